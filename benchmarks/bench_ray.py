"""The pool on a local Ray cluster (2 CPUs): :class:`~workflows.ray.RaySandboxPool`.

Figures:

* ``ray_pool_scaling``: throughput of ``RaySandboxPool(size=2)`` over ``size=1`` (the baseline,
  measured in the same run), ``TASKS`` tasks that each wait ``WORK_S`` seconds (a sleep: the
  agent waiting on its model) as Ray tasks, on an emulator whose acquire takes
  ``ACQUIRE_DELAY`` seconds (``--acquire-delay``). The detail has the overhead of each run
  against the ideal ``TASKS * WORK_S / size`` (acquire, resets, Ray's dispatch and the release
  included; the broker and the workers already running, as a cluster's are: an uncounted
  warm-up run starts the workers first), goal <= 1.3 (as the figure
  ``ray_pool_overhead_vs_ideal``). Measured on a 2-core machine shared with other jobs:
  a cold first run paid 2 to 4 s per worker process started, a warm one ~10 ms of Ray
  dispatch and ~10 ms of reset per task.
* ``ray_dead_worker_leaked``: sandboxes the emulator still lists after a run in which a pool
  task's worker was SIGKILLed mid-task (its task retried) and an actor holding a broker lease
  was ``ray.kill``-ed (its lease released when Ray reports the death). Goal 0.
* the broker's figures (``broker_4096_waiting_failed``, ``broker_leases_per_s``,
  ``broker_grant_p99_ms``, ``warm_handover_ms``, ``holder_death_recovery_s``): see
  :mod:`benchmarks._ray_broker`, measured on the same cluster against an emulator of their own
  with no acquire delay.
* ``template_seed_speedup``: 16 seeds of a 2,000-file tree from one ``SeedTemplate`` against
  16 plain seeds, measured first and without Ray (``benchmarks/_template_seed.py``). Goal >= 1.4.
* ``emulator_acquire_s``, ``emulator_reset_s``, ``emulator_reset_vs_acquire``: what the reset
  between a pool's samples costs against a fresh acquire, measured first and without Ray (see
  :mod:`benchmarks._reset`).

The cluster's machines get the key from their environment (set while its node starts), never
through Ray.
"""

from __future__ import annotations

import os
import secrets
import signal
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import _reset
from benchmarks._common import (
    BenchContext,
    EmulatorProcess,
    Figure,
    listed_ids,
    median,
    new_token,
)
from benchmarks._template_seed import template_seed_figure
from workflows import LocalSandbox

__all__ = ["ACQUIRE_DELAY", "TASKS", "WORK_S", "run"]

TASKS = 40
WORK_S = 0.5
ACQUIRE_DELAY = 1.0
LEASE_TIMEOUT = 3.0


def work(sb: LocalSandbox, task: int) -> int:
    """A task that waits ``WORK_S`` seconds (its model) and touches nothing."""
    time.sleep(WORK_S)
    return task


def _start_ray(url: str, token: str, state: Path) -> Any:
    """A local 2-CPU cluster, the driver connected to it: its ``Cluster`` (``shutdown()`` ends
    its processes, and only them).

    Ray 2.60.0's raylet gives its dashboard agent (a Python process) 15 s to start and aborts
    past them, and the driver gives the raylet 30 s (ray-project/ray#65983): a loaded 2-core
    machine misses them. Measured there (tests/ray_helpers.py has the figures): a node without a
    log monitor or dashboard, started by :class:`ray.cluster_utils.Cluster`, came up 7 times in
    8 where ``ray.init`` did 4 times, alternating; each start that reports Ray's start-up
    timeout is tried again (a fresh session). The machines' environment holds the key while
    the node starts (its processes inherit it), never a runtime_env.
    """
    import ray
    from ray.cluster_utils import Cluster

    env = {"KLAVIS_API_KEY": token, "KLAVIS_BASE_URL": url, "KLAVIS_SANDBOX_STATE_DIR": str(state)}
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        for attempt in range(1, 5):
            cluster = Cluster()
            try:
                cluster.add_node(
                    num_cpus=2,
                    include_dashboard=False,
                    include_log_monitor=False,  # one Python process fewer beside the agent
                    object_store_memory=150 * 1024 * 1024,
                )
                break
            except Exception as exc:
                cluster.shutdown()  # type: ignore[no-untyped-call]
                if "timed out during startup" not in str(exc) or attempt == 4:
                    raise
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    ray.init(address=cluster.address, log_to_driver=False)
    return cluster


