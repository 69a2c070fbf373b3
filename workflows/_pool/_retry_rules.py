"""The pool's retry and reset rules, written once for every pool and backend, as a flow.

:func:`task_flow` decides; the pools only act. Like every flow of the library (see
:mod:`workflows._flows`), it is a generator of steps, here only :class:`~workflows._flows.Act`
steps of the engine's :class:`Hands` (``take``, ``attempt``, ``reset``, ``retire``: the
engine's book around its backend's calls), run by :func:`~workflows._drivers.drive` or
:func:`~workflows._drivers.drive_async`: each step's result is sent back and its exception
thrown in. :class:`~workflows.BackendPool` has blocking hands,
:class:`~workflows.AsyncBackendPool` coroutine ones, so the rules below hold alike in both
and whatever the backend:

* a task runs on a clean sandbox; after it the sandbox is reset, or retired if its reset fails
  or the task ran past its timeout (an abandoned attempt may still be using it);
* a failed attempt is classified (:func:`~workflows._pool._failures.failure_kind`): an
  ``"infrastructure"`` failure (no sandbox could be got, the attempt timed out, or the function
  let through one of the library's infrastructure errors) is retried on a clean sandbox up to
  ``retries`` times, unless the pool is stopping; a ``"task"`` failure (the function's own
  exception) only with ``retry_on="any"``; the result keeps the last attempt, its kind, and
  counts the attempts;
* :class:`PoolClosed` (the pool was closed, or the run stopped) ends the flow at once.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from .._flows import Act, Flow
from .._tracing import task_end, task_start, traced_flow
from ._backend import AttemptOutcome
from ._failures import FailureKind, RetryOn, failure_kind, should_retry
from ._options import RUN_DEFAULTS
from ._results import TaskResult, failed

__all__ = ["Hands", "PoolClosed", "task_flow"]

log = logging.getLogger("workflows")

S = TypeVar("S")
"""The pool's sandbox type (LocalSandbox or AsyncLocalSandbox)."""


class PoolClosed(Exception):
    """The pool was closed, or the run was stopped: the worker ends (and says so)."""


class Hands(Protocol):
    """What a pool does for :func:`task_flow`: each method returns its answer (the sync
    pool's) or a coroutine of it (the async pool's), or raises."""

    def take(self) -> Any:
        """A clean sandbox (:class:`PoolClosed` once the pool closed)."""

    def attempt(self, sandbox: Any) -> Any:
        """Run the task on ``sandbox`` within the timeout: an
        :class:`~workflows.AttemptOutcome`, its ``seconds`` filled in."""

    def reset(self, sandbox: Any) -> Any:
        """Reset ``sandbox``: the seconds it took."""

    def retire(self, sandbox: Any, why: str, level: int) -> Any:
        """Release ``sandbox`` and stop lending it, logging ``why`` at ``level``."""


@traced_flow("klavis.pool.task", task_start, task_end)
def task_flow(
    index: int,
    task: Any,
    sandbox: S | None,
    hands: Hands,
    *,
    timeout: float | None,
    retries: int,
    stopping: Callable[[], bool],
    retry_on: RetryOn = RUN_DEFAULTS["retry_on"],
) -> Flow[tuple[TaskResult[Any], S | None]]:
    """Run task ``index`` on ``sandbox`` (or on one it takes); return its result and the
    sandbox the worker keeps (None when it was retired)."""
    attempts = 0

    def last(result: TaskResult[Any]) -> bool:
        """Whether the failed ``result`` stands (else the task is retried: logged)."""
        kind: FailureKind = result.failure or "task"
        if attempts > retries or stopping():
            return True
        if not should_retry(kind, retry_on):
            log.debug(
                "task %d failed (%s: %s), not retried: a task failure (retry_on=%r)",
                index,
                result.error_type,
                result.error,
                retry_on,
            )
            return True
        log.info(
            "task %d: attempt %d of %d failed (%s, %s: %s); retrying",
            index,
            attempts,
            retries + 1,
            kind,
            result.error_type,
            result.error,
        )
        return False

    while True:
        attempts += 1
        if sandbox is None:
            try:
                sandbox = yield Act(hands.take)
            except PoolClosed:
                raise
            except Exception as exc:  # noqa: BLE001 - the attempt fails with it
                result = failed(  # infrastructure, whatever the error: no task ran
                    index,
                    task,
                    exc,
                    failure="infrastructure",
                    sandbox_id=None,
                    seconds=0.0,
                    attempts=attempts,
                )
                if last(result):
                    return result, None
                continue
        outcome: AttemptOutcome = yield Act(hands.attempt, (sandbox,))
        sandbox_id: str = getattr(sandbox, "id")  # noqa: B009 - S is either sandbox class
        reset_seconds = 0.0
        if outcome.timed_out:
            why = f"task {index} ran past its timeout of {timeout} s"
            yield Act(hands.retire, (sandbox, why, logging.INFO))
            sandbox = None
        else:
            try:
                reset_seconds = yield Act(hands.reset, (sandbox,))
            except Exception as exc:  # noqa: BLE001 - the sandbox is retired
                why = f"its reset failed ({type(exc).__name__}: {exc})"
                yield Act(hands.retire, (sandbox, why, logging.WARNING))
                sandbox = None
        if outcome.error is None:
            result = TaskResult(
                index,
                task,
                True,
                value=outcome.value,
                sandbox_id=sandbox_id,
                seconds=outcome.seconds,
                reset_seconds=reset_seconds,
                attempts=attempts,
            )
            return result, sandbox
        kind: FailureKind = (
            "infrastructure"
            if outcome.timed_out
            else failure_kind(outcome.error, sandbox_id=sandbox_id)
        )
        result = failed(
            index,
            task,
            outcome.error,
            failure=kind,
            sandbox_id=sandbox_id,
            seconds=outcome.seconds,
            attempts=attempts,
            timed_out=outcome.timed_out,
        )
        if reset_seconds:
            result = dataclasses.replace(result, reset_seconds=reset_seconds)
        if last(result):
            return result, sandbox
