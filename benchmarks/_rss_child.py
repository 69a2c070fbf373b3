"""Child process measuring the peak RSS growth of one ``seed_directory`` or ``dump_to``.

Run as ``python -m benchmarks._rss_child {seed|dump} BASE_URL API_KEY SANDBOX_ID PATH``; prints
one JSON line. A fresh process per measurement, so nothing earlier (the benchmark's own
workspace generation, other figures) inflates or hides the peak.

Method: after importing ``workflows`` and attaching to the sandbox (one GET, so the connection
pool exists), the current RSS is the baseline; the kernel's high-water mark (``VmHWM``) is then
reset to the current RSS by writing ``5`` to ``/proc/self/clear_refs`` (Linux >= 4.0), the
operation runs, and the growth is ``VmHWM - baseline``: the exact peak the kernel saw, with no
sampling gaps. Where ``clear_refs`` cannot be written, a thread samples the RSS with psutil
every millisecond instead, and the method says so.
"""

from __future__ import annotations

import gc
import json
import sys
import threading
import time
from pathlib import Path

_MIB = 1024 * 1024


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def main(argv: list[str]) -> int:
    """Measure one operation; print ``{"growth_mib": ..., ...}``."""
    op, base_url, api_key, sandbox_id, path = argv
    import psutil

    from workflows import LocalSandbox

    sandbox = LocalSandbox.attach(sandbox_id, api_key=api_key, base_url=base_url)
    process = psutil.Process()
    gc.collect()
    baseline = process.memory_info().rss
    kernel = _reset_peak()
    peak = baseline
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.wait(0.001):
            peak = max(peak, process.memory_info().rss)

    sampler = None if kernel else threading.Thread(target=sample, daemon=True)
    if sampler is not None:
        sampler.start()
    started = time.perf_counter()
    if op == "seed":
        count = sandbox.seed_directory(path, progress=False)
    elif op == "dump":
        sandbox.dump_to(path, progress=False)
        count = sum(1 for p in Path(path).rglob("*") if p.is_file())
    else:
        raise SystemExit(f"unknown operation {op!r}")
    seconds = time.perf_counter() - started
    if sampler is not None:
        stop.set()
        sampler.join()
    else:
        peak = _status_kib("VmHWM") * 1024
    print(
        json.dumps(
            {
                "growth_mib": (peak - baseline) / _MIB,
                "baseline_mib": baseline / _MIB,
                "peak_mib": peak / _MIB,
                "method": "VmHWM after clear_refs" if kernel else "psutil sampling every 1 ms",
                "seconds": seconds,
                "files": count,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
