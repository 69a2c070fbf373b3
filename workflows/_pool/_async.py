"""The async pool, :class:`AsyncSandboxPool`: worker tasks, each running the pool's task flow
(:mod:`workflows._pool._retry_rules`) on the pool's :class:`~workflows._drivers.AsyncDriver`,
which its sandboxes share."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from typing import Any, TypeVar

from .._async_sandbox import AsyncLocalSandbox
from .._drivers import AsyncDriver
from .._errors import TaskTimeoutError
from .._host_limits import SlotWaitAbandoned, giving_up_when
from .._recipes import ReleaseResult, async_bulk_release
from ._base import HEALTHY_STATUS, Book, Idle, PoolBase, Run, log, report_release
from ._failures import RetryOn
from ._results import PoolResults, TaskBar, TaskResult
from ._retry_rules import Outcome, PoolClosed, task_flow

__all__ = ["AsyncSandboxPool"]

R = TypeVar("R")
T = TypeVar("T")
TaskFn = Callable[[AsyncLocalSandbox, T], Awaitable[R]]
"""What the async pool runs: ``await fn(sandbox, task)``, ``task`` one of the tasks (a type
checker holds the function and the tasks to the same ``T``)."""
Task = TaskFn[Any, R]
"""A run's function, once the task type no longer matters."""


async def _release_when_acquired(job: asyncio.Future[AsyncLocalSandbox]) -> None:
    """Release the sandbox of an acquire whose caller was cancelled, once it is answered."""
    with contextlib.suppress(Exception):
        await _arelease_quietly(await job)


async def _arelease_quietly(sandbox: AsyncLocalSandbox) -> None:
    try:
        await sandbox.release()
    except Exception as exc:  # noqa: BLE001 - the registry retries at exit; the ledger keeps it
        log.warning("could not release sandbox %s: %s", sandbox.id, exc)


