"""The pools that acquire their own sandboxes, :class:`SandboxPool` and
:class:`AsyncSandboxPool`: the pool engines (:mod:`~workflows._pool._sync`,
:mod:`~workflows._pool._async`) on the backends of this module, :class:`LocalBackend` and
:class:`AsyncLocalBackend` (a sandbox acquired with :meth:`~workflows.LocalSandbox.acquire`,
each attempt run in the pool's own thread or event loop). The twins sit side by side here,
as in :mod:`workflows._recipes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .._acquire import AcquireOptions, Unpack, resolve_acquire
from .._async_sandbox import AsyncLocalSandbox
from .._config import Settings
from .._drivers import AsyncDriver
from .._errors import TaskTimeoutError
from .._host_limits import SlotWaitAbandoned, giving_up_when
from .._models import HEALTHY_STATUS, ServerNames
from .._recipes import ReleaseResult, async_bulk_release, bulk_release
from .._sandbox import LocalSandbox
from ._async import AsyncBackendPool
from ._backend import AcquireAbandoned, Attempt, AttemptOutcome
from ._base import log
from ._options import SandboxPoolOptions, split_pool_options
from ._sync import BackendPool

__all__ = [
    "AsyncLocalBackend",
    "AsyncSandboxPool",
    "LocalBackend",
    "SandboxChecks",
    "SandboxPool",
]

R = TypeVar("R")


class _Acquires:
    """What both local backends keep: the acquire's keywords, resolved once."""

    def __init__(self, where: str, server_names: ServerNames, options: AcquireOptions) -> None:
        wanted = resolve_acquire(where, server_names, options)
        self.settings: Settings = wanted.settings
        self.server_names = server_names
        self.options = wanted.options()
        self.options["progress"] = False  # the pool's bar says it; no bar per acquire


class SandboxChecks:
    """The reset and the health check of a blocking backend whose sandboxes are
    :class:`~workflows.LocalSandbox` objects (:class:`LocalBackend`'s, and the leased ones
    of ``workflows.ray.RayBackend``): one definition of healthy, as :class:`SandboxPool`
    tells it (a GET of its details answers, and its status is ``occupied``)."""

    def reset(self, sandbox: LocalSandbox) -> None:
        sandbox.reset()

    def healthy(self, sandbox: LocalSandbox) -> bool:
        return sandbox.refresh().status == HEALTHY_STATUS


class LocalBackend(_Acquires, SandboxChecks):
    """:class:`SandboxPool`'s backend: a sandbox acquired with :meth:`LocalSandbox.acquire`,
    each attempt run in the calling worker thread, or, with a timeout, in a daemon thread of
    its own that is abandoned past it (a Python thread cannot be killed)."""

    def acquire(self, give_up: Callable[[], bool]) -> LocalSandbox:
        try:  # under host limits, a sandbox of the pool's given back ends the wait for a slot
            with giving_up_when(give_up):
                return LocalSandbox.acquire(self.server_names, **self.options)
        except SlotWaitAbandoned:
            raise AcquireAbandoned from None

    def attempt(self, sandbox: LocalSandbox, attempt: Attempt) -> AttemptOutcome:
        return _call(attempt.fn, sandbox, attempt.task, attempt.timeout, attempt.index)

    def release(self, sandbox: LocalSandbox) -> None:
        try:
            sandbox.release()
        except Exception as exc:  # noqa: BLE001 - the registry retries at exit; the ledger keeps it
            log.warning("could not release sandbox %s: %s", sandbox.id, exc)

    def close(self, sandboxes: list[LocalSandbox]) -> list[ReleaseResult]:
        if not sandboxes:
            return []
        return bulk_release(sandboxes, concurrency=len(sandboxes), progress=False)


class AsyncLocalBackend(_Acquires):
    """:class:`AsyncSandboxPool`'s backend: :class:`LocalBackend` for asyncio. Its sandboxes
    share one connection pool (an :class:`~workflows._drivers.AsyncDriver`), closed with it;
    a timed-out attempt's coroutine is cancelled."""

    def __init__(self, where: str, server_names: ServerNames, options: AcquireOptions) -> None:
        super().__init__(where, server_names, options)
        self._driver: AsyncDriver | None = None
        self._orphans: set[asyncio.Future[None]] = set()

    async def acquire(self, give_up: Callable[[], bool]) -> AsyncLocalSandbox:
        if self._driver is None:
            self._driver = AsyncDriver(self.settings)
        try:
            with giving_up_when(give_up):  # the acquire's task copies this context
                job = asyncio.ensure_future(
                    AsyncLocalSandbox.acquire(
                        self.server_names, _driver=self._driver, **self.options
                    )
                )
            try:
                return await asyncio.shield(job)
            except asyncio.CancelledError:
                # the request may have reached the service: let it finish, in a task of its
                # own (this one may be cancelled again), and release what it gave; close()
                # waits for it
                self._orphans.add(asyncio.ensure_future(_release_when_acquired(job, self)))
                raise
        except SlotWaitAbandoned:
            raise AcquireAbandoned from None

    async def attempt(self, sandbox: AsyncLocalSandbox, attempt: Attempt) -> AttemptOutcome:
        return await _acall(attempt.fn, sandbox, attempt.task, attempt.timeout, attempt.index)

    async def reset(self, sandbox: AsyncLocalSandbox) -> None:
        await sandbox.reset()

    async def healthy(self, sandbox: AsyncLocalSandbox) -> bool:
        return (await sandbox.refresh()).status == HEALTHY_STATUS

    async def release(self, sandbox: AsyncLocalSandbox) -> None:
        try:
            await sandbox.release()
        except Exception as exc:  # noqa: BLE001 - the registry retries at exit; the ledger keeps it
            log.warning("could not release sandbox %s: %s", sandbox.id, exc)

    async def close(self, sandboxes: list[AsyncLocalSandbox]) -> list[ReleaseResult]:
        try:
            if not sandboxes:
                return []
            return await async_bulk_release(sandboxes, concurrency=len(sandboxes), progress=False)
        finally:
            await asyncio.gather(*self._orphans, return_exceptions=True)
            self._orphans.clear()
            if self._driver is not None:
                await self._driver.aclose()
                self._driver = None


async def _release_when_acquired(
    job: asyncio.Future[AsyncLocalSandbox], backend: AsyncLocalBackend
) -> None:
    """Release the sandbox of an acquire whose caller was cancelled, once it is answered."""
    with contextlib.suppress(Exception):
        await backend.release(await job)


class _LocalPool:
    """What both local pools add to their engine: the backend that acquires their sandboxes
    (made by each face's constructor), and its settings."""

    _local: _Acquires

    @property
    def settings(self) -> Settings:
        """The connection settings (the key inside never shows in a repr)."""
        return self._local.settings


class SandboxPool(_LocalPool, BackendPool[LocalSandbox]):
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

    The keywords are :class:`~workflows.SandboxPoolOptions`': the pool's (``size``,
    ``health_check_after``: seconds a sandbox may sit idle before it is checked again,
    ``progress``) and :meth:`LocalSandbox.acquire`'s (:class:`~workflows.AcquireOptions`),
    checked before anything is sent. It is :class:`~workflows.BackendPool` on a backend that
    acquires with :meth:`LocalSandbox.acquire` and runs each attempt in the pool's thread.

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

    def __init__(self, server_names: ServerNames, **options: Unpack[SandboxPoolOptions]) -> None:
        pool, acquire = split_pool_options(options)
        self._local = LocalBackend(type(self).__name__, server_names, acquire)
        super().__init__(self._local, **pool)


class AsyncSandboxPool(_LocalPool, AsyncBackendPool[AsyncLocalSandbox]):
    """Run many tasks over at most ``size`` sandboxes, each task on a clean one (asyncio):
    ``fn(sandbox, task)`` is a coroutine function, given an :class:`~workflows.AsyncLocalSandbox`::

        async def run_task(sb, task):
            await sb.seed(task["files"])
            ...
            return {"passed": (await sb.dump()).text("answer.txt") == task["expected"]}

        async with AsyncSandboxPool(["filesystem"], size=8) as pool:
            results = await pool.map(run_task, tasks, timeout=300)

    The keywords are :class:`~workflows.SandboxPoolOptions`' (the pool's and
    :meth:`AsyncLocalSandbox.acquire`'s), checked before anything is sent. Its
    sandboxes share one connection pool, closed with the pool. A timed-out task's coroutine
    is cancelled (and its sandbox replaced). Otherwise it behaves as :class:`~workflows.SandboxPool`
    (lazy bounded acquire, a reset between tasks, health checks, failures classified as
    ``"task"`` or ``"infrastructure"``, retries of infrastructure failures, release on exit):
    see its docstring.
    """

    def __init__(self, server_names: ServerNames, **options: Unpack[SandboxPoolOptions]) -> None:
        pool, acquire = split_pool_options(options)
        self._local = AsyncLocalBackend(type(self).__name__, server_names, acquire)
        super().__init__(self._local, **pool)


def _call(
    fn: Callable[[LocalSandbox, Any], R],
    sandbox: LocalSandbox,
    task: Any,
    timeout: float | None,
    index: int,
) -> AttemptOutcome:
    """Run one attempt. With a timeout, in a daemon thread that is abandoned if it runs past
    it (threads cannot be killed)."""
    if timeout is None:
        try:
            return AttemptOutcome(fn(sandbox, task))
        except BaseException as exc:  # noqa: BLE001 - recorded in the task's result
            return AttemptOutcome(error=exc)
    box: list[AttemptOutcome] = []
    finished = threading.Event()

    def attempt() -> None:
        try:
            box.append(AttemptOutcome(fn(sandbox, task)))
        except BaseException as exc:  # noqa: BLE001 - recorded, or ignored once abandoned
            box.append(AttemptOutcome(error=exc))
        finally:
            finished.set()

    context = contextvars.copy_context()  # the task's span, its contextvars, as without a timeout
    threading.Thread(
        target=context.run, args=(attempt,), name=f"sandbox-pool-task-{index}", daemon=True
    ).start()
    if not finished.wait(timeout):
        error = TaskTimeoutError(f"task {index} ran past its timeout of {timeout} s; abandoned")
        return AttemptOutcome(error=error, timed_out=True)
    return box[0]


async def _acall(
    fn: Callable[[AsyncLocalSandbox, Any], Awaitable[R]],
    sandbox: AsyncLocalSandbox,
    task: Any,
    timeout: float | None,
    index: int,
) -> AttemptOutcome:
    """Run one attempt; a timed-out coroutine is cancelled and abandoned (not awaited: one
    that ignores the cancellation cannot hold the pool up)."""
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
        return AttemptOutcome(error=error, timed_out=True)
    if job.cancelled():
        return AttemptOutcome(error=asyncio.CancelledError(f"task {index} was cancelled"))
    exc = job.exception()
    if exc is not None:
        return AttemptOutcome(error=exc)
    return AttemptOutcome(job.result())


def _consume(job: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned job's outcome, so asyncio does not log it as never retrieved."""
    if not job.cancelled():
        job.exception()
