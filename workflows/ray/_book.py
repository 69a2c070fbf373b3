"""The broker's book: its sessions (one per holder process), its leases, the queue of waiting
leases, what its cap counts, and its idle warm sandboxes. No I/O: the broker
(:mod:`workflows.ray._broker`) reads and changes it on its one event loop, and does the
acquires and releases it decides.

Why a queue in the book rather than parked calls: a lease that waits is a line of this book,
not a Ray call held open in the actor (the broker of before parked each waiting acquire in one
of the actor's 1,000 concurrent calls: past ~1,000 waiting leases, heartbeats and releases
queued behind them, and leases expired under live holders). A holder's process has one
session, and the session's one long poll (:meth:`Broker.poll`) brings back every grant of
that process: whatever the number of leases, the calls parked in the broker are two per
holder process (its poll, and the call Ray's ownership uses to report its death).

Fair order: the waiting leases are served first come, first served (an ordered dict: taking
the head and dropping any lease are O(1)). A lease of a warm kind may be served out of turn by
an idle warm sandbox of its kind: that takes no slot from the lease at the head.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._async_sandbox import AsyncLocalSandbox
from ._types import Lease, LeaseState, WarmKey, lease_key

__all__ = ["Book", "Entry", "Idle", "Session"]

_ENDED_KEPT = 100_000  # why leases ended, for holders that ask after a 404 (oldest dropped)
_TIMES_KEPT = 10_000  # grant and wait times kept for stats()


@dataclass
class Session:
    """One holder process, as the broker knows it: its leases' heartbeat is its long poll."""

    session_id: str
    holder: str
    last_seen: float  # time.monotonic() of its last poll (its arrival or its answer)
    polls: int = 0  # polls parked now
    events: dict[int, tuple[Any, ...]] = field(default_factory=dict)  # seq -> undelivered
    next_seq: int = 1
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    watch: asyncio.Task[None] | None = None
    attached: bool = True  # False: known only from a dead broker's records, not back yet

    def push(self, *event: Any) -> None:
        """Queue an event for its next poll (and wake a poll that waits)."""
        self.events[self.next_seq] = event
        self.next_seq += 1
        self.wake.set()

    def ack(self, seq: int) -> None:
        """Drop the events its poll says it received (every seq up to ``seq``)."""
        for done in [s for s in self.events if s <= seq]:
            del self.events[done]


@dataclass
class Entry:
    """One lease."""

    lease_id: str
    session_id: str
    holder: str
    server_names: tuple[str, ...] | str
    options: dict[str, Any]
    base_url: str
    key: WarmKey
    created: float  # time.time()
    queued: float  # time.monotonic() of its request
    state: LeaseState = "waiting"
    sandbox: AsyncLocalSandbox | None = None
    ended: str | None = None  # why it ended, once it did
    adopted: bool = False  # taken over from a dead broker, its holder not back yet
    slot_at: float = 0.0  # time.monotonic() at which it took its slot (or warm sandbox)
    warm: bool = False  # its sandbox was an idle warm one

    @classmethod
    def new(
        cls,
        ids: tuple[str, str, str],
        names: Any,
        options: Mapping[str, Any],
        base_url: str,
        **state: Any,
    ) -> Entry:
        """A lease (``ids``: its lease id, session id and holder) of ``names`` with ``options``
        at ``base_url``, created and queued now, its warm key made here: the one way the
        broker's enqueue and its recovery (an adopted lease) make an entry."""
        key = lease_key(names, options, base_url)
        return cls(
            *ids, names, dict(options), base_url, key, time.time(), time.monotonic(), **state
        )

    def owner(self) -> dict[str, str]:
        """Who holds this lease, as its acquire's attempts and its sandbox's record in Ray's KV
        name it: lease id, session id and holder."""
        return {"lease": self.lease_id, "session": self.session_id, "holder": self.holder}

    def public(self, session: Session | None, beat: float) -> Lease:
        return Lease(
            self.lease_id,
            self.holder,
            self.state,
            self.server_names if isinstance(self.server_names, tuple) else (self.server_names,),
            self.base_url,
            None if self.sandbox is None else self.sandbox.id,
            self.created,
            beat,
            self.session_id,
            self.adopted,
        )


