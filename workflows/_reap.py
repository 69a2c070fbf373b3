"""Release what the ledger says is still held: the cure for crashed or killed jobs.

Two kinds of leftovers are found: sandboxes recorded as acquired and never released, and
sandboxes that an acquire created without the ledger ever learning their id (it ended
ambiguously, or its process died mid-request). Sandboxes acquired to outlive their process
(``klavis-sandbox acquire``, ``acquire(..., detach=True)``) are not leftovers: until their TTL
ends they are kept and reported apart (:attr:`ReapResults.detached`), unless
``include_detached``. The second kind is found by listing: see
:func:`workflows._ownership._reconcile.orphans` for how an open attempt is matched to a sandbox.

The ledger records each sandbox with the base URL it was acquired from, and ``reap`` sends the
key to one service only: the one it is pointed at. It groups what the ledger holds for the key
by base URL:

* the entries of that service are released there (sandboxes already gone count as released);
* an entry recorded for *another* base URL whose sandbox that service lists (the same id: ids
  are UUIDs, and the listing is the key's own) is released there too, and settled under the URL
  it was recorded for: an emulator restarted on another port over the same data folder, or one
  service under two names (``localhost`` and ``127.0.0.1``);
* the rest is reported apart, in :attr:`ReapResults.unreleased`, one
  :class:`ServiceEntries` per base URL, with whether that service answers a probe made without
  the key (:mod:`workflows._ownership._reach`). ``forget_unreachable`` drops, from the ledger,
  the entries of the services whose probe proves them gone (connection refused, no such host),
  never those of a service that answered, whatever it answered.

Not in :mod:`workflows._ownership`: the flows and the host limits build on that package, and
reaping runs flows and the recipes' bulk release, so it sits above them (``pyproject.toml``'s
import contracts: the recipes' layer).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypedDict

from workflows._acquire import Unpack, check_keywords
from workflows._config import ApiKey, Settings, resolve_settings
from workflows._drivers import AsyncDriver, sync_driver_for
from workflows._errors import ApiConnectionError
from workflows._flows import list_flow
from workflows._models import SandboxInfo
from workflows._ownership import _reconcile, _registry
from workflows._ownership._ledger import AcquireAttempt, Ledger, LedgerEntry, default_ledger
from workflows._ownership._reach import Reach, probe, probe_all
from workflows._recipes import ReleaseResult, async_bulk_release, bulk_release
from workflows._state_files import process_running
from workflows._steps import Act, Blocking, Flow

log = logging.getLogger("workflows")

__all__ = ["ReapOptions", "ReapResults", "ServiceEntries", "async_reap", "held_sandboxes", "reap"]


def held_sandboxes(
    *,
    api_key: str | ApiKey | None = None,
    base_url: str | None = None,
    ledger: Ledger | None = None,
    include_live: bool = False,
    include_detached: bool = False,
) -> list[LedgerEntry]:
    """What the ledger records as acquired and not released, for this key and base URL.

    Sandboxes whose acquiring process is still running are left out unless ``include_live``:
    they are in use, not leaked; so are those acquired to outlive their process (``detach``,
    ``klavis-sandbox acquire``) whose TTL has not ended, unless ``include_detached``.

    >>> [e.sandbox_id for e in held_sandboxes()]  # doctest: +SKIP
    []
    """
    settings = resolve_settings(api_key, base_url)
    book = ledger or default_ledger()
    held = book.held(base_url=settings.base_url, key=settings.api_key.fingerprint)
    return [e for e in held if _leftover(e, include_live, include_detached)]


def _leftover(entry: LedgerEntry, include_live: bool, include_detached: bool) -> bool:
    """Whether a held entry is for ``reap`` to release: not detached (or its TTL over, or
    ``include_detached``: a detached sandbox belongs to no process), and its process gone
    (or ``include_live``)."""
    if entry.detached:
        return include_detached or not entry.spared()
    return include_live or not process_running(entry.pid)


class ReapOptions(TypedDict, total=False):
    """The keywords of :func:`reap` and :func:`async_reap` (each optional; the default follows
    its name).

    * ``api_key``, ``base_url`` (None): the service to release at, resolved as
      :func:`~workflows.resolve_settings` does; the only one the key is sent to.
    * ``ledger`` (None: the default one): the :class:`~workflows.Ledger` to read and settle.
    * ``include_live`` (False): also release sandboxes whose acquiring process still runs.
    * ``include_detached`` (False): also release sandboxes acquired to outlive their process
      (``klavis-sandbox acquire``, ``acquire(..., detach=True)``) whose TTL has not ended.
    * ``dry_run`` (False): release and forget nothing; report what would be released.
    * ``forget_unreachable`` (False): drop from the ledger the entries of services that are
      gone (connection refused, no such host); never those of a service that answers.
    * ``concurrency`` (16): releases at a time.
    * ``progress`` (None): show a progress bar (None: when a terminal or notebook shows it).
    """

    api_key: str | ApiKey | None
    base_url: str | None
    ledger: Ledger | None
    include_live: bool
    include_detached: bool
    dry_run: bool
    forget_unreachable: bool
    concurrency: int
    progress: bool | None


@dataclass(frozen=True)
class ServiceEntries:
    """What the ledger holds for one base URL and a reap did not release.

    ``answered`` says whether the service answered (for the service reap was pointed at: its
    listing; for another: a probe without the key), ``reason`` what it answered or how it
    failed. ``gone`` is true when the failure proves the service gone (connection refused, no
    such host): only then may ``forget_unreachable`` drop the entries, and ``forgotten`` says
    it did.
    """

    base_url: str
    sandbox_ids: tuple[str, ...]
    attempts: tuple[str, ...]
    """Acquires recorded for it that ended without an answer (they may have left a sandbox)."""
    answered: bool
    reason: str
    gone: bool = False
    forgotten: bool = False
    pointed_at: bool = False
    """It is the service this reap was pointed at (which did not answer)."""


class ReapResults(list[ReleaseResult]):
    """One :class:`~workflows.ReleaseResult` per sandbox released (a list, as before),
    :attr:`unreleased`: what the ledger holds for services the reap could not release at, and
    :attr:`detached`: the sandboxes kept because they were acquired to outlive their process
    (each a :class:`~workflows.LedgerEntry`; ``entry.expires_in()``: seconds left)."""

    unreleased: tuple[ServiceEntries, ...]
    detached: tuple[LedgerEntry, ...]

    def __init__(
        self,
        results: Iterable[ReleaseResult] = (),
        unreleased: Iterable[ServiceEntries] = (),
        detached: Iterable[LedgerEntry] = (),
    ) -> None:
        super().__init__(results)
        self.unreleased = tuple(unreleased)
        self.detached = tuple(detached)


@dataclass
class _Recorded:
    """What the ledger holds for one base URL."""

    held: list[LedgerEntry] = field(default_factory=list)
    attempts: list[AcquireAttempt] = field(default_factory=list)


@dataclass(frozen=True)
class _Plan:
    settings: Settings
    book: Ledger
    held: list[LedgerEntry]
    attempts: list[AcquireAttempt]  # ended: their orphans are released
    running: list[AcquireAttempt]  # still waited on: their sandboxes are withheld
    elsewhere: dict[str, _Recorded]  # other base URLs, this key: held, and ended attempts
    detached: list[LedgerEntry]  # acquired to outlive their process, TTL not over: kept
    dry_run: bool
    forget: bool

    @property
    def empty(self) -> bool:
        return not (self.held or self.attempts or self.elsewhere)


def _plan(options: ReapOptions, where: str) -> _Plan:
    check_keywords(where, options, ReapOptions)
    settings = resolve_settings(options.get("api_key"), options.get("base_url"))
    book = options.get("ledger") or default_ledger()
    include_live = options.get("include_live", False)
    include_detached = options.get("include_detached", False)
    here, key = settings.base_url, settings.api_key.fingerprint
    held: list[LedgerEntry] = []
    elsewhere: dict[str, _Recorded] = {}
    detached: list[LedgerEntry] = []
    for entry in book.held(key=key):
        if not _leftover(entry, include_live, include_detached):
            if entry.detached:  # meant to outlive its process: reported, kept
                detached.append(entry)
            continue  # else in use, not leaked
        if entry.base_url == here:
            held.append(entry)
        else:
            elsewhere.setdefault(entry.base_url, _Recorded()).held.append(entry)
    attempts: list[AcquireAttempt] = []
    running: list[AcquireAttempt] = []
    for attempt in book.open_attempts(key=key):
        # an attempt whose acquire ended is over, though its process may live on: nothing will
        # record its sandbox; one still waited on (here, or in a running process) is not
        waited_on = not attempt.ended and not include_live and process_running(attempt.pid)
        if _registry.in_flight(attempt.attempt) or waited_on:
            if attempt.base_url == here:
                running.append(attempt)
        elif attempt.base_url == here:
            attempts.append(attempt)
        else:
            elsewhere.setdefault(attempt.base_url, _Recorded()).attempts.append(attempt)
    dry_run = options.get("dry_run", False)
    forget = options.get("forget_unreachable", False)
    return _Plan(settings, book, held, attempts, running, elsewhere, detached, dry_run, forget)


def _to_release(plan: _Plan, listed: list[SandboxInfo], adopted: list[LedgerEntry]) -> list[str]:
    """The ids to release: those the ledger holds, those recorded elsewhere that this service
    lists (``adopted``), then the sandboxes ended attempts left behind (found in ``listed``);
    settles those attempts (unless a dry run)."""
    found = [e.sandbox_id for e in plan.held]
    found += [e.sandbox_id for e in adopted if e.sandbox_id not in found]
    if not plan.attempts:
        return found
    book, settings = plan.book, plan.settings
    known = book.known_ids(base_url=settings.base_url) | set(found)
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
        if plan.dry_run:
            continue
        if orphan is not None:  # held from now on: a failed release is retried by the next reap
            book.record(
                "acquired", orphan.id, base_url=settings.base_url, key=key, attempt=attempt.attempt
            )
        else:
            book.settle_attempt(attempt.attempt, base_url=settings.base_url, key=key)
    return found


def _adopted(plan: _Plan, listed: list[SandboxInfo]) -> list[LedgerEntry]:
    """The entries recorded for other base URLs whose sandbox this service lists."""
    ids = {s.id for s in listed}
    return [e for r in plan.elsewhere.values() for e in r.held if e.sandbox_id in ids]


def _unreleased(
    plan: _Plan, adopted: list[LedgerEntry], reaches: dict[str, Reach]
) -> list[ServiceEntries]:
    """What stays of the other base URLs' entries, per URL; forgotten where asked and proven
    gone."""
    taken = {e.sandbox_id for e in adopted}
    groups = []
    for url, recorded in plan.elsewhere.items():
        ids = tuple(e.sandbox_id for e in recorded.held if e.sandbox_id not in taken)
        attempts = tuple(a.attempt for a in recorded.attempts)
        if ids or attempts:
            groups.append(_group(plan, url, ids, attempts, reaches[url], pointed_at=False))
    return groups


def _group(
    plan: _Plan,
    url: str,
    ids: tuple[str, ...],
    attempts: tuple[str, ...],
    reach: Reach,
    *,
    pointed_at: bool,
) -> ServiceEntries:
    """One service's entries, forgotten (unless a dry run) when asked and its service is gone."""
    forgotten = plan.forget and reach.gone and not reach.answered
    if forgotten and not plan.dry_run:
        key = plan.settings.api_key.fingerprint
        for sandbox_id in ids:
            plan.book.record("forgotten", sandbox_id, base_url=url, key=key)
        for attempt in attempts:
            plan.book.forget_attempt(attempt, base_url=url, key=key)
        log.warning(
            "forgot %d sandbox(es) and %d acquire(s) recorded for %s (%s)",
            len(ids),
            len(attempts),
            url,
            reach.reason,
        )
    return ServiceEntries(
        url,
        ids,
        attempts,
        reach.answered,
        reach.reason,
        gone=reach.gone,
        forgotten=forgotten,
        pointed_at=pointed_at,
    )


