"""Releasing 200 sandboxes on an emulator that adds 50 ms to every request.

Figures:

* ``bulk_release_speedup_vs_sequential``: a sequential loop of plain httpx DELETEs (one reused
  client) ÷ ``bulk_release(ids, concurrency=16)``, each over 200 freshly acquired sandboxes.
* ``bulk_release_time_vs_ideal``: ``bulk_release``'s time ÷ (⌈200/16⌉ * the median single
  DELETE of the sequential loop of the same round).

Each round acquires 2 * 200 sandboxes (plain httpx, 16 at a time, not timed), releases one
half with the loop and the other with ``bulk_release``, and checks that all 400 are gone.
Figures are medians over the rounds.
"""

from __future__ import annotations

import math
import time

from benchmarks._common import (
    BenchContext,
    EmulatorProcess,
    Figure,
    acquire_many,
    api_client,
    listed_ids,
    median,
    new_token,
)
from workflows import bulk_release

__all__ = ["CONCURRENCY", "LATENCY_MS", "SANDBOXES", "run"]

SANDBOXES = 200
CONCURRENCY = 16
LATENCY_MS = 50


def run(ctx: BenchContext) -> list[Figure]:
    """Measure the bulk-release figures."""
    speedups: list[float] = []
    vs_ideal: list[float] = []
    rounds: list[dict[str, float]] = []
    with EmulatorProcess(ctx.emulator_root, latency_ms=LATENCY_MS) as emulator:
        url = emulator.base_url
        for _ in range(ctx.repeats):
            token = new_token()
            sequential_ids = acquire_many(url, token, SANDBOXES)
            bulk_ids = acquire_many(url, token, SANDBOXES)

            singles: list[float] = []
            with api_client(url, token) as client:
                started = time.perf_counter()
                for sandbox_id in sequential_ids:
                    began = time.perf_counter()
                    client.delete(f"/local-sandbox/{sandbox_id}").raise_for_status()
                    singles.append(time.perf_counter() - began)
                sequential_s = time.perf_counter() - started

            started = time.perf_counter()
            results = bulk_release(
                bulk_ids, concurrency=CONCURRENCY, api_key=token, base_url=url, progress=False
            )
            bulk_s = time.perf_counter() - started
            failed = [r for r in results if not r.ok or r.already_released]
            if failed or len(results) != SANDBOXES:
                raise AssertionError(f"bulk_release did not release everything: {failed[:3]}")
            left = listed_ids(url, token)
            if left:
                raise AssertionError(f"{len(left)} sandboxes still listed after releasing")

            single = median(singles)
            ideal = math.ceil(SANDBOXES / CONCURRENCY) * single
            speedups.append(sequential_s / bulk_s)
            vs_ideal.append(bulk_s / ideal)
            rounds.append(
                {
                    "sequential_s": sequential_s,
                    "bulk_s": bulk_s,
                    "single_delete_median_s": single,
                    "ideal_s": ideal,
                }
            )

    common = {
        "sandboxes": SANDBOXES,
        "concurrency": CONCURRENCY,
        "latency_ms": LATENCY_MS,
        "rounds": rounds,
    }
    return [
        Figure(
            "bulk_release_speedup_vs_sequential",
            median(speedups),
            "x",
            ">=",
            10,
            {"per_round": [round(v, 2) for v in speedups], **common},
        ),
        Figure(
            "bulk_release_time_vs_ideal",
            median(vs_ideal),
            "x",
            "<=",
            1.5,
            {"per_round": [round(v, 3) for v in vs_ideal], **common},
        ),
    ]
