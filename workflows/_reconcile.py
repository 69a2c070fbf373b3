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
from collections.abc import Iterable

from ._errors import ApiConnectionError, ApiError, ApiTimeoutError, ServerError
from ._models import AcquireRequest, SandboxInfo

__all__ = ["AcquireDidNotHappen", "adoptable", "claim", "is_ambiguous", "release_claim"]

_claims: set[tuple[str, str]] = set()
_lock = threading.Lock()


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
