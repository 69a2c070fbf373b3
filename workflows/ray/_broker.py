"""The broker: one async Ray actor per cluster that holds every sandbox its clients lease.

Why an actor that acquires itself, rather than a counter that workers ask before acquiring:
the lease is in the broker's table *before* the acquire is sent, and the sandbox is held by a
process that outlives the worker that asked for it. A worker that dies (``ray.kill``, SIGKILL,
a node lost), at any moment, mid-acquire included, stops renewing its leases; the broker's own
loop releases them after ``lease_timeout`` seconds. Nothing depends on the dead process
running a ``finally``.

The broker is one process for the whole cluster, so its cap (``max_sandboxes``) and its
acquire rate (``max_acquires_per_second``, a minimum interval between two acquires sent) are
the cluster's. It reads the API key from its own environment (its machine's: never a
``runtime_env``, see :mod:`workflows.ray._key`), never from its clients: no argument of a
call, and nothing it returns, holds the key. Clients compare key fingerprints
(:attr:`~workflows.ApiKey.fingerprint`) to refuse a broker that would acquire with another key,
or with none.

The state lives in this module's :class:`Broker`, a plain class with async methods; the client
(:mod:`workflows.ray._client`) makes it a named, detached Ray actor.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._async_sandbox import AsyncLocalSandbox
from .._config import resolve_settings
from .._drivers import AsyncDriver
from .._errors import ConfigurationError, InvalidInputError
from .._handle import SandboxHandle

__all__ = ["Broker", "BrokerStats", "Lease", "LeaseEnded", "LeaseState", "Leased"]

log = logging.getLogger("workflows")

LeaseState = Literal["waiting", "acquiring", "held"]
"""Where a lease is: waiting for a free slot, its acquire sent, or its sandbox held."""


class LeaseEnded(InvalidInputError):
    """An acquire whose lease was ended (released, or expired) before it returned."""


@dataclass(frozen=True)
class Lease:
    """One lease of the broker, as :meth:`~workflows.ray.SandboxBroker.held` lists it.

    ``holder`` is the string its client gave (a Ray worker or actor id, a pool's token);
    ``sandbox_id`` is None until the acquire returned; ``last_heartbeat`` and ``created`` are
    Unix times (``time.time()``) on the broker's machine.
    """

    lease_id: str
    holder: str
    state: LeaseState
    server_names: tuple[str, ...]
    base_url: str
    sandbox_id: str | None
    created: float
    last_heartbeat: float


@dataclass(frozen=True)
class BrokerStats:
    """What a broker was set up with, and what it did since it started.

    ``acquire_times``: the Unix times at which its latest acquires (up to 1000) were sent, in
    order; ``expired``: leases it released because their holder stopped renewing them.
    """

    max_sandboxes: int
    max_acquires_per_second: float | None
    lease_timeout: float
    acquired: int
    released: int
    expired: int
    acquire_times: tuple[float, ...]


@dataclass(frozen=True)
class Leased:
    """What a client gets for a granted lease: its id and the sandbox's handle."""

    lease_id: str
    handle: SandboxHandle


@dataclass
class _Entry:
    lease_id: str
    holder: str
    server_names: tuple[str, ...]
    base_url: str
    created: float
    beat: float  # time.monotonic() of the last heartbeat
    beat_wall: float  # time.time() of it, for held()
    state: LeaseState = "waiting"
    cancelled: bool = False
    sandbox: AsyncLocalSandbox | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)  # set once it holds no slot

    def public(self) -> Lease:
        return Lease(
            self.lease_id,
            self.holder,
            self.state,
            self.server_names,
            self.base_url,
            None if self.sandbox is None else self.sandbox.id,
            self.created,
            self.beat_wall,
        )


_ACQUIRE_KEYS = frozenset({"benchmark", "ttl_seconds", "test_account_email", "timeout"})
"""The acquire keywords a client may send: none of them is secret (no key, no ledger)."""


