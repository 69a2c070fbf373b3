"""The pool on Ray: :class:`RaySandboxPool`, the blocking pool engine
(:class:`~workflows.BackendPool`) on a backend of this module, :class:`RayBackend`.

The rules (a clean sandbox per task, resets, retirements, which failures are retried) are the
engine's, as for :class:`~workflows.SandboxPool`: the driver's worker threads take, reset and
retire the sandboxes. What the backend does its own way:

* a sandbox is leased from the cluster's broker (:mod:`workflows.ray._broker`) through
  :class:`~workflows.ray._client.Leases`, and lives in the driver as a
  :class:`~workflows.ray._leased.LeasedSandbox` (renewed by the driver's session); it is given
  back through the broker. The broker's cap is the cluster's: ``size`` is the cap of a broker
  the pool creates; an existing broker keeps its own (a pool bigger than it is warned about),
  and the pool waits for its slots. A rate, lease timeout or warm count given that differs
  from the live broker's is a :class:`~workflows.ConfigurationError`.
* each attempt runs ``fn(sandbox, task)`` as a Ray task on the cluster, given the sandbox's
  handle (its one change of form, crossing to the worker; no key: the worker reads
  ``KLAVIS_API_KEY`` from its own environment); the driver's thread waits for it with
  ``ray.get(timeout=...)``, cancels it (``ray.cancel(force=True)``) past its timeout, turns a
  worker's death into :class:`~workflows.WorkerDiedError` (an infrastructure failure, retried)
  and a task's own exception, wrapped by Ray, back into itself (so its kind is decided as in
  the other pools).

The task's walk, from :meth:`~workflows.BackendPool.map` to its result: the engine's worker
thread (``_worker``) runs the task flow (``task_flow``), whose hands take a sandbox (the
engine's book, then :meth:`RayBackend.acquire` -> :meth:`Leases.take
<workflows.ray._client.Leases.take>` -> ``lent``), run the attempt (:meth:`RayBackend.attempt`
-> :func:`_run_task` on a worker -> ``fn``) and reset it (:meth:`RayBackend.reset`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

import ray
import ray.exceptions

from .._acquire import Unpack, resolve_acquire
from .._errors import InvalidInputError, TaskTimeoutError, WorkerDiedError
from .._handle import SandboxHandle
from .._models import ServerNames
from .._pool import Attempt, AttemptOutcome, BackendPool, SandboxPoolOptions
from .._pool._local import SandboxChecks
from .._pool._options import resolve_pool, split_pool_options
from .._recipes import ReleaseResult
from .._sandbox import LocalSandbox
from . import _wire
from ._client import DEFAULT_BROKER_NAME, DEFAULT_NAMESPACE, Leases, SandboxBroker, leases_of
from ._key import refuse_key_in_options
from ._leased import LeasedSandbox
from ._types import BrokerConfig, Warm

__all__ = ["RayBackend", "RaySandboxPool"]

log = logging.getLogger("workflows")

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


class RaySandboxPool(BackendPool[LeasedSandbox]):
    """:class:`~workflows.SandboxPool` on a Ray cluster: each task runs as a Ray task on the
    cluster's workers, over at most ``size`` sandboxes **across the whole cluster**::

        ray.init()   # KLAVIS_API_KEY exported: the local cluster's processes inherit it
        with RaySandboxPool(["filesystem"], size=16, max_acquires_per_second=2) as pool:
            results = pool.map(run_task, tasks, timeout=600, retries=1)

    The interface and the rules are :class:`SandboxPool`'s, both being
    :class:`~workflows.BackendPool` on a backend of their own (``map``, ``imap_unordered``,
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
    The other keywords are :class:`~workflows.SandboxPoolOptions`' (``size``,
    ``health_check_after``, ``progress`` and the acquire's). ``task_options`` go to Ray's
    ``.options()`` of each task (``num_cpus``, ``resources``, ``runtime_env``, ...;
    ``max_retries`` is 0 unless given: the pool retries, on a clean sandbox).

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
        *,
        max_acquires_per_second: float | None = None,
        broker_name: str = DEFAULT_BROKER_NAME,
        namespace: str = DEFAULT_NAMESPACE,
        lease_timeout: float | None = None,
        warm: int | Warm | None = None,
        task_options: dict[str, Any] | None = None,
        **options: Unpack[SandboxPoolOptions],
    ) -> None:
        if task_options is not None and not isinstance(task_options, dict):
            raise InvalidInputError(
                f"task_options must be a dict of Ray task options, got {task_options!r}"
            )
        refuse_key_in_options(task_options, "task_options")
        given_pool, acquire = split_pool_options(options)
        pool = resolve_pool("RaySandboxPool", given_pool)
        acquire["progress"] = False  # the pool's bar says it
        wanted = resolve_acquire("RaySandboxPool", server_names, acquire)
        size = pool["size"]
        given: BrokerConfig = {}
        if max_acquires_per_second is not None:
            given["max_acquires_per_second"] = max_acquires_per_second
        if lease_timeout is not None:
            given["lease_timeout"] = lease_timeout
        if warm is not None:
            given["warm"] = _warm(warm, server_names, wanted)
        self.settings = wanted.settings
        """The connection settings (the key inside never shows in a repr)."""
        self.broker = SandboxBroker.connect(
            broker_name, namespace=namespace, _defaults={"max_sandboxes": size}, **given
        )
        _warn_over_cap(self.broker, size)
        leases = leases_of(
            self.broker, "RaySandboxPool", server_names, acquire, f"pool:{uuid.uuid4().hex[:12]}"
        )
        super().__init__(RayBackend(leases, {"max_retries": 0, **(task_options or {})}), **pool)

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, broker={self.broker.name!r})"

    def __enter__(self) -> RaySandboxPool:
        return self


