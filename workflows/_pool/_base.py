"""What both pools share without I/O: the book of sandboxes, the acquire keywords, the
health-check rule, a run's summary and the report of a close."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .._acquire import AcquireOptions, Unpack, resolve_acquire
from .._config import Settings
from .._errors import InvalidInputError
from .._models import ServerNames
from .._ownership import install_exit_handlers
from .._recipes import ReleaseResult
from ._results import PoolResults, TaskBar, TaskResult, check_pool_size, check_run
from ._retry_rules import PoolClosed

__all__ = ["HEALTHY_STATUS", "Book", "Idle", "PoolBase", "Run", "log", "report_release"]

log = logging.getLogger("workflows")

R = TypeVar("R")
S = TypeVar("S")
F = TypeVar("F", bound=Callable[..., Any])

HEALTHY_STATUS = "occupied"
"""The status of a sandbox that is held and working."""


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


@dataclass(frozen=True)
class Run(Generic[F]):
    """One run's work: the function, the tasks with their positions (``todo``: those no worker
    took yet; the workers pop them, a deque being safe across threads), how many there are,
    each attempt's timeout and the retries of a failed task."""

    fn: F
    todo: deque[tuple[int, Any]]
    count: int
    timeout: float | None
    retries: int

    def next_task(self) -> tuple[int, Any] | None:
        """The next task no worker took yet, with its position; None when none is left."""
        try:
            return self.todo.popleft()
        except IndexError:
            return None


class PoolBase:
    """What both pools share: the checked acquire keywords, the settings, the health-check
    rule. Each pool sets up its own bookkeeping in :meth:`_start`."""

    _book: Book[Any]

    def __init__(
        self,
        server_names: ServerNames,
        *,
        size: int = 4,
        health_check_after: float = 60.0,
        **options: Unpack[AcquireOptions],
    ) -> None:
        wanted = resolve_acquire(type(self).__name__, server_names, options)
        check_pool_size(size, health_check_after)
        self.size = size
        self.progress = wanted.progress
        self.health_check_after = float(health_check_after)
        self._settings: Settings = wanted.settings
        self._acquire_options = wanted.options()
        self._acquire_options["progress"] = False
        self._server_names = server_names
        install_exit_handlers()  # workers acquire off the main thread, where SIGTERM's cannot be
        self._start()

    def _start(self) -> None:
        raise NotImplementedError

    @property
    def settings(self) -> Settings:
        """The connection settings (the key inside never shows in a repr)."""
        return self._settings

    def _run(self, fn: F, tasks: Iterable[Any], timeout: float | None, retries: int) -> Run[F]:
        """A run's arguments, checked (the tasks are read now, once)."""
        check_run(fn, timeout, retries)
        todo = deque(enumerate(tasks))
        return Run(fn, todo, len(todo), timeout, retries)

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
