"""The pools' shared task flow (workflows._pool._retry_rules), driven step by step: the rules both
pools follow, without a sandbox service (the pools themselves are tested live)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from workflows._pool._retry_rules import Attempt, Outcome, Reset, Retire, Take, task_flow


@dataclass(frozen=True)
class Box:
    id: str


def drive(flow: Any, answers: dict[type, list[Any]]) -> tuple[list[Any], Any]:
    """Send each step the next answer of its kind; the steps seen and the flow's return."""
    steps: list[Any] = []
    answer: Any = None
    while True:
        try:
            step = flow.send(answer)
        except StopIteration as done:
            return steps, done.value
        steps.append(step)
        answer = answers[type(step)].pop(0) if type(step) in answers else None


def test_a_passing_task_resets_its_sandbox_and_keeps_it() -> None:
    a = Box("a")
    flow = task_flow(0, "t", a, timeout=None, retries=0, stopping=lambda: False)
    steps, (result, kept) = drive(flow, {Attempt: [Outcome(42, None, False, 1.5)], Reset: [0.25]})
    assert steps == [Attempt(a), Reset(a)]
    assert (result.ok, result.value, result.sandbox_id, result.attempts) == (True, 42, "a", 1)
    assert (result.seconds, result.reset_seconds, kept) == (1.5, 0.25, a)


def test_a_failed_reset_retires_the_sandbox_and_a_retry_takes_a_clean_one() -> None:
    a, b = Box("a"), Box("b")
    boom = RuntimeError("reset failed")
    flow = task_flow(1, "t", a, timeout=None, retries=1, stopping=lambda: False)
    steps, (result, kept) = drive(
        flow,
        {
            Attempt: [
                Outcome(None, ValueError("bad"), False, 0.1),
                Outcome("ok", None, False, 0.2),
            ],
            Reset: [boom, 0.1],
            Take: [b],
        },
    )
    assert steps[:3] == [
        Attempt(a),
        Reset(a),
        Retire(a, "its reset failed (RuntimeError: reset failed)"),
    ]
    assert steps[3:] == [Take(), Attempt(b), Reset(b)]
    assert (result.ok, result.value, result.attempts, result.sandbox_id, kept) == (
        True,
        "ok",
        2,
        "b",
        b,
    )


def test_a_timed_out_attempt_retires_without_a_reset_and_no_retry_once_stopping() -> None:
    a = Box("a")
    flow = task_flow(2, "t", a, timeout=5.0, retries=3, stopping=lambda: True)
    error = TimeoutError("past")
    steps, (result, kept) = drive(flow, {Attempt: [Outcome(None, error, True, 5.0)]})
    assert steps == [Attempt(a), Retire(a, "task 2 ran past its timeout of 5.0 s", logging.INFO)]
    assert (result.ok, result.timed_out, result.attempts, kept) == (False, True, 1, None)


def test_failing_to_get_a_sandbox_is_the_attempts_failure() -> None:
    none: Box | None = None
    flow = task_flow(3, "t", none, timeout=None, retries=1, stopping=lambda: False)
    full = RuntimeError("no capacity")
    steps, (result, kept) = drive(flow, {Take: [full, full]})
    assert steps == [Take(), Take()]
    assert (result.ok, result.error_type, result.attempts, result.sandbox_id, kept) == (
        False,
        "RuntimeError",
        2,
        None,
        None,
    )
