"""Release what the ledger says is still held: the cure for crashed or killed jobs.

Two kinds of leftovers are found: sandboxes recorded as acquired and never released, and
sandboxes that an acquire created without the ledger ever learning their id (it ended
ambiguously, or its process died mid-request). The second kind is found by listing: see
:func:`workflows._ownership._reconcile.orphans` for how an open attempt is matched to a sandbox.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TypedDict

from workflows._config import ApiKey, Settings, resolve_settings
from workflows._drivers import AsyncDriver, sync_driver_for
from workflows._flows import list_flow
from workflows._models import SandboxInfo
from workflows._recipes import ReleaseResult, async_bulk_release, bulk_release

from . import _reconcile, _registry
from ._ledger import AcquireAttempt, Ledger, LedgerEntry, default_ledger, process_running

log = logging.getLogger("workflows")

__all__ = ["async_reap", "held_sandboxes", "reap"]


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
    return [e for e in held if include_live or not process_running(e.pid)]


class _Where(TypedDict):
    """Where a reap releases: the keywords both bulk releases take for it."""

    api_key: ApiKey
    base_url: str
    ledger: Ledger


@dataclass(frozen=True)
class _Plan:
    settings: Settings
    book: Ledger
    held: list[LedgerEntry]
    attempts: list[AcquireAttempt]  # ended: their orphans are released
    running: list[AcquireAttempt]  # still waited on: their sandboxes are withheld

    def where(self) -> _Where:
        return {
            "api_key": self.settings.api_key,
            "base_url": self.settings.base_url,
            "ledger": self.book,
        }


def _plan(
    api_key: str | ApiKey | None, base_url: str | None, ledger: Ledger | None, include_live: bool
) -> _Plan:
    settings = resolve_settings(api_key, base_url)
    book = ledger or default_ledger()
    held = held_sandboxes(
        api_key=settings.api_key, base_url=settings.base_url, ledger=book, include_live=include_live
    )
    attempts: list[AcquireAttempt] = []
    running: list[AcquireAttempt] = []
    for attempt in book.open_attempts(base_url=settings.base_url, key=settings.api_key.fingerprint):
        # an attempt whose acquire ended is over, though its process may live on: nothing will
        # record its sandbox; one still waited on (here, or in a running process) is not
        waited_on = not attempt.ended and not include_live and process_running(attempt.pid)
        if _registry.in_flight(attempt.attempt) or waited_on:
            running.append(attempt)
        else:
            attempts.append(attempt)
    return _Plan(settings, book, held, attempts, running)


def _to_release(plan: _Plan, listed: list[SandboxInfo], dry_run: bool) -> list[str]:
    """The ids to release: those the ledger holds, then the sandboxes ended attempts left behind
    (found in ``listed``); settles those attempts (unless ``dry_run``)."""
    found = [e.sandbox_id for e in plan.held]
    if not plan.attempts:
        return found
    book, settings = plan.book, plan.settings
    known = book.known_ids(base_url=settings.base_url) | {e.sandbox_id for e in plan.held}
    key = settings.api_key.fingerprint
    pairs = _reconcile.orphans(plan.attempts, listed, known, reserve=plan.running)
    for attempt, orphan in pairs:
        if orphan is not None:
            log.warning(
                "sandbox %s was left by an acquire that failed ambiguously (%s); releasing it",
                orphan.id,
                attempt.time,
            )
            found.append(orphan.id)
        if dry_run:
            continue
        if orphan is not None:  # held from now on: a failed release is retried by the next reap
            book.record(
                "acquired", orphan.id, base_url=settings.base_url, key=key, attempt=attempt.attempt
            )
        else:
            book.settle_attempt(attempt.attempt, base_url=settings.base_url, key=key)
    return found


def _would_release(ids: list[str]) -> list[ReleaseResult]:
    """What ``dry_run`` reports: each id, released by nobody."""
    return [ReleaseResult(sid, False) for sid in ids]


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
    released), and the sandboxes that acquires which ended ambiguously left behind: each such
    acquire was recorded before it was sent, and the sandbox that appeared after it with the
    servers it asked for, unknown to the ledger, is taken for its orphan (at most one each).
    An acquire ended once it raised, though its process may still run (a notebook kernel);
    one still waiting for its answer keeps what it may be about to record. With ``dry_run``,
    release nothing and report what would be released.

    >>> [r.sandbox_id for r in reap(dry_run=True)]  # doctest: +SKIP
    []
    """
    plan = _plan(api_key, base_url, ledger, include_live)
    listed = sync_driver_for(plan.settings).run(list_flow()) if plan.attempts else []
    ids = _to_release(plan, listed, dry_run)
    if dry_run:
        return _would_release(ids)
    return bulk_release(ids, concurrency=concurrency, progress=progress, **plan.where())


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
    """Release every sandbox :func:`held_sandboxes` lists (sandboxes already gone count as
    released), and the sandboxes that acquires which ended ambiguously left behind: each such
    acquire was recorded before it was sent, and the sandbox that appeared after it with the
    servers it asked for, unknown to the ledger, is taken for its orphan (at most one each).
    An acquire ended once it raised, though its process may still run (a notebook kernel);
    one still waiting for its answer keeps what it may be about to record. With ``dry_run``,
    release nothing and report what would be released.

    >>> [r.sandbox_id for r in await async_reap(dry_run=True)]  # doctest: +SKIP
    []
    """
    plan = _plan(api_key, base_url, ledger, include_live)
    listed: list[SandboxInfo] = []
    if plan.attempts:
        driver = AsyncDriver(plan.settings)
        try:
            listed = await driver.run(list_flow())
        finally:
            await driver.aclose()
    ids = _to_release(plan, listed, dry_run)
    if dry_run:
        return _would_release(ids)
    return await async_bulk_release(ids, concurrency=concurrency, progress=progress, **plan.where())
