"""The pools' retry and reset rules (workflows._pool._retry_rules), step by step: the flow both
pools run, on the library's own sync driver, with scripted hands and no sandbox service (the
pools themselves are tested live)."""

from __future__ import annotations

import builtins
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import import_module
from typing import Any

import pytest

from workflows import (
    ApiConnectionError,
    ApiTimeoutError,
    AttemptOutcome,
    ConflictError,
    InvalidInputError,
    LocalWriteError,
    McpError,
    NotFoundError,
    RateLimitError,
    ServerError,
    TaskTimeoutError,
    TransferError,
    TransferTimeoutError,
    WorkerDiedError,
)
from workflows._config import ApiKey, Settings
from workflows._drivers import SyncDriver
from workflows._flows import Act
from workflows._pool._failures import failure_kind
from workflows._pool._retry_rules import PoolClosed, task_flow

# the built-in of Python 3.11+; on 3.10, the backport pytest depends on there
Group: Any = (
    getattr(builtins, "ExceptionGroup", None) or import_module("exceptiongroup").ExceptionGroup
)


@dataclass(frozen=True)
class Box:
    id: str


class Hands:
    """Scripted hands: each call answers the next of its kind (an exception is raised)."""

    def __init__(self, **answers: list[Any]) -> None:
        self.answers = answers
        self.steps: list[tuple[Any, ...]] = []

    def _answer(self, kind: str, *args: Any) -> Any:
        self.steps.append((kind, *args))
        answer = self.answers.get(kind, [None]).pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def take(self) -> Any:
        return self._answer("take")

    def attempt(self, sandbox: Any) -> Any:
        return self._answer("attempt", sandbox)

    def reset(self, sandbox: Any) -> Any:
        return self._answer("reset", sandbox)

    def retire(self, sandbox: Any, why: str, level: int) -> Any:
        return self._answer("retire", sandbox, why, level)


@pytest.fixture
def driver() -> Iterator[SyncDriver]:
    # nothing is sent: every step of these flows is an Act of the scripted hands
    sync = SyncDriver(Settings(api_key=ApiKey("test-key"), base_url="http://pool.test"))
    yield sync
    sync.close()


def test_every_step_is_an_act_of_the_pools_hands() -> None:
    a = Box("a")
    hands = Hands()
    flow = task_flow(0, "t", a, hands, timeout=None, retries=0, stopping=lambda: False)
    assert next(flow) == Act(hands.attempt, (a,))
    assert flow.send(AttemptOutcome(1, None, False, 0.1)) == Act(hands.reset, (a,))
    flow.close()


def test_a_passing_task_resets_its_sandbox_and_keeps_it(driver: SyncDriver) -> None:
    a = Box("a")
    hands = Hands(attempt=[AttemptOutcome(42, None, False, 1.5)], reset=[0.25])
    flow = task_flow(0, "t", a, hands, timeout=None, retries=0, stopping=lambda: False)
    result, kept = driver.run(flow)
    assert hands.steps == [("attempt", a), ("reset", a)]
    assert (result.ok, result.value, result.sandbox_id, result.attempts) == (True, 42, "a", 1)
    assert (result.seconds, result.reset_seconds, kept) == (1.5, 0.25, a)


def test_a_failed_reset_retires_the_sandbox_and_a_retry_takes_a_clean_one(
    driver: SyncDriver,
) -> None:
    a, b = Box("a"), Box("b")
    boom = RuntimeError("reset failed")
    lost = ServerError("service unavailable", status_code=503)  # a sandbox call in the task
    hands = Hands(
        attempt=[AttemptOutcome(None, lost, False, 0.1), AttemptOutcome("ok", None, False, 0.2)],
        reset=[boom, 0.1],
        take=[b],
    )
    flow = task_flow(1, "t", a, hands, timeout=None, retries=1, stopping=lambda: False)
    result, kept = driver.run(flow)
    assert hands.steps[:3] == [
        ("attempt", a),
        ("reset", a),
        ("retire", a, "its reset failed (RuntimeError: reset failed)", logging.WARNING),
    ]
    assert hands.steps[3:] == [("take",), ("attempt", b), ("reset", b)]
    assert (result.ok, result.value, result.attempts, result.sandbox_id, kept) == (
        True,
        "ok",
        2,
        "b",
        b,
    )