def _warm(warm: int | Warm, server_names: ServerNames, wanted: Any) -> Warm:
    """The pool's ``warm``: a count of sandboxes like its own, or a Warm as it is."""
    if isinstance(warm, Warm):
        return warm
    if isinstance(warm, bool) or not isinstance(warm, int):
        raise InvalidInputError(f"warm must be an int or a Warm, got {warm!r}")
    return Warm(
        server_names,
        warm,
        benchmark=wanted.request.benchmark,
        ttl_seconds=wanted.request.ttl_seconds,
        test_account_email=wanted.request.test_account_email,
        base_url=wanted.settings.base_url,
    )


def _warn_over_cap(broker: SandboxBroker, size: int) -> None:
    """Warn when the pool is bigger than the broker's cap for the whole cluster."""
    cap = broker.stats().max_sandboxes
    if size > cap:
        name = broker.name
        message = (
            f"RaySandboxPool(size={size}) leases from the broker {name!r}, capped at "
            f"{cap} for the whole cluster: at most {cap} of its tasks run at once; raise the "
            f"cap for everyone with SandboxBroker.connect({name!r}).reconfigure("
            f"max_sandboxes={size})"
        )
        log.warning("%s", message)
        warnings.warn(message, stacklevel=3)  # at the RaySandboxPool(...) call


class RayBackend(SandboxChecks):
    """:class:`RaySandboxPool`'s backend (a :class:`~workflows.PoolBackend`): sandboxes leased
    through ``leases``, each attempt a Ray task made with ``task_options`` (see the module);
    reset and checked as :class:`~workflows.SandboxPool`'s are (``SandboxChecks``)."""

    def __init__(self, leases: Leases, task_options: dict[str, Any]) -> None:
        self.leases = leases
        self._remote = ray.remote(_run_task).options(**task_options)
        self._lock = threading.Lock()
        self._inflight: set[ray.ObjectRef[Any]] = set()

    def acquire(self, give_up: Callable[[], bool]) -> LeasedSandbox:
        # a slot of the broker may be held by this very pool, idle (its cap may be smaller
        # than size, or other clients hold the rest): stop waiting as soon as one is
        return self.leases.take(give_up)  # LeaseGivenUp is an AcquireAbandoned

    def attempt(self, sandbox: LeasedSandbox, attempt: Attempt) -> AttemptOutcome:
        try:  # Ray pickles the function and the task here: one that does not pickle fails
            ref = self._remote.remote(attempt.fn, sandbox.handle(), attempt.task)
        except Exception as exc:  # noqa: BLE001 - the task's own failure (its function or value)
            return AttemptOutcome(error=exc)
        with self._lock:
            self._inflight.add(ref)
        try:
            return AttemptOutcome(ray.get(ref, timeout=attempt.timeout))
        except ray.exceptions.GetTimeoutError:
            _cancel(ref)
            error = TaskTimeoutError(
                f"task {attempt.index} ran past its timeout of {attempt.timeout} s"
            )
            return AttemptOutcome(error=error, timed_out=True)
        except ray.exceptions.RayTaskError as exc:
            return AttemptOutcome(error=_wire.cause(exc))
        except DIED as exc:
            died = WorkerDiedError(
                f"the Ray worker running task {attempt.index} died ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else 'no detail'})"
            )
            died.__cause__ = exc
            return AttemptOutcome(error=died)
        finally:
            with self._lock:
                self._inflight.discard(ref)

    def release(self, sandbox: LeasedSandbox) -> None:
        try:
            self.leases.give_back(sandbox, "released by its pool")
        except Exception as exc:  # noqa: BLE001 - the broker ends it when the driver dies
            log.warning("could not release sandbox %s through the broker: %s", sandbox.id, exc)

    def close(self, sandboxes: list[LeasedSandbox]) -> list[ReleaseResult]:
        with self._lock:
            inflight, self._inflight = set(self._inflight), set()
        for ref in inflight:  # the tasks still running on abandoned sandboxes
            _cancel(ref)
        if not sandboxes:
            return []
        started = time.perf_counter()
        try:
            released = set(self.leases.give_back_all(sandboxes, "its pool closed"))
        except Exception as exc:  # noqa: BLE001 - each sandbox's result says so
            return [ReleaseResult(sb.id, False, error=exc) for sb in sandboxes]
        seconds = time.perf_counter() - started
        return [
            ReleaseResult(sb.id, True, already_released=sb.id not in released, seconds=seconds)
            for sb in sandboxes
        ]


def _cancel(ref: ray.ObjectRef[Any]) -> None:
    """Cancel a Ray task, killing its worker (nothing to do when it finished meanwhile)."""
    with contextlib.suppress(Exception):
        ray.cancel(ref, force=True)
