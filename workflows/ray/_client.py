"""The client of the broker: :class:`SandboxBroker`, :func:`reap`, and the heartbeats.

Every call to the broker goes through :func:`_send` (one place, so a test can capture what is
sent and check that the key is never in it). A client never sends its key: it sends the acquire
request (server names, benchmark, TTL, test account, timeout) and the base URL, and compares
its key's fingerprint with the broker's before the first acquire.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import ray
import ray.exceptions

from .._acquire import Acquire, AcquireOptions, Unpack, resolve_acquire
from .._async_sandbox import AsyncLocalSandbox
from .._config import ApiKey
from .._errors import ConfigurationError, InvalidInputError
from .._models import ServerNames
from .._sandbox import LocalSandbox
from ._broker import Broker, BrokerStats, Lease, Leased, LeaseEnded
from ._key import refuse_key_in_options, warn_if_the_job_carries_the_key

__all__ = [
    "DEFAULT_BROKER_NAME",
    "DEFAULT_NAMESPACE",
    "SandboxBroker",
    "reap",
]

log = logging.getLogger("workflows")

DEFAULT_BROKER_NAME = "klavis-sandbox-broker"
"""The name the broker is registered under in Ray, unless given another."""
DEFAULT_NAMESPACE = "klavis-sandbox"
"""The Ray namespace of the broker: every job of the cluster finds it there."""


def _send(actor: Any, method: str, *args: Any) -> Any:
    """Call ``method`` of the broker ``actor`` and wait for its answer (the broker's own error,
    such as a :class:`~workflows.ServerError` from its acquire, is raised as itself)."""
    ref = getattr(actor, method).remote(*args)
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        raise _cause(exc) from None


async def _send_async(actor: Any, method: str, *args: Any) -> Any:
    """:func:`_send`, awaited (the event loop is never blocked)."""
    ref = getattr(actor, method).remote(*args)
    try:
        return await ref
    except ray.exceptions.RayTaskError as exc:
        raise _cause(exc) from None


def _cause(exc: ray.exceptions.RayTaskError) -> BaseException:
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def _holder_name() -> str:
    """Who holds a lease: this Ray worker (its actor, when in one) and a token of its own."""
    prefix = "driver"
    with contextlib.suppress(Exception):  # outside Ray: the token alone names it
        context = ray.get_runtime_context()
        actor_id = context.get_actor_id()
        prefix = f"actor:{actor_id}" if actor_id else f"worker:{context.get_worker_id()}"
    return f"{prefix}:{uuid.uuid4().hex[:12]}"


@functools.cache
def _broker_class() -> Any:
    """:class:`Broker` as a Ray actor class (made once per process)."""
    return ray.remote(Broker)


def _lease_id() -> str:
    return f"lease-{uuid.uuid4().hex[:16]}"


def _positive(name: str, value: object, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidInputError(f"{name} must be a positive number, got {value!r}")


class _Heartbeat:
    """A daemon thread that renews a holder's leases every ``period`` seconds until stopped."""

    def __init__(self, actor: Any, holder: str, period: float) -> None:
        self._actor, self._holder, self._period = actor, holder, period
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"sandbox-broker-heartbeat-{holder}", daemon=True
        )

    def start(self) -> _Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _beat(self) -> None:
        while not self._stop.wait(self._period):
            try:
                _send(self._actor, "heartbeat", self._holder)
            except Exception as exc:  # noqa: BLE001 - logged; the next beat may pass
                log.warning("could not renew the leases of %s: %s", self._holder, exc)