def _listing_failed(reach: Reach, error: ApiConnectionError) -> Reach:
    """The service reap is pointed at failed its listing; ``reach``: what a probe then found
    (a service that answers the probe but not the listing, a slow one, is not gone)."""
    if reach.answered:
        return Reach(False, f"its listing failed: {error}")
    return reach


def _unanswered(plan: _Plan, reach: Reach) -> ReapResults:
    """The service reap is pointed at did not answer its listing: nothing is released; every
    entry is reported, by base URL (``reach``: the probe of that service)."""
    reaches = probe_all(plan.elsewhere)
    here = _group(
        plan,
        plan.settings.base_url,
        tuple(e.sandbox_id for e in plan.held),
        tuple(a.attempt for a in plan.attempts),
        reach,
        pointed_at=True,
    )
    groups = [here] if here.sandbox_ids or here.attempts else []
    return ReapResults((), groups + _unreleased(plan, [], reaches), plan.detached)


def _settle_adopted(plan: _Plan, adopted: list[LedgerEntry], results: list[ReleaseResult]) -> None:
    """An adopted sandbox released here is settled under the URL it was recorded for too."""
    done = {r.sandbox_id for r in results if r.ok}
    for entry in adopted:
        if entry.sandbox_id in done:
            plan.book.record("released", entry.sandbox_id, base_url=entry.base_url, key=entry.key)


