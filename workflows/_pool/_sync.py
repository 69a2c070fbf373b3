"""The blocking pool engine, :class:`BackendPool`: worker threads, each running the pool's task
flow (:mod:`workflows._pool._retry_rules`) over a :class:`~workflows.PoolBackend`.

The workers are threads of the pool's own rather than a ``ThreadPoolExecutor``, whose threads
are joined at interpreter exit: one task stuck forever would keep the process from exiting.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from .._acquire import Unpack
from .._drivers import drive, perform_act
from .._recipes import ReleaseResult
from ._backend import AcquireAbandoned, Attempt, AttemptOutcome, PoolBackend, PooledSandbox
from ._base import Book, Idle, PoolBase, Run, log, report_release
from ._options import PoolOptions, RunOptions
from ._results import PoolResults, TaskBar, TaskResult
from ._retry_rules import PoolClosed

__all__ = ["BackendPool"]

R = TypeVar("R")
T = TypeVar("T")
S = TypeVar("S", bound=PooledSandbox)
P = TypeVar("P", bound="BackendPool[Any]")  # a subclass's `with` gives that subclass
Task = Callable[[Any, Any], Any]
"""A run's function, ``fn(sandbox, task)``, as the engine holds it."""


class BackendPool(PoolBase, Generic[S]):
    """Run many tasks over at most ``size`` sandboxes of a :class:`~workflows.PoolBackend`,
    each task on a clean one, with worker threads: the pools' rules over any backend (see
    :mod:`workflows._pool._backend` for what a backend provides).

    ``fn(sandbox, task)`` is given to the backend's ``attempt`` once per attempt, with a
    sandbox no other task holds; the rules (lazy bounded acquire, a reset between tasks,
    health checks, failures classified ``"task"`` or ``"infrastructure"``, retries, timeouts,
    release at close) are :class:`~workflows.SandboxPool`'s, which is this engine on the
    backend that acquires :class:`~workflows.LocalSandbox` objects. The keywords are
    :class:`~workflows.PoolOptions`' (``size``, ``health_check_after``, ``progress``)::

        with BackendPool(MyBackend(...), size=8) as pool:
            results = pool.map(run_task, tasks, timeout=300, retries=1)
    """

    def __init__(self, backend: PoolBackend[S], **options: Unpack[PoolOptions]) -> None:
        self.backend = backend
        super().__init__(options)

    def _start(self) -> None:
        self._book: Book[S] = Book(self.size)
        self._cond = threading.Condition()
        self._stops: set[threading.Event] = set()

    def __repr__(self) -> str:
        with self._cond:
            live, idle = len(self._book.live), len(self._book.idle)
        return f"{type(self).__name__}(size={self.size}, live={live}, idle={idle})"

    @property
    def sandbox_ids(self) -> list[str]:
        """The sandboxes the pool holds now (idle or running a task)."""
        with self._cond:
            return list(self._book.live)

    # ----------------------------------------------------------------- sandboxes
    def _take(self) -> S:
        while True:
            with self._cond:
                picked = self._book.pick()
                while picked is None:
                    self._cond.wait()
                    picked = self._book.pick()
            if picked is True:
                try:
                    return self._acquire()
                except AcquireAbandoned:  # a sandbox of ours came back (or the pool closed)
                    continue
            assert isinstance(picked, Idle)
            if not self._stale(picked) or self._healthy(picked.sandbox):
                return picked.sandbox
            self._retire(picked.sandbox, "it failed its health check")

    def _outrun(self) -> bool:
        with self._cond:
            return self._book.outrun()

    def _acquire(self) -> S:
        try:
            sandbox = self.backend.acquire(self._outrun)
        except BaseException:
            with self._cond:
                self._book.acquiring -= 1
                self._cond.notify()
            raise
        with self._cond:
            self._book.acquiring -= 1
            closed = self._book.closed
            if not closed:
                self._book.live[sandbox.id] = sandbox
        if closed:  # the pool was closed during the acquire: nobody else will release it
            self.backend.release(sandbox)
            raise PoolClosed
        return sandbox

    def _healthy(self, sandbox: S) -> bool:
        try:
            return self.backend.healthy(sandbox)
        except Exception as exc:  # noqa: BLE001 - any failure means: replace it
            log.info("sandbox %s failed its health check: %s", sandbox.id, exc)
            return False

    def _give_back(self, sandbox: S) -> None:
        with self._cond:
            if sandbox.id in self._book.live and not self._book.closed:
                self._book.idle.append(Idle(sandbox, time.monotonic()))
            self._cond.notify()

    def _retire(self, sandbox: S, why: str, level: int = logging.WARNING) -> None:
        with self._cond:
            mine = self._book.live.pop(sandbox.id, None) is not None
            if mine:
                self._book.replaced += 1
            self._cond.notify()
        if mine:
            log.log(level, "replacing sandbox %s: %s", sandbox.id, why)
            self.backend.release(sandbox)

    # ----------------------------------------------------------------- running tasks
    def map(
        self, fn: Callable[[S, T], R], tasks: Iterable[T], **options: Unpack[RunOptions]
    ) -> PoolResults[R]:
        """Run ``fn(sandbox, task)`` for every task, ``size`` at a time; one result per task,
        in the order of ``tasks``. A task's failure is recorded in its result, never raised.
        The keywords are :class:`~workflows.RunOptions`': ``timeout`` bounds each attempt;
        ``retries`` runs a failed task again, on a clean sandbox, when its failure is
        ``"infrastructure"`` (any failure with ``retry_on="any"``).

        >>> results = pool.map(run_task, tasks, timeout=120)  # doctest: +SKIP
        >>> [r.index for r in results.failures]  # doctest: +SKIP
        [7]
        """
        started = time.perf_counter()
        before = self._book.replaced
        done = list(self.imap_unordered(fn, tasks, **options))
        return self._summary(done, started, before)

    def imap_unordered(
        self, fn: Callable[[S, T], R], tasks: Iterable[T], **options: Unpack[RunOptions]
    ) -> Iterator[TaskResult[R]]:
        """Like :meth:`map`, but yield each :class:`TaskResult` as soon as its task ends
        (``result.index`` is the task's position). Closing the iterator early stops the
        workers after their current task.
        """
        run: Run[Task] = self._run(fn, tasks, options)
        with self._cond:
            self._check_open()
        return self._results(run)

    def _results(self, run: Run[Task]) -> Iterator[TaskResult[R]]:
        if not run.count:
            return
        done: queue.Queue[TaskResult[R] | BaseException] = queue.Queue()
        stop = threading.Event()
        with self._cond:
            self._stops.add(stop)
        workers = [
            threading.Thread(  # in the caller's context (its current span, its contextvars)
                target=contextvars.copy_context().run,
                args=(self._worker, run, done, stop),
                name=f"sandbox-pool-{n}",
                daemon=True,
            )
            for n in range(min(self.size, run.count))
        ]
        bar = TaskBar(run.count, self.progress)
        try:
            for worker in workers:
                worker.start()
            for _ in range(run.count):
                # done.get() is interruptible: Ctrl-C and SIGTERM land here
                yield self._delivered(done.get(), bar)
        finally:
            stop.set()
            bar.close()
            with self._cond:
                self._stops.discard(stop)

    def _worker(
        self,
        run: Run[Task],
        done: queue.Queue[TaskResult[R] | BaseException],
        stop: threading.Event,
    ) -> None:
        holder: list[S] = []  # the sandbox this worker holds, between tasks or in one
        try:
            while True:
                if stop.is_set():  # closed, or the caller stopped reading: say so, end
                    raise PoolClosed
                picked = run.next_task()
                if picked is None:
                    return
                index, task = picked
                hands = _Hands(self, run.attempt(index, task), holder)
                flow = run.flow(index, task, hands, holder, stopping=stop.is_set)
                done.put(drive(flow, perform_act)[0])
        except PoolClosed as exc:
            done.put(exc)
        except BaseException as exc:  # noqa: BLE001 - a bug of ours: map raises it
            try:  # the flow raised mid-task: its sandbox is not known to be clean
                if holder:
                    self._retire(holder.pop(), f"the pool's task flow raised {type(exc).__name__}")
            finally:  # once retired: map raises it at once
                done.put(exc)
        finally:
            if holder:
                self._give_back(holder.pop())

    # ----------------------------------------------------------------- release
    def close(self) -> list[ReleaseResult]:
        """Stop the workers and release every sandbox (the backend's ``close``); one result
        each. Idempotent; the ``with`` block calls it."""
        with self._cond:
            for stop in self._stops:
                stop.set()
            sandboxes = self._book.close()
            self._cond.notify_all()
        return report_release(self.backend.close(sandboxes))

    def __enter__(self: P) -> P:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _Hands(Generic[S]):
    """The hands of :func:`~workflows._pool._retry_rules.task_flow` for one task: the pool's
    book around its backend's calls; ``holder`` is the worker's sandbox, emptied when it is
    retired, so that whatever happens in the flow the worker knows what to give back."""

    def __init__(self, pool: BackendPool[S], attempt: Attempt, holder: list[S]) -> None:
        self.pool, self._attempt, self.holder = pool, attempt, holder

    def take(self) -> S:
        sandbox = self.pool._take()
        self.holder.append(sandbox)
        return sandbox

    def attempt(self, sandbox: S) -> AttemptOutcome:
        started = time.perf_counter()
        outcome = self.pool.backend.attempt(sandbox, self._attempt)
        return AttemptOutcome(
            outcome.value, outcome.error, outcome.timed_out, time.perf_counter() - started
        )

    def reset(self, sandbox: S) -> float:
        started = time.perf_counter()
        self.pool.backend.reset(sandbox)
        return time.perf_counter() - started

    def retire(self, sandbox: S, why: str, level: int) -> None:
        self.holder.clear()
        self.pool._retire(sandbox, why, level)
