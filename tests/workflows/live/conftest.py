"""Fixtures of the live pool tests: ``make_pool`` (a pool of the test's face) and ``gate``; of
the Ray tests: ``ray_cluster`` (one per test process), ``ray_conn`` and ``broker_name``."""

from __future__ import annotations

import fcntl
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import workflows
from tests.helpers import Face, LoopThread, RayCluster, listed_sandboxes, start_ray
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


@pytest.fixture(scope="session")
def ray_cluster(
    emulator_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RayCluster]:
    """One local Ray cluster per test process (2 CPUs), its machines' environment holding a
    key of its own for the session emulator: every Ray test of the process is that tenant
    (they run one after another, each with a broker of its own). The environment is set only
    while ``ray.init`` starts the cluster's processes (they inherit it), never for the tests:
    the key reaches Ray's workers as it reaches a real cluster's, never through Ray."""
    import ray  # the dev extra installs it; imported here, as the mcp 1.x venv has none

    cluster = RayCluster(
        token=f"test-key-ray-{secrets.token_hex(12)}",
        base_url=emulator_url,
        state_dir=tmp_path_factory.mktemp("ray-state"),
    )
    env = {
        "KLAVIS_API_KEY": cluster.token,
        "KLAVIS_BASE_URL": emulator_url,
        "KLAVIS_SANDBOX_STATE_DIR": str(cluster.state_dir),
    }
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    # two clusters starting at the same moment on one machine fail each other (every start
    # of a -n 2 run timed out, each alone took 13 to 26 s): the test processes start theirs
    # one after the other, under a lock in the run's shared temporary folder
    lock_path = tmp_path_factory.getbasetemp().parent / "ray-start.lock"
    try:
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            context = start_ray(ray)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    cluster.address = context.address_info["gcs_address"]
    yield cluster
    ray.shutdown()


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
