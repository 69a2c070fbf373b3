"""The seam between the pools' rules and their backends: :class:`PoolBackend` (blocking) and
:class:`AsyncPoolBackend` (asyncio), public as ``workflows.PoolBackend`` and
``workflows.AsyncPoolBackend``.

On one side of it are the pools' rules, written once for every backend: which sandbox a task
gets (lazy bounded acquire, reuse of an idle one, health checks), the task flow
(:mod:`~workflows._pool._retry_rules`: a reset after each task, a retirement when it fails,
retries), whose fault a failure is (:func:`~workflows.failure_kind`), the results
(:class:`~workflows.PoolResults`) and the release of everything at close. They are run by
:class:`~workflows.BackendPool` (worker threads) and :class:`~workflows.AsyncBackendPool`
(asyncio tasks). On the other side is a backend: where a sandbox comes from and where a task
runs. :class:`~workflows.SandboxPool` is :class:`~workflows.BackendPool` on a backend that
acquires :class:`~workflows.LocalSandbox` objects and runs each task in the pool's thread;
:class:`~workflows.AsyncSandboxPool` the asyncio twin; ``workflows.ray.RaySandboxPool`` a
backend that leases from the cluster's broker and runs each task as a Ray task. Nothing but
this module's names is needed to write another (a Dask pool, a process pool; the tests hold
one on ``concurrent.futures.ProcessPoolExecutor``, ``tests/workflows/pool_backends``).

A backend's contract (the async one alike, each method a coroutine):

* :meth:`~PoolBackend.acquire` gives a new sandbox (any object with an ``id`` str) the pool
  then owns; it may wait (a cap, a rate), and stops waiting, raising :class:`AcquireAbandoned`,
  once ``give_up()`` is true (the pool got an idle sandbox back, or closed). Any other
  exception fails the task's attempt as an ``"infrastructure"`` failure (retried).
* :meth:`~PoolBackend.attempt` runs ``attempt.fn(sandbox', attempt.task)`` once, where
  ``sandbox'`` is whatever form the sandbox takes where the task runs (the sandbox itself, or
  one rebuilt from its :meth:`~workflows.LocalSandbox.handle` in another process), within
  ``attempt.timeout`` seconds (None: no limit), and says what happened in an
  :class:`AttemptOutcome`; it never raises for the task's own failure. Past the timeout it
  stops waiting (cancelling what it can) and says ``timed_out``: the pool then retires the
  sandbox, which the abandoned attempt may still be using.
* :meth:`~PoolBackend.reset` makes the sandbox clean for the next task (raising: the pool
  retires it); :meth:`~PoolBackend.healthy` says whether a sandbox that sat idle for
  ``health_check_after`` seconds still works (False: the pool retires it).
* :meth:`~PoolBackend.release` gives back one sandbox the pool retired (never raises: a
  failure is logged); :meth:`~PoolBackend.close` releases every sandbox of a closing pool (the
  pool no longer lends them; an attempt still running on one is abandoned) and frees the
  backend's own resources, one :class:`~workflows.ReleaseResult` per sandbox.

The pool calls ``acquire``, ``healthy``, ``release`` and ``close`` from any of its workers
at once (a blocking backend's methods must be thread-safe); one sandbox is never given to two
attempts at once, and ``reset``/``attempt`` of one sandbox never overlap.

A backend in a few lines (blocking; run in the pool's thread, as :class:`~workflows.SandboxPool`
does without a timeout)::

    class Local:
        def __init__(self, servers): self.servers = servers
        def acquire(self, give_up): return LocalSandbox.acquire(self.servers)
        def attempt(self, sandbox, attempt):
            try:
                return AttemptOutcome(value=attempt.fn(sandbox, attempt.task))
            except Exception as exc:
                return AttemptOutcome(error=exc)
        def reset(self, sandbox): sandbox.reset()
        def healthy(self, sandbox): return sandbox.refresh().status == "occupied"
        def release(self, sandbox): sandbox.release()
        def close(self, sandboxes): return bulk_release(sandboxes)

    with BackendPool(Local(["filesystem"]), size=4) as pool:
        results = pool.map(run_task, tasks, retries=1)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from .._recipes import ReleaseResult

__all__ = [
    "AcquireAbandoned",
    "AsyncPoolBackend",
    "Attempt",
    "AttemptOutcome",
    "PoolBackend",
    "PooledSandbox",
]


class PooledSandbox(Protocol):
    """What a pool needs of a backend's sandbox: its ``id`` (the pool's book is keyed on it,
    and each :class:`~workflows.TaskResult` names it)."""

    @property
    def id(self) -> str:
        """The sandbox's id, unique among the backend's sandboxes."""


S = TypeVar("S", bound=PooledSandbox)


class AcquireAbandoned(Exception):
    """Raised by a backend's ``acquire`` that stopped waiting because ``give_up()`` became
    true: the pool takes an idle sandbox instead (or stops, if it closed)."""


@dataclass(frozen=True)
class Attempt:
    """One attempt of one task that the pool asks its backend to run: ``fn(sandbox, task)``,
    the task's position ``index`` in the run, and ``timeout`` (seconds, None: no limit)."""

    fn: Callable[..., Any]
    task: Any = field(repr=False)
    index: int
    timeout: float | None