def test_a_timed_out_attempt_retires_without_a_reset_and_no_retry_once_stopping(
    driver: SyncDriver,
) -> None:
    a = Box("a")
    error = TimeoutError("past")
    hands = Hands(attempt=[AttemptOutcome(None, error, True, 5.0)])
    flow = task_flow(2, "t", a, hands, timeout=5.0, retries=3, stopping=lambda: True)
    result, kept = driver.run(flow)
    assert hands.steps == [
        ("attempt", a),
        ("retire", a, "task 2 ran past its timeout of 5.0 s", logging.INFO),
    ]
    assert (result.ok, result.timed_out, result.attempts, kept) == (False, True, 1, None)
    assert result.failure == "infrastructure"


def test_failing_to_get_a_sandbox_is_the_attempts_failure(driver: SyncDriver) -> None:
    full = RuntimeError("no capacity")
    hands = Hands(take=[full, full])
    flow = task_flow(3, "t", None, hands, timeout=None, retries=1, stopping=lambda: False)
    result, kept = driver.run(flow)
    assert hands.steps == [("take",), ("take",)]
    assert (result.ok, result.error_type, result.attempts, result.sandbox_id, kept) == (
        False,
        "RuntimeError",
        2,
        None,
        None,
    )
    assert result.failure == "infrastructure"  # whatever the acquire raised: no task ran


def test_a_closed_pool_ends_the_flow_instead_of_failing_the_attempt(driver: SyncDriver) -> None:
    hands = Hands(take=[PoolClosed()])
    flow = task_flow(4, "t", None, hands, timeout=None, retries=5, stopping=lambda: False)
    with pytest.raises(PoolClosed):
        driver.run(flow)
    assert hands.steps == [("take",)]


def test_a_tasks_own_exception_is_its_result_not_retried_by_default(driver: SyncDriver) -> None:
    a = Box("a")
    hands = Hands(
        attempt=[AttemptOutcome(None, ValueError("wrong answer"), False, 0.1)], reset=[0.1]
    )
    flow = task_flow(5, "t", a, hands, timeout=None, retries=2, stopping=lambda: False)
    result, kept = driver.run(flow)
    assert hands.steps == [("attempt", a), ("reset", a)]
    assert (result.ok, result.failure, result.attempts, kept) == (False, "task", 1, a)


def test_a_retry_is_logged_with_the_kind_of_failure(
    driver: SyncDriver, caplog: pytest.LogCaptureFixture
) -> None:
    a = Box("a")
    down = ServerError("bad gateway", status_code=502)
    hands = Hands(
        attempt=[AttemptOutcome(None, down, False, 0.1), AttemptOutcome(1, None, False, 0.1)]
    )
    flow = task_flow(8, "t", a, hands, timeout=None, retries=3, stopping=lambda: False)
    with caplog.at_level(logging.INFO, logger="workflows"):
        result, _ = driver.run(flow)
    assert (result.ok, result.attempts) == (True, 2)
    assert "task 8: attempt 1 of 4 failed (infrastructure, ServerError: 502: bad gateway)" in (
        caplog.text
    )


def test_retry_on_any_retries_a_tasks_own_exception_too(driver: SyncDriver) -> None:
    a = Box("a")
    wrong = ValueError("wrong answer")
    hands = Hands(
        attempt=[AttemptOutcome(None, wrong, False, 0.1), AttemptOutcome(None, wrong, False, 0.1)],
        reset=[0.1, 0.1],
    )
    flow = task_flow(
        6, "t", a, hands, timeout=None, retries=1, stopping=lambda: False, retry_on="any"
    )
    result, _ = driver.run(flow)
    assert [step[0] for step in hands.steps] == ["attempt", "reset", "attempt", "reset"]
    assert (result.ok, result.failure, result.attempts) == (False, "task", 2)


