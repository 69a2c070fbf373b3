"""A driver run in a subprocess by the Ray pool's tests: connects to the session's cluster,
runs a RaySandboxPool whose tasks say which sandbox they hold (a file each) and block, until
the test sends it SIGINT (Ctrl-C) or SIGKILL.

Usage: python ray_driver.py ADDRESS BROKER_NAME MARKER_DIR TASKS
(KLAVIS_API_KEY and KLAVIS_BASE_URL from the environment).
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import ray

from workflows import LocalSandbox
from workflows.ray import RaySandboxPool


def main() -> None:
    address, broker_name, marker_dir, tasks = sys.argv[1:5]
    ray.init(address=address, log_to_driver=False)
    markers = Path(marker_dir)

    def block(sb: LocalSandbox, task: int) -> int:
        (markers / f"{task}.held").write_text(sb.id)
        threading.Event().wait()
        return task

    with RaySandboxPool(
        ["filesystem"], size=int(tasks), broker_name=broker_name, lease_timeout=120, progress=False
    ) as pool:
        print("pool", pool.broker.name, flush=True)
        pool.map(block, range(int(tasks)))


if __name__ == "__main__":
    main()