class Broker:
    """The broker's state and methods (made a Ray actor by the client; see the module)."""

    def __init__(
        self, max_sandboxes: int, max_acquires_per_second: float | None, lease_timeout: float
    ) -> None:
        if isinstance(max_sandboxes, bool) or not isinstance(max_sandboxes, int):
            raise InvalidInputError(f"max_sandboxes must be an int, got {max_sandboxes!r}")
        if max_sandboxes < 1:
            raise InvalidInputError(f"max_sandboxes must be at least 1, got {max_sandboxes}")
        self.max_sandboxes = max_sandboxes
        self.max_acquires_per_second = max_acquires_per_second
        self.lease_timeout = float(lease_timeout)
        self._interval = 0.0 if not max_acquires_per_second else 1.0 / max_acquires_per_second
        self._leases: dict[str, _Entry] = {}
        self._busy = 0  # leases acquiring or held: what the cap counts
        self._next_send = 0.0
        self._acquire_times: deque[float] = deque(maxlen=1000)
        self._counts = {"acquired": 0, "released": 0, "expired": 0}
        self._drivers: dict[str, AsyncDriver] = {}
        self._started = False
        self._slots: asyncio.Condition
        self._rate: asyncio.Lock
        self._reaper: asyncio.Task[None]

    def _start(self) -> None:
        """Made on the actor's event loop, at its first call."""
        if self._started:
            return
        self._started = True
        self._slots = asyncio.Condition()
        self._rate = asyncio.Lock()
        self._reaper = asyncio.get_running_loop().create_task(self._expire_loop())

    # ----------------------------------------------------------------- the key
    async def key_fingerprint(self) -> str | None:
        """The fingerprint of the key this broker acquires with; None when it has none."""
        try:
            return resolve_settings().api_key.fingerprint
        except ConfigurationError:
            return None

    async def config(self) -> dict[str, Any]:
        """The broker's cap, rate and lease timeout."""
        return {
            "max_sandboxes": self.max_sandboxes,
            "max_acquires_per_second": self.max_acquires_per_second,
            "lease_timeout": self.lease_timeout,
        }

    # ----------------------------------------------------------------- leases
    async def acquire(
        self,
        holder: str,
        lease_id: str,
        server_names: list[str],
        options: Mapping[str, Any],
        base_url: str,
    ) -> Leased:
        """Lease a sandbox for ``holder`` under ``lease_id`` (the client's, so that it can end
        the lease while it waits): wait for a free slot (never past the cap), respect the
        acquire rate, acquire it with this process's key, and return its handle."""
        self._start()
        unknown = set(options) - _ACQUIRE_KEYS
        if unknown:
            raise InvalidInputError(f"the broker does not take {sorted(unknown)}")
        if lease_id in self._leases:
            raise InvalidInputError(f"lease {lease_id} exists already")
        now = time.monotonic()
        entry = _Entry(
            lease_id,
            holder,
            tuple(server_names),
            base_url,
            time.time(),
            now,
            time.time(),
        )
        self._leases[entry.lease_id] = entry  # recorded before anything is sent
        try:
            async with self._slots:
                await self._slots.wait_for(
                    lambda: entry.cancelled or self._busy < self.max_sandboxes
                )
                if entry.cancelled:
                    raise LeaseEnded(f"lease {entry.lease_id} was released while waiting")
                self._busy += 1
                entry.state = "acquiring"
        except BaseException:
            self._leases.pop(entry.lease_id, None)
            entry.done.set()
            raise
        try:
            await self._pace()
            if entry.cancelled:  # ended while it waited for its turn: nothing to acquire
                raise LeaseEnded(f"lease {entry.lease_id} was released before its acquire")
            self._acquire_times.append(time.time())
            sandbox = await AsyncLocalSandbox.acquire(
                server_names,  # type: ignore[arg-type]  # checked by acquire itself
                _driver=self._driver(base_url),
                base_url=base_url,
                progress=False,
                **options,
            )
        except BaseException:
            await self._free(entry)
            raise
        entry.sandbox = sandbox
        entry.state = "held"
        self._counts["acquired"] += 1
        if entry.cancelled:  # released (or expired) while acquiring: nobody will use it
            await self._free(entry)
            raise LeaseEnded(f"lease {entry.lease_id} was released while acquiring")
        return Leased(entry.lease_id, sandbox.handle())

    def _driver(self, base_url: str) -> AsyncDriver:
        driver = self._drivers.get(base_url)
        if driver is None:
            driver = self._drivers[base_url] = AsyncDriver(resolve_settings(None, base_url))
        return driver

    async def _pace(self) -> None:
        """Wait until the rate allows one more acquire (one actor: the cluster's rate)."""
        if not self._interval:
            return
        async with self._rate:
            now = time.monotonic()
            wait = self._next_send - now
            self._next_send = max(now, self._next_send) + self._interval
            if wait > 0:
                await asyncio.sleep(wait)

    async def _free(self, entry: _Entry) -> bool:
        """Release ``entry``'s sandbox (if any) and its slot; True if a sandbox was released."""
        self._leases.pop(entry.lease_id, None)
        released = False
        try:
            if entry.sandbox is not None and not entry.sandbox.released:
                try:
                    released = await entry.sandbox.release()
                    self._counts["released"] += 1
                except Exception as exc:  # noqa: BLE001 - the ledger keeps it for reap
                    log.warning("broker: could not release sandbox %s: %s", entry.sandbox.id, exc)
        finally:
            if entry.state != "waiting" and not entry.done.is_set():
                async with self._slots:
                    self._busy -= 1
                    self._slots.notify_all()
            entry.done.set()
        return released

    async def _end(self, entry: _Entry) -> str | None:
        """End a lease whatever its state; the sandbox id it released, if any (None also
        when another call is ending it: this one waits for that)."""
        if entry.cancelled:
            await entry.done.wait()
            return None
        entry.cancelled = True
        if entry.state == "held":
            sandbox_id = entry.sandbox.id if entry.sandbox is not None else None
            await self._free(entry)
            return sandbox_id
        if entry.state == "waiting":
            async with self._slots:
                self._slots.notify_all()  # its waiter sees it cancelled and leaves
        # acquiring: the acquire releases it when it returns; wait for that
        await entry.done.wait()
        return None

    async def release(self, lease_id: str) -> bool:
        """End one lease (its sandbox released at once); False if it was not held."""
        self._start()
        entry = self._leases.get(lease_id)
        if entry is None:
            return False
        return await self._end(entry) is not None

    async def release_holder(self, holder: str) -> list[str]:
        """End every lease of ``holder``; the sandbox ids released."""
        self._start()
        entries = [e for e in self._leases.values() if e.holder == holder]
        done = await asyncio.gather(*(self._end(e) for e in entries))
        return [sandbox_id for sandbox_id in done if sandbox_id is not None]

    async def heartbeat(self, holder: str) -> int:
        """Renew every lease of ``holder``; how many it has."""
        self._start()
        now, wall, count = time.monotonic(), time.time(), 0
        for entry in self._leases.values():
            if entry.holder == holder:
                entry.beat, entry.beat_wall = now, wall
                count += 1
        return count

    async def held(self) -> list[Lease]:
        """Every lease, in the order they were made."""
        self._start()
        return [entry.public() for entry in self._leases.values()]

    async def reap(self) -> list[str]:
        """End every lease; the sandbox ids released."""
        self._start()
        entries = list(self._leases.values())
        done = await asyncio.gather(*(self._end(e) for e in entries))
        return [sandbox_id for sandbox_id in done if sandbox_id is not None]

    async def stats(self) -> BrokerStats:
        """The broker's settings and counters."""
        self._start()
        return BrokerStats(
            self.max_sandboxes,
            self.max_acquires_per_second,
            self.lease_timeout,
            self._counts["acquired"],
            self._counts["released"],
            self._counts["expired"],
            tuple(self._acquire_times),
        )

    async def _expire_loop(self) -> None:
        """Release the leases whose holder stopped renewing them, for as long as the actor
        lives (checked four times per ``lease_timeout``)."""
        while True:
            await asyncio.sleep(self.lease_timeout / 4)
            now = time.monotonic()
            stale = [e for e in self._leases.values() if now - e.beat > self.lease_timeout]
            for entry in stale:
                log.warning(
                    "broker: lease %s of %s not renewed for %.0f s: releasing it",
                    entry.lease_id,
                    entry.holder,
                    now - entry.beat,
                )
                self._counts["expired"] += 1
                asyncio.get_running_loop().create_task(self._end(entry))
