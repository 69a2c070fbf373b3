"""The commands that release: ``release`` (by id, or ``--all``) and ``reap`` (what the local
ledger says is still held)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from workflows._config import resolve_settings
from workflows._ownership import LedgerEntry, default_ledger
from workflows._ownership._reap import ServiceEntries, reap
from workflows._recipes import ReleaseResult, bulk_release

from ._output import EXIT_ERROR, EXIT_OK, Output, UsageError


def _release_outcome(result: ReleaseResult, ours: set[str] | None) -> str:
    """``released``, ``already_released``, ``not_found`` or ``failed``.

    The service answers 404 both for an id it never gave this key and for one released
    already, so the local ledger tells them apart: a sandbox acquired here and not released by
    us (its TTL ran out, or another client released it) is ``already_released``; any other id
    is ``not_found``. ``ours`` None (``--all``, ``reap``): every 404 is ``already_released``.
    """
    if not result.ok:
        return "failed"
    if not result.already_released:
        return "released"
    if ours is None or result.sandbox_id in ours:
        return "already_released"
    return "not_found"


def _report_releases(
    results: Sequence[ReleaseResult],
    ui: Output,
    args: argparse.Namespace,
    ours: set[str] | None = None,
    kept: Sequence[dict[str, Any]] = (),
) -> int:
    ignore_missing = getattr(args, "ignore_not_found", False)
    records = []
    failed = False
    for r in results:
        outcome = _release_outcome(r, ours)
        error = None if r.error is None else str(r.error)
        if outcome == "not_found":
            error = "no such sandbox (not of this API key, or released already)"
        records.append({"sandbox_id": r.sandbox_id, "outcome": outcome, "error": error})
        if outcome == "released":
            ui.note(f"released {r.sandbox_id}")
        elif outcome == "already_released":
            ui.note(f"{r.sandbox_id} was already released (by its TTL, or by another client)")
        elif outcome == "not_found" and ignore_missing:
            ui.note(f"{r.sandbox_id}: no such sandbox (ignored)")
        else:
            failed = True
            ui.problem(f"error: {r.sandbox_id}: {error}")
    if args.json:
        ui.json([*records, *kept])
    if not results and not kept:
        ui.note("nothing to release")
    return EXIT_ERROR if failed else EXIT_OK


def cmd_release(args: argparse.Namespace, ui: Output) -> int:
    if args.all == bool(args.ids):
        raise UsageError("name sandbox ids to release, or --all (not both)")
    if args.all:
        results = bulk_release(None, base_url=args.base_url, progress=False)
        return _report_releases(results, ui, args)
    settings = resolve_settings(None, args.base_url)
    book, key = default_ledger(), settings.api_key.fingerprint
    held = book.held(key=key)
    ours = {entry.sandbox_id for entry in held if entry.base_url == settings.base_url}
    ids = list(dict.fromkeys(args.ids))
    results = bulk_release(ids, base_url=args.base_url, progress=False)
    # released here by id: an entry of this key recorded for another base URL (the service
    # before a restart on another port) is settled too, or reap would keep reporting it
    done = {r.sandbox_id for r in results if r.ok and not r.already_released}
    for entry in held:
        if entry.sandbox_id in done and entry.base_url != settings.base_url:
            book.record("released", entry.sandbox_id, base_url=entry.base_url, key=key)
    return _report_releases(results, ui, args, ours)


def _counted(group: ServiceEntries) -> str:
    """``2 sandboxes``, ``1 sandbox and 1 unfinished acquire``..."""
    held, attempts = len(group.sandbox_ids), len(group.attempts)
    parts = [f"{held} sandbox{'es' if held > 1 else ''}"] if held else []
    if attempts:
        parts.append(f"{attempts} unfinished acquire{'s' if attempts > 1 else ''}")
    return " and ".join(parts)


def _report_unreleased(
    groups: Sequence[ServiceEntries], ui: Output, dry_run: bool
) -> tuple[list[dict[str, Any]], bool]:
    """Say what the ledger holds for services reap could not release at, per base URL; its
    records for ``--json``, and whether the service reap was pointed at kept some (exit 1)."""
    records: list[dict[str, Any]] = []
    failed = False
    for g in groups:
        what, url = _counted(g), g.base_url
        if g.forgotten:
            verb = "would forget" if dry_run else "forgot"
            ui.note(f"{verb} {what} recorded for {url}, which is gone ({g.reason})")
        elif g.answered:
            ui.note(
                f"{what} recorded for {url}, another service, which answers: kept; "
                f"`klavis-sandbox reap --base-url {url}` releases them"
            )
        else:
            hint = (
                "if it is gone for good, `klavis-sandbox reap --forget` drops them from the ledger"
                if g.gone
                else "try again when it answers"
            )
            message = f"{what} recorded for {url}, which did not answer ({g.reason}): kept; {hint}"
            if g.pointed_at:
                failed = True
                ui.problem(f"error: {message}")
            else:
                ui.note(message)
        outcome = "forgotten" if g.forgotten else "kept"
        records += [
            {"sandbox_id": sid, "outcome": outcome, "error": g.reason, "base_url": url}
            for sid in g.sandbox_ids
        ]
    return records, failed


def _time_left(entry: LedgerEntry) -> str:
    """``expires in 9 min``, ``expires in 1 h 5 min``, ``no TTL``..."""
    left = entry.expires_in()
    if left is None:
        return "no TTL: it lives until released"
    minutes = max(0, round(left / 60))
    if minutes < 1:
        return "expires in under a minute"
    if minutes < 60:
        return f"expires in {minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"expires in {hours} h {minutes} min" if minutes else f"expires in {hours} h"


def _report_detached(entries: Sequence[LedgerEntry], ui: Output) -> list[dict[str, Any]]:
    """Say which sandboxes were kept as detached (acquired to outlive their command); their
    records for ``--json``."""
    for entry in entries:
        ui.note(
            f"kept {entry.sandbox_id}: detached, {_time_left(entry)} (acquired to outlive its "
            f"command; `klavis-sandbox release {entry.sandbox_id}` ends it, `reap "
            "--include-detached` every one)"
        )
    return [
        {
            "sandbox_id": entry.sandbox_id,
            "outcome": "detached",
            "error": None,
            "base_url": entry.base_url,
            "expires": entry.expires,
        }
        for entry in entries
    ]


def cmd_reap(args: argparse.Namespace, ui: Output) -> int:
    results = reap(
        base_url=args.base_url,
        include_live=args.include_live,
        include_detached=args.include_detached,
        dry_run=args.dry_run,
        forget_unreachable=args.forget,
    )
    spared = _report_detached(results.detached, ui)
    kept, unanswered = _report_unreleased(results.unreleased, ui, args.dry_run)
    kept = [*spared, *kept]
    if not args.dry_run:
        code = _report_releases(results, ui, args, kept=kept)
        return EXIT_ERROR if unanswered else code
    if args.json:
        ui.json([r.sandbox_id for r in results])
    else:
        for r in results:
            ui.data(f"{r.sandbox_id}\n")
    if not results and not results.unreleased and not results.detached:
        ui.note("nothing to release")
    return EXIT_ERROR if unanswered else EXIT_OK
