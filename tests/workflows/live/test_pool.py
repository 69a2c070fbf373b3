"""SandboxPool and AsyncSandboxPool against the emulator, both faces: results in order,
failures isolated, sandboxes replaced (failed reset, health check, timeout), everything released
(normal exit, an error or Ctrl-C in the ``with`` body, SIGINT and SIGTERM in a child process).

Task bodies are written once, as sync functions of a sandbox (see
:mod:`tests.workflows.live.pool_handle`; the fixtures are in this folder's conftest).
Blocked tasks wait on a ``threading.Event`` the test sets at the end, never on a sleep.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import workflows
from tests.faulty_proxy import Decision, faulty_proxy
from tests.helpers import expect_children_to_get_sigint, listed_sandboxes
from tests.workflows.live.pool_handle import PoolHandle
from workflows import InvalidInputError, PoolResults, TaskResult, TaskTimeoutError


def _held(conn: dict[str, str]) -> list[str]:
    return [e.sandbox_id for e in workflows.default_ledger().held(base_url=conn["base_url"])]


def test_results_in_order_failures_isolated_nothing_left(
    make_pool: Callable[..., PoolHandle], conn: dict[str, str], token: str
) -> None:
    def run(sb: Any, task: int) -> dict[str, Any]:
        before = sorted(sb.dump())  # a clean sandbox: nothing of an earlier task
        sb.seed({f"task-{task}.txt": str(task)})
        if task % 5 == 2:
            raise ValueError(f"task {task} fails on purpose")
        return {"before": before, "files": sorted(sb.dump())}

    with make_pool(["filesystem"], size=3, **conn) as pool:
        results = pool.map(run, range(12))
        assert len(listed_sandboxes(conn["base_url"], token)) <= 3
    assert [r.index for r in results] == list(range(12))
    assert [r.index for r in results.failures] == [2, 7]
    assert {(r.error_type, r.error) for r in results.failures} == {
        ("ValueError", "task 2 fails on purpose"),
        ("ValueError", "task 7 fails on purpose"),
    }
    for r in results:
        assert r.sandbox_id is not None
        assert r.attempts == 1
        if r.ok:
            assert r.value == {"before": [], "files": [f"task-{r.index}.txt"]}
    assert 1 <= len(results.sandbox_ids) <= 3
    assert results.sandboxes_replaced == 0
    summary = results.summary()
    assert summary.startswith(f"12 tasks on {len(results.sandbox_ids)} sandbox")
    # the failed tasks by their indexes (#2, #7), never a count that reads as one
    assert "10 ok, 2 failed (task failures: ValueError in tasks #2, #7; infrastructure: none)" in (
        summary
    )
    assert {r.failure for r in results} == {None, "task"}
    df = results.to_pandas()
    assert list(df.index) == list(range(12))
    assert list(df["ok"]) == [r.ok for r in results]
    assert {"sandbox_id", "error_type", "error", "seconds", "reset_seconds", "files"} <= set(
        df.columns
    )
    assert listed_sandboxes(conn["base_url"], token) == []
    assert _held(conn) == []


def test_a_sandbox_whose_reset_fails_is_replaced(
    make_pool: Callable[..., PoolHandle], emulator_url: str, token: str
) -> None:
    broken: list[str] = []

    def script(method: str, path: str) -> Decision:
        # every reset of the first sandbox reset fails (500, before anything happens)
        if method == "POST" and path.endswith("/reset"):
            sandbox_id = path.split("/")[-2]
            if not broken:
                broken.append(sandbox_id)
            if sandbox_id == broken[0]:
                return ("before", 500)
        return None

    with faulty_proxy(emulator_url, script) as proxy:
        conn = {"api_key": token, "base_url": proxy.base_url}
        with make_pool(["filesystem"], size=1, **conn) as pool:
            results = pool.map(lambda sb, task: sb.id, range(3))
            assert broken[0] not in listed_sandboxes(emulator_url, token)  # released
    assert all(r.ok for r in results), results.failures
    assert results[0].sandbox_id == broken[0]
    assert results[1].sandbox_id == results[2].sandbox_id != broken[0]
    assert results.sandboxes_replaced == 1
    assert results[0].reset_seconds == 0.0 < results[1].reset_seconds
    assert ("POST", f"/local-sandbox/{broken[0]}/reset", "before 500") in proxy.seen
    assert listed_sandboxes(emulator_url, token) == []


def test_every_task_starts_with_the_benchmark_data_again(
    make_pool: Callable[..., PoolHandle], tmp_path: Path, token: str
) -> None:
    from klavis_emulator import EmulatorConfig, EmulatorServer

    pack = tmp_path / "atlas"
    pack.mkdir()
    (pack / "README.md").write_text("# the task\n")
    config = EmulatorConfig(
        data_dir=tmp_path / "emulator", benchmark_data={"MCP_Atlas": pack}, host_mcp=False
    )

    def run(sb: Any, task: int) -> dict[str, str]:
        snapshot = sb.dump()
        seen = {name: snapshot.text(name) for name in sorted(snapshot)}
        sb.seed({"README.md": f"overwritten by task {task}", f"task-{task}.txt": "x"})
        return seen

    with EmulatorServer(config) as server:
        conn = {"api_key": token, "base_url": server.base_url}
        with make_pool(["filesystem"], size=1, benchmark="MCP_Atlas", **conn) as pool:
            results = pool.map(run, range(3))
        assert listed_sandboxes(server.base_url, token) == []
    assert len(results.sandbox_ids) == 1  # one sandbox, reset between the tasks
    assert results.values == [{"README.md": "# the task\n"}] * 3


def test_an_unhealthy_idle_sandbox_is_replaced(
    make_pool: Callable[..., PoolHandle], conn: dict[str, str], token: str
) -> None:
    with make_pool(["filesystem"], size=1, health_check_after=0, **conn) as pool:
        first = pool.map(lambda sb, task: sb.id, [0])
        gone = first[0].value
        # released behind the pool's back (as by its TTL): the next lease's check sees it
        httpx.delete(
            f"{conn['base_url']}/local-sandbox/{gone}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        ).raise_for_status()
        second = pool.map(lambda sb, task: sb.id, [0, 1])
    assert [r.ok for r in second] == [True, True]
    assert gone not in second.values
    assert second.sandboxes_replaced == 1
    assert listed_sandboxes(conn["base_url"], token) == []


def test_a_timed_out_task_is_abandoned_and_its_sandbox_replaced(
    make_pool: Callable[..., PoolHandle],
    conn: dict[str, str],
    token: str,
    gate: threading.Event,
) -> None:
    def run(sb: Any, task: int) -> str:
        if task == 0:
            gate.wait()  # past any timeout: until the test ends
        return str(sb.id)

    with make_pool(["filesystem"], size=1, **conn) as pool:
        results = pool.map(run, range(2), timeout=0.5)
        abandoned = results[0].sandbox_id
        assert abandoned not in listed_sandboxes(conn["base_url"], token)
    assert results[0].timed_out
    assert not results[0].ok
    assert results[0].error_type == "TaskTimeoutError"
    assert isinstance(results[0].exception, TaskTimeoutError)
    assert results[0].failure == "infrastructure"
    assert results[1].ok
    assert results[1].sandbox_id == results[1].value != abandoned
    assert results.sandboxes_replaced == 1
    assert listed_sandboxes(conn["base_url"], token) == []


def test_retries_run_a_failed_task_again_on_a_clean_sandbox(
    make_pool: Callable[..., PoolHandle], conn: dict[str, str]
) -> None:
    seen: dict[int, int] = {}
    lock = threading.Lock()

    def flaky(sb: Any, task: int) -> list[str]:
        files = sorted(sb.dump())
        sb.seed({"leftover.txt": "x"})
        with lock:
            seen[task] = seen.get(task, 0) + 1
            first = seen[task] == 1
        if first:
            raise RuntimeError("first attempt fails")
        return files

    with make_pool(["filesystem"], size=2, **conn) as pool:
        results = pool.map(flaky, range(3), retries=1, retry_on="any")
        once = pool.map(flaky, [9], retries=0, retry_on="any")
    assert [(r.ok, r.attempts, r.value) for r in results] == [(True, 2, [])] * 3
    assert (once[0].ok, once[0].attempts, once[0].error_type) == (False, 1, "RuntimeError")
    assert once[0].failure == "task"


@pytest.mark.parametrize("error", [ZeroDivisionError, KeyboardInterrupt])
def test_an_error_in_the_with_body_releases_everything(
    make_pool: Callable[..., PoolHandle],
    conn: dict[str, str],
    token: str,
    gate: threading.Event,
    error: type[BaseException],
) -> None:
    # the three tasks hold their sandboxes at once: task 0 ends only once all three run (else,
    # on a loaded machine, a worker started late takes task 0's sandbox back, idle: 2 listed)
    all_running = threading.Barrier(3)

    def run(sb: Any, task: int) -> int:
        all_running.wait(timeout=60)
        if task > 0:
            gate.wait()  # still running when the error comes
        return task

    with pytest.raises(error), make_pool(["filesystem"], size=3, **conn) as pool:
        first = pool.first_result(run, range(3))
        assert first.index == 0
        assert len(listed_sandboxes(conn["base_url"], token)) == 3
        raise error
    assert listed_sandboxes(conn["base_url"], token) == []
    assert _held(conn) == []


def test_closing_the_pool_while_map_runs_ends_map_with_an_error(
    make_pool: Callable[..., PoolHandle],
    conn: dict[str, str],
    token: str,
    gate: threading.Event,
) -> None:
    started = threading.Event()
    outcome: list[BaseException] = []

    def run(sb: Any, task: int) -> int:
        started.set()
        gate.wait()
        return task

    pool = make_pool(["filesystem"], size=2, **conn)

    def mapper() -> None:
        try:
            pool.map(run, range(6))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=mapper)
    thread.start()
    assert started.wait(60)
    released = pool.close()
    assert len(released) >= 1
    assert all(r.ok for r in released)
    gate.set()
    thread.join(60)
    assert not thread.is_alive()
    assert len(outcome) == 1
    assert isinstance(outcome[0], InvalidInputError)
    assert "closed" in str(outcome[0])
    assert listed_sandboxes(conn["base_url"], token) == []
    with pytest.raises(InvalidInputError, match="closed"):
        pool.map(run, [1])


def test_bad_arguments_are_refused_before_anything_is_sent(
    make_pool: Callable[..., PoolHandle], conn: dict[str, str], token: str
) -> None:
    for bad in ({"size": 0}, {"size": True}, {"health_check_after": -1}):
        with pytest.raises(InvalidInputError):
            make_pool(["filesystem"], **bad, **conn)
    with pytest.raises(InvalidInputError):
        make_pool(["no-such-server"], **conn)
    with make_pool(["filesystem"], size=1, **conn) as pool:
        for kwargs in (
            {"timeout": 0},
            {"timeout": "1"},
            {"retries": -1},
            {"retries": 1.5},
            {"retry_on": "task"},
        ):
            with pytest.raises(InvalidInputError):
                pool.map(lambda sb, task: task, [1], **kwargs)
        with pytest.raises(InvalidInputError):
            pool.pool.imap_unordered("not callable", [1])
        assert len(pool.map(lambda sb, task: task, [])) == 0
    assert listed_sandboxes(conn["base_url"], token) == []


def test_to_pandas_without_pandas_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    results = PoolResults([TaskResult(0, "t", True, value=1)])
    assert results.to_rows()[0]["value"] == 1
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(workflows.MissingExtraError, match=r"klavis-sandbox\[pandas\]'$"):
        results.to_pandas()


_CHILD = textwrap.dedent(
    """
    import asyncio, os, sys, threading
    import workflows

    conn = {"api_key": os.environ["K"], "base_url": os.environ["U"]}

    def run(sb, task):
        os.write(1, f"{sb.id}\\n".encode())  # one write: two threads never mix their lines
        threading.Event().wait()  # until the signal

    async def arun(sb, task):
        os.write(1, f"{sb.id}\\n".encode())
        await asyncio.Event().wait()

    if sys.argv[1] == "sync":
        with workflows.SandboxPool(["filesystem"], size=2, progress=False, **conn) as pool:
            pool.map(run, range(4))
    else:
        async def main():
            async with workflows.AsyncSandboxPool(
                ["filesystem"], size=2, progress=False, **conn
            ) as pool:
                await pool.map(arun, range(4))
        asyncio.run(main())
    """
)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_signals_release_every_sandbox_of_the_pool(
    conn: dict[str, str], token: str, tmp_path: Path, kind: str, sig: signal.Signals
) -> None:
    env = dict(os.environ, K=conn["api_key"], U=conn["base_url"])
    env["KLAVIS_SANDBOX_STATE_DIR"] = str(tmp_path / "child-state")
    expect_children_to_get_sigint()
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, kind],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert child.stdout is not None
        running = {child.stdout.readline().strip() for _ in range(2)}
        if "" in running:  # it ended early: show why
            child.kill()
            pytest.fail(child.communicate(timeout=60)[1])
        assert sorted(running) == sorted(listed_sandboxes(conn["base_url"], token))
        child.send_signal(sig)
        _, err = child.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        child.wait(timeout=60)
    assert child.returncode != 0
    assert conn["api_key"] not in err
    assert listed_sandboxes(conn["base_url"], token) == [], err