def _would_release(ids: list[str]) -> list[ReleaseResult]:
    """What ``dry_run`` reports: each id, released by nobody."""
    return [ReleaseResult(sid, False) for sid in ids]


def _release_keywords(plan: _Plan, options: ReapOptions) -> dict[str, Any]:
    """The keywords of the bulk release a reap ends with."""
    return {
        "concurrency": options.get("concurrency", 16),
        "progress": options.get("progress"),
        "api_key": plan.settings.api_key,
        "base_url": plan.settings.base_url,
        "ledger": plan.book,
    }


def _reap_flow(plan: _Plan, release: Callable[..., Any]) -> Flow[ReapResults]:
    """What :func:`reap` and :func:`async_reap` do once planned, written once: list the
    service, probe the other base URLs, release (``release``: :func:`bulk_release` or
    :func:`async_bulk_release`, its keywords given, run as an :class:`Act`) and settle.
    The probes are :class:`Blocking` steps: the async driver moves them to a thread."""
    try:
        listed = yield from list_flow()
    except ApiConnectionError as exc:
        reach = _listing_failed((yield Blocking(probe, (plan.settings.base_url,))), exc)
        unanswered: ReapResults = yield Blocking(_unanswered, (plan, reach))
        return unanswered
    adopted = _adopted(plan, listed)
    ids = _to_release(plan, listed, adopted)
    reaches = yield Blocking(probe_all, (list(plan.elsewhere),))
    unreleased = _unreleased(plan, adopted, reaches)
    if plan.dry_run:
        return ReapResults(_would_release(ids), unreleased, plan.detached)
    results: list[ReleaseResult] = yield Act(release, (ids,))
    _settle_adopted(plan, adopted, results)
    return ReapResults(results, unreleased, plan.detached)


