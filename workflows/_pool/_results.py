"""What a pool run returns, and what both pools share without I/O: argument checks, the bar.

:class:`TaskResult` is one task's outcome; :class:`PoolResults` the list of them, with
``to_pandas()`` (pandas is imported when called: it comes with the ``pandas`` extra) and
``summary()``.
"""

from __future__ import annotations

import numbers
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .._errors import InvalidInputError, MissingExtraError
from .._models import ResultList
from .._progress import progress_enabled
from ._failures import FailureKind, RetryOn

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "PoolResults",
    "TaskBar",
    "TaskResult",
    "check_failed_value",
    "check_pool_size",
    "check_run",
    "describe",
    "failed",
]

R = TypeVar("R")

_COLUMNS: tuple[str, ...] = (
    "task",
    "sandbox_id",
    "ok",
    "failure",
    "error_type",
    "error",
    "seconds",
    "reset_seconds",
    "attempts",
    "timed_out",
)


@dataclass(frozen=True)
class TaskResult(Generic[R]):
    """The outcome of one task of a pool run.

    ``ok`` is true when the task's function returned (its return value is ``value``); otherwise
    ``failure`` says whose fault it was (``"task"``: the function raised; ``"infrastructure"``:
    the sandbox or the service failed it, see :data:`~workflows.FailureKind`), ``error_type``
    and ``error`` (the message) say why, and ``exception`` holds the exception itself
    (``timed_out``: the task ran past the run's ``timeout``). ``seconds`` is the wall
    time of the last attempt, ``reset_seconds`` the time resetting its sandbox took afterwards
    (0 when the sandbox was replaced instead), ``sandbox_id`` the sandbox that ran it (None when
    no sandbox could be acquired), ``attempts`` how many times it ran (``retries`` + 1 at most).
    """

    index: int
    task: Any = field(repr=False)
    ok: bool
    value: R | None = None
    error_type: str | None = None
    error: str | None = None
    sandbox_id: str | None = None
    seconds: float = 0.0
    reset_seconds: float = 0.0
    attempts: int = 1
    timed_out: bool = False
    failure: FailureKind | None = None
    exception: BaseException | None = field(default=None, repr=False, compare=False)


def describe(exc: BaseException) -> str:
    """``str(exc)``, or a placeholder naming its type when its ``__str__`` raises (a task's own
    exception class may be broken: its result is recorded all the same, as :mod:`traceback`
    does with ``<exception str() failed>``)."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - any failure of a user's __str__
        return f"<{type(exc).__name__}: str() failed>"


def failed(
    index: int,
    task: Any,
    exc: BaseException,
    *,
    failure: FailureKind,
    sandbox_id: str | None,
    seconds: float,
    attempts: int,
    timed_out: bool = False,
) -> TaskResult[Any]:
    """The result of a task that raised ``exc`` (or timed out), a ``failure`` of that kind."""
    return TaskResult(
        index,
        task,
        False,
        error_type=type(exc).__name__,
        error=describe(exc),
        sandbox_id=sandbox_id,
        seconds=seconds,
        attempts=attempts,
        timed_out=timed_out,
        failure=failure,
        exception=exc,
    )


def _task_numbers(indexes: list[int], shown: int = 5) -> str:
    """``task #4`` or ``tasks #4, #9``; past ``shown`` of them, ``and N more``."""
    numbers = ", ".join(f"#{i}" for i in indexes[:shown])
    more = f" and {len(indexes) - shown} more" if len(indexes) > shown else ""
    return f"task{'s' if len(indexes) > 1 else ''} {numbers}{more}"