class AsyncSandboxPool(PoolBase):
    """Run many tasks over at most ``size`` sandboxes, each task on a clean one (asyncio):
    ``fn(sandbox, task)`` is a coroutine function, given an :class:`~workflows.AsyncLocalSandbox`::

        async def run_task(sb, task):
            await sb.seed(task["files"])
            ...
            return {"passed": (await sb.dump()).text("answer.txt") == task["expected"]}

        async with AsyncSandboxPool(["filesystem"], size=8) as pool:
            results = await pool.map(run_task, tasks, timeout=300)

    The acquire keywords are :meth:`AsyncLocalSandbox.acquire`'s
    (:class:`~workflows.AcquireOptions`), checked before anything is sent;
    ``health_check_after``: seconds a sandbox may sit idle before it is checked again. Its
    sandboxes share one connection pool, closed with the pool. A timed-out task's coroutine
    is cancelled (and its sandbox replaced). Otherwise it behaves as :class:`~workflows.SandboxPool`
    (lazy bounded acquire, a reset between tasks, health checks, failures classified as
    ``"task"`` or ``"infrastructure"``, retries of infrastructure failures, release on exit):
    see its docstring.
    """

    def _start(self) -> None:
        self._book: Book[AsyncLocalSandbox] = Book(self.size)
        self._cond: asyncio.Condition | None = None
        self._driver: AsyncDriver | None = None
        self._workers: set[asyncio.Task[None]] = set()
        self._orphans: set[asyncio.Future[None]] = set()

    def __repr__(self) -> str:
        live, idle = len(self._book.live), len(self._book.idle)
        return f"AsyncSandboxPool(size={self.size}, live={live}, idle={idle})"

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
    async def _take(self) -> AsyncLocalSandbox:
        while True:
            async with self._condition:
                picked = self._book.pick()
                while picked is None:
                    await self._condition.wait()
                    picked = self._book.pick()
            if picked is True:
                try:  # under host limits, a sandbox of ours given back ends the wait for a slot
                    with giving_up_when(lambda: self._book.closed or bool(self._book.idle)):
                        return await self._acquire()
                except SlotWaitAbandoned:
                    continue
            assert isinstance(picked, Idle)
            if not self._stale(picked) or await self._healthy(picked.sandbox):
                return picked.sandbox
            await self._retire(picked.sandbox, "it failed its health check")

    async def _acquire(self) -> AsyncLocalSandbox:
        if self._driver is None:
            self._driver = AsyncDriver(self._settings)
        job = asyncio.ensure_future(
            AsyncLocalSandbox.acquire(
                self._server_names, _driver=self._driver, **self._acquire_options
            )
        )
        try:
            try:
                sandbox = await asyncio.shield(job)
            except asyncio.CancelledError:
                # the request may have reached the service: let it finish, in a task of its
                # own (this one may be cancelled again), and release what it gave; close()
                # waits for it
                self._orphans.add(asyncio.ensure_future(_release_when_acquired(job)))
                raise
        except BaseException:
            self._book.acquiring -= 1
            await self._notify()
            raise
        self._book.acquiring -= 1
        if self._book.closed:
            await _arelease_quietly(sandbox)
            raise PoolClosed
        self._book.live[sandbox.id] = sandbox
        return sandbox

    async def _notify(self) -> None:
        async with self._condition:
            self._condition.notify()

    async def _healthy(self, sandbox: AsyncLocalSandbox) -> bool:
        try:
            return (await sandbox.refresh()).status == HEALTHY_STATUS
        except Exception as exc:  # noqa: BLE001 - any failure means: replace it
            log.info("sandbox %s failed its health check: %s", sandbox.id, exc)
            return False

    async def _give_back(self, sandbox: AsyncLocalSandbox) -> None:
        if sandbox.id in self._book.live and not self._book.closed:
            self._book.idle.append(Idle(sandbox, time.monotonic()))
        await self._notify()

    async def _retire(
        self, sandbox: AsyncLocalSandbox, why: str, level: int = logging.WARNING
    ) -> None:
        mine = self._book.live.pop(sandbox.id, None) is not None
        if mine:
            self._book.replaced += 1
            log.log(level, "replacing sandbox %s: %s", sandbox.id, why)
            await _arelease_quietly(sandbox)
        await self._notify()

    # ----------------------------------------------------------------- running tasks
    async def map(
        self,
        fn: TaskFn[T, R],
        tasks: Iterable[T],
        *,
        timeout: float | None = None,
        retries: int = 0,
        retry_on: RetryOn = "infrastructure",
    ) -> PoolResults[R]:
        """Run ``await fn(sandbox, task)`` for every task, ``size`` at a time; one result per
        task, in the order of ``tasks``. A task's failure is recorded in its result, never raised.
        ``timeout`` bounds each attempt; ``retries`` runs a failed task again, on a clean
        sandbox, when its failure is ``"infrastructure"`` (any failure with ``retry_on="any"``).

        >>> results = await pool.map(run_task, tasks, timeout=120)  # doctest: +SKIP
        >>> [r.index for r in results.failures]  # doctest: +SKIP
        [7]
        """
        started = time.perf_counter()
        before = self._book.replaced
        done: list[TaskResult[R]] = []
        async with contextlib.aclosing(
            self.imap_unordered(fn, tasks, timeout=timeout, retries=retries, retry_on=retry_on)
        ) as results:
            async for result in results:
                done.append(result)
        return self._summary(done, started, before)

    def imap_unordered(
        self,
        fn: TaskFn[T, R],
        tasks: Iterable[T],
        *,
        timeout: float | None = None,
        retries: int = 0,
        retry_on: RetryOn = "infrastructure",
    ) -> AsyncGenerator[TaskResult[R], None]:
        """Like :meth:`map`, but yield each :class:`TaskResult` as soon as its task ends.
        Leaving the loop early: close the iterator (``contextlib.aclosing``) to cancel the
        workers at once; each cancelled task's sandbox is replaced."""
        run = self._run(fn, tasks, timeout, retries, retry_on)
        self._check_open()
        return self._results(run)

    async def _results(self, run: Run[Task[R]]) -> AsyncGenerator[TaskResult[R], None]:
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
        run: Run[Task[R]],
        done: asyncio.Queue[TaskResult[R] | BaseException],
    ) -> None:
        holder: list[AsyncLocalSandbox] = []  # the sandbox held between tasks, if any
        try:
            while (picked := run.next_task()) is not None:
                index, task = picked
                done.put_nowait(await self._task(run, index, task, holder))
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

    async def _task(
        self, run: Run[Task[R]], index: int, task: Any, holder: list[AsyncLocalSandbox]
    ) -> TaskResult[R]:
        """Run :func:`~workflows._pool._retry_rules.task_flow` with coroutine hands;
        ``holder`` holds the worker's sandbox (emptied before one is retired, so a cancelled
        worker never hands back a sandbox being released)."""
        hands = self._hands(run, index, task, holder)
        flow = task_flow(
            index,
            task,
            holder[0] if holder else None,
            hands,
            timeout=run.timeout,
            retries=run.retries,
            retry_on=run.retry_on,
            stopping=lambda: False,  # a stopping async pool cancels its workers instead
        )
        if self._driver is None:
            self._driver = AsyncDriver(self._settings)
        result: TaskResult[R] = (await self._driver.run(flow))[0]
        return result

    def _hands(
        self, run: Run[Task[Any]], index: int, task: Any, holder: list[AsyncLocalSandbox]
    ) -> _Hands:
        """The hands of :func:`~workflows._pool._retry_rules.task_flow` for one task."""
        return _Hands(self, run, index, task, holder)

    # ----------------------------------------------------------------- release
    async def close(self) -> list[ReleaseResult]:
        """Cancel the workers and release every sandbox (``size`` at a time); one result
        each. Also closes the connection pool. Idempotent; ``async with`` calls it."""
        sandboxes = self._book.close()
        workers = list(self._workers)
        for worker in workers:
            worker.cancel()
        try:
            results = (
                await async_bulk_release(sandboxes, concurrency=self.size, progress=False)
                if sandboxes
                else []
            )
        finally:
            await asyncio.gather(*workers, return_exceptions=True)
            await asyncio.gather(*self._orphans, return_exceptions=True)
            self._orphans.clear()
            if self._driver is not None:
                await self._driver.aclose()
                self._driver = None
        return report_release(results)

    async def __aenter__(self) -> AsyncSandboxPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.shield(asyncio.ensure_future(self.close()))


