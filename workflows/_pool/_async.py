"""The asyncio pool engine, :class:`AsyncBackendPool`: worker tasks, each running the pool's
task flow (:mod:`workflows._pool._retry_rules`) over an :class:`~workflows.AsyncPoolBackend`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from typing import Any, Generic, TypeVar

from .._acquire import Unpack
from .._drivers import drive_async, perform_act_async
from .._recipes import ReleaseResult
from ._backend import AcquireAbandoned, AsyncPoolBackend, Attempt, AttemptOutcome, PooledSandbox
from ._base import Book, Idle, PoolBase, Run, log, report_release
from ._options import PoolOptions, RunOptions
from ._results import PoolResults, TaskBar, TaskResult
from ._retry_rules import PoolClosed

__all__ = ["AsyncBackendPool"]

R = TypeVar("R")
T = TypeVar("T")
S = TypeVar("S", bound=PooledSandbox)
P = TypeVar("P", bound="AsyncBackendPool[Any]")  # a subclass's `with` gives that subclass
Task = Callable[[Any, Any], Awaitable[Any]]
"""A run's function, ``await fn(sandbox, task)``, as the engine holds it."""


class AsyncBackendPool(PoolBase, Generic[S]):
    """:class:`~workflows.BackendPool` for asyncio: the pools' rules over an
    :class:`~workflows.AsyncPoolBackend`, with worker tasks on the running event loop.
    :class:`~workflows.AsyncSandboxPool` is this engine on the backend that acquires
    :class:`~workflows.AsyncLocalSandbox` objects. Leaving ``map`` early or closing the pool
    cancels the workers; a sandbox whose task was cancelled is retired::

        async with AsyncBackendPool(MyAsyncBackend(...), size=8) as pool:
            results = await pool.map(run_task, tasks, timeout=300)
    """

    def __init__(self, backend: AsyncPoolBackend[S], **options: Unpack[PoolOptions]) -> None:
        self.backend = backend
        super().__init__(options)

    def _start(self) -> None:
        self._book: Book[S] = Book(self.size)
        self._cond: asyncio.Condition | None = None
        self._workers: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        live, idle = len(self._book.live), len(self._book.idle)
        return f"{type(self).__name__}(size={self.size}, live={live}, idle={idle})"

    @property
    def sandbox_ids(self) -> list[str]:
        """The sandboxes the pool holds now (idle or running a task)."""
        return list(self._book.live)

    @property
    def _condition(self) -> asyncio.Condition:
        if self._cond is None:  # made in the running loop
            self._cond = asyncio.Condition()
        return self._cond

    # ----------------------------------------------------------------- sandboxes
    async def _take(self) -> S:
        while True:
            async with self._condition:
                picked = self._book.pick()
                while picked is None:
                    await self._condition.wait()
                    picked = self._book.pick()
            if picked is True:
                try:
                    return await self._acquire()
                except AcquireAbandoned:  # a sandbox of ours came back (or the pool closed)
                    continue
            assert isinstance(picked, Idle)
            if not self._stale(picked) or await self._healthy(picked.sandbox):
                return picked.sandbox
            await self._retire(picked.sandbox, "it failed its health check")

    async def _acquire(self) -> S:
        try:
            sandbox = await self.backend.acquire(self._book.outrun)
        except BaseException:
            self._book.acquiring -= 1
            await self._notify()
            raise
        self._book.acquiring -= 1
        if self._book.closed:
            await self.backend.release(sandbox)
            raise PoolClosed
        self._book.live[sandbox.id] = sandbox
        return sandbox

    async def _notify(self) -> None:
        async with self._condition:
            self._condition.notify()

    async def _healthy(self, sandbox: S) -> bool:
        try:
            return await self.backend.healthy(sandbox)
        except Exception as exc:  # noqa: BLE001 - any failure means: replace it
            log.info("sandbox %s failed its health check: %s", sandbox.id, exc)
            return False

    async def _give_back(self, sandbox: S) -> None:
        if sandbox.id in self._book.live and not self._book.closed:
            self._book.idle.append(Idle(sandbox, time.monotonic()))
        await self._notify()

    async def _retire(self, sandbox: S, why: str, level: int = logging.WARNING) -> None:
        mine = self._book.live.pop(sandbox.id, None) is not None
        if mine:
            self._book.replaced += 1
            log.log(level, "replacing sandbox %s: %s", sandbox.id, why)
            await self.backend.release(sandbox)
        await self._notify()

    # ----------------------------------------------------------------- running tasks
    async def map(
        self,
        fn: Callable[[S, T], Awaitable[R]],
        tasks: Iterable[T],
        **options: Unpack[RunOptions],
    ) -> PoolResults[R]:
        """Run ``await fn(sandbox, task)`` for every task, ``size`` at a time; one result per
        task, in the order of ``tasks``. A task's failure is recorded in its result, never raised.
        The keywords are :class:`~workflows.RunOptions`': ``timeout`` bounds each attempt;
        ``retries`` runs a failed task again, on a clean sandbox, when its failure is
        ``"infrastructure"`` (any failure with ``retry_on="any"``).

        >>> results = await pool.map(run_task, tasks, timeout=120)  # doctest: +SKIP
        >>> [r.index for r in results.failures]  # doctest: +SKIP
        [7]
        """
        started = time.perf_counter()
        before = self._book.replaced
        done: list[TaskResult[R]] = []
        async with contextlib.aclosing(self.imap_unordered(fn, tasks, **options)) as results:
            async for result in results:
                done.append(result)
        return self._summary(done, started, before)

    def imap_unordered(
        self,
        fn: Callable[[S, T], Awaitable[R]],
        tasks: Iterable[T],
        **options: Unpack[RunOptions],
    ) -> AsyncGenerator[TaskResult[R], None]:
        """Like :meth:`map`, but yield each :class:`TaskResult` as soon as its task ends.
        Leaving the loop early: close the iterator (``contextlib.aclosing``) to cancel the
        workers at once; each cancelled task's sandbox is replaced."""
        run: Run[Task] = self._run(fn, tasks, options)
        self._check_open()
        return self._results(run)

    async def _results(self, run: Run[Task]) -> AsyncGenerator[TaskResult[R], None]:
        if not run.count:
            return
        done: asyncio.Queue[TaskResult[R] | BaseException] = asyncio.Queue()
        workers = [
            asyncio.ensure_future(self._worker(run, done)) for _ in range(min(self.size, run.count))
        ]
        self._workers.update(workers)
        bar = TaskBar(run.count, self.progress)
        try:
            for _ in range(run.count):
                yield self._delivered(await done.get(), bar)
        finally:
            bar.close()
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            self._workers.difference_update(workers)

    async def _worker(
        self,
        run: Run[Task],
        done: asyncio.Queue[TaskResult[R] | BaseException],
    ) -> None:
        holder: list[S] = []  # the sandbox held between tasks, if any
        try:
            while (picked := run.next_task()) is not None:
                index, task = picked
                hands = _Hands(self, run.attempt(index, task), holder)
                # a stopping async pool cancels its workers instead of saying it is stopping
                flow = run.flow(index, task, hands, holder, stopping=lambda: False)
                done.put_nowait((await drive_async(flow, perform_act_async))[0])
        except asyncio.CancelledError:
            done.put_nowait(PoolClosed())  # a map still waiting learns that the pool closed
            if holder:  # cancelled mid-task or mid-reset: it is not known to be clean
                await self._retire(holder.pop(), "its task was cancelled")
            raise
        except PoolClosed as exc:
            done.put_nowait(exc)
        except BaseException as exc:  # noqa: BLE001 - a bug of ours: map raises it
            try:  # the flow raised mid-task: its sandbox is not known to be clean
                if holder:
                    why = f"the pool's task flow raised {type(exc).__name__}"
                    await self._retire(holder.pop(), why)
            finally:  # once retired: map raises it at once
                done.put_nowait(exc)
        finally:
            if holder:
                await self._give_back(holder.pop())

    # ----------------------------------------------------------------- release
    async def close(self) -> list[ReleaseResult]:
        """Cancel the workers and release every sandbox (the backend's ``close``); one
        result each. Idempotent; ``async with`` calls it."""
        sandboxes = self._book.close()
        workers = list(self._workers)
        for worker in workers:
            worker.cancel()
        # the workers end first (a cancelled one gives back nothing: the book is closed), so
        # that an acquire they leave under way is known to the backend's close
        await asyncio.gather(*workers, return_exceptions=True)
        return report_release(await self.backend.close(sandboxes))

    async def __aenter__(self: P) -> P:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.shield(asyncio.ensure_future(self.close()))


class _Hands(Generic[S]):
    """The coroutine hands of :func:`~workflows._pool._retry_rules.task_flow` for one task
    (see the blocking engine's); ``holder`` is emptied before a sandbox is retired, so a
    cancelled worker never hands back a sandbox being released."""

    def __init__(self, pool: AsyncBackendPool[S], attempt: Attempt, holder: list[S]) -> None:
        self.pool, self._attempt, self.holder = pool, attempt, holder

    async def take(self) -> S:
        sandbox = await self.pool._take()
        self.holder.append(sandbox)
        return sandbox

    async def attempt(self, sandbox: S) -> AttemptOutcome:
        started = time.perf_counter()
        outcome = await self.pool.backend.attempt(sandbox, self._attempt)
        return AttemptOutcome(
            outcome.value, outcome.error, outcome.timed_out, time.perf_counter() - started
        )

    async def reset(self, sandbox: S) -> float:
        started = time.perf_counter()
        await self.pool.backend.reset(sandbox)
        return time.perf_counter() - started

    async def retire(self, sandbox: S, why: str, level: int) -> None:
        self.holder.clear()
        await self.pool._retire(sandbox, why, level)
