"""Child process of the interrupt benchmark: seeds the workspace inside ``with``, to be killed.

``python -m benchmarks._interrupt_child BASE_URL API_KEY PATH``. Prints ``acquired <id>`` once
inside the ``with`` block, then seeds ``PATH`` with progress bars on (tqdm writes ``packing`` and
``uploading`` to stderr, which is how the parent knows where the seed is), and prints ``seeded``
if the seed ever finishes (the signal came too late). The parent sends SIGINT or SIGTERM
mid-seed; leaving ``with`` must release the sandbox.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    """Acquire, report, seed."""
    base_url, api_key, path = argv
    from workflows import LocalSandbox

    with LocalSandbox.acquire(
        ["filesystem"], api_key=api_key, base_url=base_url, ttl_seconds=3600, progress=True
    ) as sandbox:
        print(f"acquired {sandbox.id}", flush=True)
        sandbox.seed_directory(path, progress=True)
        print("seeded", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