def test_an_infrastructure_failure_is_retried_until_retries_run_out(driver: SyncDriver) -> None:
    a = Box("a")
    down = ApiConnectionError("could not reach the API")
    hands = Hands(attempt=[AttemptOutcome(None, down, False, 0.1)] * 3, reset=[0.1] * 3)
    flow = task_flow(7, "t", a, hands, timeout=None, retries=2, stopping=lambda: False)
    result, _ = driver.run(flow)
    assert (result.ok, result.failure, result.attempts, result.error_type) == (
        False,
        "infrastructure",
        3,
        "ApiConnectionError",
    )


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (ValueError("the agent's answer is wrong"), "task"),
        (AssertionError(), "task"),
        (InvalidInputError("a bad path the function passed"), "task"),
        (NotFoundError("no such file", status_code=404), "task"),
        (ConflictError("not in that state", status_code=409), "task"),
        (LocalWriteError("disk full", path="out"), "task"),
        (McpError("tool 'write' failed: denied", tool="write"), "task"),
        (McpError("MCP server at u: invalid params", code=-32602), "task"),
        (McpError("the MCP session ended during the call", connection_lost=True), "infrastructure"),
        (ApiConnectionError("refused"), "infrastructure"),
        (ApiTimeoutError("no answer"), "infrastructure"),
        (ServerError("bad gateway", status_code=502), "infrastructure"),
        (RateLimitError("slow down", status_code=429), "infrastructure"),
        (TransferError("upload failed", status_code=503), "infrastructure"),
        (TransferTimeoutError("download too slow", timeout=5.0), "infrastructure"),
        (TaskTimeoutError("past its timeout"), "infrastructure"),
        (WorkerDiedError("the Ray worker running task 3 died"), "infrastructure"),
        (
            Group("both", [ServerError("x", status_code=500), ApiTimeoutError("y")]),
            "infrastructure",
        ),
        (Group("mixed", [ServerError("x", status_code=500), ValueError("z")]), "task"),
    ],
)
def test_failure_kind_of_what_a_task_function_raises(exc: BaseException, kind: str) -> None:
    assert failure_kind(exc) == kind
    assert failure_kind(exc, sandbox_id="sb-1") == kind  # none of them is about sandbox sb-1


def test_a_404_about_the_tasks_own_sandbox_is_infrastructure() -> None:
    gone = NotFoundError("Local sandbox sb-1 not found", status_code=404, sandbox_id="sb-1")
    assert failure_kind(gone, sandbox_id="sb-1") == "infrastructure"  # it vanished under the task
    assert failure_kind(gone, sandbox_id="sb-2") == "task"  # the function asked about another
    assert failure_kind(gone) == "task"


def test_the_summary_names_failed_tasks_by_index_never_as_a_count() -> None:
    from workflows import PoolResults, TaskResult

    def failed(index: int, error: str, kind: Any = "task") -> TaskResult[int]:
        return TaskResult(index, None, False, error_type=error, sandbox_id="s", failure=kind)

    results = PoolResults(
        [
            *(TaskResult(i, None, True, value=1, sandbox_id="s") for i in (0, 1, 2, 3, 5, 7)),
            failed(4, "RuntimeError"),
            failed(9, "RuntimeError"),
            failed(6, "ServerError", "infrastructure"),
            *(failed(i, "ValueError") for i in range(10, 17)),
        ]
    )
    assert (
        "6 ok, 10 failed (task failures: RuntimeError in tasks #4, #9, ValueError in tasks "
        "#10, #11, #12, #13, #14 and 2 more; infrastructure: ServerError in task #6)"
    ) in results.summary()
    assert "infrastructure: none)" in PoolResults([failed(2, "ValueError")]).summary()
