"""RaySandboxPool on a real local Ray cluster and the session emulator: results in order, the
cluster-wide cap and the acquire rate held, a worker killed mid-task leaves nothing acquired
and its task retried, a driver's Ctrl-C releases everything, and reap after a killed driver;
the README's tracing inside workers (``worker_process_setup_hook``, the emulator's URL in the
``runtime_env``)."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import ray

import workflows.ray
from tests.helpers import (
    RAY_TEST_TIMEOUT,
    Poller,
    RayCluster,
    expect_children_to_get_sigint,
    listed_sandboxes,
    wait_until,
)
from tests.workflows.live.broker_actors import Gate
from workflows import LocalSandbox, TaskTimeoutError, WorkerDiedError
from workflows.ray import RaySandboxPool, SandboxBroker

# Ray ships this module's functions and classes by value: its workers need not import tests/.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(RAY_TEST_TIMEOUT)]  # a cluster's start
DRIVER = Path(__file__).with_name("ray_driver.py")


def _lease_and_wait(broker: SandboxBroker, gate: Any) -> str:
    """A worker the framework owns, leasing through the same broker as the pool."""
    with broker.sandbox(["filesystem"]) as sb:
        ray.get(gate.wait.remote())
        return sb.id


lease_and_wait: Any = ray.remote(num_cpus=0)(_lease_and_wait)


@pytest.fixture
def pool_kwargs(ray_conn: dict[str, str], broker_name: str) -> dict[str, Any]:
    return {**ray_conn, "broker_name": broker_name, "progress": False}


def double(sb: LocalSandbox, task: int) -> dict[str, Any]:
    sb.seed({"task.txt": str(task)})
    return {"task": task, "twice": 2 * task, "pid": os.getpid()}


def test_results_in_order_with_task_failures_kept_apart(
    ray_cluster: RayCluster, pool_kwargs: dict[str, Any]
) -> None:
    def fails_on_three(sb: LocalSandbox, task: int) -> dict[str, Any]:
        if task == 3:
            raise ValueError("wrong answer")
        return double(sb, task)

    with RaySandboxPool(["filesystem"], size=2, **pool_kwargs) as pool:
        results = pool.map(fails_on_three, range(6))
        assert len(pool.sandbox_ids) <= 2
    assert [r.index for r in results] == list(range(6))
    assert [r.value["twice"] for r in results if r.ok and r.value] == [0, 2, 4, 8, 10]
    (failed,) = results.failures
    assert (failed.index, failed.failure, failed.error_type) == (3, "task", "ValueError")
    assert failed.attempts == 1  # a task's own failure is not retried by default
    assert {r.value["pid"] for r in results if r.ok and r.value} != {
        os.getpid()
    }  # ran on Ray's workers
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []


def test_a_task_that_does_not_pickle_fails_alone_and_the_pool_goes_on(
    ray_cluster: RayCluster, pool_kwargs: dict[str, Any]
) -> None:
    # issue 32: Ray pickled the task outside the attempt's try, the flow raised, and the
    # sandbox it took was never given back: the next map of a pool of one hung for ever
    with RaySandboxPool(["filesystem"], size=1, **pool_kwargs) as pool:
        tasks: list[Any] = [threading.Lock(), 2]  # a lock does not pickle
        results = pool.map(double, tasks)
        again = pool.map(double, [3])
    failed, ok = results
    assert (failed.ok, failed.failure, failed.error_type) == (False, "task", "TypeError")
    assert (ok.ok, again[0].ok) == (True, True)
    assert (again[0].value or {}).get("twice") == 6
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []


class FlowBroke(BaseException):
    """What the broken hands raise: caught by no rule of the flow (as a bug of ours)."""


class BrokenOnce:
    """A pool backend whose first reset raises :class:`FlowBroke`; the rest is the wrapped
    backend's."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.broke = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def reset(self, sandbox: LocalSandbox) -> None:
        if not self.broke:
            self.broke = True
            raise FlowBroke("the flow broke")
        self.backend.reset(sandbox)


def test_a_flow_that_raises_fails_the_run_and_the_next_run_finishes(
    ray_cluster: RayCluster, pool_kwargs: dict[str, Any]
) -> None:
    with RaySandboxPool(["filesystem"], size=1, **pool_kwargs) as pool:
        pool.backend = BrokenOnce(pool.backend)
        with pytest.raises(FlowBroke):
            pool.map(double, [1])
        assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []  # not kept
        results = pool.map(double, [2, 3])  # size=1: hangs if the place was not given back
    assert [r.ok for r in results] == [True, True]
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []


