"""Every call to the broker actor, in one place: its arguments sent by name, its answer waited
for, the broker's own error raised as itself. The client (:mod:`workflows.ray._client`) and the
holder's session (:mod:`workflows.ray._session`) both call :func:`send` / :func:`send_async`
here, looked up at each call, so a test that replaces ``workflows.ray._wire.send`` sees all that
is sent (and checks that the key is never in it). Below both: neither imports the other for it.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import ray
import ray.exceptions

from ._broker import Broker

__all__ = ["cause", "send", "send_async"]


@functools.cache
def _parameters(method: str) -> tuple[str, ...]:
    """The names of the broker method's parameters (``self`` left out)."""
    return tuple(inspect.signature(getattr(Broker, method)).parameters)[1:]


def _call(actor: Any, method: str, args: tuple[Any, ...]) -> Any:
    """Submit the call, its arguments by name. A handle found by name (``ray.get_actor``)
    after the job that made the broker ended has no signatures (Ray could not load the
    class that job exported, and takes every method as ``(**kwargs)``): arguments by
    position would be refused there (``TypeError: too many positional arguments``)."""
    return getattr(actor, method).remote(**dict(zip(_parameters(method), args, strict=False)))


def send(actor: Any, method: str, *args: Any) -> Any:
    """Call ``method`` of the broker ``actor`` and wait for its answer (the broker's own error,
    such as a :class:`~workflows.ServerError` from its acquire, is raised as itself). Waited
    for through the ref's ``future()``, as ``ray.get`` would: the session's thread waits so
    inside async actors, where ``ray.get`` warns that it blocks the loop (it does not, there)."""
    ref = _call(actor, method, args)
    try:
        return ref.future().result()
    except ray.exceptions.RayTaskError as exc:
        raise cause(exc) from None


async def send_async(actor: Any, method: str, *args: Any) -> Any:
    """:func:`send`, awaited (the event loop is never blocked)."""
    ref = _call(actor, method, args)
    try:
        return await ref
    except ray.exceptions.RayTaskError as exc:
        raise cause(exc) from None


def cause(exc: ray.exceptions.RayTaskError) -> BaseException:
    """What a Ray task raised: its own exception where Ray kept it, else Ray's error."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc
