"""The client of the broker: :class:`SandboxBroker` and :func:`reap`.

Every call to the broker goes through :func:`workflows.ray._wire.send` (one place, so a test
can capture what is sent and check that the key is never in it). A client never sends its key:
it sends the acquire request (server names, benchmark, TTL, test account, timeout) and the base
URL, and compares its key's fingerprint with the broker's before the first lease. Leases travel
through this process's session (:mod:`workflows.ray._session`): asked with one call, granted
through the session's long poll, renewed by its thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import ray
import ray.exceptions

from .._acquire import Acquire, AcquireOptions, Unpack, resolve_acquire
from .._config import ApiKey
from .._drivers import drive, drive_async, perform_act, perform_act_async
from .._errors import ConfigurationError, InvalidInputError
from .._models import ServerNames
from .._pool import AcquireAbandoned
from .._steps import Act, Flow
from . import _wire
from ._broker import Broker, _SessionUnknown
from ._key import refuse_key_in_options, warn_if_the_job_carries_the_key
from ._leased import (
    AsyncLeasedSandbox,
    LeasedSandbox,
    give_back,
    give_back_async,
    lease_id,
    lent,
)
from ._session import Link, Session, session_for
from ._types import BrokerConfig, BrokerStats, Lease, Leased, check_config, describe

__all__ = [
    "DEFAULT_BROKER_NAME",
    "DEFAULT_NAMESPACE",
    "LeaseGivenUp",
    "Leases",
    "SandboxBroker",
    "leases_of",
    "reap",
]

log = logging.getLogger("workflows")

DEFAULT_BROKER_NAME = "klavis-sandbox-broker"
"""The name the broker is registered under in Ray, unless given another."""
DEFAULT_NAMESPACE = "klavis-sandbox"
"""The Ray namespace of the broker: every job of the cluster finds it there."""
DEFAULT_BROKER_WAIT = 60.0
"""Seconds a client waits for a dead broker to come back before BrokerUnavailableError."""
_MAX_CONCURRENCY = 10_000
"""The broker actor's concurrent calls: two parked per holder process, the rest never park."""


@functools.cache
def _broker_class() -> Any:
    """:class:`Broker` as a Ray actor class (made once per process)."""
    return ray.remote(Broker)


def _lease_id() -> str:
    return f"lease-{uuid.uuid4().hex[:16]}"


