"""The sandboxes a broker's lease gives: :class:`~workflows.LocalSandbox` and
:class:`~workflows.AsyncLocalSandbox` that say so when their lease ended.

A lease can end while its holder still uses the sandbox: the holder's process stopped
renewing it for ``lease_timeout`` seconds (stopped, wedged), ``reap(everything=True)`` took it,
or the broker restarted and the holder did not come back in time. The sandbox is then released
(or given to another lease, reset), and its next call would answer a bare 404. These faces
check first what their session knows (the poll brings the broker's word that the lease ended),
and on a :class:`~workflows.NotFoundError` ask the broker about the lease: either way, the
holder gets :class:`~workflows.LeaseExpiredError`, saying when and why, an infrastructure
failure. The other errors pass unchanged. They pickle as the plain faces do (their handle).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .._acquire import Acquire
from .._async_sandbox import AsyncLocalSandbox
from .._drivers import drive, drive_async, perform_act, perform_act_async
from .._errors import BrokerUnavailableError, LeaseExpiredError, NotFoundError
from .._handle import restore
from .._sandbox import LocalSandbox
from .._steps import Flow
from ._session import Session, ended_error
from ._types import Leased

__all__ = [
    "AsyncLeasedSandbox",
    "LeasedSandbox",
    "give_back",
    "give_back_async",
    "lease_id",
    "lent",
]

F = TypeVar("F", bound=Callable[..., Any])

# the calls that reach the sandbox (the service's API or its MCP servers)
_CALLS = (
    "refresh",
    "seed",
    "seed_directory",
    "dump",
    "dump_to",
    "reset",
    "list_tools",
    "call_tool",
    "execute",
    "execute_directory",
    "initialize_server_data",
    "dump_server_data",
)


class _Lease:
    """What a leased sandbox knows of its lease."""

    def __init__(self, session: Session, lease_id: str, sandbox_id: str) -> None:
        self.session, self.lease_id, self.sandbox_id = session, lease_id, sandbox_id

    def check(self) -> None:
        """Raise :class:`LeaseExpiredError` when the session knows the lease ended."""
        reason = self.session.ended_reason(self.lease_id)
        if reason is not None:
            raise ended_error(self.lease_id, self.sandbox_id, reason)

    def _error(self, status: Any) -> LeaseExpiredError | None:
        state, reason = status
        if state == "ended":
            return ended_error(self.lease_id, self.sandbox_id, str(reason))
        if state == "unknown":
            why = "the broker has no record of it (it restarted without it)"
            return ended_error(self.lease_id, self.sandbox_id, why)
        return None

    def explaining(self, *, awaited: bool) -> Flow[LeaseExpiredError | None]:
        """The lease's end behind a 404, if it ended (the broker asked): written once for
        :func:`_guarded` and :func:`_guarded_async` (``awaited``)."""
        reason = self.session.ended_reason(self.lease_id)
        if reason is not None:
            return ended_error(self.lease_id, self.sandbox_id, reason)
        link = self.session.link
        try:
            status = yield from link.calling(
                "lease_status", self.lease_id, awaited=awaited, wait=10
            )
        except BrokerUnavailableError:
            return None
        return self._error(status)


def _guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: LeasedSandbox, *args: Any, **kwargs: Any) -> Any:
        self._lease.check()
        try:
            return method(self, *args, **kwargs)
        except NotFoundError as exc:
            ended = drive(self._lease.explaining(awaited=False), perform_act)
            if ended is None:
                raise
            raise ended from exc

    return call


def _guarded_async(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def call(self: AsyncLeasedSandbox, *args: Any, **kwargs: Any) -> Any:
        self._lease.check()
        try:
            return await method(self, *args, **kwargs)
        except NotFoundError as exc:
            ended = await drive_async(self._lease.explaining(awaited=True), perform_act_async)
            if ended is None:
                raise
            raise ended from exc

    return call


class LeasedSandbox(LocalSandbox):
    """A :class:`~workflows.LocalSandbox` lent by the broker (see the module)."""

    _lease: _Lease

    def __reduce__(self) -> tuple[Any, ...]:
        return restore, (LocalSandbox, self.handle(), self.progress, self.limits)


class AsyncLeasedSandbox(AsyncLocalSandbox):
    """An :class:`~workflows.AsyncLocalSandbox` lent by the broker (see the module)."""

    _lease: _Lease

    def __reduce__(self) -> tuple[Any, ...]:
        return restore, (AsyncLocalSandbox, self.handle(), self.progress, self.limits)


L = TypeVar("L", LeasedSandbox, AsyncLeasedSandbox)


def lent(face: type[L], leased: Leased, session: Session, wanted: Acquire) -> L:
    """The lease-to-sandbox step, written once: the sandbox of the granted lease ``leased``,
    of ``face`` (:class:`LeasedSandbox` or :class:`AsyncLeasedSandbox`), with the connection,
    progress and limits of ``wanted`` (the key from this process: never from the lease)."""
    sandbox: L = face.from_handle(  # type: ignore[assignment]
        leased.handle,
        api_key=wanted.settings.api_key,
        timeout=wanted.settings.timeout,
        progress=wanted.progress,
        limits=wanted.limits,
    )
    sandbox._lease = _Lease(session, leased.lease_id, sandbox.id)
    return sandbox


def lease_id(sandbox: LeasedSandbox | AsyncLeasedSandbox) -> str:
    """The id of the lease that lent ``sandbox``."""
    return sandbox._lease.lease_id


def give_back(sandbox: LeasedSandbox, reason: str = "released by its holder") -> bool:
    """End the lease of ``sandbox`` (its session sends the release; a broker that is down gets
    it when it is back); whether this call ended it."""
    return sandbox._lease.session.release(sandbox._lease.lease_id, reason)


async def give_back_async(
    sandbox: AsyncLeasedSandbox, reason: str = "released by its holder"
) -> bool:
    """:func:`give_back`, awaited."""
    return await sandbox._lease.session.release_async(sandbox._lease.lease_id, reason)


for _name in _CALLS:
    setattr(LeasedSandbox, _name, _guarded(getattr(LocalSandbox, _name)))
    setattr(AsyncLeasedSandbox, _name, _guarded_async(getattr(AsyncLocalSandbox, _name)))
