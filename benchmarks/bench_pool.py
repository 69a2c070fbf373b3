"""A benchmark's loop: 200 tasks over 8 sandboxes with :class:`~workflows.SandboxPool`.

Figures:

* ``pool_throughput_vs_fresh_acquire``: 200 tiny tasks (seed one file) run by acquiring a
  fresh sandbox per task, 8 at a time (``LocalSandbox.acquire`` in ``with``, 8 threads) ÷ the
  same tasks through ``SandboxPool(size=8).map`` (acquire, resets and the final release
  included), on an emulator whose acquire takes ``ACQUIRE_DELAY`` seconds, as a VM start does on
  the service (``--acquire-delay``). The fresh-acquire run is measured once (it is about 200 *
  the delay / 8, and sleeps barely vary), the pool's once per repeat (its median is used).
* ``pool_overhead_vs_ideal``: 200 tasks that each work ``WORK_S`` seconds (a sleep: the agent
  waiting on its model) through ``SandboxPool(size=8).map``, acquire, resets and release
  included ÷ the ideal 200 * ``WORK_S`` / 8, on an emulator without the acquire delay: the
  pool's own cost (leases, resets, bookkeeping), not the service's VM start. Median over the
  repeats.

Both emulators start MCP servers on first use (``--no-mcp-at-acquire``): no task speaks MCP,
and 200 server starts would measure the CPU of this machine, not the pool.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from benchmarks._common import (
    BenchContext,
    EmulatorProcess,
    Figure,
    listed_ids,
    median,
    new_token,
)
from workflows import LocalSandbox, SandboxPool, ServerName

__all__ = ["ACQUIRE_DELAY", "SIZE", "TASKS", "WORK_S", "run"]

TASKS = 200
SIZE = 8
ACQUIRE_DELAY = 2.0
WORK_S = 0.25
SERVERS: list[ServerName] = ["filesystem"]


def tiny(sb: LocalSandbox, task: int) -> int:
    """The tiny task: seed one small file."""
    return sb.seed({"task.txt": f"task {task}\n"})


def work(sb: LocalSandbox, task: int) -> int:
    """A task that works ``WORK_S`` seconds and touches nothing."""
    time.sleep(WORK_S)
    return task


def _pool_run(url: str, fn: Callable[[LocalSandbox, int], int], label: str) -> tuple[float, int]:
    token = new_token()
    started = time.perf_counter()
    with SandboxPool(SERVERS, size=SIZE, api_key=token, base_url=url, progress=False) as pool:
        results = pool.map(fn, range(TASKS))
    seconds = time.perf_counter() - started
    if results.failures:
        raise AssertionError(f"{label}: {len(results.failures)} tasks failed: {results.summary()}")
    if listed_ids(url, token):
        raise AssertionError(f"{label}: sandboxes still listed after the pool closed")
    return seconds, len(results.sandbox_ids)


def _fresh_run(url: str) -> float:
    token = new_token()

    def one(task: int) -> int:
        with LocalSandbox.acquire(SERVERS, api_key=token, base_url=url, progress=False) as sb:
            return tiny(sb, task)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=SIZE) as executor:
        list(executor.map(one, range(TASKS)))
    seconds = time.perf_counter() - started
    if listed_ids(url, token):
        raise AssertionError("fresh acquires: sandboxes still listed at the end")
    return seconds


def run(ctx: BenchContext) -> list[Figure]:
    """Measure the pool figures."""
    pool_s: list[float] = []
    with EmulatorProcess(
        ctx.emulator_root, acquire_delay=ACQUIRE_DELAY, mcp_at_acquire=False
    ) as emulator:
        fresh_s = _fresh_run(emulator.base_url)
        for _ in range(ctx.repeats):
            seconds, used = _pool_run(emulator.base_url, tiny, "tiny tasks")
            pool_s.append(seconds)

    overhead: list[float] = []
    work_s: list[float] = []
    ideal = TASKS * WORK_S / SIZE
    with EmulatorProcess(ctx.emulator_root, mcp_at_acquire=False) as emulator:
        for _ in range(ctx.repeats):
            seconds, _ = _pool_run(emulator.base_url, work, "working tasks")
            work_s.append(seconds)
            overhead.append(seconds / ideal)

    common = {"tasks": TASKS, "size": SIZE}
    return [
        Figure(
            "pool_throughput_vs_fresh_acquire",
            fresh_s / median(pool_s),
            "x",
            ">=",
            3,
            {
                **common,
                "acquire_delay_s": ACQUIRE_DELAY,
                "fresh_acquire_s": round(fresh_s, 2),
                "pool_s": [round(v, 2) for v in pool_s],
                "sandboxes_used": used,
            },
        ),
        Figure(
            "pool_overhead_vs_ideal",
            median(overhead),
            "x",
            "<=",
            1.3,
            {
                **common,
                "work_s": WORK_S,
                "ideal_s": ideal,
                "pool_s": [round(v, 2) for v in work_s],
                "per_round": [round(v, 3) for v in overhead],
            },
        ),
    ]
