"""One task of a sandbox pool, written once for both pools: its attempts, retries and resets.

:func:`task_flow` decides; the pools only perform. Like the library's other flows (see
:mod:`workflows._flows`), it is a generator that yields what it needs done and receives the
outcome: :class:`Take` (a clean sandbox, or the exception acquiring one raised),
:class:`Attempt` (the task on that sandbox: an :class:`Outcome`), :class:`Reset` (the seconds
it took, or the exception it raised) and :class:`Retire` (release and forget a sandbox; no
answer). :class:`~workflows.SandboxPool` performs them with blocking calls and threads,
:class:`~workflows.AsyncSandboxPool` with awaits, so the rules below hold alike in both:

* a task runs on a clean sandbox; after it the sandbox is reset, or retired if its reset fails
  or the task ran past its timeout (an abandoned attempt may still be using it);
* a failed or timed-out attempt is retried on a clean sandbox up to ``retries`` times, unless
  the pool is stopping; the result keeps the last attempt and counts them;
* a failure to get a sandbox is that attempt's failure, retried the same way.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ._results import TaskResult, failed

__all__ = ["Attempt", "Outcome", "Reset", "Retire", "Step", "Take", "task_flow"]

S = TypeVar("S")
"""The pool's sandbox type (LocalSandbox or AsyncLocalSandbox)."""


@dataclass(frozen=True)
class Take:
    """Get a clean sandbox; answer it, or the ``Exception`` getting one raised."""


@dataclass(frozen=True)
class Attempt(Generic[S]):
    """Run the task on ``sandbox`` (within the timeout); answer an :class:`Outcome`."""

    sandbox: S


@dataclass(frozen=True)
class Outcome:
    """What one attempt gave: its value or error, whether it timed out, and its seconds."""

    value: Any
    error: BaseException | None
    timed_out: bool
    seconds: float


@dataclass(frozen=True)
class Reset(Generic[S]):
    """Reset ``sandbox``; answer the seconds it took, or the ``Exception`` it raised."""

    sandbox: S


@dataclass(frozen=True)
class Retire(Generic[S]):
    """Release ``sandbox`` and stop lending it, logging ``why`` at ``level``."""

    sandbox: S
    why: str
    level: int = logging.WARNING


Step = Take | Attempt[S] | Reset[S] | Retire[S]


def task_flow(
    index: int,
    task: Any,
    sandbox: S | None,
    *,
    timeout: float | None,
    retries: int,
    stopping: Callable[[], bool],
) -> Generator[Step[S], Any, tuple[TaskResult[Any], S | None]]:
    """Run task ``index`` on ``sandbox`` (or on one it takes); return its result and the
    sandbox the worker keeps (None when it was retired)."""
    attempts = 0
    while True:
        attempts += 1
        if sandbox is None:
            taken = yield Take()
            if isinstance(taken, Exception):
                result = failed(index, task, taken, sandbox_id=None, seconds=0.0, attempts=attempts)
                if attempts > retries or stopping():
                    return result, None
                continue
            sandbox = taken
        outcome: Outcome = yield Attempt(sandbox)
        sandbox_id: str = getattr(sandbox, "id")  # noqa: B009 - S is either sandbox class
        reset_seconds = 0.0
        if outcome.timed_out:
            yield Retire(sandbox, f"task {index} ran past its timeout of {timeout} s", logging.INFO)
            sandbox = None
        else:
            reset = yield Reset(sandbox)
            if isinstance(reset, Exception):
                yield Retire(sandbox, f"its reset failed ({type(reset).__name__}: {reset})")
                sandbox = None
            else:
                reset_seconds = reset
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
        result = failed(
            index,
            task,
            outcome.error,
            sandbox_id=sandbox_id,
            seconds=outcome.seconds,
            attempts=attempts,
            timed_out=outcome.timed_out,
        )
        if reset_seconds:
            result = dataclasses.replace(result, reset_seconds=reset_seconds)
        if attempts > retries or stopping():
            return result, sandbox
