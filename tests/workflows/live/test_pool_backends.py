"""The pools' rules, held by every backend of the public seam (``workflows.PoolBackend``):
:class:`~workflows.SandboxPool`, :class:`~workflows.AsyncSandboxPool`, the process-pool backend
of ``tests/workflows/pool_backends/process_pool.py`` (written only against ``workflows``'
public names) on :class:`~workflows.BackendPool`, and ``workflows.ray.RaySandboxPool`` on a
real local Ray cluster (slow). Each: results in order, failure kinds, retries of infrastructure
failures only, a clean sandbox per task, a sandbox whose reset fails retired and replaced,
nothing left acquired at close.

Service failures are scripted with :mod:`tests.faulty_proxy` (a real HTTP proxy in front of the
emulator), never mocked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import workflows
from tests.faulty_proxy import Decision, faulty_proxy
from tests.helpers import RAY_TEST_TIMEOUT, LoopThread, listed_sandboxes
from tests.workflows.live.pool_handle import PoolHandle
from tests.workflows.pool_backends import tasks
from tests.workflows.pool_backends.process_pool import ProcessPoolBackend
from workflows import BackendPool, InvalidInputError


@dataclass
class Rig:
    """A backend under test: ``make(base_url, size)`` gives a pool on it; ``base_url`` and
    ``token`` are its tenant's on the emulator (where nothing may be left)."""

    kind: str
    base_url: str
    token: str
    make: Callable[[str, int], PoolHandle]

    def listed(self) -> list[str]:
        return listed_sandboxes(self.base_url, self.token)


_RAY = pytest.param("ray", marks=[pytest.mark.slow, pytest.mark.timeout(RAY_TEST_TIMEOUT)])


@pytest.fixture(params=["sync", "async", "process", _RAY])
def rig(
    request: pytest.FixtureRequest,
    emulator_url: str,
    token: str,
    loop_thread: LoopThread,
    monkeypatch: pytest.MonkeyPatch,
) -> Rig:
    kind: str = request.param
    if kind == "ray":
        import ray

        from workflows.ray import RaySandboxPool

        ray.cloudpickle.register_pickle_by_value(tasks)  # type: ignore[no-untyped-call]
        cluster = request.getfixturevalue("ray_cluster")
        broker = request.getfixturevalue("broker_name")
        key = cluster.token

        def ray_pool(base_url: str, size: int) -> PoolHandle:
            pool = RaySandboxPool(
                ["filesystem"],
                size=size,
                broker_name=broker,
                task_options={"num_cpus": 0},
                api_key=key,
                base_url=base_url,
                progress=False,
            )
            return PoolHandle(None, pool)

        return Rig(kind, cluster.base_url, key, ray_pool)

    def local(base_url: str, size: int) -> PoolHandle:
        conn: dict[str, Any] = {"api_key": token, "base_url": base_url, "progress": False}
        if kind == "sync":
            return PoolHandle(None, workflows.SandboxPool(["filesystem"], size=size, **conn))
        if kind == "async":
            return PoolHandle(
                loop_thread, workflows.AsyncSandboxPool(["filesystem"], size=size, **conn)
            )
        # the workers read the key from the environment they inherit: it is never pickled
        monkeypatch.setenv("KLAVIS_API_KEY", token)
        backend = ProcessPoolBackend(["filesystem"], api_key=token, base_url=base_url)
        return PoolHandle(None, BackendPool(backend, size=size, progress=False))

    return Rig(kind, emulator_url, token, local)


def test_results_in_order_task_failures_kept_and_each_task_on_a_clean_sandbox(rig: Rig) -> None:
    with rig.make(rig.base_url, 2) as pool:
        results = pool.map(tasks.clean_then_seed, range(7))
        assert len(pool.pool.sandbox_ids) <= 2
    assert [r.index for r in results] == list(range(7))
    assert [r.index for r in results.failures] == [1, 4]
    for failed in results.failures:
        assert (failed.failure, failed.error_type, failed.attempts) == ("task", "ValueError", 1)
        assert failed.error == f"task {failed.index} fails on purpose"
    ok = [r for r in results if r.ok]
    assert [r.value["before"] for r in ok if r.value] == [[]] * 5  # reset between tasks
    assert {r.sandbox_id for r in ok} == {r.value["sandbox"] for r in ok if r.value}
    assert 1 <= len(results.sandbox_ids) <= 2
    assert results.sandboxes_replaced == 0
    assert rig.listed() == []


def test_infrastructure_failures_are_retried_and_task_failures_only_when_asked(
    rig: Rig, tmp_path: Path
) -> None:
    with rig.make(rig.base_url, 2) as pool:
        flaky = pool.map(
            tasks.fails_first_on_infrastructure, [(str(tmp_path), n) for n in range(3)], retries=1
        )
        without_retries = pool.map(tasks.fails_first_on_infrastructure, [(str(tmp_path), 9)])
        by_default = pool.map(tasks.wrong, [0], retries=2)
        asked = pool.map(tasks.wrong, [0], retries=2, retry_on="any")
    assert [(r.ok, r.value, r.attempts) for r in flaky] == [(True, n, 2) for n in range(3)]
    (dropped,) = without_retries
    assert (dropped.ok, dropped.failure, dropped.error_type) == (
        False,
        "infrastructure",
        "ApiConnectionError",
    )
    for results, attempts in ((by_default, 1), (asked, 3)):
        (result,) = results
        assert (result.failure, result.error_type, result.attempts) == (
            "task",
            "ValueError",
            attempts,
        )
    assert "infrastructure: ApiConnectionError in task #0" in without_retries.summary()
    assert rig.listed() == []


def test_a_sandbox_whose_reset_fails_is_retired_and_replaced(rig: Rig) -> None:
    broken: list[str] = []

    def script(method: str, path: str) -> Decision:
        if method == "POST" and path.endswith("/reset"):  # every reset of the first sandbox
            sandbox = path.split("/")[-2]
            broken[:] = broken or [sandbox]
            if sandbox == broken[0]:
                return ("before", 500)
        return None

    with faulty_proxy(rig.base_url, script) as proxy, rig.make(proxy.base_url, 1) as pool:
        results = pool.map(tasks.sandbox_id, range(3))
        assert broken[0] not in rig.listed()  # released at once, not at close
    assert all(r.ok for r in results), results.failures
    assert results[0].value == results[0].sandbox_id == broken[0]
    assert results[1].sandbox_id == results[2].sandbox_id != broken[0]
    assert results.sandboxes_replaced == 1
    assert rig.listed() == []


def test_close_releases_every_sandbox_and_a_closed_pool_runs_nothing(rig: Rig) -> None:
    pool = rig.make(rig.base_url, 2)
    results = pool.map(tasks.sandbox_id, range(4))
    held = set(pool.pool.sandbox_ids)
    assert held == set(results.sandbox_ids)
    assert 1 <= len(held) <= 2
    released = pool.close()
    assert {r.sandbox_id for r in released} == held
    assert all(r.ok for r in released)
    assert rig.listed() == []
    assert pool.pool.sandbox_ids == []
    with pytest.raises(InvalidInputError, match="closed"):
        pool.map(tasks.sandbox_id, [0])
    assert pool.close() == []  # idempotent