class LeaseGivenUp(AcquireAbandoned):
    """A lease its holder stopped waiting for (a pool that no longer needs it)."""


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

    While a lease lives, a thread of its holder's process renews it (the process's session);
    a holder that dies has its waiting leases dropped and its sandboxes released as soon as
    Ray reports the death (about 2 s), one that stops without dying, ``lease_timeout``
    seconds later. A broker that dies is restarted by Ray (or made again by the next
    :meth:`connect`) and adopts what the dead one leased; its clients wait for it up to
    ``broker_wait`` seconds (:class:`~workflows.BrokerUnavailableError` past that). The
    handle pickles (a task or actor can be given it).
    """

    def __init__(
        self,
        actor: Any,
        name: str,
        namespace: str,
        lease_timeout: float,
        broker_wait: float = DEFAULT_BROKER_WAIT,
    ) -> None:
        """Made by :meth:`connect`."""
        self._link = Link(actor, name, namespace, broker_wait)
        self.name = name
        self.namespace = namespace
        self.lease_timeout = lease_timeout
        self.broker_wait = broker_wait
        self._fingerprint: str | None = None

    def __repr__(self) -> str:
        return f"SandboxBroker(name={self.name!r}, namespace={self.namespace!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        args = (self._link.actor, self.name, self.namespace, self.lease_timeout, self.broker_wait)
        return (SandboxBroker, args)

    @classmethod
    def connect(
        cls,
        name: str = DEFAULT_BROKER_NAME,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        actor_options: dict[str, Any] | None = None,
        broker_wait: float = DEFAULT_BROKER_WAIT,
        _defaults: BrokerConfig | None = None,
        **config: Unpack[BrokerConfig],
    ) -> SandboxBroker:
        """The broker named ``name``, created (detached: it outlives this job; restarted by
        Ray if it dies) when none exists.

        ``config`` (:class:`~workflows.ray.BrokerConfig`): ``max_sandboxes`` (the cluster's
        cap, 8 when not given), ``max_acquires_per_second`` (None: no limit),
        ``lease_timeout`` (30 s) and ``warm`` (:class:`~workflows.ray.Warm` sandboxes kept
        ready). A broker is the cluster's: one that exists keeps its settings, and a setting
        given here that differs from its own raises :class:`~workflows.ConfigurationError`,
        naming both values and how to change the live one (:meth:`reconfigure`, for
        everyone). ``broker_wait``: how long this handle's calls wait for a broker that died.
        (``_defaults``, private: settings used only when no broker of this name ever ran,
        as a pool's ``size`` for the cap.)
        ``actor_options`` go to Ray's ``.options()`` of the actor (``resources``,
        ``scheduling_strategy``, ...). Connects to Ray (``ray.init()``) if this process has
        not yet.

        >>> warm = Warm(["git"], 4)
        >>> broker = SandboxBroker.connect(max_sandboxes=16, warm=warm)  # doctest: +SKIP
        """
        if not isinstance(name, str) or not name:
            raise InvalidInputError(f"name must be a non-empty str, got {name!r}")
        given = check_config(config)
        defaults = check_config(_defaults or {})
        if (
            isinstance(broker_wait, bool)
            or not isinstance(broker_wait, int | float)
            or broker_wait < 0
        ):
            raise InvalidInputError(f"broker_wait must be a number >= 0, got {broker_wait!r}")
        refuse_key_in_options(actor_options, "actor_options")
        token = uuid.uuid4().hex
        options: dict[str, Any] = {
            "num_cpus": 0,  # it waits on the network: it must never take a task's CPU
            "max_concurrency": _MAX_CONCURRENCY,
            "max_restarts": -1,  # Ray starts it again when it dies; it adopts its records
            "max_task_retries": 0,  # a call in flight at its death fails: clients ask again
            **(actor_options or {}),
            "name": name,
            "namespace": namespace,
            "lifetime": "detached",
            "get_if_exists": True,
        }
        actor = _broker_class().options(**options).remote(name, namespace, given, token, defaults)
        link = Link(actor, name, namespace, broker_wait)
        live: dict[str, Any] = link.call("config")
        conflicts = {k: v for k, v in given.items() if live.get(k) != v}
        if conflicts:
            raise ConfigurationError(_conflict(name, conflicts, live))
        _warn_if_the_job_carries_the_key()
        return cls(link.actor, name, namespace, float(live["lease_timeout"]), broker_wait)

    def reconfigure(self, **changes: Unpack[BrokerConfig]) -> dict[str, Any]:
        """Change the live broker's settings for every client of the cluster (the broker logs
        it, and keeps it across its restarts); the settings now. A lower cap takes effect as
        leases end (none is taken back); warm kinds given up are released.

        >>> SandboxBroker.connect().reconfigure(max_sandboxes=32)  # doctest: +SKIP
        """
        given = check_config(changes)
        session = self._session()
        live: dict[str, Any] = self._link.call("reconfigure", given, session.holder)
        self.lease_timeout = float(live["lease_timeout"])
        log.warning("sandbox broker %r reconfigured: %s", self.name, describe(given))
        return live

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

    def _wanting(
        self, where: str, server_names: ServerNames, options: AcquireOptions, *, awaited: bool
    ) -> Flow[Acquire]:
        """The acquire ``where``'s keywords ask for, checked, and the broker's key compared
        with this process's (asked of the broker when the fingerprint is not known yet):
        written once for :meth:`_wanted` and :meth:`_wanted_async` (``awaited``)."""
        wanted = resolve_acquire(where, server_names, options)
        if self._fingerprint != wanted.settings.api_key.fingerprint:
            found = yield from self._link.calling("key_fingerprint", awaited=awaited)
            self._check_key(wanted.settings.api_key, found)
        return wanted

    def _wanted(self, where: str, server_names: ServerNames, options: AcquireOptions) -> Acquire:
        return drive(self._wanting(where, server_names, options, awaited=False), perform_act)

    async def _wanted_async(
        self, where: str, server_names: ServerNames, options: AcquireOptions
    ) -> Acquire:
        flow = self._wanting(where, server_names, options, awaited=True)
        return await drive_async(flow, perform_act_async)

    @staticmethod
    def _request(wanted: Acquire, holder: str) -> dict[str, Any]:
        """What the broker is sent for a lease: never the key."""
        request = wanted.request
        names = request.server_names
        return {
            "server_names": names if isinstance(names, str) else list(names),
            "options": {
                "benchmark": request.benchmark,
                "ttl_seconds": request.ttl_seconds,
                "test_account_email": request.test_account_email,
                "timeout": wanted.settings.timeout,
            },
            "base_url": wanted.settings.base_url,
            "holder": holder,
        }

    # ----------------------------------------------------------------- sessions and leases
    def _session(self) -> Session:
        session = session_for(self._link)
        session.ensure()
        return session

    async def _session_async(self) -> Session:
        session = session_for(self._link)
        if not session._opened.is_set():
            await asyncio.to_thread(session.ensure)
        return session

    def _ask(
        self,
        session: Session,
        lease_id: str,
        request: dict[str, Any],
        future: concurrent.futures.Future[Leased],
        *,
        awaited: bool,
    ) -> Flow[Leased | None]:
        """Send the lease's request: its grant when a warm sandbox was there, else None (it
        comes by the session's poll). A broker that does not know the session (it restarted,
        or the session expired) is asked again once the session is open there (which may
        itself ask for this lease: the broker takes a lease once). Written once for
        :meth:`_lease` and :meth:`_lease_async` (``awaited``): the broker's call is the link's
        flow (:meth:`~workflows.ray._session.Link.calling`), the pause an :class:`Act` step
        (``time.sleep``, or ``asyncio.sleep``)."""
        deadline = time.monotonic() + self.broker_wait
        sleep = asyncio.sleep if awaited else time.sleep
        while True:
            try:
                args = session.request_args(lease_id, request)
                leased: Leased | None = yield from self._link.calling(
                    "acquire", *args, awaited=awaited
                )
                return leased
            except _SessionUnknown:
                if future.done() or time.monotonic() > deadline:
                    return None
                session.reopen()
                yield Act(sleep, (0.2,))

    def _lease(
        self, session: Session, request: dict[str, Any], give_up: Callable[[], bool] | None = None
    ) -> Leased:
        """Lease a sandbox (waits for a free slot); ``give_up()``, checked while it waits,
        ends the lease (:class:`LeaseGivenUp`)."""
        lease_id = _lease_id()
        future = session.expect(lease_id, request)
        try:
            asked = self._ask(session, lease_id, request, future, awaited=False)
            leased = drive(asked, perform_act)
            if leased is not None:
                session.granted_now(lease_id, leased)
                return leased
            while True:
                try:
                    return future.result(timeout=0.2 if give_up is not None else 1.0)
                except concurrent.futures.TimeoutError:
                    if give_up is not None and give_up():
                        raise LeaseGivenUp(f"lease {lease_id} was given up") from None
        except BaseException:
            session.release(lease_id, "its holder stopped waiting")  # waiting, or just granted
            raise

    async def _lease_async(self, session: Session, request: dict[str, Any]) -> Leased:
        lease_id = _lease_id()
        future = session.expect(lease_id, request)
        try:
            asked = self._ask(session, lease_id, request, future, awaited=True)
            leased = await drive_async(asked, perform_act_async)
            if leased is not None:
                session.granted_now(lease_id, leased)
                return leased
            return await asyncio.wrap_future(future)
        except BaseException:
            await asyncio.shield(session.release_async(lease_id, "its holder stopped waiting"))
            raise

    @contextlib.contextmanager
    def sandbox(
        self, server_names: ServerNames, **options: Unpack[AcquireOptions]
    ) -> Iterator[LeasedSandbox]:
        """Lease a sandbox from the broker for the ``with`` block; it is released through
        the broker when the block ends, however it ends (and by the broker if this process
        dies). The keywords are :class:`~workflows.AcquireOptions`' (``ledger`` is the
        broker's own). Waits while the cluster's cap is reached. A call on the sandbox after
        the broker ended the lease raises :class:`~workflows.LeaseExpiredError`, saying why.

        >>> with SandboxBroker.connect().sandbox(["filesystem"]) as sb:  # doctest: +SKIP
        ...     sb.seed({"a.txt": "A"})
        """
        leases = leases_of(self, "sandbox", server_names, options, "sandbox")
        sandbox = leases.take()
        try:
            yield sandbox
        finally:
            leases.give_back(sandbox)

    @contextlib.asynccontextmanager
    async def async_sandbox(
        self, server_names: ServerNames, **options: Unpack[AcquireOptions]
    ) -> AsyncIterator[AsyncLeasedSandbox]:
        """:meth:`sandbox`, for asyncio code: ``async with broker.async_sandbox([...]) as sb``
        gives an :class:`~workflows.AsyncLocalSandbox`. The lease is renewed by a thread of
        the process, not by the event loop: a loop blocked for longer than ``lease_timeout``
        keeps it."""
        wanted = await self._wanted_async("async_sandbox", server_names, options)
        leases = Leases(self, wanted, "async_sandbox")
        sandbox = await leases.take_async()
        try:
            try:
                yield sandbox
            finally:
                await sandbox.aclose()
        finally:
            await asyncio.shield(give_back_async(sandbox))

    def held(self) -> list[Lease]:
        """Every lease the broker has now (waiting, acquiring or held), oldest first."""
        leases: list[Lease] = self._link.call("held")
        return leases

    def stats(self) -> BrokerStats:
        """The broker's settings, and its counts since it (this incarnation) started."""
        stats: BrokerStats = self._link.call("stats")
        return stats

    def reap(self, *, everything: bool = False) -> list[str]:
        """Release what is orphaned (see :func:`reap`); the sandbox ids released."""
        released: list[str] = self._link.call("reap", everything)
        return released

    def shutdown(self) -> list[str]:
        """Release everything the broker holds, forget its records, and end it (the next
        :meth:`connect` creates a new one, adopting nothing); the sandbox ids released."""
        try:
            released: list[str] = self._link.call("shutdown", wait=0)
        finally:
            ray.kill(self._link.actor, no_restart=True)
            session_for(self._link).close()
        return released