class SandboxBroker:
    """A handle on the cluster's broker: a named, detached Ray actor that leases sandboxes
    under one cap and one acquire rate for every worker of the cluster.

    Get it (or create it) by name, anywhere in the cluster::

        broker = SandboxBroker.connect(max_sandboxes=16, max_acquires_per_second=2)
        with broker.sandbox(["filesystem"]) as sb:     # in any Ray task or actor
            sb.seed({"task.txt": "..."})

    The broker acquires and releases itself, with the key of its own environment: the
    machines' (``KLAVIS_API_KEY`` exported before ``ray.init()`` starts a local cluster, or
    before ``ray start`` on each node; or ``KLAVIS_API_KEY_FILE``), never a ``runtime_env``,
    which every job of the cluster can read (a job whose ``runtime_env`` holds it gets a
    :class:`~workflows.ray.KeyInRayWarning`; ``actor_options`` holding it are refused).
    While a ``sandbox()`` block runs, a heartbeat renews its lease; a holder
    that dies stops renewing, and the broker releases its sandbox ``lease_timeout`` seconds
    later. The handle pickles (a task or actor can be given it).
    """

    def __init__(self, actor: Any, name: str, namespace: str, lease_timeout: float) -> None:
        """Made by :meth:`connect`."""
        self._actor = actor
        self.name = name
        self.namespace = namespace
        self.lease_timeout = lease_timeout
        self._fingerprint: str | None = None

    def __repr__(self) -> str:
        return f"SandboxBroker(name={self.name!r}, namespace={self.namespace!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (SandboxBroker, (self._actor, self.name, self.namespace, self.lease_timeout))

    @classmethod
    def connect(
        cls,
        name: str = DEFAULT_BROKER_NAME,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        max_sandboxes: int = 8,
        max_acquires_per_second: float | None = None,
        lease_timeout: float = 30.0,
        actor_options: dict[str, Any] | None = None,
    ) -> SandboxBroker:
        """The broker named ``name``, created (detached: it outlives this job) when none exists.

        ``max_sandboxes`` (the cluster's cap), ``max_acquires_per_second`` (None: no limit)
        and ``lease_timeout`` (seconds a lease lives without a heartbeat) apply only when this
        call creates it; an existing broker keeps its own (see :meth:`stats`).
        ``actor_options`` go to Ray's ``.options()`` of the actor (``resources``,
        ``scheduling_strategy``, ``runtime_env``, ...). Connects to Ray (``ray.init()``) if
        this process has not yet.
        """
        if not isinstance(name, str) or not name:
            raise InvalidInputError(f"name must be a non-empty str, got {name!r}")
        if isinstance(max_sandboxes, bool) or not isinstance(max_sandboxes, int):
            raise InvalidInputError(f"max_sandboxes must be an int, got {max_sandboxes!r}")
        if max_sandboxes < 1:
            raise InvalidInputError(f"max_sandboxes must be at least 1, got {max_sandboxes}")
        _positive("max_acquires_per_second", max_acquires_per_second, allow_none=True)
        _positive("lease_timeout", lease_timeout)
        refuse_key_in_options(actor_options, "actor_options")
        options: dict[str, Any] = {
            "num_cpus": 0,  # it waits on the network: it must never take a task's CPU
            "max_concurrency": 1000,
            **(actor_options or {}),
            "name": name,
            "namespace": namespace,
            "lifetime": "detached",
            "get_if_exists": True,
        }
        actor = (
            _broker_class()
            .options(**options)
            .remote(max_sandboxes, max_acquires_per_second, float(lease_timeout))
        )
        config = _send(actor, "config")
        _warn_if_the_job_carries_the_key()
        return cls(actor, name, namespace, float(config["lease_timeout"]))

    # ----------------------------------------------------------------- the key
    def _check_key(self, key: ApiKey, fingerprint: str | None) -> None:
        if fingerprint == key.fingerprint:
            self._fingerprint = fingerprint
            return
        if fingerprint is None:
            raise ConfigurationError(
                f"the sandbox broker {self.name!r} has no Klavis API key in its environment, "
                "and it acquires with its own: give it to the cluster's machines (export "
                "KLAVIS_API_KEY before ray.init() starts a local cluster, or before `ray start` "
                "on each node, or set KLAVIS_API_KEY_FILE to a file holding it; never in a "
                "runtime_env, which every job of the cluster can read), then shut this broker "
                "down and connect again"
            )
        raise ConfigurationError(
            f"the sandbox broker {self.name!r} acquires with another Klavis API key than this "
            "process's (their fingerprints differ): give both the same KLAVIS_API_KEY, or "
            "connect to a broker of another name"
        )

    def _wanted(self, where: str, server_names: ServerNames, options: AcquireOptions) -> Acquire:
        wanted = resolve_acquire(where, server_names, options)
        if self._fingerprint != wanted.settings.api_key.fingerprint:
            self._check_key(wanted.settings.api_key, _send(self._actor, "key_fingerprint"))
        return wanted

    @staticmethod
    def _request(wanted: Acquire) -> tuple[list[str], dict[str, Any], str]:
        """What the broker is sent for an acquire: never the key."""
        request = wanted.request
        options = {
            "benchmark": request.benchmark,
            "ttl_seconds": request.ttl_seconds,
            "test_account_email": request.test_account_email,
            "timeout": wanted.settings.timeout,
        }
        return list(request.server_names), options, wanted.settings.base_url

    def _lease(self, holder: str, wanted: Acquire) -> Leased:
        """Lease a sandbox for ``holder`` (waits for a free slot)."""
        leased: Leased = _send(self._actor, "acquire", holder, _lease_id(), *self._request(wanted))
        return leased

    def _lease_unless(self, holder: str, wanted: Acquire, give_up: Callable[[], bool]) -> Leased:
        """:meth:`_lease`, ended (:class:`LeaseEnded` raised) as soon as ``give_up()`` says so
        while it waits (checked every 0.2 s)."""
        lease_id = _lease_id()
        ref = self._actor.acquire.remote(holder, lease_id, *self._request(wanted))
        gave_up = False
        while not gave_up and not ray.wait([ref], timeout=0.2)[0]:
            gave_up = give_up()
        if not gave_up:
            gave_up = give_up()
        if gave_up:
            self._release(lease_id)  # ends it waiting, or releases what it was just granted
        try:
            leased: Leased = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            raise _cause(exc) from None
        if gave_up:
            raise LeaseEnded(f"lease {lease_id} was given up")
        return leased

    # ----------------------------------------------------------------- leases
    @contextlib.contextmanager
    def sandbox(
        self, server_names: ServerNames, **options: Unpack[AcquireOptions]
    ) -> Iterator[LocalSandbox]:
        """Lease a sandbox from the broker for the ``with`` block; it is released through
        the broker when the block ends, however it ends (and by the broker, after
        ``lease_timeout``, if this process dies). The keywords are
        :class:`~workflows.AcquireOptions`' (``ledger`` is the broker's own). Waits while the
        cluster's cap is reached.

        >>> with SandboxBroker.connect().sandbox(["filesystem"]) as sb:  # doctest: +SKIP
        ...     sb.seed({"a.txt": "A"})
        """
        wanted = self._wanted("sandbox", server_names, options)
        holder = _holder_name()
        beat = _Heartbeat(self._actor, holder, self.lease_timeout / 3).start()
        try:
            leased = self._lease(holder, wanted)
            yield LocalSandbox.from_handle(
                leased.handle,
                api_key=wanted.settings.api_key,
                timeout=wanted.settings.timeout,
                progress=wanted.progress,
                limits=wanted.limits,
            )
        finally:
            beat.stop()
            _send(self._actor, "release_holder", holder)

    @contextlib.asynccontextmanager
    async def async_sandbox(
        self, server_names: ServerNames, **options: Unpack[AcquireOptions]
    ) -> AsyncIterator[AsyncLocalSandbox]:
        """:meth:`sandbox`, for asyncio code: ``async with broker.async_sandbox([...]) as sb``
        gives an :class:`~workflows.AsyncLocalSandbox`; the heartbeat is a task of the loop."""
        wanted = resolve_acquire("async_sandbox", server_names, options)
        if self._fingerprint != wanted.settings.api_key.fingerprint:
            found = await _send_async(self._actor, "key_fingerprint")
            self._check_key(wanted.settings.api_key, found)
        holder = _holder_name()
        beat = asyncio.get_running_loop().create_task(self._beat_async(holder))
        try:
            leased: Leased = await _send_async(
                self._actor, "acquire", holder, _lease_id(), *self._request(wanted)
            )
            sandbox: AsyncLocalSandbox = AsyncLocalSandbox.from_handle(
                leased.handle,
                api_key=wanted.settings.api_key,
                timeout=wanted.settings.timeout,
                progress=wanted.progress,
                limits=wanted.limits,
            )
            try:
                yield sandbox
            finally:
                await sandbox.aclose()
        finally:
            beat.cancel()
            await asyncio.shield(_send_async(self._actor, "release_holder", holder))

    async def _beat_async(self, holder: str) -> None:
        while True:
            await asyncio.sleep(self.lease_timeout / 3)
            try:
                await _send_async(self._actor, "heartbeat", holder)
            except Exception as exc:  # noqa: BLE001 - logged; the next beat may pass
                log.warning("could not renew the leases of %s: %s", holder, exc)

    def held(self) -> list[Lease]:
        """Every lease the broker has now (waiting, acquiring or held), oldest first."""
        leases: list[Lease] = _send(self._actor, "held")
        return leases

    def stats(self) -> BrokerStats:
        """The broker's cap, rate and lease timeout, and its counts since it started."""
        stats: BrokerStats = _send(self._actor, "stats")
        return stats

    def reap(self) -> list[str]:
        """Release everything the broker holds (for the driver, after a crash); the sandbox
        ids released."""
        released: list[str] = _send(self._actor, "reap")
        return released

    def shutdown(self) -> list[str]:
        """Release everything the broker holds, then end the broker (the next
        :meth:`connect` creates a new one); the sandbox ids released."""
        try:
            released: list[str] = _send(self._actor, "reap")
        finally:
            ray.kill(self._actor, no_restart=True)
        return released

    # the pool's side (workflows.ray.RaySandboxPool): leases under one holder, renewed together
    def _heartbeat(self, holder: str) -> _Heartbeat:
        return _Heartbeat(self._actor, holder, self.lease_timeout / 3).start()

    def _release(self, lease_id: str) -> bool:
        released: bool = _send(self._actor, "release", lease_id)
        return released

    def _release_holder(self, holder: str) -> list[str]:
        released: list[str] = _send(self._actor, "release_holder", holder)
        return released


def _warn_if_the_job_carries_the_key() -> None:
    """:func:`~workflows.ray._key.warn_if_the_job_carries_the_key` for this process's job."""
    try:
        context = ray.get_runtime_context()
        job, runtime_env = context.get_job_id(), dict(context.runtime_env)
    except Exception:  # noqa: BLE001 - a Ray without these calls: nothing to check
        return
    warn_if_the_job_carries_the_key(runtime_env, job)


def reap(name: str = DEFAULT_BROKER_NAME, *, namespace: str = DEFAULT_NAMESPACE) -> list[str]:
    """Release whatever the broker ``name`` still holds (for the driver after a crash: its
    pool's leases would otherwise live until their ``lease_timeout``); the sandbox ids
    released. Raises :class:`~workflows.InvalidInputError` when there is no such broker.

    >>> workflows.ray.reap()  # doctest: +SKIP
    ['sbx-1', 'sbx-2']
    """
    try:
        actor = ray.get_actor(name, namespace=namespace)
    except ValueError:
        raise InvalidInputError(
            f"no sandbox broker named {name!r} in the Ray namespace {namespace!r}"
        ) from None
    released: list[str] = _send(actor, "reap")
    return released
