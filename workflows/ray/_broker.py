"""The broker: one async Ray actor per cluster that holds every sandbox its clients lease.

Why an actor that acquires itself, rather than a counter that workers ask before acquiring:
the lease is in the broker's book *before* the acquire is sent, and the sandbox is held by a
process that outlives the worker that asked for it; the broker's cap
(``max_sandboxes``) and acquire rate (``max_acquires_per_second``) are the cluster's.

How it scales (issue 31): a waiting lease is a line of the book, never a parked call
(:mod:`workflows.ray._book`); each holder *process* has one session, whose single long poll
(:meth:`Broker.poll`, answered at least every ``lease_timeout / 3``) brings back the grants of
all its leases and is the heartbeat of all of them. So the calls parked in the actor are two per
holder process, whatever the leases, and control calls (release, heartbeat, ``held``,
``stats``) always find a free slot of ``max_concurrency``. Rejected: Ray concurrency groups for
the control calls: each group of an async actor runs its own event loop in its own thread
(Ray's docs), so the book would be shared across threads and need locks around every
``await``; with calls that never park, one loop and one default group suffice.

How a dead holder gives its place back at once: when a session opens, its process makes a
call to :meth:`Broker.park` and passes the ObjectRef it owns (inside a list, so Ray does not
resolve it) to :meth:`Broker.open_session`; the broker awaits it. When the process dies (an
actor killed, a worker crashed, its node lost) Ray tells the borrower of an object whose
owner died: ``OwnerDiedError``, measured at about 2 s after ``ray.kill`` or SIGKILL on a
loaded 2-core machine, against ``lease_timeout`` (30 s) for a missed heartbeat. The
session's waiting leases are then dropped (never granted), its sandboxes released, and the
cap recovers; a holder that stops polling without dying (stopped, wedged) loses its leases
``lease_timeout`` seconds after its last poll.

How it survives its own death: every sandbox it holds, and every acquire before it is sent,
is written in the cluster's KV store (:mod:`workflows.ray._store`, which says why there). It
runs with ``max_restarts=-1``; a broker that starts (Ray restarting it, or the next
``connect()`` after it was killed for good) reads those records before answering anything:
it counts every sandbox of them in its cap, keeps each for its holder until the holder's
session comes back (:meth:`Broker.open_session`, within ``lease_timeout``), releases the rest,
and finds by listing the sandbox an interrupted acquire may have made
(:func:`workflows._ownership.orphans`), releasing it.

The state lives in :class:`Broker`, a plain class with async methods; the client
(:mod:`workflows.ray._client`) makes it a named, detached Ray actor. It reads the API key from
its own environment (its machine's, see :mod:`workflows.ray._key`), never from its clients.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

import ray
import ray.exceptions

from .._config import resolve_settings
from .._errors import ConfigurationError, InvalidInputError
from ._book import Entry, Session
from ._recovery import Recovery
from ._store import Store
from ._types import BrokerStats, Lease, Leased, Settings, describe

__all__ = ["Broker"]

log = logging.getLogger("workflows")

_ACQUIRE_KEYS = frozenset({"benchmark", "ttl_seconds", "test_account_email", "timeout"})
"""The acquire keywords a client may send: none of them is secret (no key, no ledger)."""


class Broker(Recovery):
    """The broker's Ray methods (made a Ray actor by the client; see the module)."""

    def __init__(
        self,
        name: str,
        namespace: str,
        given: Mapping[str, Any],
        token: str,
        defaults: Mapping[str, Any] | None = None,
    ) -> None:
        store = Store(name, namespace)
        super().__init__(store)
        self.name = name
        self._token = token
        recorded = store.settings()
        if recorded is None:  # a new name: ``defaults`` (a pool's size as the cap), then given
            self.settings = Settings().updated(defaults or {}).updated(given)
        elif recorded[1] == token:  # Ray restarted this actor: a later reconfigure() stands
            self.settings = recorded[0]
        else:  # made by a new connect(): what it gave, over what the last broker ran with
            self.settings = recorded[0].updated(given)
        store.put_settings(self.settings, token)
        self.incarnation = store.next_incarnation()
        self._inherit()
        self._started = False
        self._parks: dict[str, tuple[asyncio.Event, float]] = {}

    def _start(self) -> None:
        """Made on the actor's event loop, at its first call: the loops, and the adoption of
        what a dead broker of this name left."""
        if self._started:
            return
        self._started = True
        self._spawn(self._expire_loop())
        self._spawn(self.recover())

    # ----------------------------------------------------------------- settings, key
    async def key_fingerprint(self) -> str | None:
        """The fingerprint of the key this broker acquires with; None when it has none."""
        try:
            return resolve_settings().api_key.fingerprint
        except ConfigurationError:
            return None

    async def config(self) -> dict[str, Any]:
        """The broker's settings (cap, rate, lease timeout, warm) and its incarnation."""
        self._start()
        return {**self.settings.as_dict(), "incarnation": self.incarnation}

    async def reconfigure(self, given: Mapping[str, Any], by: str) -> dict[str, Any]:
        """Change settings for every client (logged, kept for the broker's restarts)."""
        self._start()
        before = self.settings.as_dict()
        self.settings = self.settings.updated(given)
        self._warm_since = time.monotonic()
        changed = {k: v for k, v in self.settings.as_dict().items() if before[k] != v}
        self._store.put_settings(self.settings, self._token)
        if changed:
            log.warning(
                "broker %s reconfigured by %s: %s (was %s)",
                self.name,
                by,
                describe(changed),
                describe({k: before[k] for k in changed}),
            )
        keys = self._warm_specs()
        for key in [k for k in self._book.idle if k not in keys]:  # warm kinds given up
            for idle in self._book.idle.pop(key):
                self._spawn(self._release_then_free(idle.sandbox))
        self.dispatch()
        return await self.config()

    # ----------------------------------------------------------------- sessions
    async def park(self, session_id: str) -> None:
        """Held open for the session's process (its ObjectRef is what the broker watches);
        returns when the session closes."""
        event = asyncio.Event()
        self._unpark(session_id)  # a park of before, of the same session: it is replaced
        self._parks[session_id] = (event, time.monotonic())
        await event.wait()

    def _unpark(self, session_id: str) -> None:
        park = self._parks.pop(session_id, None)
        if park is not None:
            park[0].set()

    async def open_session(
        self,
        session_id: str,
        watch: list[Any],
        holder: str,
        held: list[str],
        waiting: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """Open (or open again, after this broker restarted or forgot it) a holder process's
        session: watch its death through ``watch[0]``, hand back the ``held`` leases this
        broker adopted for it, and queue its ``waiting`` requests again. Returns the settings,
        the leases kept and those lost (with why)."""
        self._start()
        await self.recovered.wait()
        book, now = self._book, time.monotonic()
        session = book.sessions.get(session_id)
        if session is None:
            session = book.sessions[session_id] = Session(session_id, holder, now)
        session.attached, session.holder, session.last_seen = True, holder, now
        if watch:
            if session.watch is not None:
                session.watch.cancel()
            session.watch = asyncio.get_running_loop().create_task(self._watch(session, watch[0]))
        kept, lost = [], {}
        for lease_id in held:
            entry = book.entries.get(lease_id)
            if entry is not None and entry.session_id == session_id and entry.state == "held":
                entry.adopted = False
                kept.append(lease_id)
            else:
                reason = book.ended.get(lease_id, ("the broker has no record of it", None))[0]
                lost[lease_id] = reason
        for request in waiting:
            entry = book.entries.get(request["lease_id"])
            if entry is None:
                self._enqueue(session_id, request)
            elif entry.session_id == session_id and entry.state == "held" and entry.adopted:
                entry.adopted = False  # acquired for it just before the last broker died
                assert entry.sandbox is not None
                book.granted(entry)
                session.push(
                    "granted", entry.lease_id, Leased(entry.lease_id, entry.sandbox.handle())
                )
        self.dispatch()
        return {**(await self.config()), "kept": kept, "lost": lost}

    async def _watch(self, session: Session, ref: Any) -> None:
        """Wait for the session's park call; its owner's death ends the session."""
        try:
            await ref
        except ray.exceptions.ObjectLostError as exc:  # OwnerDiedError: its process died
            if self._book.sessions.get(session.session_id) is session:
                self._session_died(session, f"Ray reported its process dead ({type(exc).__name__})")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - not a death: the heartbeat still guards it
            log.info("broker: watching %s ended: %s", session.holder, exc)

    def _session_died(self, session: Session, reason: str) -> None:
        book = self._book
        book.counts["dead_holders"] += 1
        entries = book.of_session(session.session_id)
        log.warning(
            "broker: holder %s died (%s): ending its %d lease(s)",
            session.holder,
            reason,
            len(entries),
        )
        book.counts["dropped"] += sum(e.state == "waiting" for e in entries)
        self._spawn(self._end_all(entries, f"its holder died: {reason}", notify=False))
        self._close(session)

    def _close(self, session: Session) -> None:
        self._book.sessions.pop(session.session_id, None)
        if session.watch is not None:
            session.watch.cancel()
        session.wake.set()
        self._unpark(session.session_id)

    async def close_session(self, session_id: str) -> list[str]:
        """End every lease of a session and forget it (its process is done with the broker);
        the sandbox ids released."""
        self._start()
        session = self._book.sessions.get(session_id)
        released = await self._end_all(
            self._book.of_session(session_id), "its holder closed its session"
        )
        if session is not None:
            self._close(session)
        return released

    async def poll(self, session_id: str, ack: int, wait: float) -> dict[str, Any]:
        """The session's long poll, and the heartbeat of all its leases: its undelivered
        events (grants, failures, leases ended), at once if there are any, else after at most
        ``wait`` seconds (never more than ``lease_timeout / 3``). ``ack``: the last event
        the session received. ``unknown``: the broker does not know the session (it restarted,
        or the session expired): open it again."""
        self._start()
        session = self._book.sessions.get(session_id)
        answer: dict[str, Any] = {
            "incarnation": self.incarnation,
            "lease_timeout": self.settings.lease_timeout,
        }
        if session is None or not session.attached:
            return {**answer, "unknown": True}
        session.ack(ack)
        session.last_seen = time.monotonic()
        if not session.events:
            session.wake.clear()
            session.polls += 1
            try:
                limit = min(wait, self.settings.lease_timeout / 3)
                await asyncio.wait_for(session.wake.wait(), timeout=limit)
            except asyncio.TimeoutError:
                pass
            finally:
                session.polls -= 1
                session.last_seen = time.monotonic()
        return {**answer, "events": sorted(session.events.items())}

    # ----------------------------------------------------------------- leases
    def _enqueue(self, session_id: str, request: Mapping[str, Any]) -> Entry:
        """Queue the lease ``request`` (its ``lease_id``, ``server_names``, ``options``,
        ``base_url`` and ``holder``, as :meth:`acquire` takes them) for the session."""
        lease_id, holder, base_url = request["lease_id"], request["holder"], request["base_url"]
        server_names, options = request["server_names"], request["options"]
        unknown = set(options) - _ACQUIRE_KEYS
        if unknown:
            raise InvalidInputError(f"the broker does not take {sorted(unknown)}")
        names: Any = server_names if isinstance(server_names, str) else tuple(server_names)
        entry = Entry.new((lease_id, session_id, holder), names, options, base_url)
        warm = set(self._warm_specs())
        if entry.key in warm:
            self._last_use[entry.key] = entry.queued
        self._book.enqueue(entry, warm)
        return entry

    async def acquire(
        self,
        session_id: str,
        lease_id: str,
        server_names: Any,
        options: Mapping[str, Any],
        base_url: str,
        holder: str,
    ) -> Leased | None:
        """Ask for a lease under ``lease_id`` (the client's, so that it can end it while it
        waits) for the session's process: queued, first come first served, and granted
        through the session's poll; or, when an idle warm sandbox of its kind is there and no
        lease of its kind waits before it, granted now (the answer is the lease)."""
        self._start()
        await self.recovered.wait()
        book = self._book
        session = book.sessions.get(session_id)
        if session is None or not session.attached:
            raise _SessionUnknown(session_id)
        session.last_seen = time.monotonic()
        if lease_id in book.entries:
            return None  # asked again (a retry after a lost answer): its grant comes by poll
        if lease_id in book.ended:
            raise InvalidInputError(f"lease {lease_id} ended already: {book.ended[lease_id][0]}")
        request = {
            "lease_id": lease_id,
            "server_names": server_names,
            "options": options,
            "base_url": base_url,
            "holder": holder,
        }
        entry = self._enqueue(session_id, request)
        if book.head_of(entry.key) is entry and book.idle_count(entry.key):
            idle = book.take_idle(entry.key)
            assert idle is not None
            return self._hand_warm(entry, idle, push=False)
        self.dispatch()
        return None

    async def _end(self, entry: Entry, reason: str, *, notify: bool = True) -> str | None:
        """End a lease whatever its state (``notify``: tell its holder, whose lease it no
        longer is); the sandbox id given back, if it held one."""
        book = self._book
        if entry.ended is not None:
            return None
        entry.ended = reason
        book.remember_end(entry, reason)
        if notify:
            self._push(entry, ("ended", entry.lease_id, reason))
        if entry.state == "waiting":
            book.unqueue(entry)
            book.entries.pop(entry.lease_id, None)
            return None
        if entry.state == "acquiring":  # its acquire gives it back when it returns
            return None
        book.entries.pop(entry.lease_id, None)
        assert entry.sandbox is not None
        await self._give_back(entry.key, entry.sandbox)
        return entry.sandbox.id

    async def _end_all(
        self, entries: Iterable[Entry], reason: str, *, notify: bool = True
    ) -> list[str]:
        """End these leases together (as :meth:`_end`); the sandbox ids given back."""
        done = await asyncio.gather(*(self._end(e, reason, notify=notify) for e in entries))
        return [sandbox_id for sandbox_id in done if sandbox_id is not None]

    async def release(self, lease_id: str, reason: str = "released by its holder") -> bool:
        """End one lease (its sandbox released, or kept warm); False if it held none."""
        self._start()
        entry = self._book.entries.get(lease_id)
        if entry is None:
            return False
        return await self._end(entry, reason, notify=False) is not None

    async def release_many(self, lease_ids: list[str], reason: str) -> list[str]:
        """End these leases; the sandbox ids given back."""
        self._start()
        entries = [e for e in map(self._book.entries.get, lease_ids) if e is not None]
        return await self._end_all(entries, reason, notify=False)

    async def lease_status(self, lease_id: str) -> tuple[str, str | None]:
        """A lease's state, or ``"ended"`` with why, or ``"unknown"``."""
        self._start()
        entry = self._book.entries.get(lease_id)
        if entry is not None and entry.ended is None:
            return entry.state, None
        if lease_id in self._book.ended:
            return "ended", self._book.ended[lease_id][0]
        return "unknown", None

    async def held(self) -> list[Lease]:
        """Every lease, in the order they were made."""
        self._start()
        book, now_wall, now = self._book, time.time(), time.monotonic()
        out = []
        for entry in book.entries.values():
            session = book.sessions.get(entry.session_id)
            beat = now_wall - (now - session.last_seen) if session is not None else entry.created
            out.append(entry.public(session, beat))
        return out

    async def reap(self, everything: bool = False) -> list[str]:
        """End the leases of holders that are dead (Ray reported it, or no poll for a full
        heartbeat period, ``lease_timeout / 3``, or held for a dead broker and not claimed
        back); with ``everything``, every lease. The sandbox ids given back."""
        self._start()
        await self.recovered.wait()
        book, now = self._book, time.monotonic()
        period = self.settings.lease_timeout / 3
        if everything:
            entries = list(book.entries.values())
            reason = "released by reap(everything=True)"
        else:
            entries = []
            for entry in book.entries.values():
                session = book.sessions.get(entry.session_id)
                if (
                    session is None
                    or not session.attached
                    or (session.polls == 0 and now - session.last_seen > period)
                ):
                    entries.append(entry)
            reason = "released by reap(): its holder is dead"
        return await self._end_all(entries, reason)

    async def shutdown(self) -> list[str]:
        """End every lease and release every sandbox (the warm ones, and those being acquired
        once they are), then forget the records (nothing for a next broker to adopt): the
        sandbox ids released. The client kills the actor next."""
        self._start()
        await self.recovered.wait()
        self._closing = True
        released = await self.reap(everything=True)
        for key in list(self._book.idle):
            for idle in self._book.idle.pop(key):
                if await self._release_sandbox(idle.sandbox):
                    released.append(idle.sandbox.id)
                self._book.busy -= 1
        deadline = time.monotonic() + 120
        while self._book.busy > 0 and time.monotonic() < deadline:  # noqa: ASYNC110 - acquires under way give their slots back
            await asyncio.sleep(0.05)
        self._store.forget()
        return released

    async def stats(self) -> BrokerStats:
        """The broker's settings and counters."""
        self._start()
        book, counts, s = self._book, self._book.counts, self.settings
        return BrokerStats(
            s.max_sandboxes,
            s.max_acquires_per_second,
            s.lease_timeout,
            counts["acquired"],
            counts["released"],
            counts["expired"],
            tuple(book.acquire_times),
            warm=s.warm,
            waiting=len(book.queue),
            held=book.held_count(),
            busy=book.busy,
            sessions=len(book.sessions),
            granted=counts["granted"],
            dead_holders=counts["dead_holders"],
            dropped=counts["dropped"],
            warm_hits=counts["warm_hits"],
            warm_misses=counts["warm_misses"],
            warm_idle=book.idle_total(),
            warm_resets=counts["warm_resets"],
            adopted=counts["adopted"],
            incarnation=self.incarnation,
            grant_seconds=tuple(book.grant_seconds),
            wait_seconds=tuple(book.wait_seconds),
        )

    # ----------------------------------------------------------------- expiry
    async def _expire_loop(self) -> None:
        """For as long as the actor lives, a few times per ``lease_timeout``: end the leases of
        holders that stopped polling, release warm sandboxes idle too long, reconcile
        ambiguous acquires."""
        while True:
            timeout = self.settings.lease_timeout
            await asyncio.sleep(min(timeout / 6, 2.0))
            now = time.monotonic()
            for session in list(self._book.sessions.values()):
                silent = now - session.last_seen
                if session.polls or silent <= timeout:
                    continue
                entries = self._book.of_session(session.session_id)
                if session.attached:
                    why = f"no heartbeat from its holder for {silent:.0f} s"
                else:
                    why = "the broker restarted and its holder did not come back"
                why += f" (lease_timeout {timeout:g} s)"
                if entries:
                    log.warning("broker: leases of %s ended: %s", session.holder, why)
                self._book.counts["expired"] += sum(e.state != "waiting" for e in entries)
                self._spawn(self._end_all(entries, why))
                self._close(session)
            for session_id, (_, since) in list(self._parks.items()):
                if session_id not in self._book.sessions and now - since > timeout:
                    self._unpark(session_id)  # a park whose session never opened
            self._expire_idle(now)
            if self._ledger.ambiguous:
                self._spawn(self.reconcile_ambiguous())

    def _expire_idle(self, now: float) -> None:
        """Release the idle warm sandboxes of kinds nobody leased for their idle_timeout."""
        specs = self._warm_specs()
        for key, idle in self._book.idle.items():
            spec = specs.get(key)
            if spec is not None and not self._unused(key, spec, now):
                continue
            while idle:
                self._spawn(self._release_then_free(idle.pop().sandbox))


class _SessionUnknown(InvalidInputError):
    """The broker does not know this session (it restarted, or the session expired): the
    client opens it again and asks again."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"the broker does not know session {session_id}: open it again")
        self.session_id = session_id

    def __reduce__(self) -> tuple[Any, ...]:
        return (_SessionUnknown, (self.session_id,))