def test_the_cluster_cap_holds_for_the_pool_and_other_workers_together(
    ray_cluster: RayCluster, pool_kwargs: dict[str, Any]
) -> None:
    broker = SandboxBroker.connect(pool_kwargs["broker_name"], max_sandboxes=2)
    gate = Gate.remote()  # type: ignore[attr-defined]

    def waits(sb: LocalSandbox, task: int) -> int:
        ray.get(gate.wait.remote())
        return task

    with Poller(ray_cluster) as poller, ThreadPoolExecutor(1) as executor:
        outsider = lease_and_wait.remote(broker, gate)
        # the pool wants 3 sandboxes, the outsider 1: the broker's cap of 2 holds for all
        pool = RaySandboxPool(["filesystem"], size=3, task_options={"num_cpus": 0}, **pool_kwargs)
        with pool:
            running = executor.submit(pool.map, waits, range(6))
            wait_until(lambda: len(broker.held()) == 4, "asked for 4 leases")
            wait_until(lambda: poller.most == 2, "at the cap")
            assert sum(lease.state == "waiting" for lease in broker.held()) == 2
            ray.get(gate.open.remote())
            results = running.result(timeout=120)
        assert ray.get(outsider, timeout=60)
    assert [r.value for r in results] == list(range(6))
    assert poller.most == 2
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []


def test_the_acquire_rate_is_the_cluster_s(
    ray_cluster: RayCluster, pool_kwargs: dict[str, Any]
) -> None:
    rate = 4.0
    gate = Gate.remote()  # type: ignore[attr-defined]

    def waits(sb: LocalSandbox, task: int) -> int:  # each task holds its sandbox until all 4 do
        ray.get(gate.wait.remote())
        return task

    pool = RaySandboxPool(
        ["filesystem"],
        size=4,
        max_acquires_per_second=rate,
        task_options={"num_cpus": 0},
        **pool_kwargs,
    )
    with pool, ThreadPoolExecutor(1) as executor:
        running = executor.submit(pool.map, waits, range(8))
        wait_until(lambda: pool.broker.stats().acquired == 4, "holding 4 sandboxes")
        ray.get(gate.open.remote())
        results = running.result(timeout=120)
        stats = pool.broker.stats()
    assert not results.failures
    assert stats.max_acquires_per_second == rate
    times = stats.acquire_times
    assert len(times) == len(results.sandbox_ids) == 4
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert min(gaps) >= 1 / rate - 0.02, gaps


def test_a_worker_killed_mid_task_leaves_nothing_and_its_task_is_retried(
    ray_cluster: RayCluster, pool_kwargs: dict[str, Any], tmp_path: Path
) -> None:
    pid_file = tmp_path / "worker.pid"

    def dies_once(sb: LocalSandbox, task: int) -> str:
        if not pid_file.exists():  # the first attempt: say who runs it, then block
            pid_file.write_text(str(os.getpid()))
            threading.Event().wait()
        return "second attempt"

    with (
        RaySandboxPool(["filesystem"], size=1, **pool_kwargs) as pool,
        ThreadPoolExecutor(1) as executor,
    ):
        running = executor.submit(pool.map, dies_once, [0], retries=1)
        wait_until(pid_file.exists, "running the task")
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        results = running.result(timeout=120)
    (result,) = results
    assert (result.ok, result.value, result.attempts) == (True, "second attempt", 2)
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []

    # without retries, the death is the task's result: an infrastructure failure
    pid_file.unlink()
    with (
        RaySandboxPool(["filesystem"], size=1, **pool_kwargs) as pool,
        ThreadPoolExecutor(1) as executor,
    ):
        running = executor.submit(pool.map, dies_once, [0])
        wait_until(pid_file.exists, "running the task")
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        (result,) = running.result(timeout=120)
    assert (result.ok, result.failure, result.error_type) == (
        False,
        "infrastructure",
        WorkerDiedError.__name__,
    )
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []


def test_a_timed_out_task_is_cancelled_and_its_sandbox_replaced(
    ray_cluster: RayCluster, pool_kwargs: dict[str, Any]
) -> None:
    gate = Gate.remote()  # type: ignore[attr-defined]

    def waits(sb: LocalSandbox, task: int) -> int:
        ray.get(gate.wait.remote())  # never opened
        return task

    with RaySandboxPool(["filesystem"], size=1, **pool_kwargs) as pool:
        (result,) = pool.map(waits, [0], timeout=2)
        assert pool.sandbox_ids == []  # retired: the cancelled task may still have used it
    assert result.timed_out
    assert (result.failure, result.error_type) == ("infrastructure", TaskTimeoutError.__name__)
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []


