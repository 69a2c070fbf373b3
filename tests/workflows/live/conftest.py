"""Fixtures of the live pool tests: ``make_pool`` (a pool of the test's face) and ``gate``; of
the Ray tests: ``ray_cluster`` (one per test process), ``ray_multinode`` (two nodes, one per
module that asks for it), ``ray_conn`` and ``broker_name``."""

from __future__ import annotations

import contextlib
import fcntl
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import workflows
from tests.helpers import Face, LoopThread, RayCluster, listed_sandboxes, start_cluster
from tests.ray_helpers import with_environment
from tests.workflows.live.pool_handle import PoolHandle


@pytest.fixture
def make_pool(face: Face) -> Callable[..., PoolHandle]:
    loop: LoopThread | None = face._loop

    def make(*args: Any, **kwargs: Any) -> PoolHandle:
        kwargs.setdefault("progress", False)
        if loop is None:
            return PoolHandle(None, workflows.SandboxPool(*args, **kwargs))
        return PoolHandle(loop, workflows.AsyncSandboxPool(*args, **kwargs))

    return make


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """What blocked tasks wait for; set when the test ends, so their threads finish."""
    event = threading.Event()
    yield event
    event.set()


@contextlib.contextmanager
def _one_start_at_a_time(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Hold the run's lock on starting Ray clusters: two clusters starting at the same moment on
    one machine fail each other (every start of a -n 2 run timed out, each alone took 13 to
    26 s), so the test processes start theirs one after the other. The lock is a file in the
    run's shared temporary folder."""
    lock_path = tmp_path_factory.getbasetemp().parent / "ray-start.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _start(
    cpus: tuple[int, ...],
    name: str,
    emulator_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> RayCluster:
    """A cluster of ``len(cpus)`` nodes whose machines' environment holds a key of its own for
    the session emulator (a tenant of its own); the driver is not connected. The key, URL and
    ledger folder are in this process's environment only while the nodes start (they inherit
    it), never for the tests, never in a runtime_env: the key reaches Ray's workers as it
    reaches a real cluster's, never through Ray."""
    cluster = RayCluster(
        token=f"test-key-ray-{secrets.token_hex(12)}",
        base_url=emulator_url,
        state_dir=tmp_path_factory.mktemp(f"{name}-state"),
    )
    with _one_start_at_a_time(tmp_path_factory), with_environment(cluster.environment):
        cluster.cluster = start_cluster(cpus)
    cluster.address = cluster.cluster.address
    return cluster


@pytest.fixture(scope="session")
def ray_cluster(
    emulator_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RayCluster]:
    """One local Ray cluster per test process (one node, 2 CPUs), the driver connected to it:
    every Ray test of the process is its tenant (they run one after another, each with a
    broker of its own). Started as :mod:`tests.ray_helpers` says (Ray's public options only,
    retried on Ray's start-up timeout, one start at a time in the run)."""
    import ray  # the dev extra installs it; imported here, as the mcp 1.x venv has none

    cluster = _start((2,), "ray", emulator_url, tmp_path_factory)
    assert cluster.cluster is not None
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.cluster.shutdown()  # type: ignore[no-untyped-call]


@pytest.fixture(scope="module")
def _multinode_cluster(
    emulator_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RayCluster]:
    """The two nodes of ``ray_multinode``, started once per module that asks for them."""
    cluster = _start((1, 1), "ray-multinode", emulator_url, tmp_path_factory)
    assert cluster.cluster is not None
    yield cluster
    # Cluster.shutdown resets the driver's internal KV client, whichever cluster it is on
    with _driver_elsewhere(None):
        cluster.cluster.shutdown()  # type: ignore[no-untyped-call]


@pytest.fixture
def ray_multinode(_multinode_cluster: RayCluster) -> Iterator[RayCluster]:
    """A local Ray cluster of two nodes (the head and one more, one CPU each, each node a raylet
    and agents of its own on this machine), the driver connected to it for the test:
    what a lost node, or work spread over nodes, needs. One cluster per module (its nodes
    start once, one after the other, as :func:`ray_cluster`'s), a tenant of its own, its key
    in the nodes' environment as :func:`ray_cluster`'s.

    ``ray_multinode.cluster`` is the :class:`ray.cluster_utils.Cluster`:
    ``cluster.worker_nodes`` (each ``node.node_id`` for a ``NodeAffinitySchedulingStrategy``),
    ``cluster.remove_node(node)`` to lose one. A test that removes a node adds one back for
    the module's next tests, under the cluster's environment::

        with with_environment(ray_multinode.environment):
            ray_multinode.cluster.add_node(**NODE_OPTIONS, num_cpus=1)

    A driver is connected to one cluster at a time: the driver leaves the process's
    ``ray_cluster`` (if it was connected) for the test, and is connected to it again after.
    A test asks for one of the two fixtures, never both.
    """
    with _driver_elsewhere(_multinode_cluster.address):
        yield _multinode_cluster


@contextlib.contextmanager
def _driver_elsewhere(address: str | None) -> Iterator[None]:
    """The driver connected to the cluster at ``address`` (to none if None) while the block
    runs, then to the one it was connected to before, if any."""
    import ray

    previous = ray.get_runtime_context().gcs_address if ray.is_initialized() else None
    ray.shutdown()
    try:
        if address is not None:
            ray.init(address=address, log_to_driver=False)
        yield
    finally:
        ray.shutdown()
        if previous is not None:
            ray.init(address=previous, log_to_driver=False)


@pytest.fixture
def ray_conn(ray_cluster: RayCluster) -> dict[str, str]:
    """Keyword arguments that point the driver at the session emulator as the cluster's tenant."""
    return {"api_key": ray_cluster.token, "base_url": ray_cluster.base_url}


@pytest.fixture
def broker_name(ray_cluster: RayCluster) -> Iterator[str]:
    """A broker name of this test's own; whatever broker holds it is shut down at the end
    (its leases released), and the emulator then lists nothing of the cluster's tenant."""
    import ray

    name = f"test-broker-{secrets.token_hex(6)}"
    yield name
    try:
        actor = ray.get_actor(name, namespace="klavis-sandbox")
    except ValueError:
        pass
    else:
        try:  # every lease, warm sandbox and record of it, then the actor, for good
            ray.get(actor.shutdown.remote(), timeout=120)
        finally:
            ray.kill(actor, no_restart=True)
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []
