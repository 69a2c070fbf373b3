"""The broker at the scale RL runs, and a lost node (issue 31 points 1 and 2): 4,096 leases
waiting at once on a cap of 8 all finish, with no error, no lease ended under a live holder,
the cap never exceeded as the emulator lists it, and nothing left; a holder whose node is lost
has its waiting leases dropped and its place given back at once (``ray.cluster_utils.Cluster``
with two simulated nodes).

Both are heavy (minutes, and a cluster of their own for the second): marked ``scale``, to run
once per CI run (``-m scale``) rather than on every interpreter.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from tests.helpers import Poller, RayCluster, listed_sandboxes, wait_until
from tests.ray_helpers import start_cluster, with_environment
from tests.workflows.live.broker_actors import Episodes, Gate
from workflows.ray import SandboxBroker

pytestmark = [pytest.mark.slow, pytest.mark.scale]

LEASES, ACTORS, CAP = 4096, 4, 8
NODE_DRIVER = Path(__file__).with_name("broker_node_driver.py")


@pytest.mark.timeout(3600)
def test_4096_waiting_leases_on_a_cap_of_8_all_finish(
    ray_cluster: RayCluster, broker_name: str
) -> None:
    broker = SandboxBroker.connect(broker_name, max_sandboxes=CAP, lease_timeout=30)
    gate = Gate.remote()  # type: ignore[attr-defined]
    actors = [Episodes.remote() for _ in range(ACTORS)]  # type: ignore[attr-defined]
    with Poller(ray_cluster) as poller:
        runs = [actor.run.remote(broker, LEASES // ACTORS, gate) for actor in actors]

        def all_in() -> bool:  # the first 8 hold their sandboxes until the gate opens
            stats = broker.stats()
            return (stats.waiting, stats.held) == (LEASES - CAP, CAP)

        wait_until(all_in, "4,096 leases in the broker at once", deadline=900)
        ray.get(gate.open.remote())
        done = ray.get(runs, timeout=3600)
        stats = broker.stats()
    assert [d["errors"] for d in done] == [{}] * ACTORS
    assert sum(len(d["results"]) for d in done) == LEASES
    assert (stats.granted, stats.expired, stats.dropped) == (LEASES, 0, 0)
    assert poller.most <= CAP
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []
    assert broker.held() == []
    waits = stats.wait_seconds
    print(  # fairness, reported: first come, first served (the last waits the whole run)
        f"\n4,096 leases: longest wait {max(waits):.0f} s, median {statistics.median(waits):.0f} s"
        f", grant p50 {statistics.median(stats.grant_seconds) * 1000:.0f} ms"
    )


@pytest.fixture
def two_nodes(
    ray_cluster: RayCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Any, Any]]:
    """A second Ray cluster of two simulated nodes (a head, and a worker node to lose), its
    processes with the session emulator's tenant in their environment; this process does not
    connect to it (it stays connected to ``ray_cluster``): a driver subprocess does.

    Its files go to a folder of its own (``RAY_TMPDIR`` while it starts): a
    ``ray.cluster_utils.Cluster`` writes its address in ``<tmp>/ray/ray_current_cluster``,
    which every plain ``ray.init()`` of the machine would otherwise connect to. It is ended
    node by node (``Cluster.shutdown`` also resets this process's link to its own cluster's
    key-value store)."""
    folder = tempfile.mkdtemp(prefix="rn-", dir="/tmp")  # short: socket paths have a limit
    env = {**ray_cluster.environment, "RAY_TMPDIR": folder}
    lock_path = tmp_path_factory.getbasetemp().parent / "ray-start.lock"
    with open(lock_path, "a") as lock, with_environment(env):
        fcntl.flock(lock, fcntl.LOCK_EX)  # one start at a time in the run, as the fixtures'
        cluster = start_cluster((1, 1), resources=({"head": 1}, {"doomed": 1}))
    nodes = [cluster.head_node, *cluster.worker_nodes]
    try:
        yield cluster, nodes[1]
    finally:
        for node in reversed(nodes):  # the worker (if not lost already), then the head
            with contextlib.suppress(Exception):
                cluster.remove_node(node)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.timeout(1200)
def test_a_holder_on_a_lost_node_gives_its_place_back_at_once(
    ray_cluster: RayCluster, two_nodes: tuple[Any, Any], broker_name: str
) -> None:
    cluster, doomed = two_nodes
    driver = subprocess.Popen(
        [sys.executable, str(NODE_DRIVER), cluster.address, broker_name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert driver.stdin is not None
        assert driver.stdout is not None
        ready = json.loads(driver.stdout.readline())
        assert ready == {"ready": True, "granted": 4}
        cluster.remove_node(doomed)
        driver.stdin.write("removed\n")
        driver.stdin.flush()
        after = json.loads(driver.stdout.readline())
        assert after["doomed_leases"] == 0
        assert (after["dead_holders"], after["dropped"], after["expired"]) == (1, 1, 0)
        # 4 before the loss, 4 to the live holder, none to the dead; and within the driver's
        # 200 s (lease_timeout / 3) where lease_timeout is 600 s: Ray's report of the death did it
        assert after["granted"] == 8
        finished = json.loads(driver.stdout.readline())
        assert finished["errors"] == {}
        assert finished["results"] == 6
        assert driver.wait(timeout=120) == 0
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=60)
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []
