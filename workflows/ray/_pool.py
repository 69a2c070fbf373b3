"""The pool on Ray: :class:`RaySandboxPool`, :class:`~workflows.SandboxPool` with other hands.

The rules (a clean sandbox per task, resets, retirements, which failures are retried) are the
pool's task flow (:mod:`workflows._pool._retry_rules`), run as in :class:`SandboxPool`: the
driver's worker threads take, reset and retire the sandboxes. What differs is where things
happen:

* a sandbox is leased from the cluster's broker (:mod:`workflows.ray._broker`), through the
  driver's session (renewed by its thread); it is released through the broker. The broker's
  cap is the cluster's: ``size`` is the cap of a broker the pool creates; an existing broker
  keeps its own (a pool bigger than it is warned about), and the pool waits for its slots. A
  rate, lease timeout or warm count given that differs from the live broker's is a
  :class:`~workflows.ConfigurationError`.
* each attempt runs ``fn(sandbox, task)`` as a Ray task on the cluster, given the sandbox's
  handle (no key: the worker reads ``KLAVIS_API_KEY`` from its own environment); the driver's
  thread waits for it with ``ray.get(timeout=...)``, cancels it (``ray.cancel(force=True)``)
  past its timeout, turns a worker's death into :class:`~workflows.WorkerDiedError` (an
  infrastructure failure, retried) and a task's own exception, wrapped by Ray, back into
  itself (so its kind is decided as in the other pools).
"""

from __future__ import annotations

import contextlib
import time
import uuid
import warnings
from typing import Any

import ray
import ray.exceptions

from .._acquire import AcquireOptions, Unpack, resolve_acquire
from .._errors import InvalidInputError, TaskTimeoutError, WorkerDiedError
from .._handle import SandboxHandle
from .._models import ServerNames
from .._pool._base import Run, log
from .._pool._retry_rules import Outcome
from .._pool._sync import SandboxPool, _Hands
from .._recipes import ReleaseResult
from .._sandbox import LocalSandbox
from ._client import DEFAULT_BROKER_NAME, DEFAULT_NAMESPACE, LeaseGivenUp, SandboxBroker
from ._key import refuse_key_in_options
from ._types import BrokerConfig, Warm

__all__ = ["RaySandboxPool"]

DIED: tuple[type[BaseException], ...] = (
    ray.exceptions.WorkerCrashedError,
    ray.exceptions.ActorDiedError,
    ray.exceptions.NodeDiedError,
    ray.exceptions.OwnerDiedError,
    ray.exceptions.ObjectLostError,
    ray.exceptions.TaskCancelledError,
    ray.exceptions.RaySystemError,
)
"""What ``ray.get`` raises when the process running a task died (or the task was cancelled by
someone else): the task did nothing wrong."""


def _run_task(fn: Any, handle: SandboxHandle, task: Any) -> Any:
    """What a Ray worker runs: the task function on the sandbox of ``handle`` (the key from
    the worker's environment)."""
    return fn(LocalSandbox.from_handle(handle, progress=False), task)


class RaySandboxPool(SandboxPool):
    """:class:`~workflows.SandboxPool` on a Ray cluster: each task runs as a Ray task on the
    cluster's workers, over at most ``size`` sandboxes **across the whole cluster**::

        ray.init()   # KLAVIS_API_KEY exported: the local cluster's processes inherit it
        with RaySandboxPool(["filesystem"], size=16, max_acquires_per_second=2) as pool:
            results = pool.map(run_task, tasks, timeout=600, retries=1)

    The interface and the rules are :class:`SandboxPool`'s (``map``, ``imap_unordered``,
    ``timeout``, ``retries``, ``retry_on``, resets between tasks, health checks,
    :class:`~workflows.PoolResults`, ``sandbox_ids``, ``close()``, ``with``); ``fn(sandbox,
    task)`` is a plain function Ray ships to the workers (it, the tasks and the values it
    returns must pickle), given a :class:`~workflows.LocalSandbox` that the pool does not let it
    release.

    The sandboxes are leased from the cluster's broker (:class:`SandboxBroker`, named
    ``broker_name``; created with ``max_sandboxes=size`` when none ever ran). The broker's
    settings are the cluster's: ``max_acquires_per_second``, ``lease_timeout`` and ``warm``,
    when given, must be the live broker's (:class:`~workflows.ConfigurationError` otherwise,
    saying how to change them for everyone); a ``size`` over its cap is warned about, and
    the pool waits for its slots. ``warm``: sandboxes of the pool's servers (and acquire
    options) the broker keeps acquired ahead, an int, or a :class:`~workflows.ray.Warm` for
    more (a template, an idle timeout). The driver holds the leases, renewed by a thread of
    its process; if the driver dies, the broker releases them as soon as Ray reports it. A
    worker that dies under a task (``ray.kill``, SIGKILL, a node lost) gives a
    :class:`~workflows.WorkerDiedError`, an ``"infrastructure"`` failure: the task is retried
    on a clean sandbox when ``retries`` allow. ``timeout`` cancels the Ray task
    (``ray.cancel(force=True)``: its worker is killed) and replaces its sandbox.
    ``task_options`` go to Ray's ``.options()`` of each task (``num_cpus``, ``resources``,
    ``runtime_env``, ...; ``max_retries`` is 0 unless given: the pool retries, on a clean
    sandbox).

    The broker acquires with its own environment's key; so does each worker, to use the
    sandbox: give the key to the cluster's machines (exported before ``ray.init()`` starts a
    local cluster, or before ``ray start`` on each node; or ``KLAVIS_API_KEY_FILE``). The key
    is never sent through Ray, and ``task_options`` whose ``runtime_env`` holds it are refused
    (Ray would keep it where every job of the cluster reads it). This process needs it too
    (resets, health checks): a :class:`~workflows.ConfigurationError` says so when the
    broker's differs or is missing.
    """

    def __init__(
        self,
        server_names: ServerNames,
        size: int = 4,
        *,
        max_acquires_per_second: float | None = None,
        broker_name: str = DEFAULT_BROKER_NAME,
        namespace: str = DEFAULT_NAMESPACE,
        lease_timeout: float | None = None,
        warm: int | Warm | None = None,
        task_options: dict[str, Any] | None = None,
        health_check_after: float = 60.0,
        **options: Unpack[AcquireOptions],
    ) -> None:
        if task_options is not None and not isinstance(task_options, dict):
            raise InvalidInputError(
                f"task_options must be a dict of Ray task options, got {task_options!r}"
            )
        refuse_key_in_options(task_options, "task_options")
        given: BrokerConfig = {}
        if max_acquires_per_second is not None:
            given["max_acquires_per_second"] = max_acquires_per_second
        if lease_timeout is not None:
            given["lease_timeout"] = lease_timeout
        self._broker_args = (broker_name, namespace, given, warm)
        self._task_options: dict[str, Any] = {"max_retries": 0, **(task_options or {})}
        super().__init__(server_names, size=size, health_check_after=health_check_after, **options)

    def _start(self) -> None:
        super()._start()
        name, namespace, given, warm = self._broker_args
        if warm is not None:
            given["warm"] = self._warm(warm)
        self.broker = SandboxBroker.connect(
            name, namespace=namespace, _defaults={"max_sandboxes": self.size}, **given
        )
        cap = self.broker.stats().max_sandboxes
        if self.size > cap:
            message = (
                f"RaySandboxPool(size={self.size}) leases from the broker {name!r}, capped at "
                f"{cap} for the whole cluster: at most {cap} of its tasks run at once; raise the "
                f"cap for everyone with SandboxBroker.connect({name!r}).reconfigure("
                f"max_sandboxes={self.size})"
            )
            log.warning("%s", message)
            warnings.warn(message, stacklevel=3)
        self._wanted = self.broker._wanted(
            "RaySandboxPool", self._server_names, self._acquire_options
        )
        self._holder = f"pool:{uuid.uuid4().hex[:12]}"
        self._leases: dict[str, str] = {}  # sandbox id -> lease id
        self._inflight: set[ray.ObjectRef[Any]] = set()
        self._remote = ray.remote(_run_task).options(**self._task_options)

    def _warm(self, warm: int | Warm) -> Warm:
        """The pool's ``warm``: a count of sandboxes like its own, or a Warm as it is."""
        if isinstance(warm, Warm):
            return warm
        if isinstance(warm, bool) or not isinstance(warm, int):
            raise InvalidInputError(f"warm must be an int or a Warm, got {warm!r}")
        request = resolve_acquire("RaySandboxPool", self._server_names, self._acquire_options)
        return Warm(
            self._server_names,
            warm,
            benchmark=request.request.benchmark,
            ttl_seconds=request.request.ttl_seconds,
            test_account_email=request.request.test_account_email,
            base_url=self._settings.base_url,
        )

    def __repr__(self) -> str:
        with self._cond:
            live, idle = len(self._book.live), len(self._book.idle)
        return (
            f"RaySandboxPool(size={self.size}, live={live}, idle={idle}, "
            f"broker={self.broker.name!r})"
        )

    # ----------------------------------------------------------------- the pool's own hands
    def _acquire_one(self) -> LocalSandbox:
        session = self.broker._session()
        request = self.broker._request(self._wanted, f"{session.holder}:{self._holder}")
        # a slot of the broker may be held by this very pool, idle (its cap may be smaller
        # than size, or other clients hold the rest): stop waiting as soon as one is
        leased = self.broker._lease(session, request, self._outrun)
        sandbox: LocalSandbox = LocalSandbox.from_handle(
            leased.handle,
            api_key=self._settings.api_key,
            timeout=self._settings.timeout,
            progress=False,
            limits=self._wanted.limits,
        )
        with self._cond:
            self._leases[sandbox.id] = leased.lease_id
        return sandbox

    def _outrun(self) -> bool:
        """Whether an acquire under way is not needed any more: the pool has an idle sandbox
        (a worker ended), or it closed."""
        with self._cond:
            return bool(self._book.idle) or self._book.closed

    def _take(self) -> LocalSandbox:
        while True:
            try:
                return super()._take()
            except LeaseGivenUp:
                continue  # an idle sandbox of the pool's is there to take (or it closed)

    def _release_one(self, sandbox: LocalSandbox) -> None:
        with self._cond:
            lease_id = self._leases.pop(sandbox.id, None)
        if lease_id is None:
            return
        try:
            self.broker._release(lease_id, "released by its pool")
        except Exception as exc:  # noqa: BLE001 - the broker ends it when the driver dies
            log.warning("could not release sandbox %s through the broker: %s", sandbox.id, exc)

    def _release_all(self, sandboxes: list[LocalSandbox]) -> list[ReleaseResult]:
        with self._cond:
            inflight, self._inflight = set(self._inflight), set()
            leases, self._leases = dict(self._leases), {}
        for ref in inflight:  # the tasks still running on abandoned sandboxes
            _cancel(ref)
        if not leases:
            return [ReleaseResult(sb.id, True, already_released=True) for sb in sandboxes]
        started = time.perf_counter()
        try:
            released = set(self.broker._release_many(list(leases.values()), "its pool closed"))
        except Exception as exc:  # noqa: BLE001 - each sandbox's result says so
            return [ReleaseResult(sb.id, False, error=exc) for sb in sandboxes]
        seconds = time.perf_counter() - started
        return [
            ReleaseResult(sb.id, True, already_released=sb.id not in released, seconds=seconds)
            for sb in sandboxes
        ]

    def _hands(self, run: Run[Any], index: int, task: Any, holder: list[LocalSandbox]) -> _Hands:
        return _RayHands(self, run, index, task, holder)

    def _attempt(self, run: Run[Any], sandbox: LocalSandbox, task: Any, index: int) -> Outcome:
        """Run one attempt as a Ray task and wait for it (see the module)."""
        started = time.perf_counter()
        try:  # Ray pickles the function and the task here: one that does not pickle fails
            ref = self._remote.remote(run.fn, sandbox.handle(), task)
        except Exception as exc:  # noqa: BLE001 - the task's own failure (its function or value)
            return Outcome(None, exc, False, time.perf_counter() - started)
        with self._cond:
            self._inflight.add(ref)
        try:
            value = ray.get(ref, timeout=run.timeout)
        except ray.exceptions.GetTimeoutError:
            _cancel(ref)
            timed_out = TaskTimeoutError(f"task {index} ran past its timeout of {run.timeout} s")
            return Outcome(None, timed_out, True, time.perf_counter() - started)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            error = cause if isinstance(cause, BaseException) else exc
            return Outcome(None, error, False, time.perf_counter() - started)
        except DIED as exc:
            died = WorkerDiedError(
                f"the Ray worker running task {index} died ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else 'no detail'})"
            )
            died.__cause__ = exc
            return Outcome(None, died, False, time.perf_counter() - started)
        finally:
            with self._cond:
                self._inflight.discard(ref)
        return Outcome(value, None, False, time.perf_counter() - started)

    def __enter__(self) -> RaySandboxPool:
        return self


def _cancel(ref: ray.ObjectRef[Any]) -> None:
    """Cancel a Ray task, killing its worker (nothing to do when it finished meanwhile)."""
    with contextlib.suppress(Exception):
        ray.cancel(ref, force=True)


class _RayHands(_Hands):
    """The sync pool's hands, whose attempt is a Ray task."""

    pool: RaySandboxPool

    def attempt(self, sandbox: LocalSandbox) -> Outcome:
        return self.pool._attempt(self.run, sandbox, self.task, self.index)