@dataclass
class Idle:
    """A warm sandbox nobody leases, since ``since`` (time.monotonic())."""

    sandbox: AsyncLocalSandbox
    since: float


class Book:
    """Sessions, leases, the queue, the cap's count and the warm sandboxes (see the module)."""

    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}
        self.entries: dict[str, Entry] = {}
        self.queue: OrderedDict[str, None] = OrderedDict()  # waiting leases, oldest first
        self.by_key: dict[WarmKey, OrderedDict[str, None]] = {}  # the same, by warm kind
        self.busy = 0  # what the cap counts: acquiring, held, idle warm, warming, unreconciled
        self.idle: dict[WarmKey, list[Idle]] = {}
        self.warming: dict[WarmKey, int] = {}  # warm acquires and resets under way
        self.ended: OrderedDict[str, tuple[str, str | None]] = OrderedDict()
        self.counts = dict.fromkeys(
            (
                "acquired",
                "released",
                "expired",
                "granted",
                "dead_holders",
                "dropped",
                "warm_hits",
                "warm_misses",
                "warm_resets",
                "adopted",
            ),
            0,
        )
        self.acquire_times: deque[float] = deque(maxlen=1000)
        self.grant_seconds: deque[float] = deque(maxlen=_TIMES_KEPT)
        self.wait_seconds: deque[float] = deque(maxlen=_TIMES_KEPT)

    # ----------------------------------------------------------------- waiting leases
    def enqueue(self, entry: Entry, warm_keys: set[WarmKey]) -> None:
        self.entries[entry.lease_id] = entry
        self.queue[entry.lease_id] = None
        if entry.key in warm_keys:
            self.by_key.setdefault(entry.key, OrderedDict())[entry.lease_id] = None

    def unqueue(self, entry: Entry) -> None:
        """Take ``entry`` out of the queues (it got a slot, a warm sandbox, or ended)."""
        self.queue.pop(entry.lease_id, None)
        waiting = self.by_key.get(entry.key)
        if waiting is not None:
            waiting.pop(entry.lease_id, None)

    def head(self) -> Entry | None:
        """The oldest waiting lease."""
        for lease_id in self.queue:
            return self.entries[lease_id]
        return None

    def head_of(self, key: WarmKey) -> Entry | None:
        """The oldest waiting lease of a warm kind."""
        for lease_id in self.by_key.get(key, ()):
            return self.entries[lease_id]
        return None

    def waiting_of(self, key: WarmKey) -> int:
        return len(self.by_key.get(key, ()))

    # ----------------------------------------------------------------- warm sandboxes
    def idle_count(self, key: WarmKey) -> int:
        return len(self.idle.get(key, ()))

    def take_idle(self, key: WarmKey) -> Idle | None:
        """The most recently idle warm sandbox of ``key`` (its slot passes to the lease)."""
        idle = self.idle.get(key)
        return idle.pop() if idle else None

    def oldest_idle(self) -> Idle | None:
        """The warm sandbox idle the longest, of any kind (the first to evict)."""
        found: Idle | None = None
        for idle in self.idle.values():
            if idle and (found is None or idle[0].since < found.since):
                found = idle[0]
        return found

    def drop_idle(self, idle: Idle) -> None:
        for items in self.idle.values():
            if idle in items:
                items.remove(idle)
                return

    def idle_total(self) -> int:
        return sum(len(items) for items in self.idle.values())

    # ----------------------------------------------------------------- ended leases
    def remember_end(self, entry: Entry, reason: str) -> None:
        """Keep why ``entry`` ended, for a holder that asks (its sandbox answered 404)."""
        sandbox_id = None if entry.sandbox is None else entry.sandbox.id
        self.ended[entry.lease_id] = (reason, sandbox_id)
        while len(self.ended) > _ENDED_KEPT:
            self.ended.popitem(last=False)

    def of_session(self, session_id: str) -> list[Entry]:
        return [e for e in self.entries.values() if e.session_id == session_id]

    def held_count(self) -> int:
        return sum(1 for e in self.entries.values() if e.state == "held")

    def granted(self, entry: Entry) -> None:
        """Count a grant: its time from the slot it took, and from its request."""
        now = time.monotonic()
        self.counts["granted"] += 1
        self.grant_seconds.append(now - (entry.slot_at or now))
        self.wait_seconds.append(now - entry.queued)
