"""The commands that release: ``release`` (by id, or ``--all``) and ``reap`` (what the local
ledger says is still held)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from workflows._config import resolve_settings
from workflows._ownership import default_ledger
from workflows._ownership._reap import reap
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
        ui.json(records)
    if not results:
        ui.note("nothing to release")
    return EXIT_ERROR if failed else EXIT_OK


def cmd_release(args: argparse.Namespace, ui: Output) -> int:
    if args.all == bool(args.ids):
        raise UsageError("name sandbox ids to release, or --all (not both)")
    if args.all:
        results = bulk_release(None, base_url=args.base_url, progress=False)
        return _report_releases(results, ui, args)
    settings = resolve_settings(None, args.base_url)
    held = default_ledger().held(base_url=settings.base_url, key=settings.api_key.fingerprint)
    ours = {entry.sandbox_id for entry in held}
    ids = list(dict.fromkeys(args.ids))
    results = bulk_release(ids, base_url=args.base_url, progress=False)
    return _report_releases(results, ui, args, ours)


def cmd_reap(args: argparse.Namespace, ui: Output) -> int:
    results = reap(base_url=args.base_url, include_live=args.include_live, dry_run=args.dry_run)
    if not args.dry_run:
        return _report_releases(results, ui, args)
    if args.json:
        ui.json([r.sandbox_id for r in results])
    else:
        for r in results:
            ui.data(f"{r.sandbox_id}\n")
    if not results:
        ui.note("nothing to release")
    return EXIT_OK
