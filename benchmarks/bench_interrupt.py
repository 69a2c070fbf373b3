"""Interrupting a seed: SIGINT and SIGTERM sent to processes inside ``with LocalSandbox...``.

Four child processes (``benchmarks/_interrupt_child.py``) each acquire a sandbox in a ``with``
block and seed the 100 MiB workspace with progress bars on. The parent reads each child's
stderr and signals it the moment the seed reaches a phase: SIGINT and SIGTERM while packing
(the ``packing`` bar appeared: reading files and compressing), SIGINT and SIGTERM while
uploading (the ``uploading`` bar appeared: upload-url, PUT and initialize are under way).

Figure ``interrupt_leaked_sandboxes``: sandboxes of the children's key still listed once all
four have exited. The detail says, for each child, its exit status and whether the signal
landed mid-seed (the child prints ``seeded`` if its seed finished first).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from benchmarks._common import (
    REPO_ROOT,
    BenchContext,
    EmulatorProcess,
    Figure,
    listed_ids,
    new_token,
)

__all__ = ["PLAN", "run"]

PLAN: tuple[tuple[signal.Signals, str], ...] = (
    (signal.SIGINT, "packing"),
    (signal.SIGTERM, "packing"),
    (signal.SIGINT, "uploading"),
    (signal.SIGTERM, "uploading"),
)
_TIMEOUT = 180.0


@dataclass
class _Child:
    proc: subprocess.Popen[bytes]
    sig: signal.Signals
    phase: str
    stderr: bytes = b""
    stdout: bytes = b""
    signalled_at: float | None = None

    def report(self) -> dict[str, Any]:
        out = self.stdout.decode(errors="replace")
        err = self.stderr.decode(errors="replace").replace("\r", "\n")
        tail = [line for line in err.splitlines() if line.strip() and "%|" not in line][-3:]
        acquired = next(
            (line.split()[1] for line in out.splitlines() if line.startswith("acquired ")), None
        )
        return {
            "signal": self.sig.name,
            "phase": self.phase,
            "sandbox": acquired,
            "mid_seed": acquired is not None
            and self.signalled_at is not None
            and "seeded" not in out.splitlines(),
            "returncode": self.proc.returncode,
            "stderr_tail": tail,
        }


def run(ctx: BenchContext) -> list[Figure]:
    """Measure the interrupt figure."""
    with EmulatorProcess(ctx.emulator_root) as emulator:
        url = emulator.base_url
        token = new_token()
        children: list[_Child] = []
        for sig, phase in PLAN:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "benchmarks._interrupt_child",
                    url,
                    token,
                    str(ctx.workspace),
                ],
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            assert proc.stdout is not None
            assert proc.stderr is not None
            children.append(_Child(proc, sig, phase))
        by_fd: dict[int, tuple[_Child, str]] = {}
        for child in children:
            assert child.proc.stdout is not None
            assert child.proc.stderr is not None
            by_fd[child.proc.stdout.fileno()] = (child, "stdout")
            by_fd[child.proc.stderr.fileno()] = (child, "stderr")

        deadline = time.monotonic() + _TIMEOUT
        while by_fd and time.monotonic() < deadline:
            ready, _, _ = select.select(list(by_fd), [], [], 1.0)
            for fd in ready:
                child, stream = by_fd[fd]
                chunk = os.read(fd, 65536)
                if not chunk:
                    del by_fd[fd]
                    continue
                if stream == "stdout":
                    child.stdout += chunk
                    continue
                child.stderr += chunk
                if child.signalled_at is None and child.phase.encode() in child.stderr:
                    child.proc.send_signal(child.sig)
                    child.signalled_at = time.monotonic()
        for child in children:
            try:
                child.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait()
            for pipe in (child.proc.stdout, child.proc.stderr):
                if pipe is not None:
                    pipe.close()
        leaked = listed_ids(url, token)

    reports = [child.report() for child in children]
    return [
        Figure(
            "interrupt_leaked_sandboxes",
            len(leaked),
            "sandboxes",
            "==",
            0,
            {
                "children": reports,
                "all_signalled_mid_seed": all(r["mid_seed"] for r in reports),
                "leaked": leaked,
            },
        )
    ]