class Leases:
    """Sandboxes of one kind (``wanted``) leased from ``broker`` under one holder label, each
    turned into the sandbox face of its lease (:func:`~workflows.ray._leased.lent`): the way
    :meth:`SandboxBroker.sandbox`, :meth:`SandboxBroker.async_sandbox` and
    ``RaySandboxPool``'s backend lease (made by :func:`leases_of`, which checks the key once)."""

    def __init__(self, broker: SandboxBroker, wanted: Acquire, label: str) -> None:
        self.broker, self.wanted, self.label = broker, wanted, label

    def take(self, give_up: Callable[[], bool] | None = None) -> LeasedSandbox:
        """Lease a sandbox (waits for a free slot); ``give_up()``, checked while it waits,
        ends the wait (:class:`LeaseGivenUp`)."""
        session = self.broker._session()
        request = self.broker._request(self.wanted, f"{session.holder}:{self.label}")
        leased = self.broker._lease(session, request, give_up)
        return lent(LeasedSandbox, leased, session, self.wanted)

    async def take_async(self) -> AsyncLeasedSandbox:
        """:meth:`take`, awaited (without ``give_up``)."""
        session = await self.broker._session_async()
        request = self.broker._request(self.wanted, f"{session.holder}:{self.label}")
        leased = await self.broker._lease_async(session, request)
        return lent(AsyncLeasedSandbox, leased, session, self.wanted)

    @staticmethod
    def give_back(sandbox: LeasedSandbox, reason: str = "released by its holder") -> bool:
        """End the lease of ``sandbox``; whether this call ended it."""
        return give_back(sandbox, reason)

    def give_back_all(self, sandboxes: list[LeasedSandbox], reason: str) -> list[str]:
        """End the leases of ``sandboxes`` with one call; the sandbox ids the broker released
        (the others were released already)."""
        ids = [lease_id(sandbox) for sandbox in sandboxes]
        session_for(self.broker._link).forget_held(ids)
        released: list[str] = self.broker._link.call("release_many", ids, reason)
        return released