def _scaling_run(url: str, token: str, size: int, tasks: int = TASKS) -> float:
    from workflows.ray import RaySandboxPool, SandboxBroker

    name = f"bench-broker-{secrets.token_hex(4)}"
    broker = SandboxBroker.connect(name, max_sandboxes=size)
    try:
        started = time.perf_counter()
        with RaySandboxPool(
            ["filesystem"], size=size, broker_name=name, api_key=token, base_url=url, progress=False
        ) as pool:
            results = pool.map(work, range(tasks))
        seconds = time.perf_counter() - started
    finally:
        broker.shutdown()
    if results.failures:
        raise AssertionError(f"ray pool size {size}: {results.summary()}")
    if listed_ids(url, token):
        raise AssertionError("sandboxes still listed after the Ray pool closed")
    return seconds


def _dead_worker_run(ctx: BenchContext, url: str, token: str) -> dict[str, Any]:
    import ray

    from workflows.ray import RaySandboxPool, SandboxBroker

    name = f"bench-broker-{secrets.token_hex(4)}"
    marker = ctx.folder("ray-dead-worker") / "died"

    def dies_once(sb: LocalSandbox, task: int) -> int:
        if task == 2 and not marker.exists():
            marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)  # the worker dies mid-task
        time.sleep(WORK_S)
        return task

    @ray.remote(num_cpus=0)
    class Holder:
        def hold(self, broker: SandboxBroker, path: str) -> None:
            with broker.sandbox(["filesystem"]) as sb:
                Path(path).write_text(sb.id)
                threading.Event().wait()

    broker = SandboxBroker.connect(name, max_sandboxes=3, lease_timeout=LEASE_TIMEOUT)
    held = marker.with_name("held")
    holder = Holder.remote()  # type: ignore[attr-defined]
    holder.hold.remote(broker, str(held))
    with RaySandboxPool(
        ["filesystem"], size=2, broker_name=name, api_key=token, base_url=url, progress=False
    ) as pool:
        results = pool.map(dies_once, range(6), retries=1)
    deadline = time.monotonic() + 60
    while not held.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    ray.kill(holder)
    # the killed actor's lease ends lease_timeout after its last heartbeat: wait up to 3 times
    deadline = time.monotonic() + 3 * LEASE_TIMEOUT
    while listed_ids(url, token) and time.monotonic() < deadline:
        time.sleep(0.2)
    leaked = len(listed_ids(url, token))
    stats = broker.stats()
    broker.shutdown()
    return {
        "leaked": leaked,
        "killed_task_attempts": results[2].attempts,
        "killed_task_ok": results[2].ok,
        "failures": len(results.failures),
        "expired_leases": stats.expired,
    }


def run(ctx: BenchContext) -> list[Figure]:
    """Measure the Ray pool's figures (and first, without Ray, the emulator's reset)."""
    import ray

    from benchmarks._ray_broker import broker_figures

    template = template_seed_figure(ctx.emulator_root, ctx.scratch, ctx.repeats)  # no Ray
    resets = _reset.run(ctx)
    token = new_token()
    with (
        EmulatorProcess(
            ctx.emulator_root, acquire_delay=ACQUIRE_DELAY, mcp_at_acquire=False
        ) as emulator,
        EmulatorProcess(ctx.emulator_root, mcp_at_acquire=False) as fast,
    ):
        url = emulator.base_url
        cluster = _start_ray(url, token, ctx.folder("ray-state"))
        try:
            # a warm-up run, not counted: Ray starts a worker process per CPU on first use
            # (2 to 4 s each on this machine), which a cluster running a job has done already
            _scaling_run(url, token, 2, tasks=4)
            one = [_scaling_run(url, token, 1) for _ in range(ctx.repeats)]
            two = [_scaling_run(url, token, 2) for _ in range(ctx.repeats)]
            dead = _dead_worker_run(ctx, url, token)
            broker = broker_figures(fast.base_url, token)
        finally:
            ray.shutdown()
            cluster.shutdown()
    one_s, two_s = median(one), median(two)
    overhead = {size: s / (TASKS * WORK_S / size) for size, s in ((1, one_s), (2, two_s))}
    common = {"tasks": TASKS, "work_s": WORK_S, "acquire_delay_s": ACQUIRE_DELAY}
    return [
        Figure(
            "ray_pool_scaling",
            one_s / two_s,
            "x",
            ">=",
            1.6,
            {
                **common,
                "size_1_s": [round(v, 2) for v in one],
                "size_2_s": [round(v, 2) for v in two],
                "overhead_vs_ideal_size_1": round(overhead[1], 3),
                "overhead_vs_ideal_size_2": round(overhead[2], 3),
            },
        ),
        Figure(
            "ray_pool_overhead_vs_ideal",
            overhead[2],
            "x",
            "<=",
            1.3,
            {**common, "size": 2, "ideal_s": TASKS * WORK_S / 2, "pool_s": round(two_s, 2)},
        ),
        Figure("ray_dead_worker_leaked", dead["leaked"], "sandboxes", "==", 0, dead),
        *broker,
        template,
        *resets,
    ]