@pytest.fixture
def driver(ray_cluster: RayCluster, broker_name: str, tmp_path: Path) -> Iterator[Any]:
    """Start :data:`DRIVER` (2 blocked tasks) and wait until both hold their sandbox."""
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KLAVIS_")}
    env.update(KLAVIS_API_KEY=ray_cluster.token, KLAVIS_BASE_URL=ray_cluster.base_url)
    env["KLAVIS_SANDBOX_STATE_DIR"] = str(tmp_path / "driver-state")
    expect_children_to_get_sigint()
    process = subprocess.Popen(
        [sys.executable, str(DRIVER), ray_cluster.address, broker_name, str(markers), "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(lambda: len(list(markers.glob("*.held"))) == 2, "holding 2 sandboxes", 120)
        process.markers = markers  # type: ignore[attr-defined]
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=60)


def test_ctrl_c_in_the_driver_releases_everything(ray_cluster: RayCluster, driver: Any) -> None:
    held = sorted(path.read_text() for path in driver.markers.glob("*.held"))
    assert sorted(listed_sandboxes(ray_cluster.base_url, ray_cluster.token)) == held
    driver.send_signal(signal.SIGINT)
    output = driver.communicate(timeout=120)[0].decode()
    assert driver.returncode != 0
    assert "KeyboardInterrupt" in output
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []


def test_what_a_killed_driver_held_is_released_when_ray_reports_its_death(
    ray_cluster: RayCluster, broker_name: str, driver: Any
) -> None:
    held = sorted(path.read_text() for path in driver.markers.glob("*.held"))
    assert sorted(listed_sandboxes(ray_cluster.base_url, ray_cluster.token)) == held
    driver.kill()
    driver.wait(timeout=60)
    # lease_timeout is 120 s there: Ray's report of the driver's death ends its leases
    wait_until(
        lambda: not listed_sandboxes(ray_cluster.base_url, ray_cluster.token),
        "released without reap",
        deadline=110,
    )
    assert workflows.ray.reap(broker_name) == []  # nothing left for reap to take


README = Path(__file__).resolve().parents[3] / "README.md"

TRACED_TASK = """
import os
from workflows import LocalSandbox


@ray.remote(num_cpus=0)
def seed_and_read_back() -> tuple[str, str]:
    with LocalSandbox.acquire(["filesystem"]) as sb:  # the key: this node's environment
        sb.seed({"a.txt": "traced"})
        return os.environ["KLAVIS_BASE_URL"], sb.dump().text("a.txt")


print(*ray.get(seed_and_read_back.remote(), timeout=600))
"""


def readme_block(containing: str) -> str:
    """The README's ```py block (in a list item: indented) that holds ``containing``."""
    blocks = re.findall(r"^ *```py\n(.*?)^ *```", README.read_text(), re.MULTILINE | re.DOTALL)
    [block] = [b for b in blocks if containing in b]
    return textwrap.dedent(block)


def test_the_readme_s_worker_setup_hook_traces_inside_workers_with_the_url_of_the_runtime_env(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    """The README's block, run as written in a job of its own (``address="auto"`` finds the
    cluster through ``RAY_ADDRESS``), with the URL of a second emulator in its ``runtime_env``:
    the worker's sandbox is that emulator's (the nodes' environment names the session's), and
    the worker's spans, exported by the hook's SDK to the worker's output, are in the
    session's worker logs, without the key."""
    from klavis_emulator import EmulatorConfig, EmulatorServer

    snippet = readme_block("worker_process_setup_hook")
    assert '"http://127.0.0.1:8321"' in snippet
    with EmulatorServer(EmulatorConfig(mcp_at_acquire=False)) as other:
        other_url = other.base_url
        assert other_url != ray_cluster.base_url
        job = snippet.replace('"http://127.0.0.1:8321"', repr(other_url)) + TRACED_TASK
        env = {k: v for k, v in os.environ.items() if not k.startswith("KLAVIS_")}
        env["RAY_ADDRESS"] = ray_cluster.address
        done = subprocess.run(
            [sys.executable, "-c", job],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
            cwd=tmp_path,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [other_url, "traced"]

    assert ray_cluster.cluster is not None
    head: Any = ray_cluster.cluster.head_node  # read only: where the cluster's files are
    logs = Path(head.get_session_dir_path()) / "logs"

    def worker_output() -> str:
        return "".join(path.read_text(errors="replace") for path in logs.glob("worker-*.out"))

    spans = ('"name": "klavis.acquire"', '"name": "klavis.seed"', '"name": "klavis.release"')
    wait_until(lambda: all(span in worker_output() for span in spans), "traced in a worker", 120)
    assert ray_cluster.token not in worker_output()
