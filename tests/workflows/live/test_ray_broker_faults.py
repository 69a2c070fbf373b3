"""The broker when things die (issue 31 points 2, 3, 4, 6), on a real local Ray cluster and the
session emulator: a holder killed with queued leases gives its place back at once and none of
its queued leases is granted; a broker killed mid-run is started again (by Ray, or by the next
``connect``) and adopts what it leased, never over the cap, losing no finished episode;
``reap()`` beside a live job takes only the dead job's; a blocked event loop keeps its lease,
and a lease that did end says so and why."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
import ray

import workflows.ray
from tests.helpers import Poller, RayCluster, listed_sandboxes, wait_until
from tests.workflows.live.broker_actors import Episodes, Gate, Keeper
from workflows.ray import SandboxBroker

pytestmark = pytest.mark.slow


def _of(broker: SandboxBroker, actor: Any) -> list[workflows.ray.Lease]:
    """The leases of the holder actor ``actor``."""
    actor_id = actor._actor_id.hex()
    return [lease for lease in broker.held() if f"actor:{actor_id}" in lease.session]


@pytest.mark.timeout(600)
def test_a_killed_holder_s_queued_leases_are_never_granted_and_its_place_comes_back(
    ray_cluster: RayCluster, broker_name: str
) -> None:
    # lease_timeout 600: a missed heartbeat cannot explain anything in this test's time; only
    # Ray's report of the death can give the cap back (within lease_timeout / 3 = 200 s)
    broker = SandboxBroker.connect(broker_name, max_sandboxes=4, lease_timeout=600)
    gate = Gate.remote()  # type: ignore[attr-defined]
    victim, live = Episodes.remote(), Episodes.remote()  # type: ignore[attr-defined]
    with Poller(ray_cluster) as poller:
        victim.run.remote(broker, 7, gate)
        wait_until(lambda: len(_of(broker, victim)) == 7, "the victim asked for 7 leases")
        wait_until(lambda: broker.stats().held == 4, "the victim holding the cap")
        running = live.run.remote(broker, 6, gate)
        wait_until(lambda: len(_of(broker, live)) == 6, "the live actor waiting behind it")
        assert broker.stats().granted == 4

        ray.kill(victim)
        wait_until(
            lambda: sum(lease.state == "held" for lease in _of(broker, live)) == 4,
            "the live actor holding the cap the dead one left",
            deadline=200,
        )
        stats = broker.stats()
        assert _of(broker, victim) == []
        assert (stats.dead_holders, stats.dropped, stats.expired) == (1, 3, 0)
        assert stats.granted == 8  # 4 before the death, 4 to the live actor: none to the dead
        assert poller.most == 4
        ray.get(gate.open.remote())
        done = ray.get(running, timeout=300)
    assert done["errors"] == {}
    assert len(done["results"]) == 6
    wait_until(lambda: not listed_sandboxes(ray_cluster.base_url, ray_cluster.token), "released")
    assert broker.held() == []


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("how", ["ray restarts it", "the next connect"])
def test_a_broker_killed_mid_run_adopts_its_leases_and_loses_no_episode(
    ray_cluster: RayCluster, broker_name: str, how: str
) -> None:
    broker = SandboxBroker.connect(
        broker_name, max_sandboxes=6, max_acquires_per_second=4, lease_timeout=30
    )
    actors = [Episodes.remote() for _ in range(4)]  # type: ignore[attr-defined]
    with Poller(ray_cluster) as poller:
        runs = [actor.run.remote(broker, 6, None, True) for actor in actors]
        wait_until(lambda: broker.stats().held >= 5, "5 leases held", deadline=300)
        ray.kill(broker._link.actor, no_restart=how != "ray restarts it")
        if how == "the next connect":
            wait_until(lambda: _gone(broker_name), "the broker gone for good")
            assert SandboxBroker.connect(broker_name).stats().incarnation == 2
        done = [ray.get(run, timeout=600) for run in runs]
        stats = broker.stats()
    assert [d["errors"] for d in done] == [{}, {}, {}, {}]
    assert sorted(r["index"] for d in done for r in d["results"]) == sorted(list(range(6)) * 4)
    assert all(r["reward"] for d in done for r in d["results"])  # no finished episode lost
    assert stats.incarnation == 2
    assert stats.adopted >= 1
    assert poller.most <= 6
    # a block's exit hands its release to the broker, which sends it after answering: the last
    # ones may still be on their way when the episodes have returned (a leak would stay)
    wait_until(lambda: not listed_sandboxes(ray_cluster.base_url, ray_cluster.token), "released")
    assert broker.held() == []


def _gone(name: str) -> bool:
    try:
        ray.get_actor(name, namespace="klavis-sandbox")
    except ValueError:
        return True
    return False


def test_reap_takes_only_what_dead_holders_left_beside_a_live_job(
    ray_cluster: RayCluster, broker_name: str
) -> None:
    broker = SandboxBroker.connect(broker_name, max_sandboxes=4, lease_timeout=30)
    live, stopped = Keeper.remote(), Keeper.remote()  # type: ignore[attr-defined]
    kept = ray.get(live.take.remote(broker))
    lost = ray.get(stopped.take.remote(broker))
    pid = ray.get(stopped.pid.remote())
    os.kill(pid, signal.SIGSTOP)  # alive, silent: Ray reports no death; reap must judge
    try:
        wait_until(
            lambda: all(time.time() - lease.last_heartbeat > 12 for lease in _of(broker, stopped)),
            "a heartbeat period (lease_timeout / 3 = 10 s) without its poll",
        )
        assert workflows.ray.reap(broker_name) == [lost]
        assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == [kept]
        assert ray.get(live.use.remote()) == {"ok": "used"}  # the live job's sandbox works on
    finally:
        os.kill(pid, signal.SIGKILL)

    # everything=True takes the live one too, and its holder is told so, and why
    assert workflows.ray.reap(broker_name, everything=True) == [kept]
    used = ray.get(live.use.remote())
    assert used["error"] == "LeaseExpiredError"
    assert "reap(everything=True)" in used["message"]
    assert used["kind"] == "infrastructure"
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []


def test_a_blocked_event_loop_keeps_its_lease_and_an_ended_lease_says_why(
    ray_cluster: RayCluster, broker_name: str
) -> None:
    broker = SandboxBroker.connect(broker_name, max_sandboxes=2, lease_timeout=6)
    keeper = Keeper.remote()  # type: ignore[attr-defined]
    sandbox_id = ray.get(keeper.take.remote(broker))
    ray.get(keeper.block_the_loop.remote(15))  # 2.5 lease timeouts of a blocked loop
    assert ray.get(keeper.use.remote()) == {"ok": "used"}
    assert broker.stats().expired == 0

    # a process that stops altogether (SIGSTOP: no thread runs) loses its lease after
    # lease_timeout; its next call says so rather than a bare 404
    pid = ray.get(keeper.pid.remote())
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(
            lambda: sandbox_id not in listed_sandboxes(ray_cluster.base_url, ray_cluster.token),
            "released after lease_timeout without a heartbeat",
        )
    finally:
        os.kill(pid, signal.SIGCONT)
    used = ray.get(keeper.use.remote())
    assert used["error"] == "LeaseExpiredError", used
    assert "no heartbeat from its holder" in used["message"]
    assert "lease_timeout 6 s" in used["message"]
    assert used["kind"] == "infrastructure"
    assert broker.stats().expired == 1
    ray.get(keeper.leave.remote())  # leaving the block after that raises nothing
    assert broker.held() == []
