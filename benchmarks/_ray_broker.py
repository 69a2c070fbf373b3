"""The broker's figures (issue 31), on the Ray cluster :mod:`benchmarks.bench_ray` started, against
an emulator of their own whose acquire takes no extra time (the pool's figures use one with a
1 s acquire delay; here 4,096 acquires of 1 s on a cap of 8 would take 9 minutes measuring the
delay, not the broker).

* ``broker_4096_waiting_failed``: leases that failed (an error, a lease ended under its live
  holder, a grant missing) when 4 async actors, each with 1,024 concurrent ``async_sandbox``
  blocks, put 4,096 leases in the broker at once on a cap of 8 (the first 8 hold their
  sandboxes until all 4,096 are in). Goal 0. The detail has the most sandboxes the emulator
  listed (polled: never over 8), the longest wait against the median (first come, first
  served: the last lease waits the whole run), the wall time.
* ``broker_leases_per_s``: leases granted and released per second through the broker in that
  run (each an acquire and a release on the emulator: the service's work, not the broker's,
  bounds it; see the detail's load average). Reported.
* ``broker_grant_p99_ms``: from a free slot to the granted lease (the acquire included), p99
  over the run (p50 in the detail). Reported.
* ``warm_handover_ms``: median time ``async with broker.async_sandbox(...)`` takes to give a
  sandbox when an idle warm one of its kind is there (no acquire: a request, its grant, the
  session's thread handing it to the loop), measured in an async actor; the same lease
  without warm sandboxes (an acquire) is the baseline, in the detail. Goal <= 50.
* ``holder_death_recovery_s``: from ``ray.kill`` of an actor holding the whole cap to another
  actor's waiting leases holding it, ``lease_timeout`` being 60 s: Ray's report of the death,
  not a missed heartbeat. Reported (goal: well under ``lease_timeout / 3``).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import threading
import time
from typing import Any

import ray

from benchmarks._common import Figure, listed_ids
from workflows.ray import SandboxBroker, Warm

__all__ = ["broker_figures"]

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]

LEASES, ACTORS, CAP = 4096, 4, 8
HANDOVERS = 20


@ray.remote(num_cpus=0)
class _Gate:
    def __init__(self) -> None:
        self.event: asyncio.Event | None = None

    async def wait(self) -> None:
        if self.event is None:
            self.event = asyncio.Event()
        await self.event.wait()

    async def open(self) -> None:
        if self.event is None:
            self.event = asyncio.Event()
        self.event.set()


@ray.remote(num_cpus=0)
class _Holder:
    async def run(self, broker: SandboxBroker, n: int, url: str, gate: Any) -> dict[str, int]:
        errors: dict[str, int] = {}

        async def one() -> None:
            try:
                async with broker.async_sandbox(["filesystem"], base_url=url):
                    if gate is not None:
                        await gate.wait.remote()
            except Exception as exc:  # noqa: BLE001 - counted
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1

        await asyncio.gather(*(one() for _ in range(n)))
        return errors

    async def handovers(self, broker: SandboxBroker, url: str, idle: int) -> list[float]:
        """Lease ``HANDOVERS`` times, each when ``idle`` warm sandboxes are idle: seconds each."""
        seconds = []
        for _ in range(HANDOVERS):
            while (await broker._link.call_async("stats")).warm_idle < idle:  # noqa: ASYNC110 - polls the broker
                await asyncio.sleep(0.05)
            started = time.perf_counter()
            async with broker.async_sandbox(["filesystem"], base_url=url):
                seconds.append(time.perf_counter() - started)
        return seconds


def _poll_most(url: str, token: str, stop: threading.Event, most: list[int]) -> None:
    while not stop.is_set():
        most[0] = max(most[0], len(listed_ids(url, token)))
        time.sleep(0.05)


def _scale(url: str, token: str) -> dict[str, Any]:
    name = f"bench-broker-{os.getpid()}-scale"
    broker = SandboxBroker.connect(name, max_sandboxes=CAP, lease_timeout=30)
    gate = _Gate.remote()  # type: ignore[attr-defined]
    most, stop = [0], threading.Event()
    poller = threading.Thread(target=_poll_most, args=(url, token, stop, most), daemon=True)
    poller.start()
    try:
        holders = [_Holder.remote() for _ in range(ACTORS)]  # type: ignore[attr-defined]
        runs = [h.run.remote(broker, LEASES // ACTORS, url, gate) for h in holders]
        deadline = time.monotonic() + 900
        while True:
            stats = broker.stats()
            if (stats.waiting, stats.held) == (LEASES - CAP, CAP) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        started = time.perf_counter()
        ray.get(gate.open.remote())
        errors = ray.get(runs, timeout=3600)
        wall = time.perf_counter() - started
        stats = broker.stats()
    finally:
        stop.set()
        poller.join()
        broker.shutdown()
    failed = sum(sum(e.values()) for e in errors) + stats.expired + (LEASES - stats.granted)
    grants = sorted(stats.grant_seconds)
    waits = stats.wait_seconds
    return {
        "failed": failed,
        "errors": [e for e in errors if e],
        "expired": stats.expired,
        "granted": stats.granted,
        "most_listed": most[0],
        "cap": CAP,
        "wall_s": round(wall, 1),
        "leases_per_s": LEASES / wall,
        "grant_p50_ms": round(1000 * statistics.median(grants), 1),
        "grant_p99_ms": 1000 * grants[int(0.99 * (len(grants) - 1))],
        "longest_wait_s": round(max(waits), 1),
        "median_wait_s": round(statistics.median(waits), 1),
        "left": len(listed_ids(url, token)),
        "load_average": os.getloadavg(),
    }


def _handover(url: str) -> dict[str, Any]:
    holder = _Holder.remote()  # type: ignore[attr-defined]
    cold_name, warm_name = f"bench-broker-{os.getpid()}-cold", f"bench-broker-{os.getpid()}-warm"
    cold = SandboxBroker.connect(cold_name, max_sandboxes=4)
    try:
        cold_s = ray.get(holder.handovers.remote(cold, url, 0), timeout=600)
    finally:
        cold.shutdown()
    warm = SandboxBroker.connect(
        warm_name, max_sandboxes=4, warm=Warm(["filesystem"], 4, base_url=url)
    )
    try:
        warm_s = ray.get(holder.handovers.remote(warm, url, 4), timeout=600)
        hits = warm.stats().warm_hits
    finally:
        warm.shutdown()
    return {
        "warm_ms": 1000 * statistics.median(warm_s),
        "cold_ms": round(1000 * statistics.median(cold_s), 1),
        "warm_hits": hits,
        "leases": HANDOVERS,
    }


def _death(url: str) -> dict[str, Any]:
    name = f"bench-broker-{os.getpid()}-death"
    broker = SandboxBroker.connect(name, max_sandboxes=2, lease_timeout=60)
    gate = _Gate.remote()  # type: ignore[attr-defined]
    victim, other = _Holder.remote(), _Holder.remote()  # type: ignore[attr-defined]
    try:
        victim.run.remote(broker, 2, url, gate)
        while broker.stats().held < 2:
            time.sleep(0.1)
        waiting = other.run.remote(broker, 2, url, gate)
        while broker.stats().waiting < 2:
            time.sleep(0.1)
        killed = time.perf_counter()
        ray.kill(victim)
        while broker.stats().held < 2 or broker.stats().dead_holders < 1:
            time.sleep(0.02)
        recovered = time.perf_counter() - killed
        ray.get(gate.open.remote())
        ray.get(waiting, timeout=300)
    finally:
        broker.shutdown()
    return {"recovery_s": recovered, "lease_timeout_s": 60}


def broker_figures(url: str, token: str) -> list[Figure]:
    """Measure the broker's figures against the emulator at ``url`` (see the module)."""
    scale = _scale(url, token)
    handover = _handover(url)
    death = _death(url)
    return [
        Figure("broker_4096_waiting_failed", scale["failed"], "leases", "==", 0, scale),
        Figure(
            "broker_leases_per_s",
            round(scale["leases_per_s"], 1),
            "leases/s",
            "report",
            0,
            {"wall_s": scale["wall_s"], "load_average": scale["load_average"]},
        ),
        Figure(
            "broker_grant_p99_ms",
            round(scale["grant_p99_ms"], 1),
            "ms",
            "report",
            0,
            {"grant_p50_ms": scale["grant_p50_ms"]},
        ),
        Figure("warm_handover_ms", round(handover["warm_ms"], 1), "ms", "<=", 50, handover),
        Figure("holder_death_recovery_s", round(death["recovery_s"], 2), "s", "report", 0, death),
    ]
