"""Whose fault a pool's failed task is, against the emulator, both faces: a task's own exception
is ``failure="task"`` and is not retried unless ``retry_on="any"``; an acquire that fails, a
sandbox call that fails on the service's side, a sandbox that vanishes under its task, a
timeout are ``"infrastructure"`` and retried;
``summary()`` counts both; ``to_pandas(failed_value=0)`` makes a mean count the failures.

Service failures are scripted with :mod:`tests.faulty_proxy` (a real HTTP proxy in front of the
emulator that answers chosen requests with an error status), never mocked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.faulty_proxy import Decision, faulty_proxy
from tests.helpers import listed_sandboxes
from tests.workflows.live.pool_handle import PoolHandle
from workflows import (
    InvalidInputError,
    NotFoundError,
    PoolResults,
    ServerError,
    TaskResult,
    TaskTimeoutError,
)


class Calls:
    """Counts the calls of a task function, across its threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def __call__(self) -> int:
        with self._lock:
            self.count += 1
            return self.count


def test_a_tasks_own_exception_is_its_result_and_is_not_retried_unless_asked(
    make_pool: Callable[..., PoolHandle], conn: dict[str, str], token: str
) -> None:
    calls = Calls()

    def wrong(sb: Any, task: int) -> int:
        calls()
        sb.seed({"answer.txt": "41"})
        raise ValueError("the answer is 42")

    with make_pool(["filesystem"], size=1, **conn) as pool:
        by_default = pool.map(wrong, [0], retries=2)
        assert calls.count == 1
        asked = pool.map(wrong, [0], retries=2, retry_on="any")
        assert calls.count == 1 + 3
    for results, attempts in ((by_default, 1), (asked, 3)):
        (result,) = results
        assert (result.ok, result.failure, result.error_type) == (False, "task", "ValueError")
        assert result.attempts == attempts
        assert isinstance(result.exception, ValueError)
    assert by_default.sandboxes_replaced == asked.sandboxes_replaced == 0  # reset, kept
    assert listed_sandboxes(conn["base_url"], token) == []


def test_an_acquire_that_fails_is_an_infrastructure_failure_and_retried(
    make_pool: Callable[..., PoolHandle], emulator_url: str, token: str
) -> None:
    refusals = [0]  # how many acquires to refuse still: the test sets it before each run

    def script(method: str, path: str) -> Decision:
        if (method, path) == ("POST", "/local-sandbox") and refusals[0] > 0:
            refusals[0] -= 1
            return ("before", 400)  # a definite answer: the library does not retry it
        return None

    calls = Calls()

    def run(sb: Any, task: int) -> str:
        calls()
        return str(sb.id)

    with faulty_proxy(emulator_url, script) as proxy:
        conn = {"api_key": token, "base_url": proxy.base_url}
        with make_pool(["filesystem"], size=1, **conn) as pool:
            refusals[0] = 1
            failed = pool.map(run, [0])  # retries=0: the failure stands
            refusals[0] = 1
            retried = pool.map(run, [0], retries=1)
    (first,) = failed
    assert (first.ok, first.failure, first.sandbox_id) == (False, "infrastructure", None)
    assert (first.error_type, first.attempts) == ("BadRequestError", 1)
    (second,) = retried
    assert (second.ok, second.failure, second.attempts) == (True, None, 2)
    assert second.value == second.sandbox_id
    assert calls.count == 1  # the function ran only once it had a sandbox
    refused = [seen for seen in proxy.seen if seen == ("POST", "/local-sandbox", "before 400")]
    assert len(refused) == 2
    assert listed_sandboxes(emulator_url, token) == []


def test_a_service_failure_inside_the_task_is_infrastructure_and_retried(
    make_pool: Callable[..., PoolHandle], emulator_url: str, token: str
) -> None:
    """The function's ``sb.refresh()`` gets 503s on its first attempt (the library retries
    them, then raises ServerError through the function): the agent did nothing wrong."""
    calls = Calls()
    failing = threading.Event()

    def script(method: str, path: str) -> Decision:
        if method == "GET" and path.startswith("/local-sandbox/") and failing.is_set():
            return ("before", 503)
        return None

    def run(sb: Any, task: int) -> str:
        if calls() == 1:
            failing.set()  # the service fails this attempt's calls
            try:
                return str(sb.refresh().status)
            finally:
                failing.clear()
        return str(sb.refresh().status)

    with faulty_proxy(emulator_url, script) as proxy:
        conn = {"api_key": token, "base_url": proxy.base_url}
        with make_pool(["filesystem"], size=1, **conn) as pool:
            retried = pool.map(run, [0], retries=1)
            calls.count = 0
            not_retried = pool.map(run, [0])
    (ok,) = retried
    assert (ok.ok, ok.value, ok.attempts, ok.failure) == (True, "occupied", 2, None)
    (failed,) = not_retried
    assert (failed.ok, failed.failure, failed.attempts) == (False, "infrastructure", 1)
    assert isinstance(failed.exception, ServerError)
    assert failed.exception.status_code == 503
    assert any(outcome == "before 503" for _, _, outcome in proxy.seen)
    assert listed_sandboxes(emulator_url, token) == []


