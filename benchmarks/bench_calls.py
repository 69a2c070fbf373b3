"""The cost of the library itself: per call, and at import.

Figures:

* ``call_overhead_vs_httpx``: the median of 500 ``sb.refresh()`` ÷ the median of 500 plain GETs
  of the same sandbox with one reused httpx client (``client.get(...).json()``: the notebook's
  way, which also decodes the body), emulator without injected latency. After a warm-up the two
  kinds of call strictly alternate (in pairs whose order flips every time), so bursts of other
  work on the machine hit both alike.
* ``import_time_s``: the median wall time of ``python -c "import workflows"`` minus the median
  of ``python -c "pass"`` (7 runs each, alternating), fresh interpreters of the same venv.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable

from benchmarks._common import (
    REPO_ROOT,
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


def _wall(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True)
    return time.perf_counter() - started


def _heaviest_imports(limit: int = 8) -> list[str]:
    """Import time of ``import workflows`` by top-level package (``-X importtime`` self times
    summed), heaviest first: where a slow import comes from."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import workflows"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    totals: dict[str, int] = {}
    for line in proc.stderr.splitlines():
        found = re.match(r"import time:\s+(\d+) \|\s+\d+ \| *(\S+)", line)
        if found:
            package = found.group(2).split(".")[0]
            totals[package] = totals.get(package, 0) + int(found.group(1))
    heaviest = sorted(totals.items(), key=lambda item: item[1], reverse=True)[:limit]
    return [f"{name} {us / 1e6:.3f} s" for name, us in heaviest]


def _import_time() -> Figure:
    bare: list[float] = []
    full: list[float] = []
    _wall("import workflows")  # warm the file-system cache and the .pyc files
    for _ in range(IMPORT_RUNS):
        bare.append(_wall("pass"))
        full.append(_wall("import workflows"))
    value = median(full) - median(bare)
    return Figure(
        "import_time_s",
        value,
        "s",
        "<=",
        0.35,
        {
            "bare_interpreter_s": median(bare),
            "with_import_s": median(full),
            "runs": IMPORT_RUNS,
            "self_time_by_package": _heaviest_imports(),
        },
    )


def run(ctx: BenchContext) -> list[Figure]:
    """Measure the call-overhead and import-time figures."""
    return [_call_overhead(ctx), _import_time()]
