"""What a broker does when it starts where another of its name died: it adopts.

At its start (``__init__``, before any call is answered) it reads the dead broker's records
from Ray's KV (:mod:`workflows.ray._store`) and counts every one of them in its cap: the
sandboxes the dead one held, and the acquires it had sent without seeing their answer. Then,
on its event loop (:meth:`Recovery.recover`, which every lease call waits for):

* each sandbox held for a lease is adopted: kept under its lease and holder, *not* released,
  until the holder's session comes back (:meth:`Broker.open_session`) and is handed it back;
  a holder that does not come back within ``lease_timeout`` loses it (the expiry loop
  releases it, saying why to a holder that asks later);
* each warm sandbox (idle, nobody's) is released: the new broker makes its own;
* each interrupted acquire is reconciled as the library reconciles an ambiguous acquire: the
  key's sandboxes are listed, and the one the attempt most likely made (not known before it,
  the servers it asked for, created around its time: :func:`workflows._ownership.orphans`)
  is released. Until it is, its slot stays counted.

So across a broker's death and restart the service never holds more than the cap: what the
dead one held is counted by the new one before the new one acquires anything.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .._async_sandbox import AsyncLocalSandbox
from .._errors import NotFoundError
from .._ownership import AcquireAttempt, orphans
from ._book import Entry, Session
from ._grants import Grants
from ._store import decode_handle

__all__ = ["Recovery"]

log = logging.getLogger("workflows")


def _attempt(attempt: str, record: dict[str, Any]) -> AcquireAttempt:
    servers, known = record.get("servers"), record.get("known")
    benchmark = record.get("benchmark")
    return AcquireAttempt(
        attempt=attempt,
        base_url=str(record.get("base_url", "")),
        key=str(record.get("key", "")),
        servers=tuple(str(s) for s in servers) if isinstance(servers, list) else (),
        benchmark=benchmark if isinstance(benchmark, str) else None,
        known=frozenset(str(k) for k in known) if isinstance(known, list) else frozenset(),
        pid=0,
        time=str(record.get("time", "")),
        ended=True,
    )


class Recovery(Grants):
    """The adoption of a dead broker's leases (see the module); the broker's base."""

    def _inherit(self) -> None:
        """Read the dead broker's records and count them in the cap (at the start)."""
        self.recovered = asyncio.Event()
        self._inherited = list(self._store.records("s"))
        self._interrupted = list(self._store.records("a"))
        self._book.busy += len(self._inherited) + len(self._interrupted)
        if self._inherited or self._interrupted:
            log.warning(
                "broker: adopting %d sandbox(es) and %d interrupted acquire(s) of the broker "
                "that ran before it",
                len(self._inherited),
                len(self._interrupted),
            )

    async def recover(self) -> None:
        """Adopt the dead broker's sandboxes, then reconcile its interrupted acquires; lease
        calls wait for the first part only."""
        try:
            for sandbox_id, record in self._inherited:
                try:
                    await self._adopt(sandbox_id, record)
                except Exception as exc:  # noqa: BLE001 - counted still: never over the cap
                    log.warning("broker: could not adopt sandbox %s: %s", sandbox_id, exc)
        finally:
            self._inherited = []
            self.recovered.set()
            self.dispatch()
        interrupted, self._interrupted = self._interrupted, []
        await self._reconcile(interrupted)

    async def _adopt(self, sandbox_id: str, record: dict[str, Any]) -> None:
        book = self._book
        base_url = str(record.get("base_url") or self._base_url())
        handle = decode_handle(record.get("handle"))
        if handle is not None:
            sandbox = AsyncLocalSandbox.from_handle(handle, base_url=base_url, progress=False)
        else:
            try:
                sandbox = await AsyncLocalSandbox.attach(
                    sandbox_id, base_url=base_url, progress=False
                )
            except NotFoundError:  # released (or expired) before its record was deleted
                self._store.delete_sandbox(sandbox_id)
                self._free_slot()
                return
        book.counts["adopted"] += 1
        lease_id, session_id = record.get("lease"), record.get("session")
        if record.get("warm") or not isinstance(lease_id, str) or not isinstance(session_id, str):
            self._spawn(self._release_then_free(sandbox))
            return
        names: Any = record.get("server_names") or tuple(s.name for s in sandbox.servers)
        names = names if isinstance(names, str) else tuple(names)
        options = record.get("options") if isinstance(record.get("options"), dict) else {}
        holder = str(record.get("holder") or session_id)
        entry = Entry.new(
            (lease_id, session_id, holder),
            names,
            options or {},
            base_url,
            state="held",
            sandbox=sandbox,
            adopted=True,
        )
        book.entries[lease_id] = entry
        if session_id not in book.sessions:
            book.sessions[session_id] = Session(session_id, holder, entry.queued, attached=False)

    async def _reconcile(self, attempts: list[tuple[str, dict[str, Any]]]) -> None:
        """Release what interrupted (or ambiguous) acquires made; their slots are counted
        until then (kept counted, and tried again later, when the listing fails)."""
        by_url: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for attempt, record in attempts:
            by_url.setdefault(str(record.get("base_url") or self._base_url()), []).append(
                (attempt, record)
            )
        for base_url, items in by_url.items():
            try:
                listed = await AsyncLocalSandbox.list(base_url=base_url)
            except Exception as exc:  # noqa: BLE001 - counted still; tried again later
                log.warning("broker: could not list sandboxes to reconcile: %s", exc)
                self._ledger.ambiguous.update(attempt for attempt, _ in items)
                continue
            known = {e.sandbox.id for e in self._book.entries.values() if e.sandbox is not None}
            known |= {i.sandbox.id for idle in self._book.idle.values() for i in idle}
            pairs = orphans([_attempt(a, r) for a, r in items], listed, known)
            for found, info in pairs:
                if info is not None:
                    log.warning(
                        "broker: an interrupted acquire made sandbox %s: releasing it", info.id
                    )
                    try:
                        orphan = await AsyncLocalSandbox.attach(info.id, base_url=base_url)
                        await orphan.release()
                    except NotFoundError:
                        pass
                    except Exception as exc:  # noqa: BLE001 - counted still; tried again later
                        log.warning("broker: could not release orphan %s: %s", info.id, exc)
                        self._ledger.ambiguous.add(found.attempt)
                        continue
                self._store.delete_attempt(found.attempt)
                self._free_slot()

    async def reconcile_ambiguous(self) -> None:
        """Reconcile the acquires of this broker that ended ambiguously (their slots counted)."""
        pending, self._ledger.ambiguous = self._ledger.ambiguous, set()
        records = dict(self._store.records("a"))
        found = [(a, records[a]) for a in pending if a in records]
        for attempt in pending - set(records):  # its record is gone: nothing left to find
            log.info("broker: attempt %s has no record left", attempt)
            self._free_slot()
        await self._reconcile(found)
