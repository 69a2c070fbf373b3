"""Deciding, without I/O, what an ambiguous acquire left behind.

When an acquire fails in a way that may have taken effect (a 5xx, a timeout, a dropped
connection), the sandbox may exist although we never saw its id. We list the key's sandboxes
before each attempt and again after such a failure: a sandbox that appeared in between, holds the
servers we asked for and is not claimed by another acquire of this process is ours to adopt.

An acquire that adopts a sandbox claims it (:func:`workflows._ownership.claim`, process-wide),
and an acquire whose answer names a sandbox that another acquire already adopted goes back to
reconciling (it will find the one the other acquire created), so two callers never share one.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone

from workflows._errors import ApiConnectionError, ApiError, ApiTimeoutError, ServerError
from workflows._models import AcquireRequest, SandboxInfo

from ._ledger import AcquireAttempt

# When a sandbox must have been created, relative to the time its attempt was recorded (this
# machine's clock), to be taken for the attempt's orphan: not before it, give or take the
# difference between this machine's clock and the service's; and not after the request could
# have ended (its timeout, 60 s by default, the same allowance for the clocks, and the service's
# own latency in writing the record).
ORPHAN_CLOCK_SKEW_SECONDS = 120.0
ORPHAN_AFTER_SECONDS = 300.0


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


def _created_within(info: SandboxInfo, attempt: AcquireAttempt) -> bool:
    started = _seconds(attempt.time)
    created = _seconds(info.created_at)
    if started is None or created is None:  # no times, no way to tell: never taken
        return False
    return started - ORPHAN_CLOCK_SKEW_SECONDS <= created <= started + ORPHAN_AFTER_SECONDS


def orphans(
    attempts: Iterable[AcquireAttempt],
    listed: Iterable[SandboxInfo],
    known: Iterable[str],
    *,
    reserve: Iterable[AcquireAttempt] = (),
) -> list[tuple[AcquireAttempt, SandboxInfo | None]]:
    """Pair each unsettled acquire attempt with the sandbox it most likely left behind.

    A sandbox is an attempt's orphan when it was not among the ids the key listed before the
    attempt, no process of this user ever recorded it (``known``), it holds exactly the servers
    (and benchmark) asked for, and its ``created_at`` lies between
    :data:`ORPHAN_CLOCK_SKEW_SECONDS` before the attempt and :data:`ORPHAN_AFTER_SECONDS` after
    it (a sandbox without a ``created_at`` is never taken). Each attempt gets at most one
    sandbox, the earliest created: an attempt creates at most one. ``None`` means nothing is
    left (it created nothing, or its sandbox is gone already).

    The attempts of ``reserve`` (those of processes still running) are served first and their
    sandboxes withheld: a sandbox that a running acquire may be about to record is never taken
    for another attempt's orphan. Only the pairs of ``attempts`` are returned.

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

    def pick(attempt: AcquireAttempt) -> SandboxInfo | None:
        for info in candidates:
            if info.id in taken or info.id in attempt.known:
                continue
            if frozenset(s.name for s in info.servers) != frozenset(attempt.servers):
                continue
            if attempt.benchmark is not None and info.benchmark not in (None, attempt.benchmark):
                continue
            if not _created_within(info, attempt):
                continue
            taken.add(info.id)
            return info
        return None

    for attempt in sorted(reserve, key=lambda a: (a.time, a.attempt)):
        pick(attempt)
    return [
        (attempt, pick(attempt)) for attempt in sorted(attempts, key=lambda a: (a.time, a.attempt))
    ]