@dataclass(frozen=True)
class AttemptOutcome:
    """What one attempt gave: the function's ``value``, or the ``error`` it raised (or that
    stopped it from running: a task that does not pickle, a worker that died), and whether it
    ran past its timeout (``timed_out``, with a :class:`~workflows.TaskTimeoutError` as
    ``error``). ``seconds`` is filled in by the pool, which times the attempt."""

    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False
    seconds: float = 0.0


class PoolBackend(Protocol[S]):
    """Where a :class:`~workflows.BackendPool`'s sandboxes come from and where its tasks run
    (blocking methods, called from the pool's worker threads; see the module for the
    contract)."""

    def acquire(self, give_up: Callable[[], bool]) -> S:
        """A new sandbox; :class:`AcquireAbandoned` once ``give_up()`` while waiting."""

    def attempt(self, sandbox: S, attempt: Attempt) -> AttemptOutcome:
        """Run ``attempt`` on ``sandbox`` within its timeout; never raise for the task."""

    def reset(self, sandbox: S) -> None:
        """Make ``sandbox`` clean for the next task (raise: the pool retires it)."""

    def healthy(self, sandbox: S) -> bool:
        """Whether a sandbox that sat idle still works."""

    def release(self, sandbox: S) -> None:
        """Give back a retired sandbox (a failure logged, never raised)."""

    def close(self, sandboxes: list[S]) -> list[ReleaseResult]:
        """Release every sandbox of a closing pool and free the backend's resources."""


class AsyncPoolBackend(Protocol[S]):
    """:class:`PoolBackend` for :class:`~workflows.AsyncBackendPool`: the same contract, each
    method a coroutine run on the pool's event loop (it must not block it)."""

    async def acquire(self, give_up: Callable[[], bool]) -> S:
        """A new sandbox; :class:`AcquireAbandoned` once ``give_up()`` while waiting."""

    async def attempt(self, sandbox: S, attempt: Attempt) -> AttemptOutcome:
        """Run ``attempt`` on ``sandbox`` within its timeout; never raise for the task."""

    async def reset(self, sandbox: S) -> None:
        """Make ``sandbox`` clean for the next task (raise: the pool retires it)."""

    async def healthy(self, sandbox: S) -> bool:
        """Whether a sandbox that sat idle still works."""

    async def release(self, sandbox: S) -> None:
        """Give back a retired sandbox (a failure logged, never raised)."""

    async def close(self, sandboxes: list[S]) -> list[ReleaseResult]:
        """Release every sandbox of a closing pool and free the backend's resources."""
