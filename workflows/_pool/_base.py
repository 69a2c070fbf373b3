"""What both pool engines share without I/O: the book of sandboxes, a run's work, the pool's
keywords and health-check rule, a run's summary and the report of a close."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .._errors import InvalidInputError
from .._flows import Flow
from .._ownership import install_exit_handlers
from .._recipes import ReleaseResult
from ._backend import Attempt
from ._options import PoolOptions, RunOptions, RunSettings, resolve_pool, resolve_run
from ._results import PoolResults, TaskBar, TaskResult
from ._retry_rules import Hands, PoolClosed, task_flow

__all__ = ["Book", "Idle", "PoolBase", "Run", "log", "report_release"]

log = logging.getLogger("workflows")

R = TypeVar("R")
S = TypeVar("S")
F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class Idle(Generic[S]):
    sandbox: S
    since: float


@dataclass
class Book(Generic[S]):
    """What a pool holds: idle sandboxes, every live one, acquires under way, counters."""

    size: int
    idle: list[Idle[S]] = field(default_factory=list)
    live: dict[str, S] = field(default_factory=dict)
    acquiring: int = 0
    closed: bool = False
    replaced: int = 0

    def pick(self) -> Idle[S] | bool | None:
        """An idle sandbox; True if there is room to acquire one (counted); None: wait."""
        if self.closed:
            raise PoolClosed
        if self.idle:
            return self.idle.pop()
        if len(self.live) + self.acquiring < self.size:
            self.acquiring += 1
            return True
        return None

    def close(self) -> list[S]:
        """Mark the pool closed; every live sandbox, forgotten (the caller releases them)."""
        self.closed = True
        sandboxes = list(self.live.values())
        self.live.clear()
        self.idle.clear()
        return sandboxes

    def outrun(self) -> bool:
        """Whether an acquire under way is not needed any more: a sandbox came back idle, or
        the pool closed (the ``give_up`` of a backend's acquire)."""
        return self.closed or bool(self.idle)


@dataclass(frozen=True)
class Run(Generic[F]):
    """One run's work: the function, the tasks with their positions (``todo``: those no worker
    took yet; the workers pop them, a deque being safe across threads), how many there are,
    and the run's options."""

    fn: F
    todo: deque[tuple[int, Any]]
    count: int
    options: RunSettings

    def next_task(self) -> tuple[int, Any] | None:
        """The next task no worker took yet, with its position; None when none is left."""
        try:
            return self.todo.popleft()
        except IndexError:
            return None

    def attempt(self, index: int, task: Any) -> Attempt:
        """What the backend is asked to run for task ``index``."""
        return Attempt(self.fn, task, index, self.options.timeout)

    def flow(
        self, index: int, task: Any, hands: Hands, holder: list[Any], stopping: Callable[[], bool]
    ) -> Flow[tuple[TaskResult[Any], Any]]:
        """The task flow of task ``index`` on the worker's sandbox (``holder``'s, if any)."""
        return task_flow(
            index,
            task,
            holder[0] if holder else None,
            hands,
            timeout=self.options.timeout,
            retries=self.options.retries,
            retry_on=self.options.retry_on,
            stopping=stopping,
        )


class PoolBase:
    """What both engines share: the checked pool keywords, the health-check rule, a run's
    arguments and summary. Each engine sets up its own bookkeeping in :meth:`_start`."""

    _book: Book[Any]

    def __init__(self, options: PoolOptions) -> None:
        resolved = resolve_pool(type(self).__name__, options)
        self.size = resolved["size"]
        self.health_check_after = float(resolved["health_check_after"])
        self.progress = resolved["progress"]
        install_exit_handlers()  # workers acquire off the main thread, where SIGTERM's cannot be
        self._start()

    def _start(self) -> None:
        raise NotImplementedError

    def _run(self, fn: F, tasks: Iterable[Any], options: RunOptions) -> Run[F]:
        """A run's arguments, checked (the tasks are read now, once)."""
        settings = resolve_run(f"{type(self).__name__}.map", fn, options)
        todo = deque(enumerate(tasks))
        return Run(fn, todo, len(todo), settings)

    def _check_open(self) -> None:
        if self._book.closed:
            raise InvalidInputError("this pool is closed; make a new one")

    def _stale(self, idle: Idle[Any]) -> bool:
        return time.monotonic() - idle.since > self.health_check_after

    def _delivered(self, got: TaskResult[R] | BaseException, bar: TaskBar) -> TaskResult[R]:
        """What a worker handed over: a task's result (counted on ``bar``), or what it raised
        (a closed pool says so)."""
        if isinstance(got, PoolClosed):
            raise InvalidInputError("the pool was closed while map ran") from None
        if isinstance(got, BaseException):
            raise got
        bar.update(got, len(self._book.live))
        return got

    def _summary(
        self, done: list[TaskResult[R]], started: float, replaced_before: int
    ) -> PoolResults[R]:
        """A run's results (``started``: its perf_counter; ``replaced_before``: the book's
        count of replaced sandboxes then), logged."""
        results = PoolResults(
            done,
            wall_seconds=time.perf_counter() - started,
            sandboxes_replaced=self._book.replaced - replaced_before,
        )
        log.info("pool run: %s", results.summary())
        return results


def report_release(results: list[ReleaseResult]) -> list[ReleaseResult]:
    """``results`` of a pool's close, each failure logged."""
    for result in results:
        if not result.ok:
            log.warning(
                "could not release sandbox %s (%s); it stays in the ledger for "
                "`klavis-sandbox reap`",
                result.sandbox_id,
                result.error,
            )
    return results