class _Hands:
    """The async pool's hands for one task (see :class:`~workflows._pool._retry_rules.Hands`);
    ``holder`` is the worker's."""

    def __init__(
        self,
        pool: AsyncSandboxPool,
        run: Run[Task[Any]],
        index: int,
        task: Any,
        holder: list[AsyncLocalSandbox],
    ) -> None:
        self.pool, self.run, self.index, self.task, self.holder = pool, run, index, task, holder

    async def take(self) -> AsyncLocalSandbox:
        sandbox = await self.pool._take()
        self.holder.append(sandbox)
        return sandbox

    async def attempt(self, sandbox: AsyncLocalSandbox) -> Outcome:
        started = time.perf_counter()
        run = self.run
        value, error, timed_out = await _acall(run.fn, sandbox, self.task, run.timeout, self.index)
        return Outcome(value, error, timed_out, time.perf_counter() - started)

    async def reset(self, sandbox: AsyncLocalSandbox) -> float:
        started = time.perf_counter()
        await sandbox.reset()
        return time.perf_counter() - started

    async def retire(self, sandbox: AsyncLocalSandbox, why: str, level: int) -> None:
        self.holder.clear()
        await self.pool._retire(sandbox, why, level)


async def _acall(
    fn: Callable[[AsyncLocalSandbox, Any], Awaitable[R]],
    sandbox: AsyncLocalSandbox,
    task: Any,
    timeout: float | None,
    index: int,
) -> tuple[R | None, BaseException | None, bool]:
    """Run one attempt: (value, error, timed out); a timed-out coroutine is cancelled and
    abandoned (not awaited: one that ignores the cancellation cannot hold the pool up)."""
    job = asyncio.ensure_future(fn(sandbox, task))
    try:
        finished, _ = await asyncio.wait({job}, timeout=timeout)
    except asyncio.CancelledError:
        job.cancel()
        raise
    if not finished:
        job.cancel()
        job.add_done_callback(_consume)
        error = TaskTimeoutError(f"task {index} ran past its timeout of {timeout} s; cancelled")
        return None, error, True
    if job.cancelled():
        return None, asyncio.CancelledError(f"task {index} was cancelled"), False
    exc = job.exception()
    if exc is not None:
        return None, exc, False
    return job.result(), None, False


def _consume(job: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned job's outcome, so asyncio does not log it as never retrieved."""
    if not job.cancelled():
        job.exception()