def reap(**options: Unpack[ReapOptions]) -> ReapResults:
    """Release every sandbox the ledger holds for this key and base URL (sandboxes already gone
    count as released), those recorded for another base URL that this service lists by id,
    and the sandboxes that acquires which ended ambiguously left behind: each such acquire was
    recorded before it was sent, and the sandbox that appeared after it with the servers it
    asked for, unknown to the ledger, is taken for its orphan (at most one each). An acquire
    ended once it raised, though its process may still run (a notebook kernel); one still
    waiting for its answer keeps what it may be about to record. Sandboxes whose acquiring
    process still runs are kept unless ``include_live``, and those acquired to outlive their
    process (``detach=True``, ``klavis-sandbox acquire``) until their TTL ends, unless
    ``include_detached`` (listed in the result's ``detached``). With ``dry_run``, release
    nothing and report what would be released.

    The result is a list of :class:`~workflows.ReleaseResult`; its ``unreleased`` lists, by
    base URL, what the ledger still holds for services this reap could not release at (one
    that did not answer, or another base URL); ``forget_unreachable=True`` drops those of a
    service proven gone (connection refused, no such host). See :class:`ReapOptions`.

    >>> [r.sandbox_id for r in reap(dry_run=True)]  # doctest: +SKIP
    []
    """
    plan = _plan(options, "reap")
    if plan.empty:
        return ReapResults(detached=plan.detached)
    release = partial(bulk_release, **_release_keywords(plan, options))
    return sync_driver_for(plan.settings).run(_reap_flow(plan, release))


async def async_reap(**options: Unpack[ReapOptions]) -> ReapResults:
    """Release every sandbox the ledger holds for this key and base URL (sandboxes already gone
    count as released), those recorded for another base URL that this service lists by id,
    and the sandboxes that acquires which ended ambiguously left behind: each such acquire was
    recorded before it was sent, and the sandbox that appeared after it with the servers it
    asked for, unknown to the ledger, is taken for its orphan (at most one each). An acquire
    ended once it raised, though its process may still run (a notebook kernel); one still
    waiting for its answer keeps what it may be about to record. Sandboxes whose acquiring
    process still runs are kept unless ``include_live``, and those acquired to outlive their
    process (``detach=True``, ``klavis-sandbox acquire``) until their TTL ends, unless
    ``include_detached`` (listed in the result's ``detached``). With ``dry_run``, release
    nothing and report what would be released.

    The result is a list of :class:`~workflows.ReleaseResult`; its ``unreleased`` lists, by
    base URL, what the ledger still holds for services this reap could not release at (one
    that did not answer, or another base URL); ``forget_unreachable=True`` drops those of a
    service proven gone (connection refused, no such host). See :class:`ReapOptions`.

    >>> [r.sandbox_id for r in await async_reap(dry_run=True)]  # doctest: +SKIP
    []
    """
    plan = _plan(options, "async_reap")
    if plan.empty:
        return ReapResults(detached=plan.detached)
    release = partial(async_bulk_release, **_release_keywords(plan, options))
    driver = AsyncDriver(plan.settings)
    try:
        return await driver.run(_reap_flow(plan, release))
    finally:
        await driver.aclose()
