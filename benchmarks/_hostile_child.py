"""Child process measuring the client's peak RSS growth while it refuses one hostile dump.

Run as ``python -m benchmarks._hostile_child BASE_URL API_KEY SANDBOX_ID DEST`` where the
emulator at ``BASE_URL`` hands out signed URLs that lead to a hostile store the parent set up
(``tests/hostile_storage.py``); prints one JSON line: the growth, the error raised (its class),
and whether it was refused (a ``KlavisError``) rather than accepted or crashed.

Both ``dump()`` (a Snapshot) and ``dump_to()`` (a folder) are run, in that order; the figure is
the larger growth. The archive limits are the library's defaults, except 64 MiB of files in at
most 1,000 members (a download cap of about 85 MiB), so that "too large" is reached quickly, on
the same code path as with the defaults' 25 GiB.
Method as in ``benchmarks/_rss_child.py``: the kernel's high-water mark is reset to the current
RSS (``/proc/self/clear_refs``) after attaching, and the growth is ``VmHWM`` minus that RSS.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path

from benchmarks._rss_child import _status_kib

_MIB = 1024 * 1024


def main(argv: list[str]) -> int:
    """Run dump and dump_to against the hostile store; print the growth and the outcome."""
    base_url, api_key, sandbox_id, dest = argv
    from workflows import ArchiveLimits, KlavisError, LocalSandbox

    limits = ArchiveLimits(max_total_bytes=64 * _MIB, max_members=1000)
    sandbox = LocalSandbox.attach(
        sandbox_id, api_key=api_key, base_url=base_url, limits=limits, timeout=30
    )
    outcomes: list[dict[str, object]] = []
    worst = 0.0
    for how in ("dump", "dump_to"):
        gc.collect()
        baseline = _status_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")
        started = time.perf_counter()
        error: BaseException | None = None
        try:
            if how == "dump":
                sandbox.dump(progress=False).close()
            else:
                sandbox.dump_to(Path(dest) / "out", progress=False)
        except Exception as exc:  # noqa: BLE001 - the outcome is reported, not raised
            error = exc
        growth = (_status_kib("VmHWM") - baseline) / 1024
        worst = max(worst, growth)
        outcomes.append(
            {
                "how": how,
                "growth_mib": round(growth, 1),
                "seconds": round(time.perf_counter() - started, 2),
                "error": type(error).__name__ if error is not None else None,
                "message": str(error)[:160] if error is not None else None,
                "refused": isinstance(error, KlavisError),
            }
        )
    print(
        json.dumps(
            {
                "growth_mib": round(worst, 1),
                "refused": all(bool(o["refused"]) for o in outcomes),
                "outcomes": outcomes,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