class PoolResults(ResultList[TaskResult[R]]):
    """One :class:`TaskResult` per task, in the order of the tasks (``pool.map``'s result).

    >>> results.summary()  # doctest: +SKIP
    '20 tasks on 4 sandboxes: 19 ok, 1 failed (task failures: AssertionError in task #7; ...'
    >>> df = results.to_pandas(failed_value=0)  # doctest: +SKIP
    >>> df["score"].mean()  # a failed task counts as 0, not skipped  # doctest: +SKIP
    """

    def __init__(
        self,
        results: Sequence[TaskResult[R]],
        *,
        wall_seconds: float = 0.0,
        sandboxes_replaced: int = 0,
    ) -> None:
        self._results = sorted(results, key=lambda r: r.index)
        self.wall_seconds = wall_seconds
        """The run's wall time, from the first acquire to the last result."""
        self.sandboxes_replaced = sandboxes_replaced
        """Sandboxes replaced during the run (failed reset or health check, timed-out task)."""

    @property
    def values(self) -> list[R | None]:
        """What each task's function returned (None for a failed task)."""
        return [r.value for r in self._results]

    @property
    def failures(self) -> list[TaskResult[R]]:
        """The tasks that failed."""
        return [r for r in self._results if not r.ok]

    @property
    def sandbox_ids(self) -> list[str]:
        """The sandboxes that ran tasks, in order of first use."""
        return list(dict.fromkeys(r.sandbox_id for r in self._results if r.sandbox_id))

    def __repr__(self) -> str:
        return f"PoolResults({len(self)} tasks, {len(self.failures)} failed)"

    def summary(self) -> str:
        """One line: counts, the failures by kind then by error type, replacements and times.

        For example ``20 tasks on 4 sandboxes: 17 ok, 3 failed (task failures: ValueError in
        task #4; infrastructure: ServerError in task #9, TaskTimeoutError in task #12); 1
        sandbox replaced; 3.1 s in all, task 0.12 s median (max 1.5 s), reset 0.03 s median``:
        a task's number is its index in the tasks given (``results[4]``), at most
        five named per error type.
        """
        count = len(self._results)
        noun = "task" if count == 1 else "tasks"
        used = len(self.sandbox_ids)
        text = f"{count} {noun} on {used} sandbox{'' if used == 1 else 'es'}: "
        failures = self.failures
        text += f"{count - len(failures)} ok, {len(failures)} failed"
        if failures:
            parts = []
            for kind, label in (("task", "task failures"), ("infrastructure", "infrastructure")):
                mine = [r for r in failures if (r.failure or "task") == kind]
                by_type: dict[str, list[int]] = {}
                for r in mine:
                    by_type.setdefault(r.error_type or "?", []).append(r.index)
                listed = ", ".join(
                    f"{name} in {_task_numbers(by_type[name])}" for name in sorted(by_type)
                )
                parts.append(f"{label}: {listed or 'none'}")
            text += " (" + "; ".join(parts) + ")"
        replaced = self.sandboxes_replaced
        text += f"; {replaced} sandbox{'' if replaced == 1 else 'es'} replaced"
        if count:
            seconds = [r.seconds for r in self._results]
            resets = [r.reset_seconds for r in self._results if r.reset_seconds > 0]
            text += (
                f"; {self.wall_seconds:.1f} s in all, task {statistics.median(seconds):.2f} s "
                f"median (max {max(seconds):.2f} s)"
            )
            if resets:
                text += f", reset {statistics.median(resets):.2f} s median"
        return text

    def to_rows(self, *, failed_value: bool | float | str | None = None) -> list[dict[str, Any]]:
        """One dict per task: the columns of :meth:`to_pandas` (``failed_value`` as there)."""
        check_failed_value(failed_value)
        rows = []
        value_columns: dict[str, None] = {}  # every task's, in order of first appearance
        for r in self._results:
            row: dict[str, Any] = {
                "task": r.index,
                "sandbox_id": r.sandbox_id,
                "ok": r.ok,
                "failure": r.failure,
                "error_type": r.error_type,
                "error": r.error,
                "seconds": r.seconds,
                "reset_seconds": r.reset_seconds,
                "attempts": r.attempts,
                "timed_out": r.timed_out,
            }
            if isinstance(r.value, Mapping):
                for key, value in r.value.items():
                    name = str(key)
                    name = f"value.{name}" if name in _COLUMNS else name
                    row[name] = value
                    value_columns[name] = None
            elif r.value is not None:
                row["value"] = r.value
                value_columns["value"] = None
            rows.append(row)
        if failed_value is not None:
            for row in rows:
                if not row["ok"]:
                    row.update(dict.fromkeys(value_columns, failed_value))
        return rows

    def to_pandas(self, *, failed_value: bool | float | str | None = None) -> pd.DataFrame:
        """A DataFrame, one row per task, indexed by ``task`` (the task's position):
        ``sandbox_id, ok, failure, error_type, error, seconds, reset_seconds, attempts,
        timed_out``, then what the function returned: one column per key when it returned a
        mapping (a key that clashes with a column above is prefixed ``value.``), else a
        ``value`` column.

        A failed task has no value: its value columns hold NaN, which ``mean()`` and the like
        skip, so 21 passes out of 24 tasks would average 1.0. ``failed_value`` puts a value of
        your choice there instead (for example ``0`` for a score, ``False`` for a pass), in
        every value column any task filled::

            df = results.to_pandas(failed_value=0)
            df["score"].mean()          # the failed tasks count as 0

        Needs pandas (``pip install 'klavis-sandbox[pandas]'``, which brings pandas-stubs too, so
        that ``mypy`` checks what you do with the frame).
        """
        try:
            import pandas as pd
        except ImportError as exc:
            raise MissingExtraError("PoolResults.to_pandas()", extra="pandas") from exc
        frame = pd.DataFrame(self.to_rows(failed_value=failed_value))
        if frame.empty:
            frame = pd.DataFrame(columns=list(_COLUMNS))
        indexed: pd.DataFrame = frame.set_index("task")  # the stubs leave this overload Any
        return indexed


