"""stamina's notices of the library's own retries go to the ``workflows`` logger, and only there.

stamina reports every scheduled retry through hooks that are global to the process: by default
a ``stamina.retry_scheduled`` warning on the ``stamina`` logger (which Python prints bare on
stderr when logging is not configured) or a structlog event when structlog is installed. A
library should neither print nor reconfigure the application's stamina, so:

- the driver iterates its retry contexts through :func:`routed`, which marks the current
  context (a :class:`contextvars.ContextVar`, so threads and asyncio tasks each see their own);
- :func:`routed` puts one :class:`RouteRetries` hook in front of whatever hooks stamina has
  (the defaults, or those the application set with ``stamina.instrumentation.
  set_on_retry_hooks``): a retry inside a marked context is logged at INFO on the ``workflows``
  logger (the record carries ``workflows.retry_num`` and ``workflows.caused_by``, as stamina's
  carry ``stamina.*``), every other retry goes to those hooks as before. If the application
  later sets hooks of its own, the next retry context of the library puts the router back in
  front of them.

stamina has no per-context hook (its instrumentation is global by design), hence this module.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractContextManager
from typing import Any

from stamina.instrumentation import RetryDetails, get_on_retry_hooks, set_on_retry_hooks

from ._errors import KlavisError

__all__ = ["RouteRetries", "describe", "routed"]

log = logging.getLogger("workflows")

_OURS: contextvars.ContextVar[bool] = contextvars.ContextVar("workflows_retrying", default=False)
_LOCK = threading.Lock()


def describe(exc: BaseException) -> str:
    """What failed, for a log line: the library's own (redacted) message, else the type only."""
    for item in (exc, exc.__cause__):
        if isinstance(item, KlavisError):
            return f"{type(item).__name__}: {item}"
    return type(exc).__name__


class RouteRetries:
    """A stamina retry hook: the library's retries to its logger, the others to ``others``."""

    def __init__(self, others: tuple[Any, ...]) -> None:
        self.others = others

    def __call__(self, details: RetryDetails) -> AbstractContextManager[None] | None:
        if _OURS.get():
            cause = describe(details.caused_by)
            log.info(
                "retry %d in %.2f s (%.2f s waited so far) after %s",
                details.retry_num,
                details.wait_for,
                details.waited_so_far,
                cause,
                extra={"workflows.retry_num": details.retry_num, "workflows.caused_by": cause},
            )
            return None
        managers = [cm for hook in self.others if (cm := hook(details)) is not None]
        return _all_of(managers) if managers else None


@contextlib.contextmanager
def _all_of(managers: list[AbstractContextManager[None]]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for manager in managers:
            stack.enter_context(manager)
        yield


def _install() -> None:
    """Put a :class:`RouteRetries` in front of stamina's current hooks, unless it is there."""
    with _LOCK:
        hooks = get_on_retry_hooks()
        if not any(isinstance(hook, RouteRetries) for hook in hooks):
            set_on_retry_hooks([RouteRetries(hooks)])


class routed:  # a class used like a function: ``for attempt in routed(context)``
    """Iterate a stamina retry context (sync or async) with its notices sent to our logger."""

    def __init__(self, context: Any) -> None:
        _install()
        self._context = context
        self._iterator: Iterator[Any] | None = None
        self._async_iterator: AsyncIterator[Any] | None = None

    def __iter__(self) -> routed:
        self._iterator = iter(self._context)
        return self

    def __next__(self) -> Any:
        assert self._iterator is not None
        token = _OURS.set(True)
        try:
            return next(self._iterator)
        finally:
            _OURS.reset(token)

    def __aiter__(self) -> routed:
        self._async_iterator = self._context.__aiter__()
        return self

    async def __anext__(self) -> Any:
        assert self._async_iterator is not None
        token = _OURS.set(True)
        try:
            return await self._async_iterator.__anext__()
        finally:
            _OURS.reset(token)
