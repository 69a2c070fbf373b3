"""Release what the ledger says is still held: the cure for crashed or killed jobs."""

from __future__ import annotations

from ._config import ApiKey, resolve_settings
from ._ledger import Ledger, default_ledger
from ._recipes import ReleaseResult, async_bulk_release, bulk_release

__all__ = ["async_reap", "reap"]


def reap(
    *,
    api_key: str | ApiKey | None = None,
    base_url: str | None = None,
    ledger: Ledger | None = None,
    concurrency: int = 16,
    progress: bool | None = None,
) -> list[ReleaseResult]:
    """Release every sandbox the ledger records as acquired and not released, for this key and
    base URL. Sandboxes already gone count as released. Returns one result per sandbox.

    >>> [r.sandbox_id for r in reap()]  # doctest: +SKIP
    []
    """
    settings = resolve_settings(api_key, base_url)
    book = ledger or default_ledger()
    held = book.held(base_url=settings.base_url, key=settings.api_key.fingerprint)
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
    concurrency: int = 16,
    progress: bool | None = None,
) -> list[ReleaseResult]:
    """The async twin of :func:`reap`."""
    settings = resolve_settings(api_key, base_url)
    book = ledger or default_ledger()
    held = book.held(base_url=settings.base_url, key=settings.api_key.fingerprint)
    return await async_bulk_release(
        [entry.sandbox_id for entry in held],
        concurrency=concurrency,
        api_key=settings.api_key,
        base_url=settings.base_url,
        progress=progress,
        ledger=book,
    )
