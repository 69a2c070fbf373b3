"""The sync pool, :class:`SandboxPool`: worker threads, each running the pool's task flow
(:mod:`workflows._pool._retry_rules`) on the process's :class:`~workflows._drivers.SyncDriver`.

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
from typing import Any, TypeVar

from .._drivers import sync_driver_for
from .._errors import TaskTimeoutError
from .._host_limits import SlotWaitAbandoned, giving_up_when
from .._recipes import ReleaseResult, bulk_release
from .._sandbox import LocalSandbox
from ._base import HEALTHY_STATUS, Book, Idle, PoolBase, Run, log, report_release
from ._failures import RetryOn
from ._results import PoolResults, TaskBar, TaskResult
from ._retry_rules import Outcome, PoolClosed, task_flow

__all__ = ["SandboxPool"]

R = TypeVar("R")
T = TypeVar("T")
TaskFn = Callable[[LocalSandbox, T], R]
"""What the sync pool runs: ``fn(sandbox, task)``, ``task`` one of the tasks (a type checker holds
the function and the tasks to the same ``T``)."""
Task = TaskFn[Any, R]
"""A run's function, once the task type no longer matters."""


class SandboxPool(PoolBase):
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

    The acquire keywords are :meth:`LocalSandbox.acquire`'s (:class:`~workflows.AcquireOptions`),
    checked before anything is sent.
    ``health_check_after``: seconds a sandbox may sit idle before it is checked again.

    How it behaves, and why (the async pool alike):

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
    * **Failures stay with their task, and say whose fault they are.** A task that fails is
      recorded (``ok=False``, the error's type and message) and the batch goes on. Its
      ``failure`` is ``"infrastructure"`` when the sandbox or the service failed it: no sandbox
      could be acquired (after the library's own retries of transient errors), the attempt ran
      past its timeout, or the function let through one of the library's infrastructure errors
      from a sandbox call (:class:`~workflows.ApiConnectionError` and
      :class:`~workflows.ApiTimeoutError`, :class:`~workflows.ServerError`,
      :class:`~workflows.RateLimitError`, :class:`~workflows.TransferError`,
      :class:`~workflows.AcquireAmbiguousError`, an :class:`~workflows.McpError` whose
      ``connection_lost`` is true, a :class:`~workflows.NotFoundError` about the task's own
      sandbox: it disappeared under the task). Anything else the function raises is ``"task"``:
      its result (an :class:`~workflows.InvalidInputError` of a bad call, another 4xx answer, a
      tool's failure turned into an :class:`~workflows.McpError`, the function's own
      exceptions).
      ``retries=n`` runs a task that failed on infrastructure up to ``n`` more times, each on a
      clean sandbox; a task's own exception is not retried unless ``retry_on="any"``. The result
      is the last attempt's, with ``attempts``. ``summary()`` counts both kinds;
      ``to_pandas(failed_value=0)`` counts a failed task as 0 (not a skipped NaN) in averages.
    * **Timeouts.** ``timeout=`` bounds each attempt. The async pool cancels the coroutine. The
      sync pool runs each attempt in a thread of its own when a timeout is given, and a Python
      thread cannot be killed: a timed-out attempt is *abandoned*. Its sandbox is released at once
      (so the thread's later calls fail instead of touching a sandbox another task got) and
      replaced; whatever the thread returns later is ignored; the thread runs until the function
      returns (it is a daemon thread: it never keeps the interpreter from exiting). Either way
      the result says ``timed_out`` with a :class:`~workflows.TaskTimeoutError`, an
      ``"infrastructure"`` failure (retried: the next attempt may be faster; a task that is
      slow by nature fails each attempt, so keep ``retries`` small with a ``timeout``).
    * **Release.** Every sandbox is acquired with ``LocalSandbox.acquire`` (or its async twin), so
      it is in the ledger and in the process's registry of owned sandboxes, which releases it at
      interpreter exit and on SIGTERM. Leaving the ``with`` block (or ``close()``) releases them
      all, ``size`` at a time with :func:`~workflows.bulk_release`; on an error or Ctrl-C inside
      the block, the workers are told to stop and every sandbox is released at once, even one a
      task is still using (that task's result is dropped).
    """

    def _start(self) -> None:
        self._book: Book[LocalSandbox] = Book(self.size)
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
                try:  # under host limits, a sandbox of ours given back ends the wait for a slot
                    with giving_up_when(lambda: self._book.closed or bool(self._book.idle)):
                        return self._acquire()
                except SlotWaitAbandoned:
                    continue
            assert isinstance(picked, Idle)
            if not self._stale(picked) or self._healthy(picked.sandbox):
                return picked.sandbox
            self._retire(picked.sandbox, "it failed its health check")

    def _acquire(self) -> LocalSandbox:
        try:
            sandbox = self._acquire_one()
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
            self._release_one(sandbox)
            raise PoolClosed
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
                self._book.idle.append(Idle(sandbox, time.monotonic()))
            self._cond.notify()

    def _retire(self, sandbox: LocalSandbox, why: str, level: int = logging.WARNING) -> None:
        with self._cond:
            mine = self._book.live.pop(sandbox.id, None) is not None
            if mine:
                self._book.replaced += 1
            self._cond.notify()
        if mine:
            log.log(level, "replacing sandbox %s: %s", sandbox.id, why)
            self._release_one(sandbox)

    # what a pool of another engine does its own way (workflows.ray.RaySandboxPool)
    def _acquire_one(self) -> LocalSandbox:
        """A new sandbox, acquired for the pool."""
        return LocalSandbox.acquire(self._server_names, **self._acquire_options)

    def _release_one(self, sandbox: LocalSandbox) -> None:
        """Release one sandbox the pool stopped lending, logging a failure."""
        _release_quietly(sandbox)

    def _release_all(self, sandboxes: list[LocalSandbox]) -> list[ReleaseResult]:
        """Release every sandbox of a closing pool (``size`` at a time); one result each."""
        if not sandboxes:
            return []
        return bulk_release(sandboxes, concurrency=self.size, progress=False)

    def _hands(
        self, run: Run[Task[Any]], index: int, task: Any, holder: list[LocalSandbox]
    ) -> _Hands:
        """The hands of :func:`~workflows._pool._retry_rules.task_flow` for one task."""
        return _Hands(self, run, index, task, holder)

    # ----------------------------------------------------------------- running tasks
    def map(
        self,
        fn: TaskFn[T, R],
        tasks: Iterable[T],
        *,
        timeout: float | None = None,
        retries: int = 0,
        retry_on: RetryOn = "infrastructure",
    ) -> PoolResults[R]:
        """Run ``fn(sandbox, task)`` for every task, ``size`` at a time; one result per task,
        in the order of ``tasks``. A task's failure is recorded in its result, never raised.
        ``timeout`` bounds each attempt; ``retries`` runs a failed task again, on a clean
        sandbox, when its failure is ``"infrastructure"`` (any failure with ``retry_on="any"``).

        >>> results = pool.map(run_task, tasks, timeout=120)  # doctest: +SKIP
        >>> [r.index for r in results.failures]  # doctest: +SKIP
        [7]
        """
        started = time.perf_counter()
        before = self._book.replaced
        done = list(
            self.imap_unordered(fn, tasks, timeout=timeout, retries=retries, retry_on=retry_on)
        )
        return self._summary(done, started, before)

    def imap_unordered(
        self,
        fn: TaskFn[T, R],
        tasks: Iterable[T],
        *,
        timeout: float | None = None,
        retries: int = 0,
        retry_on: RetryOn = "infrastructure",
    ) -> Iterator[TaskResult[R]]:
        """Like :meth:`map`, but yield each :class:`TaskResult` as soon as its task ends
        (``result.index`` is the task's position). Closing the iterator early stops the
        workers after their current task.
        """
        run = self._run(fn, tasks, timeout, retries, retry_on)
        with self._cond:
            self._check_open()
        return self._results(run)

    def _results(self, run: Run[Task[R]]) -> Iterator[TaskResult[R]]:
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
        run: Run[Task[R]],
        done: queue.Queue[TaskResult[R] | BaseException],
        stop: threading.Event,
    ) -> None:
        holder: list[LocalSandbox] = []  # the sandbox this worker holds, between tasks or in one
        try:
            while True:
                if stop.is_set():  # closed, or the caller stopped reading: say so, end
                    raise PoolClosed
                picked = run.next_task()
                if picked is None:
                    return
                index, task = picked
                done.put(self._task(run, index, task, holder, stop))
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

    def _task(
        self,
        run: Run[Task[R]],
        index: int,
        task: Any,
        holder: list[LocalSandbox],
        stop: threading.Event,
    ) -> TaskResult[R]:
        """Run :func:`~workflows._pool._retry_rules.task_flow` with blocking hands; ``holder``
        holds the worker's sandbox (the one it took, emptied when it is retired), so that
        whatever happens in the flow the worker knows what to give back."""
        hands = self._hands(run, index, task, holder)
        flow = task_flow(
            index,
            task,
            holder[0] if holder else None,
            hands,
            timeout=run.timeout,
            retries=run.retries,
            retry_on=run.retry_on,
            stopping=stop.is_set,
        )
        result: TaskResult[R] = sync_driver_for(self._settings).run(flow)[0]
        return result

    # ----------------------------------------------------------------- release
    def close(self) -> list[ReleaseResult]:
        """Stop the workers and release every sandbox (``size`` at a time); one result each.
        Idempotent; the ``with`` block calls it."""
        with self._cond:
            for stop in self._stops:
                stop.set()
            sandboxes = self._book.close()
            self._cond.notify_all()
        return report_release(self._release_all(sandboxes))

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _Hands:
    """The sync pool's hands for one task (see :class:`~workflows._pool._retry_rules.Hands`);
    ``holder`` is the worker's."""

    def __init__(
        self,
        pool: SandboxPool,
        run: Run[Task[Any]],
        index: int,
        task: Any,
        holder: list[LocalSandbox],
    ) -> None:
        self.pool, self.run, self.index, self.task, self.holder = pool, run, index, task, holder

    def take(self) -> LocalSandbox:
        sandbox = self.pool._take()
        self.holder.append(sandbox)
        return sandbox

    def attempt(self, sandbox: LocalSandbox) -> Outcome:
        started = time.perf_counter()
        value, error, timed_out = _call(
            self.run.fn, sandbox, self.task, self.run.timeout, self.index
        )
        return Outcome(value, error, timed_out, time.perf_counter() - started)

    def reset(self, sandbox: LocalSandbox) -> float:
        started = time.perf_counter()
        sandbox.reset()
        return time.perf_counter() - started

    def retire(self, sandbox: LocalSandbox, why: str, level: int) -> None:
        self.holder.clear()
        self.pool._retire(sandbox, why, level)


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

    context = contextvars.copy_context()  # the task's span, its contextvars, as without a timeout
    threading.Thread(
        target=context.run, args=(attempt,), name=f"sandbox-pool-task-{index}", daemon=True
    ).start()
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
