"""Many tasks over a few sandboxes: :class:`SandboxPool` and its twin :class:`AsyncSandboxPool`.

A benchmark runs hundreds of tasks, each on a clean sandbox. Acquiring one per task costs a VM
start each time; a pool acquires at most ``size`` sandboxes and resets one between two tasks::

    with SandboxPool(["filesystem", "git"], size=8) as pool:
        results = pool.map(run_task, tasks)          # run_task(sandbox, task) -> anything
    results.to_pandas()                              # one row per task, in order

How it behaves, and why:

* **Lazy, bounded acquire.** A sandbox is acquired when a worker first needs one and none is
  idle, never more than ``size`` at a time (held, idle, or being acquired): a run of 3 tasks
  on a pool of 8 acquires 3. The first ``size`` tasks each acquire concurrently, so the run
  starts after about one acquire's time, as an eager start would, without paying for sandboxes
  a short run never uses. Sandboxes stay acquired between two runs of the same pool.
* **A clean sandbox per task.** A task gets a sandbox no other task holds. When it ends, however
  it ends, the pool calls ``reset()``: the service empties the workspace, restarts the MCP
  servers and loads a benchmark sandbox's data again, so the next task starts as from a fresh
  acquire. A sandbox whose reset fails is released (best effort) and replaced by a new acquire.
* **Health check.** A successful reset proves a sandbox alive, so during a run nothing else is
  checked. A sandbox that sat idle longer than ``health_check_after`` seconds (between two runs,
  its TTL may have run out) is checked before its next task with one cheap request, a GET of
  its details (``refresh()``): healthy when it answers and its status is ``occupied``.
  Otherwise it is replaced. No MCP call: servers restart on reset anyway.
* **Failures stay with their task.** A task that raises is recorded (``ok=False``, the error's
  type and message) and the batch goes on. ``retries=n`` runs a failed task up to ``n`` more
  times, each on a clean sandbox; its result is the last attempt's, with ``attempts``. An
  acquire that fails (after the library's own retries of transient errors) fails the attempt
  that needed the sandbox, with that error.
* **Timeouts.** ``timeout=`` bounds each attempt. The async pool cancels the coroutine. The
  sync pool runs each attempt in a thread of its own when a timeout is given, and a Python
  thread cannot be killed: a timed-out attempt is *abandoned*. Its sandbox is released at once
  (so the thread's later calls fail instead of touching a sandbox another task got) and
  replaced; whatever the thread returns later is ignored; the thread runs until the function
  returns (it is a daemon thread: it never keeps the interpreter from exiting). Either way
  the result says ``timed_out`` with a :class:`~workflows.TaskTimeoutError`.
* **Release.** Every sandbox is acquired with ``LocalSandbox.acquire`` (or its async twin), so
  it is in the ledger and in the process's registry of owned sandboxes, which releases it at
  interpreter exit and on SIGTERM. Leaving the ``with`` block (or ``close()``) releases them
  all, ``size`` at a time with :func:`~workflows.bulk_release`; on an error or Ctrl-C inside
  the block, the workers are told to stop and every sandbox is released at once, even one a
  task is still using (that task's result is dropped).

The sync pool runs its workers in threads of its own rather than a ``ThreadPoolExecutor``,
whose threads are joined at interpreter exit: one task stuck forever would keep the process
from exiting. Progress: a ``tqdm.auto`` bar (tasks done, failures, sandboxes live); logging
through the ``workflows`` logger.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Generator,
    Iterable,
    Iterator,
    Sequence,
)
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, TypeVar

from .._archive import ArchiveLimits
from .._async_sandbox import AsyncLocalSandbox
from .._config import ApiKey, Settings, resolve_settings
from .._drivers import AsyncDriver
from .._errors import InvalidInputError, TaskTimeoutError
from .._ledger import Ledger
from .._models import check_acquire
from .._ownership import install_exit_handlers, ledger_of
from ._results import PoolResults, TaskBar, TaskResult, check_pool_size, check_run
from ._retry_rules import Attempt, Outcome, Reset, Step, Take, task_flow
from .._recipes import ReleaseResult, async_bulk_release, bulk_release
from .._sandbox import LocalSandbox

__all__ = ["AsyncSandboxPool", "SandboxPool"]

log = logging.getLogger("workflows")

R = TypeVar("R")
S = TypeVar("S", LocalSandbox, AsyncLocalSandbox)

HEALTHY_STATUS = "occupied"
"""The status of a sandbox that is held and working."""


class _Closed(Exception):
    """The pool was closed, or the run was stopped: the worker ends (and says so)."""


@dataclass
class _Idle(Generic[S]):
    sandbox: S
    since: float


@dataclass
class _Book(Generic[S]):
    """What a pool holds: idle sandboxes, every live one, acquires under way, counters."""

    size: int
    idle: list[_Idle[S]] = field(default_factory=list)
    live: dict[str, S] = field(default_factory=dict)
    acquiring: int = 0
    closed: bool = False
    replaced: int = 0

    def pick(self) -> _Idle[S] | bool | None:
        """An idle sandbox; True if there is room to acquire one (counted); None: wait."""
        if self.closed:
            raise _Closed
        if self.idle:
            return self.idle.pop()
        if len(self.live) + self.acquiring < self.size:
            self.acquiring += 1
            return True
        return None


class _PoolBase:
    """What both pools share: the checked acquire arguments, the settings, the health-check
    rule. Each pool sets up its own bookkeeping in :meth:`_start`."""

    _book: _Book[Any]

    def __init__(
        self,
        server_names: Sequence[str] | str,
        *,
        size: int = 4,
        benchmark: str | None = None,
        ttl_seconds: int | None = 7200,
        test_account_email: str | None = None,
        api_key: str | ApiKey | None = None,
        base_url: str | None = None,
        timeout: float | None = None,
        progress: bool | None = None,
        ledger: Ledger | bool = True,
        limits: ArchiveLimits | None = None,
        health_check_after: float = 60.0,
    ) -> None:
        check_acquire(
            server_names,
            benchmark=benchmark,
            ttl_seconds=ttl_seconds,
            test_account_email=test_account_email,
        )
        check_pool_size(size, health_check_after)
        self.size = size
        self.progress = progress
        self.health_check_after = float(health_check_after)
        self._settings: Settings = resolve_settings(api_key, base_url, timeout=timeout)
        book = ledger_of(ledger)
        self._acquire_args: dict[str, Any] = {
            "benchmark": benchmark,
            "ttl_seconds": ttl_seconds,
            "test_account_email": test_account_email,
            "api_key": self._settings.api_key,
            "base_url": self._settings.base_url,
            "timeout": self._settings.timeout,
            "progress": False,
            "ledger": False if book is None else book,
            "limits": limits,
        }
        self._server_names = server_names
        install_exit_handlers()  # workers acquire off the main thread, where SIGTERM's cannot be
        self._start()

    def _start(self) -> None:
        raise NotImplementedError

    @property
    def settings(self) -> Settings:
        """The connection settings (the key inside never shows in a repr)."""
        return self._settings

    def _stale(self, idle: _Idle[Any]) -> bool:
        return time.monotonic() - idle.since > self.health_check_after

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


class SandboxPool(_PoolBase):
    """Run many tasks over at most ``size`` sandboxes, each task on a clean one.

    ``fn(sandbox, task)`` is called once per task with a :class:`~workflows.LocalSandbox` that
    no other task holds; the pool resets it afterwards, replaces it if the reset fails, and
    releases every sandbox when the ``with`` block ends (or on Ctrl-C, SIGTERM, exit)::

        def run_task(sb, task):
            sb.seed(task["files"])
            ...                                  # the agent calls sb's MCP tools
            return {"passed": sb.dump().text("answer.txt") == task["expected"]}

        with SandboxPool(["filesystem", "git"], size=8) as pool:
            results = pool.map(run_task, tasks, timeout=300, retries=1)
        print(results.summary())
        df = results.to_pandas()

    The acquire arguments are :meth:`LocalSandbox.acquire`'s, checked before anything is sent.
    ``health_check_after``: seconds a sandbox may sit idle before it is checked again. How the
    pool behaves (lazy acquire, health checks, timeouts, retries) is described in
    :mod:`workflows._pool`.
    """

    def _start(self) -> None:
        self._book: _Book[LocalSandbox] = _Book(self.size)
        self._cond = threading.Condition()
        self._stops: set[threading.Event] = set()

    def __repr__(self) -> str:
        with self._cond:
            live, idle = len(self._book.live), len(self._book.idle)
        return f"SandboxPool(size={self.size}, live={live}, idle={idle})"

    @property
    def sandbox_ids(self) -> list[str]:
        """The sandboxes the pool holds now (idle or running a task)."""
        with self._cond:
            return list(self._book.live)

    # ----------------------------------------------------------------- sandboxes
    def _take(self) -> LocalSandbox:
        while True:
            with self._cond:
                picked = self._book.pick()
                while picked is None:
                    self._cond.wait()
                    picked = self._book.pick()
            if picked is True:
                return self._acquire()
            assert isinstance(picked, _Idle)
            if not self._stale(picked) or self._healthy(picked.sandbox):
                return picked.sandbox
            self._retire(picked.sandbox, "it failed its health check")

    def _acquire(self) -> LocalSandbox:
        try:
            sandbox = LocalSandbox.acquire(self._server_names, **self._acquire_args)
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
            _release_quietly(sandbox)
            raise _Closed
        return sandbox

    def _healthy(self, sandbox: LocalSandbox) -> bool:
        try:
            return sandbox.refresh().status == HEALTHY_STATUS
        except Exception as exc:  # noqa: BLE001 - any failure means: replace it
            log.info("sandbox %s failed its health check: %s", sandbox.id, exc)
            return False

    def _give_back(self, sandbox: LocalSandbox) -> None:
        with self._cond:
            if sandbox.id in self._book.live and not self._book.closed:
                self._book.idle.append(_Idle(sandbox, time.monotonic()))
            self._cond.notify()

    def _retire(self, sandbox: LocalSandbox, why: str, level: int = logging.WARNING) -> None:
        with self._cond:
            mine = self._book.live.pop(sandbox.id, None) is not None
            if mine:
                self._book.replaced += 1
            self._cond.notify()
        if mine:
            log.log(level, "replacing sandbox %s: %s", sandbox.id, why)
            _release_quietly(sandbox)

    # ----------------------------------------------------------------- running tasks
    def map(
        self,
        fn: Callable[[LocalSandbox, Any], R],
        tasks: Iterable[Any],
        *,
        timeout: float | None = None,
        retries: int = 0,
    ) -> PoolResults[R]:
        """Run ``fn(sandbox, task)`` for every task, ``size`` at a time; one result per task,
        in the order of ``tasks``. A task's failure is recorded in its result, never raised.

        >>> results = pool.map(run_task, tasks, timeout=120)  # doctest: +SKIP
        >>> [r.index for r in results.failures]  # doctest: +SKIP
        [7]
        """
        started = time.perf_counter()
        before = self._book.replaced
        done = list(self.imap_unordered(fn, tasks, timeout=timeout, retries=retries))
        return self._summary(done, started, before)

    def imap_unordered(
        self,
        fn: Callable[[LocalSandbox, Any], R],
        tasks: Iterable[Any],
        *,
        timeout: float | None = None,
        retries: int = 0,
    ) -> Iterator[TaskResult[R]]:
        """Like :meth:`map`, but yield each :class:`TaskResult` as soon as its task ends
        (``result.index`` is the task's position). Closing the iterator early stops the
        workers after their current task.
        """
        check_run(fn, timeout, retries)
        items = list(enumerate(tasks))
        with self._cond:
            if self._book.closed:
                raise InvalidInputError("this pool is closed; make a new one")
        return self._results(fn, items, timeout, retries)

    def _results(
        self,
        fn: Callable[[LocalSandbox, Any], R],
        items: list[tuple[int, Any]],
        timeout: float | None,
        retries: int,
    ) -> Iterator[TaskResult[R]]:
        if not items:
            return
        todo: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
        for item in items:
            todo.put(item)
        done: queue.Queue[TaskResult[R] | BaseException] = queue.Queue()
        stop = threading.Event()
        with self._cond:
            self._stops.add(stop)
        workers = [
            threading.Thread(
                target=self._worker,
                args=(fn, todo, done, stop, timeout, retries),
                name=f"sandbox-pool-{n}",
                daemon=True,
            )
            for n in range(min(self.size, len(items)))
        ]
        bar = TaskBar(len(items), self.progress)
        try:
            for worker in workers:
                worker.start()
            for _ in items:
                got = done.get()  # interruptible: Ctrl-C and SIGTERM land here
                if isinstance(got, _Closed):
                    raise InvalidInputError("the pool was closed while map ran") from None
                if isinstance(got, BaseException):
                    raise got
                bar.update(got, len(self._book.live))
                yield got
        finally:
            stop.set()
            bar.close()
            with self._cond:
                self._stops.discard(stop)

    def _worker(
        self,
        fn: Callable[[LocalSandbox, Any], R],
        todo: queue.SimpleQueue[tuple[int, Any]],
        done: queue.Queue[TaskResult[R] | BaseException],
        stop: threading.Event,
        timeout: float | None,
        retries: int,
    ) -> None:
        sandbox: LocalSandbox | None = None
        try:
            while True:
                if stop.is_set():  # closed, or the caller stopped reading: say so, end
                    raise _Closed
                try:
                    index, task = todo.get_nowait()
                except queue.Empty:
                    return
                result, sandbox = self._task(fn, index, task, sandbox, stop, timeout, retries)
                done.put(result)
        except _Closed as exc:
            done.put(exc)
        except BaseException as exc:  # noqa: BLE001 - a bug of ours: let map raise it
            done.put(exc)
        finally:
            if sandbox is not None:
                self._give_back(sandbox)

    def _task(
        self,
        fn: Callable[[LocalSandbox, Any], R],
        index: int,
        task: Any,
        sandbox: LocalSandbox | None,
        stop: threading.Event,
        timeout: float | None,
        retries: int,
    ) -> tuple[TaskResult[R], LocalSandbox | None]:
        """Perform :func:`~workflows._pool_task.task_flow` with blocking calls."""
        flow: Generator[Step[LocalSandbox], Any, tuple[TaskResult[R], LocalSandbox | None]]
        flow = task_flow(
            index, task, sandbox, timeout=timeout, retries=retries, stopping=stop.is_set
        )
        answer: Any = None
        with contextlib.closing(flow):
            while True:
                try:
                    step = flow.send(answer)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
                if isinstance(step, Take):
                    try:
                        answer = self._take()
                    except _Closed:
                        raise
                    except Exception as exc:  # noqa: BLE001 - the attempt fails with it
                        answer = exc
                elif isinstance(step, Attempt):
                    started = time.perf_counter()
                    value, error, timed_out = _call(fn, step.sandbox, task, timeout, index)
                    answer = Outcome(value, error, timed_out, time.perf_counter() - started)
                elif isinstance(step, Reset):
                    started = time.perf_counter()
                    try:
                        step.sandbox.reset()
                        answer = time.perf_counter() - started
                    except Exception as exc:  # noqa: BLE001 - the flow retires it
                        answer = exc
                else:
                    self._retire(step.sandbox, step.why, step.level)
                    answer = None

    # ----------------------------------------------------------------- release
    def close(self) -> list[ReleaseResult]:
        """Stop the workers and release every sandbox (``size`` at a time); one result each.
        Idempotent; the ``with`` block calls it."""
        with self._cond:
            self._book.closed = True
            for stop in self._stops:
                stop.set()
            sandboxes = list(self._book.live.values())
            self._book.live.clear()
            self._book.idle.clear()
            self._cond.notify_all()
        if not sandboxes:
            return []
        results = bulk_release(sandboxes, concurrency=self.size, progress=False)
        for result in results:
            if not result.ok:
                log.warning(
                    "could not release sandbox %s (%s); it stays in the ledger for "
                    "`klavis-sandbox reap`",
                    result.sandbox_id,
                    result.error,
                )
        return results

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _call(
    fn: Callable[[LocalSandbox, Any], R],
    sandbox: LocalSandbox,
    task: Any,
    timeout: float | None,
    index: int,
) -> tuple[R | None, BaseException | None, bool]:
    """Run one attempt: (value, error, timed out). With a timeout, in a daemon thread that is
    abandoned if it runs past it (threads cannot be killed)."""
    if timeout is None:
        try:
            return fn(sandbox, task), None, False
        except BaseException as exc:  # noqa: BLE001 - recorded in the task's result
            return None, exc, False
    box: list[Any] = []
    finished = threading.Event()

    def attempt() -> None:
        try:
            box.append((fn(sandbox, task), None))
        except BaseException as exc:  # noqa: BLE001 - recorded, or ignored once abandoned
            box.append((None, exc))
        finally:
            finished.set()

    threading.Thread(target=attempt, name=f"sandbox-pool-task-{index}", daemon=True).start()
    if not finished.wait(timeout):
        error = TaskTimeoutError(f"task {index} ran past its timeout of {timeout} s; abandoned")
        return None, error, True
    value, error = box[0]
    return value, error, False


def _release_quietly(sandbox: LocalSandbox) -> None:
    try:
        sandbox.release()
    except Exception as exc:  # noqa: BLE001 - the registry retries at exit; the ledger keeps it
        log.warning("could not release sandbox %s: %s", sandbox.id, exc)


async def _release_when_acquired(job: asyncio.Future[AsyncLocalSandbox]) -> None:
    """Release the sandbox of an acquire whose caller was cancelled, once it is answered."""
    with contextlib.suppress(Exception):
        await _arelease_quietly(await job)


async def _arelease_quietly(sandbox: AsyncLocalSandbox) -> None:
    try:
        await sandbox.release()
    except Exception as exc:  # noqa: BLE001 - the registry retries at exit; the ledger keeps it
        log.warning("could not release sandbox %s: %s", sandbox.id, exc)


class AsyncSandboxPool(_PoolBase):
    """The asyncio twin of :class:`SandboxPool`: ``fn`` is a coroutine function::

        async def run_task(sb, task):
            await sb.seed(task["files"])
            ...
            return {"passed": (await sb.dump()).text("answer.txt") == task["expected"]}

        async with AsyncSandboxPool(["filesystem"], size=8) as pool:
            results = await pool.map(run_task, tasks, timeout=300)

    Its sandboxes share one connection pool, closed with the pool. A timed-out task's
    coroutine is cancelled (and its sandbox replaced).
    """

    def _start(self) -> None:
        self._book: _Book[AsyncLocalSandbox] = _Book(self.size)
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
                return await self._acquire()
            assert isinstance(picked, _Idle)
            if not self._stale(picked) or await self._healthy(picked.sandbox):
                return picked.sandbox
            await self._retire(picked.sandbox, "it failed its health check")

    async def _acquire(self) -> AsyncLocalSandbox:
        if self._driver is None:
            self._driver = AsyncDriver(self._settings)
        job = asyncio.ensure_future(
            AsyncLocalSandbox.acquire(
                self._server_names, **self._acquire_args, _driver=self._driver
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
            raise _Closed
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
            self._book.idle.append(_Idle(sandbox, time.monotonic()))
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
        fn: Callable[[AsyncLocalSandbox, Any], Awaitable[R]],
        tasks: Iterable[Any],
        *,
        timeout: float | None = None,
        retries: int = 0,
    ) -> PoolResults[R]:
        """Run ``await fn(sandbox, task)`` for every task, ``size`` at a time; one result per
        task, in the order of ``tasks``. A task's failure is recorded, never raised."""
        started = time.perf_counter()
        before = self._book.replaced
        done: list[TaskResult[R]] = []
        async with contextlib.aclosing(
            self.imap_unordered(fn, tasks, timeout=timeout, retries=retries)
        ) as results:
            async for result in results:
                done.append(result)
        return self._summary(done, started, before)

    def imap_unordered(
        self,
        fn: Callable[[AsyncLocalSandbox, Any], Awaitable[R]],
        tasks: Iterable[Any],
        *,
        timeout: float | None = None,
        retries: int = 0,
    ) -> AsyncGenerator[TaskResult[R], None]:
        """Like :meth:`map`, but yield each :class:`TaskResult` as soon as its task ends.
        Leaving the loop early: close the iterator (``contextlib.aclosing``) to cancel the
        workers at once; each cancelled task's sandbox is replaced."""
        check_run(fn, timeout, retries)
        items = list(enumerate(tasks))
        if self._book.closed:
            raise InvalidInputError("this pool is closed; make a new one")
        return self._results(fn, items, timeout, retries)

    async def _results(
        self,
        fn: Callable[[AsyncLocalSandbox, Any], Awaitable[R]],
        items: list[tuple[int, Any]],
        timeout: float | None,
        retries: int,
    ) -> AsyncGenerator[TaskResult[R], None]:
        if not items:
            return
        todo: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        for item in items:
            todo.put_nowait(item)
        done: asyncio.Queue[TaskResult[R] | BaseException] = asyncio.Queue()
        workers = [
            asyncio.ensure_future(self._worker(fn, todo, done, timeout, retries))
            for _ in range(min(self.size, len(items)))
        ]
        self._workers.update(workers)
        bar = TaskBar(len(items), self.progress)
        try:
            for _ in items:
                got = await done.get()
                if isinstance(got, _Closed):
                    raise InvalidInputError("the pool was closed while map ran") from None
                if isinstance(got, BaseException):
                    raise got
                bar.update(got, len(self._book.live))
                yield got
        finally:
            bar.close()
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            self._workers.difference_update(workers)

    async def _worker(
        self,
        fn: Callable[[AsyncLocalSandbox, Any], Awaitable[R]],
        todo: asyncio.Queue[tuple[int, Any]],
        done: asyncio.Queue[TaskResult[R] | BaseException],
        timeout: float | None,
        retries: int,
    ) -> None:
        holder: list[AsyncLocalSandbox] = []  # the sandbox held between tasks, if any
        try:
            while not todo.empty():
                index, task = todo.get_nowait()
                done.put_nowait(await self._task(fn, index, task, holder, timeout, retries))
        except _Closed as exc:
            done.put_nowait(exc)
        except asyncio.CancelledError:
            done.put_nowait(_Closed())  # a map still waiting learns that the pool closed
            if holder:  # cancelled mid-task or mid-reset: it is not known to be clean
                await self._retire(holder.pop(), "its task was cancelled")
            raise
        except BaseException as exc:  # noqa: BLE001 - a bug of ours: let map raise it
            done.put_nowait(exc)
        finally:
            if holder:
                await self._give_back(holder.pop())

    async def _task(
        self,
        fn: Callable[[AsyncLocalSandbox, Any], Awaitable[R]],
        index: int,
        task: Any,
        holder: list[AsyncLocalSandbox],
        timeout: float | None,
        retries: int,
    ) -> TaskResult[R]:
        """Perform :func:`~workflows._pool_task.task_flow` with awaits; ``holder`` holds the
        worker's sandbox (emptied before one is retired, so a cancelled worker never hands
        back a sandbox being released)."""
        flow: Generator[
            Step[AsyncLocalSandbox], Any, tuple[TaskResult[R], AsyncLocalSandbox | None]
        ]
        flow = task_flow(
            index,
            task,
            holder[0] if holder else None,
            timeout=timeout,
            retries=retries,
            stopping=lambda: False,  # a stopping async pool cancels its workers instead
        )
        answer: Any = None
        with contextlib.closing(flow):
            while True:
                try:
                    step = flow.send(answer)
                except StopIteration as done:
                    result: TaskResult[R] = done.value[0]
                    return result
                if isinstance(step, Take):
                    try:
                        answer = await self._take()
                    except _Closed:
                        raise
                    except Exception as exc:  # noqa: BLE001 - the attempt fails with it
                        answer = exc
                    else:
                        holder.append(answer)
                elif isinstance(step, Attempt):
                    started = time.perf_counter()
                    value, error, timed_out = await _acall(fn, step.sandbox, task, timeout, index)
                    answer = Outcome(value, error, timed_out, time.perf_counter() - started)
                elif isinstance(step, Reset):
                    started = time.perf_counter()
                    try:
                        await step.sandbox.reset()
                        answer = time.perf_counter() - started
                    except Exception as exc:  # noqa: BLE001 - the flow retires it
                        answer = exc
                else:
                    holder.clear()
                    await self._retire(step.sandbox, step.why, step.level)
                    answer = None

    # ----------------------------------------------------------------- release
    async def close(self) -> list[ReleaseResult]:
        """Cancel the workers and release every sandbox (``size`` at a time); one result
        each. Also closes the connection pool. Idempotent; ``async with`` calls it."""
        self._book.closed = True
        workers = list(self._workers)
        for worker in workers:
            worker.cancel()
        sandboxes = list(self._book.live.values())
        self._book.live.clear()
        self._book.idle.clear()
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
        for result in results:
            if not result.ok:
                log.warning(
                    "could not release sandbox %s (%s); it stays in the ledger for "
                    "`klavis-sandbox reap`",
                    result.sandbox_id,
                    result.error,
                )
        return results

    async def __aenter__(self) -> AsyncSandboxPool:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.shield(asyncio.ensure_future(self.close()))


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