def test_a_sandbox_that_vanishes_under_its_task_is_infrastructure_and_retried(
    make_pool: Callable[..., PoolHandle], conn: dict[str, str], token: str
) -> None:
    """The first attempt's sandbox is released behind the pool's back (as by its TTL or a
    reaper) before the task calls an MCP tool: its MCP server answers 404 about that very
    sandbox; the retry runs on a new one."""
    calls = Calls()

    def run(sb: Any, task: int) -> str:
        if calls() == 1:
            httpx.delete(
                f"{conn['base_url']}/local-sandbox/{sb.id}",
                headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            ).raise_for_status()
        return str(sb.call_tool("filesystem", "list_allowed_directories").text)

    with make_pool(["filesystem"], size=1, **conn) as pool:
        first = pool.map(run, [0])
        calls.count = 0
        retried = pool.map(run, [0], retries=1)
    (lost,) = first
    assert (lost.ok, lost.failure, lost.error_type) == (False, "infrastructure", "NotFoundError")
    assert isinstance(lost.exception, NotFoundError)
    assert lost.exception.sandbox_id == lost.sandbox_id
    (ok,) = retried
    assert (ok.ok, ok.attempts, ok.failure) == (True, 2, None)
    assert "/data" in str(ok.value)
    assert first.sandboxes_replaced == retried.sandboxes_replaced == 1  # its reset failed: 404
    assert listed_sandboxes(conn["base_url"], token) == []


def test_summary_counts_both_kinds_and_failed_value_makes_the_mean_count_failures(
    make_pool: Callable[..., PoolHandle],
    conn: dict[str, str],
    token: str,
    gate: threading.Event,
) -> None:
    def run(sb: Any, task: int) -> dict[str, Any]:
        if task == 1:
            raise AssertionError("the agent's answer is wrong")
        if task == 3:
            gate.wait()  # past the timeout: until the test ends
        return {"score": 1, "sandbox": str(sb.id)}

    with make_pool(["filesystem"], size=2, **conn) as pool:
        results = pool.map(run, range(6), timeout=5)
    assert [r.failure for r in results] == [None, "task", None, "infrastructure", None, None]
    assert isinstance(results[3].exception, TaskTimeoutError)
    summary = results.summary()
    assert (
        "4 ok, 2 failed (task failures: AssertionError in task #1; "
        "infrastructure: TaskTimeoutError in task #3)"
    ) in summary
    plain = results.to_pandas()
    assert plain["score"].mean() == 1.0  # NaN skipped: what a new user is surprised by
    filled = results.to_pandas(failed_value=0)
    assert filled["score"].mean() == pytest.approx(4 / 6)
    assert list(filled["score"]) == [1, 0, 1, 0, 1, 1]
    assert list(filled["sandbox"])[1] == 0  # every value column of a failed task
    failure = filled["failure"].fillna("-")  # pandas shows a passed task's None as NaN
    assert list(failure) == ["-", "task", "-", "infrastructure", "-", "-"]
    assert list(filled["error_type"])[1] == "AssertionError"  # the other columns are kept
    assert listed_sandboxes(conn["base_url"], token) == []


def test_failed_value_fills_the_value_columns_of_failed_tasks_only() -> None:
    results = PoolResults(
        [
            TaskResult(0, "a", True, value={"score": 0.5, "ok": True}),
            TaskResult(1, "b", False, error_type="ValueError", failure="task"),
            TaskResult(2, "c", True, value={"score": 1.0, "steps": 3}),
        ]
    )
    rows = results.to_rows(failed_value=0)
    assert rows[1]["score"] == rows[1]["value.ok"] == rows[1]["steps"] == 0
    assert (rows[1]["ok"], rows[1]["failure"]) == (False, "task")
    assert "steps" not in rows[0]  # a task that succeeded keeps what it returned
    assert "score" not in results.to_rows()[1]  # no failed_value: nothing filled
    plain = PoolResults([TaskResult(0, "a", True, value=7), TaskResult(1, "b", False)])
    assert [row.get("value") for row in plain.to_rows(failed_value=-1)] == [7, -1]
    assert plain.to_rows(failed_value=False)[1]["value"] is False
    for bad in ([0], {"score": 0}, object(), b"0"):
        with pytest.raises(InvalidInputError, match="failed_value"):
            plain.to_rows(failed_value=bad)  # type: ignore[arg-type]
