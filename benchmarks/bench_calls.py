"""The cost of the library itself per call (the import: :mod:`benchmarks.bench_imports`).

Figures:

* ``call_overhead_vs_httpx``: the median of 500 ``sb.refresh()`` ÷ the median of 500 plain GETs
  of the same sandbox with one reused httpx client (``client.get(...).json()``: the notebook's
  way, which also decodes the body), emulator without injected latency. After a warm-up the two
  kinds of call strictly alternate (in pairs whose order flips every time), so bursts of other
  work on the machine hit both alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from benchmarks._common import (
    BenchContext,
    EmulatorProcess,
    Figure,
    acquire_many,
    api_client,
    median,
    new_token,
)
from workflows import LocalSandbox

__all__ = ["run"]

CALLS = 500
WARMUP = 50
IMPORT_RUNS = 7


def _call_overhead(ctx: BenchContext) -> Figure:
    with EmulatorProcess(ctx.emulator_root) as emulator:
        url = emulator.base_url
        token = new_token()
        (sandbox_id,) = acquire_many(url, token, 1, servers=("filesystem", "git", "terminal"))
        sandbox = LocalSandbox.attach(sandbox_id, api_key=token, base_url=url)
        library: list[float] = []
        plain: list[float] = []
        with api_client(url, token) as client:
            path = f"/local-sandbox/{sandbox_id}"

            def raw_get() -> object:
                response = client.get(path)
                response.raise_for_status()
                return response.json()

            for _ in range(WARMUP):
                sandbox.refresh()
                raw_get()
            pair: list[tuple[Callable[[], object], list[float]]] = [
                (sandbox.refresh, library),
                (raw_get, plain),
            ]
            for i in range(CALLS):
                for call, times in pair if i % 2 == 0 else pair[::-1]:
                    started = time.perf_counter()
                    call()
                    times.append(time.perf_counter() - started)
    library_s, plain_s = median(library), median(plain)
    return Figure(
        "call_overhead_vs_httpx",
        library_s / plain_s,
        "x",
        "<=",
        1.2,
        {
            "refresh_median_ms": library_s * 1000,
            "httpx_median_ms": plain_s * 1000,
            "overhead_median_us": (library_s - plain_s) * 1e6,
            "calls": CALLS,
        },
    )


def run(ctx: BenchContext) -> list[Figure]:
    """Measure the call-overhead figure."""
    return [_call_overhead(ctx)]
