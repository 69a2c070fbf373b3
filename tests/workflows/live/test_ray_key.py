"""The API key never travels through Ray (issue 32): given the way the README says (the cluster's
machines' environment, here the environment ``ray.init`` starts the local cluster with), it is
neither in the cluster's job table, read as another job reads it (a second driver, without the
key), nor in any file of the Ray session's folder, after a pool and a broker lease ran; a job
whose own ``runtime_env`` holds it is warned; options that would put it there are refused
before anything is sent; on a cluster of several nodes, each node's workers have it from that
node's own environment."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from tests.helpers import RAY_TEST_TIMEOUT, RayCluster, listed_sandboxes
from workflows import InvalidInputError, LocalSandbox
from workflows.ray import RaySandboxPool, SandboxBroker

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(RAY_TEST_TIMEOUT)]  # a cluster's start

ANOTHER_JOB = """
import sys, ray
ray.init(address=sys.argv[1], log_to_driver=False)
gcs = ray._raylet.GcsClient(address=sys.argv[1])  # what any job of the cluster may read
for job_id, info in gcs.get_all_job_info().items():
    print(job_id, info.config.runtime_env_info.serialized_runtime_env)
"""

WARNED_JOB = """
import sys, warnings, ray
from workflows.ray import SandboxBroker
ray.init(address=sys.argv[1], log_to_driver=False,
         runtime_env={"env_vars": {"KLAVIS_API_KEY": sys.argv[3]}})
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    broker = SandboxBroker.connect(sys.argv[2])
    SandboxBroker.connect(sys.argv[2])  # warned once per job
for warning in caught:
    print("WARNING", warning.category.__name__, str(warning.message).replace(sys.argv[3], "KEY"))
print("leaked" if any(sys.argv[3] in str(w.message) for w in caught) else "not shown")
broker.shutdown()
"""


def job_table(address: str) -> str:
    """Every job's ``runtime_env`` in the cluster's job table, as another job reads it (a
    driver of its own, without the key)."""
    other = subprocess.run(
        [sys.executable, "-c", ANOTHER_JOB, address],
        capture_output=True,
        text=True,
        timeout=300,
        env=_without_the_key(),
        check=True,
    )
    return other.stdout


def _without_the_key() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("KLAVIS_API_KEY")}


def _lease_in_a_task(broker: SandboxBroker) -> str:
    with broker.sandbox(["filesystem"]) as sb:
        sb.seed({"a.txt": "A"})
        return sb.id


def _seed(sb: LocalSandbox, task: int) -> int:
    sb.seed({"task.txt": str(task)})
    return task


def test_the_key_is_in_neither_the_job_table_nor_the_session_files(
    ray_cluster: RayCluster, broker_name: str
) -> None:
    conn: dict[str, Any] = {"api_key": ray_cluster.token, "base_url": ray_cluster.base_url}
    with RaySandboxPool(
        ["filesystem"], size=2, broker_name=broker_name, progress=False, **conn
    ) as pool:
        assert [r.value for r in pool.map(_seed, range(3))] == [0, 1, 2]  # the key reached them
    broker = SandboxBroker.connect(broker_name)
    leased = ray.get(ray.remote(num_cpus=0)(_lease_in_a_task).remote(broker))
    assert leased
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []

    table = job_table(ray_cluster.address)
    assert len(table.splitlines()) >= 2  # this job and the reading one, at least
    assert ray_cluster.token not in table

    node: Any = ray._private.worker._global_node  # read only: where this cluster's files are
    session = Path(node.get_session_dir_path())
    token = ray_cluster.token.encode()
    read = 0
    for path in session.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            read += 1
            assert token not in data, f"the key is in {path}"
    assert read > 10  # the logs were there to read


def test_a_job_whose_runtime_env_holds_the_key_is_warned_once_without_the_key(
    ray_cluster: RayCluster, broker_name: str
) -> None:
    stand_in = "sk-warned-job-not-the-cluster-s"  # the job table keeps it: not the real key
    done = subprocess.run(
        [sys.executable, "-c", WARNED_JOB, ray_cluster.address, broker_name, stand_in],
        capture_output=True,
        text=True,
        timeout=300,
        env=_without_the_key(),
        check=True,
    )
    warned = [line for line in done.stdout.splitlines() if line.startswith("WARNING")]
    assert len(warned) == 1, done.stdout
    assert warned[0].startswith("WARNING KeyInRayWarning this Ray job's runtime_env holds")
    assert "every job connected to the cluster can read" in warned[0]
    assert done.stdout.splitlines()[-1] == "not shown"
    assert stand_in in job_table(ray_cluster.address)  # what the warning is about


@pytest.mark.parametrize("by", ["name", "value"])
def test_options_that_would_put_the_key_in_ray_are_refused_before_anything_is_sent(
    ray_cluster: RayCluster, broker_name: str, by: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KLAVIS_API_KEY", ray_cluster.token)
    env_vars: dict[str, Any] = (
        {"KLAVIS_API_KEY": "anything"} if by == "name" else {"MY_KEY": ray_cluster.token}
    )
    options = {"runtime_env": {"env_vars": env_vars}}
    with pytest.raises(InvalidInputError) as caught:
        RaySandboxPool(
            ["filesystem"], broker_name=broker_name, task_options=options, progress=False
        )
    assert "task_options['runtime_env']['env_vars']" in str(caught.value)
    assert "export KLAVIS_API_KEY before ray.init()" in str(caught.value)
    with pytest.raises(InvalidInputError, match=r"actor_options\['runtime_env'\]"):
        SandboxBroker.connect(broker_name, actor_options=options)
    assert ray_cluster.token not in str(caught.value)
    with pytest.raises(ValueError, match="Failed to look up actor"):
        ray.get_actor(broker_name, namespace="klavis-sandbox")  # no broker was made


@ray.remote(num_cpus=1)
def _node_and_key_digest() -> tuple[str, str]:
    """The node this task ran on, and the SHA-256 of the key in its worker's environment (the
    digest, never the key, goes back through Ray)."""
    key = os.environ.get("KLAVIS_API_KEY", "")
    return ray.get_runtime_context().get_node_id(), hashlib.sha256(key.encode()).hexdigest()


def test_every_node_of_a_cluster_gives_its_workers_the_key_from_its_own_environment(
    ray_multinode: RayCluster,
) -> None:
    alive = [node["NodeID"] for node in ray.nodes() if node["Alive"]]  # type: ignore[no-untyped-call]
    assert len(alive) == 2
    pinned = [
        _node_and_key_digest.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
        ).remote()
        for node_id in alive
    ]
    seen = dict(ray.get(pinned, timeout=600))
    expected = hashlib.sha256(ray_multinode.token.encode()).hexdigest()
    assert seen == dict.fromkeys(alive, expected)
    assert ray_multinode.token not in job_table(ray_multinode.address)