def leases_of(
    broker: SandboxBroker,
    where: str,
    server_names: ServerNames,
    options: AcquireOptions,
    label: str,
) -> Leases:
    """:class:`Leases` of the sandbox ``server_names`` and ``options`` (the keywords of
    ``where``, checked) name, under the holder label ``label``; the broker's key is compared
    with this process's here (:class:`~workflows.ConfigurationError` when they differ)."""
    return Leases(broker, broker._wanted(where, server_names, options), label)


def _conflict(name: str, conflicts: dict[str, Any], live: dict[str, Any]) -> str:
    asked = describe(conflicts)
    running = describe({k: live[k] for k in conflicts})
    return (
        f"the sandbox broker {name!r} runs with {running}, and this call asked for {asked}: "
        "the broker is the cluster's, and every client shares its settings. To change the "
        f"live broker for everyone, call SandboxBroker.connect({name!r}).reconfigure({asked}) "
        "(the broker logs it); to use it as it is, connect without these arguments"
    )


def _warn_if_the_job_carries_the_key() -> None:
    """:func:`~workflows.ray._key.warn_if_the_job_carries_the_key` for this process's job."""
    try:
        context = ray.get_runtime_context()
        job, runtime_env = context.get_job_id(), dict(context.runtime_env)
    except Exception:  # noqa: BLE001 - a Ray without these calls: nothing to check
        return
    warn_if_the_job_carries_the_key(runtime_env, job)


def reap(
    name: str = DEFAULT_BROKER_NAME, *, namespace: str = DEFAULT_NAMESPACE, everything: bool = False
) -> list[str]:
    """Release the sandboxes the broker ``name`` holds for holders that are dead: Ray
    reported their death (the broker has then released them already), or they have not
    renewed their leases for a heartbeat period (``lease_timeout / 3``), or they held leases
    of a broker that died and have not come back to its successor. Live holders' sandboxes
    are left alone. ``everything=True`` releases every lease, live ones included (their
    holders' next call raises :class:`~workflows.LeaseExpiredError`). The sandbox ids
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
    released: list[str] = _wire.send(actor, "reap", everything)
    return released