def check_pool_size(size: int, health_check_after: float) -> None:
    """Refuse a size that is not a positive whole number, or a negative idle time."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidInputError(f"size must be a positive whole number, got {size!r}")
    if (
        isinstance(health_check_after, bool)
        or not isinstance(health_check_after, int | float)
        or not health_check_after >= 0
    ):
        raise InvalidInputError(
            f"health_check_after must be a number of seconds >= 0, got {health_check_after!r}"
        )


def check_failed_value(value: object) -> None:
    """Refuse a ``failed_value`` that is not a scalar: a number (numpy's too), bool, str or
    None."""
    if value is not None and not isinstance(value, numbers.Number | str):
        raise InvalidInputError(
            f"failed_value must be a number, a bool or a str, got {type(value).__name__}"
        )


def check_run(
    fn: Callable[..., Any], timeout: float | None, retries: int, retry_on: RetryOn
) -> None:
    """Refuse a function that is not callable, a timeout that is not positive, bad retries."""
    if not callable(fn):
        raise InvalidInputError(f"fn must be callable (sandbox, task), got {type(fn).__name__}")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
    ):
        raise InvalidInputError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise InvalidInputError(f"retries must be a whole number >= 0, got {retries!r}")
    if retry_on not in ("infrastructure", "any"):
        raise InvalidInputError(f"retry_on must be 'infrastructure' or 'any', got {retry_on!r}")


class TaskBar:
    """A ``tqdm.auto`` bar of tasks done, with failures and live sandboxes (or nothing)."""

    def __init__(self, total: int, progress: bool | None) -> None:
        self._bar: Any = None
        self._failed = 0
        if progress_enabled(progress):
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc="tasks", unit="task", leave=False)

    def update(self, result: TaskResult[Any], live: int) -> None:
        """Count one finished task."""
        if self._bar is None:
            return
        self._failed += not result.ok
        self._bar.set_postfix(failed=self._failed, sandboxes=live, refresh=False)
        self._bar.update(1)

    def close(self) -> None:
        """Remove the bar."""
        if self._bar is not None:
            self._bar.close()
