"""Deciding, without I/O, what an ambiguous acquire left behind.

When an acquire fails in a way that may have taken effect (a 5xx, a timeout, a dropped
connection), the sandbox may exist although we never saw its id. We list the key's sandboxes
before each attempt and again after such a failure: a sandbox that appeared in between, holds the
servers we asked for and is not claimed by another acquire of this process is ours to adopt.

Claims are process-wide: an acquire that adopts a sandbox claims it, and an acquire whose
answer names a sandbox that another acquire already adopted goes back to reconciling (it will
find the one the other acquire created), so two callers never share one sandbox.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable
from datetime import datetime, timezone

from ._errors import ApiConnectionError, ApiError, ApiTimeoutError, ServerError
from ._ledger import AcquireAttempt
from ._models import AcquireRequest, SandboxInfo

__all__ = [
    "AcquireDidNotHappen",
    "adoptable",
    "attempt_ended",
    "claim",
    "in_flight",
    "is_ambiguous",
    "new_attempt",
    "orphans",
    "release_claim",
]

_claims: set[tuple[str, str]] = set()
_in_flight: set[str] = set()
_lock = threading.Lock()
# How far a sandbox's created_at may lie from the time its attempt was recorded and still be
# taken for the attempt's orphan: the request's own duration (60 s by default) plus a generous
# allowance for the difference between this machine's clock and the service's.
ORPHAN_WINDOW_SECONDS = 600.0


class AcquireDidNotHappen(Exception):
    """Reconciling showed the failed acquire created nothing: it is safe to send it again."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


def is_ambiguous(exc: BaseException) -> bool:
    """Whether a failed acquire may nevertheless have created a sandbox."""
    if isinstance(exc, ApiTimeoutError):
        return True
    if isinstance(exc, ApiConnectionError):
        cause = exc.__cause__
        # refused before anything was sent: nothing can have happened
        return type(cause).__name__ not in ("ConnectError", "ConnectTimeout")
    if isinstance(exc, ServerError):
        return True
    return isinstance(exc, ApiError) and exc.status_code >= 500


def adoptable(
    request: AcquireRequest, before: Iterable[str], after: Iterable[SandboxInfo]
) -> list[SandboxInfo]:
    """Sandboxes that appeared between two listings and hold exactly the servers requested.

    >>> from workflows._models import check_acquire, ServerInfo
    >>> req = check_acquire(["git"])
    >>> new = SandboxInfo("b", "occupied", servers=(ServerInfo("git", "s1"),))
    >>> old = SandboxInfo("a", "occupied", servers=(ServerInfo("git", "s0"),))
    >>> [s.id for s in adoptable(req, {"a"}, [old, new])]
    ['b']
    """
    known = set(before)
    wanted = request.wanted_servers()
    out = []
    for info in after:
        if info.id in known:
            continue
        if frozenset(s.name for s in info.servers) != wanted:
            continue
        if request.benchmark is not None and info.benchmark not in (None, request.benchmark):
            continue
        out.append(info)
    return sorted(out, key=lambda s: (s.created_at or "", s.id))


def claim(base_url: str, sandbox_id: str) -> bool:
    """Claim a sandbox for one acquire of this process; False if another acquire has it."""
    with _lock:
        key = (base_url, sandbox_id)
        if key in _claims:
            return False
        _claims.add(key)
        return True


def release_claim(base_url: str, sandbox_id: str) -> None:
    """Forget a claim once the sandbox is released (ids are never reused; this saves memory)."""
    with _lock:
        _claims.discard((base_url, sandbox_id))


def new_attempt() -> str:
    """A fresh attempt id, marked in flight until :func:`attempt_ended`."""
    attempt = uuid.uuid4().hex
    with _lock:
        _in_flight.add(attempt)
    return attempt


def attempt_ended(attempt: str) -> None:
    """The acquire of ``attempt`` returned or raised (settled or not)."""
    with _lock:
        _in_flight.discard(attempt)


def in_flight(attempt: str) -> bool:
    """Whether an acquire of this process is still waiting on ``attempt``."""
    with _lock:
        return attempt in _in_flight


def _seconds(text: str | None) -> float | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:  # the service writes UTC
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def orphans(
    attempts: Iterable[AcquireAttempt], listed: Iterable[SandboxInfo], known: Iterable[str]
) -> list[tuple[AcquireAttempt, SandboxInfo | None]]:
    """Pair each unsettled acquire attempt with the sandbox it most likely left behind.

    A sandbox is an attempt's orphan when it was not among the ids the key listed before the
    attempt, no process of this user ever recorded it (``known``), it holds exactly the servers
    (and benchmark) asked for, and its ``created_at`` (when given) lies within
    :data:`ORPHAN_WINDOW_SECONDS` of the attempt. Attempts are taken oldest first and each gets
    at most one sandbox, the earliest created: an attempt creates at most one. ``None`` means
    nothing is left (it created nothing, or its sandbox is gone already).

    >>> from workflows._models import ServerInfo
    >>> a = AcquireAttempt("t1", "u", "k", ("git",), None, frozenset({"old"}), 1,
    ...                    "2026-01-01T00:00:00+00:00")
    >>> new = SandboxInfo("new", "occupied", servers=(ServerInfo("git", "s"),),
    ...                   created_at="2026-01-01T00:00:05+00:00")
    >>> old = SandboxInfo("old", "occupied", servers=(ServerInfo("git", "s"),))
    >>> [(x.attempt, s.id if s else None) for x, s in orphans([a], [old, new], set())]
    [('t1', 'new')]
    """
    taken = set(known)
    candidates = sorted(listed, key=lambda s: (s.created_at or "", s.id))
    out: list[tuple[AcquireAttempt, SandboxInfo | None]] = []
    for attempt in sorted(attempts, key=lambda a: (a.time, a.attempt)):
        started = _seconds(attempt.time)
        found: SandboxInfo | None = None
        for info in candidates:
            if info.id in taken or info.id in attempt.known:
                continue
            if frozenset(s.name for s in info.servers) != frozenset(attempt.servers):
                continue
            if attempt.benchmark is not None and info.benchmark not in (None, attempt.benchmark):
                continue
            created = _seconds(info.created_at)
            if (
                started is not None
                and created is not None
                and abs(created - started) > ORPHAN_WINDOW_SECONDS
            ):
                continue
            found = info
            break
        if found is not None:
            taken.add(found.id)
        out.append((attempt, found))
    return out
