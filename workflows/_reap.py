"""Release what the ledger says is still held: the cure for crashed or killed jobs."""

from __future__ import annotations

import os

from ._config import ApiKey, Settings, resolve_settings
from ._ledger import Ledger, LedgerEntry, default_ledger
from ._recipes import ReleaseResult, async_bulk_release, bulk_release

__all__ = ["async_reap", "held_sandboxes", "reap"]


def _alive(pid: int) -> bool:
    """Whether another process with this pid is running on this machine."""
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def held_sandboxes(
    *,
    api_key: str | ApiKey | None = None,
    base_url: str | None = None,
    ledger: Ledger | None = None,
    include_live: bool = False,
) -> list[LedgerEntry]:
    """What the ledger records as acquired and not released, for this key and base URL.

    Sandboxes whose acquiring process is still running are left out unless ``include_live``:
    they are in use, not leaked.

    >>> [e.sandbox_id for e in held_sandboxes()]  # doctest: +SKIP
    []
    """
    settings = resolve_settings(api_key, base_url)
    book = ledger or default_ledger()
    held = book.held(base_url=settings.base_url, key=settings.api_key.fingerprint)
    return [e for e in held if include_live or not _alive(e.pid)]


def _plan(
    api_key: str | ApiKey | None, base_url: str | None, ledger: Ledger | None, include_live: bool
) -> tuple[Settings, Ledger, list[LedgerEntry]]:
    settings = resolve_settings(api_key, base_url)
    book = ledger or default_ledger()
    held = held_sandboxes(
        api_key=settings.api_key, base_url=settings.base_url, ledger=book, include_live=include_live
    )
    return settings, book, held


def reap(
    *,
    api_key: str | ApiKey | None = None,
    base_url: str | None = None,
    ledger: Ledger | None = None,
    include_live: bool = False,
    dry_run: bool = False,
    concurrency: int = 16,
    progress: bool | None = None,
) -> list[ReleaseResult]:
    """Release every sandbox :func:`held_sandboxes` lists (sandboxes already gone count as
    released). With ``dry_run``, release nothing and report what would be released.

    >>> [r.sandbox_id for r in reap(dry_run=True)]  # doctest: +SKIP
    []
    """
    settings, book, held = _plan(api_key, base_url, ledger, include_live)
    if dry_run:
        return [ReleaseResult(e.sandbox_id, False) for e in held]
    return bulk_release(
        [entry.sandbox_id for entry in held],
        concurrency=concurrency,
        api_key=settings.api_key,
        base_url=settings.base_url,
        progress=progress,
        ledger=book,
    )


async def async_reap(
    *,
    api_key: str | ApiKey | None = None,
    base_url: str | None = None,
    ledger: Ledger | None = None,
    include_live: bool = False,
    dry_run: bool = False,
    concurrency: int = 16,
    progress: bool | None = None,
) -> list[ReleaseResult]:
    """The async twin of :func:`reap`."""
    settings, book, held = _plan(api_key, base_url, ledger, include_live)
    if dry_run:
        return [ReleaseResult(e.sandbox_id, False) for e in held]
    return await async_bulk_release(
        [entry.sandbox_id for entry in held],
        concurrency=concurrency,
        api_key=settings.api_key,
        base_url=settings.base_url,
        progress=progress,
        ledger=book,
    )
