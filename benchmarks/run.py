"""Run the benchmarks, print the table, write ``benchmarks/results.json``.

``python -m benchmarks.run [--only seed,dump,...] [--repeats N] [--output PATH]``; ``scripts/bench``
runs it with the defaults. Each group starts the emulators it needs in child processes
(``python -m klavis_emulator --port 0``), so the emulator's CPU work never shares the measured
client's GIL; their state lives in RAM (``/dev/shm``, or ``$KLAVIS_BENCH_EMULATOR_DIR``), see
:func:`benchmarks._common.emulator_root`. The client's files (the generated workspace, spool
files, dump destinations) live under ``$TMPDIR``. ``results.json`` records both places, the load
average before and after the run and each group, and how long this disk takes to create a
file, since a busy or slow disk moves the seed and dump figures more than any code change.

| group | figures |
|---|---|
| seed | seed_speedup_vs_notebook, seed_time_vs_limit, seed_peak_rss_mb |
| dump | dump_speedup_vs_notebook, dump_peak_rss_mb |
| bulk | bulk_release_speedup_vs_sequential, bulk_release_time_vs_ideal |
| calls | call_overhead_vs_httpx |
| imports | import_time_s, import_time_plain_s (a venv with only the wheel, made in scratch) |
| soak | soak_completed_fraction, soak_lost_files, soak_leaked_sandboxes |
| interrupt | interrupt_leaked_sandboxes |
| hostile | hostile_emulator_peak_rss_mb, hostile_client_peak_rss_mb, hostile_inputs_refused |
| mcp | mcp_first_call_s, mcp_session_speedup |
| pool | pool_throughput_vs_fresh_acquire, pool_overhead_vs_ideal |
| ray | ray_pool_scaling, ray_pool_overhead_vs_ideal, ray_dead_worker_leaked, |
| | broker_4096_waiting_failed, broker_leases_per_s, broker_grant_p99_ms, warm_handover_ms, |
| | holder_death_recovery_s |
| | template_seed_speedup (without Ray: benchmarks/_template_seed.py) |
| | emulator_acquire_s, emulator_reset_s, emulator_reset_vs_acquire |
| shapes | shapes_seed_speedup, shapes_seed_vs_limit, shapes_dump_speedup, |
| | shapes_dump_to_speedup, shapes_dump_vs_limit, emulator_dump_mb_s, |
| | emulator_dump_vs_limit, emulator_initialize_vs_limit (each its worst shape's, 4 shapes) |
| footprint | demo_fresh_s, first_tool_call_s, setup_full_s, setup_disk_mb |
| sandboxes | emulator_sandbox_pss_mib, emulator_20_sandboxes_warm_s (MCP-Atlas shape) |
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks import (
    bench_bulk,
    bench_calls,
    bench_dump,
    bench_footprint,
    bench_hostile,
    bench_imports,
    bench_interrupt,
    bench_mcp,
    bench_pool,
    bench_ray,
    bench_sandboxes,
    bench_seed,
    bench_shapes,
    bench_soak,
)
from benchmarks._common import (
    REPO_ROOT,
    BenchContext,
    Figure,
    emulator_root,
    file_create_ms,
    load_average,
    machine_info,
    write_mb_s,
)
from benchmarks._workspace import generate

__all__ = ["GROUPS", "main"]

GROUPS: dict[str, Callable[[BenchContext], list[Figure]]] = {
    "seed": bench_seed.run,
    "dump": bench_dump.run,
    "bulk": bench_bulk.run,
    "calls": bench_calls.run,
    "imports": bench_imports.run,
    "soak": bench_soak.run,
    "interrupt": bench_interrupt.run,
    "hostile": bench_hostile.run,
    "mcp": bench_mcp.run,
    "pool": bench_pool.run,
    "ray": bench_ray.run,
    "shapes": bench_shapes.run,
    "footprint": bench_footprint.run,
    "sandboxes": bench_sandboxes.run,
}


def _format_value(figure: Figure) -> str:
    if figure.value == int(figure.value) and figure.unit not in ("x", "s", "MiB"):
        return str(int(figure.value))
    return f"{figure.value:.3g}" if figure.value < 10 else f"{figure.value:.1f}"


def table(figures: Sequence[Figure]) -> str:
    """The results as a Markdown table: name, value, unit, goal, met?."""
    rows = [("name", "value", "unit", "goal", "met?")]
    rows += [(f.name, _format_value(f), f.unit, f.goal, "yes" if f.met else "NO") for f in figures]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [
        "| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen groups; return 0 (a missed goal is reported, not an error)."""
    parser = argparse.ArgumentParser(prog="benchmarks.run", description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=",".join(GROUPS), help="comma-separated groups")
    parser.add_argument("--repeats", type=int, default=3, help="runs per timed figure (3)")
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="where to write the JSON results (default: benchmarks/results.json when every "
        "group runs, nowhere with --only)",
    )
    args = parser.parse_args(argv)
    chosen = [g.strip() for g in args.only.split(",") if g.strip()]
    unknown = [g for g in chosen if g not in GROUPS]
    if unknown:
        parser.error(f"unknown groups {unknown}; choose from {', '.join(GROUPS)}")

    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="klavis-bench-"))
    emulators = emulator_root(scratch)
    # the library's ledger of this run (and of its child processes) stays in the scratch folder
    os.environ["KLAVIS_SANDBOX_STATE_DIR"] = str(scratch / "state")
    for name in ("KLAVIS_API_KEY", "KLAVIS_BASE_URL"):
        os.environ.pop(name, None)
    figures: list[Figure] = []
    timings: dict[str, float] = {}
    environment: dict[str, Any] = {
        "scratch": str(scratch.parent),
        "emulator_data": str(emulators.parent),
        "load_before": load_average(),
    }
    try:
        environment["scratch_file_create_ms"] = probe = round(file_create_ms(scratch), 3)
        environment["scratch_write_mb_s"] = speed = round(write_mb_s(scratch), 1)
        if probe > 0.5 or speed < 1000:
            print(
                f"!!! {scratch.parent} takes {probe:.2f} ms to create a file (healthy: < 0.1 ms) "
                f"and writes {speed:.0f} MB/s (healthy: > 1,000); the seed and dump figures will "
                "be slow and noisy: set TMPDIR to a faster folder, or stop what else is writing "
                "to this disk",
                flush=True,
            )
        began = time.perf_counter()
        info = generate(scratch / "workspace")
        timings["workspace"] = time.perf_counter() - began
        workspace_info = {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in dataclasses.asdict(info).items()
            if k != "root"
        }
        print(
            f"==> workspace: {info.files} files, {info.total_bytes:,} bytes, "
            f"sha256 {info.sha256[:16]} ({timings['workspace']:.1f} s)",
            flush=True,
        )
        ctx = BenchContext(info.root, workspace_info, scratch, emulators, max(1, args.repeats))
        loads: dict[str, dict[str, list[float] | None]] = {}
        environment["load_by_group"] = loads
        for group in chosen:
            loads[group] = {"before": load_average()}
            print(f"==> {group} (load average {loads[group]['before']})", flush=True)
            began = time.perf_counter()
            produced = GROUPS[group](ctx)
            timings[group] = time.perf_counter() - began
            loads[group]["after"] = load_average()
            for figure in produced:
                print(f"    {figure.name} = {_format_value(figure)} {figure.unit} ({figure.goal})")
            figures.extend(produced)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(emulators, ignore_errors=True)
    elapsed = time.perf_counter() - started

    print()
    print(table(figures))
    print(f"\n{len(figures)} figures in {elapsed:.0f} s; {sum(f.met for f in figures)} met.")
    environment["load_after"] = load_average()
    results: dict[str, Any] = {
        "figures": {f.name: f.to_json() for f in figures},
        "machine": {**machine_info(), **environment},
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seconds": {"total": round(elapsed, 1), **{k: round(v, 1) for k, v in timings.items()}},
        "repeats": args.repeats,
    }
    output = args.output
    if output is None and chosen == list(GROUPS):
        output = REPO_ROOT / "benchmarks" / "results.json"
    if output is not None:
        output.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
