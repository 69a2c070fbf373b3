"""The broker's hands: the acquires, resets and releases its book decides, and the dispatch
that decides them (:class:`Grants`, the half of :class:`~workflows.ray._broker.Broker` that
does I/O).

Every change of the book (a request, a release, a death, a finished acquire) ends with
:meth:`Grants.dispatch`, which runs to completion without awaiting: it hands idle warm
sandboxes to waiting leases of their kind, gives free slots to the oldest waiting leases (an
acquire each, as a task), evicts idle warm sandboxes that a waiting lease of another kind needs
the slot of, and refills the warm sandboxes when nobody waits. So the cap is checked and
counted in one place, on one event loop, and never exceeded: a slot is counted before its
acquire is sent and given back only once its sandbox is released (or kept warm).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Coroutine
from typing import Any

from .._async_sandbox import AsyncLocalSandbox
from .._config import resolve_settings
from .._drivers import AsyncDriver
from ._book import Book, Entry, Idle
from ._store import KvLedger, Store, current_lease, encode_handle
from ._types import Leased, Settings, Warm, WarmKey

__all__ = ["Grants"]

log = logging.getLogger("workflows")

_WARM_BACKOFF = 5.0  # seconds before a warm refill is tried again after one failed


class Grants:
    """The I/O half of the broker (see the module): its subclass holds the Ray methods."""

    settings: Settings
    incarnation: int

    def __init__(self, store: Store) -> None:
        self._store = store
        self._book = Book()
        self._ledger = KvLedger(store)
        self._drivers: dict[str, AsyncDriver] = {}
        self._next_send = 0.0
        self._rate: asyncio.Lock | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._evicting = 0
        self._warm_retry_at = 0.0
        self._default_base_url: str | None = None
        self._closing = False  # shut down: no grant, no refill, nothing kept warm
        self._warm_since = time.monotonic()  # warm kinds count as used when configured
        self._last_use: dict[WarmKey, float] = {}  # the last lease asked of each warm kind

    # ----------------------------------------------------------------- helpers
    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` as a task the broker keeps (so it is not collected mid-way)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _driver(self, base_url: str) -> AsyncDriver:
        driver = self._drivers.get(base_url)
        if driver is None:
            driver = self._drivers[base_url] = AsyncDriver(resolve_settings(None, base_url))
        return driver

    def _base_url(self) -> str:
        if self._default_base_url is None:
            self._default_base_url = resolve_settings(None, None).base_url.rstrip("/")
        return self._default_base_url

    def _warm_specs(self) -> dict[WarmKey, Warm]:
        return {spec.key(self._base_url()): spec for spec in self.settings.warm}

    def _unused(self, key: WarmKey, spec: Warm, now: float) -> bool:
        """Whether nobody asked for a lease of this warm kind for ``idle_timeout`` seconds
        (its idle sandboxes are released, and not made again until one is asked for)."""
        return now - max(self._last_use.get(key, 0.0), self._warm_since) > spec.idle_timeout

    async def _pace(self) -> None:
        """Wait until the rate allows one more acquire (one actor: the cluster's rate)."""
        rate = self.settings.max_acquires_per_second
        if not rate:
            return
        if self._rate is None:
            self._rate = asyncio.Lock()
        async with self._rate:  # FIFO: acquires leave in the order they got their slots
            now = time.monotonic()
            wait = self._next_send - now
            self._next_send = max(now, self._next_send) + 1.0 / rate
            if wait > 0:
                await asyncio.sleep(wait)

    def _record(self, sandbox: AsyncLocalSandbox, entry: Entry | None) -> None:
        """Write down (Ray's KV) who holds ``sandbox``: ``entry``'s lease, or nobody (warm)."""
        record: dict[str, Any] = {
            "sandbox_id": sandbox.id,
            "base_url": sandbox.settings.base_url,
            "handle": encode_handle(sandbox.handle()),
            "warm": entry is None,
        }
        if entry is not None:
            record.update(entry.owner(), server_names=entry.server_names, options=entry.options)
        try:
            self._store.put_sandbox(sandbox.id, record)
        except Exception as exc:  # noqa: BLE001 - the lease goes on; only a restart loses it
            log.warning("broker: could not record sandbox %s in Ray's KV: %s", sandbox.id, exc)

    # ----------------------------------------------------------------- dispatch
    def dispatch(self) -> None:
        """Give what is free to what waits (see the module); never awaits."""
        book, cap = self._book, self.settings.max_sandboxes
        now = time.monotonic()
        if self._closing:
            return
        for key, idle in book.idle.items():  # idle warm sandboxes, to leases of their kind
            while idle:
                entry = book.head_of(key)
                if entry is None:
                    break
                self._hand_warm(entry, idle.pop())
        while book.queue:  # free slots, first come first served
            entry = book.head()
            assert entry is not None
            if book.busy < cap:
                book.busy += 1
                book.unqueue(entry)
                entry.state, entry.slot_at = "acquiring", now
                if entry.key in self._warm_specs():
                    book.counts["warm_misses"] += 1
                self._spawn(self._acquire_for(entry))
                continue
            if len(book.queue) > self._evicting and book.idle_total():
                victim = book.oldest_idle()  # the slot of an idle warm sandbox of another kind
                assert victim is not None
                book.drop_idle(victim)
                self._evicting += 1
                self._spawn(self._evict(victim))
            break
        if book.queue or now < self._warm_retry_at:
            return
        for key, spec in self._warm_specs().items():  # warm refills, when nobody waits
            if self._unused(key, spec, now):
                continue
            need = spec.count - book.idle_count(key) - book.warming.get(key, 0)
            while need > 0 and book.busy < cap:
                need -= 1
                book.busy += 1
                book.warming[key] = book.warming.get(key, 0) + 1
                self._spawn(self._warm_one(spec, key))

    def _hand_warm(self, entry: Entry, idle: Idle, *, push: bool = True) -> Leased:
        """Give the idle warm sandbox to ``entry`` (its slot passes with it)."""
        book = self._book
        book.unqueue(entry)
        entry.state, entry.sandbox, entry.warm = "held", idle.sandbox, True
        entry.slot_at = time.monotonic()
        book.counts["warm_hits"] += 1
        self._record(idle.sandbox, entry)
        leased = Leased(entry.lease_id, idle.sandbox.handle(), warm=True)
        book.granted(entry)
        if push:
            self._push(entry, ("granted", entry.lease_id, leased))
        return leased

    def _push(self, entry: Entry, event: tuple[Any, ...]) -> None:
        session = self._book.sessions.get(entry.session_id)
        if session is not None:
            session.push(*event)

    def _free_slot(self) -> None:
        self._book.busy -= 1
        self.dispatch()

    def _slot_after_failure(self, lease_id: str) -> None:
        """A failed acquire's slot: given back, unless the acquire may have made a sandbox
        nobody saw (ambiguous): counted until that is reconciled."""
        if not self._ledger.left_open(lease_id):
            self._free_slot()

    # ----------------------------------------------------------------- acquires
    async def _acquire_for(self, entry: Entry) -> None:
        """Acquire ``entry``'s sandbox (its slot counted), then grant it, or give it back
        when the lease ended meanwhile."""
        book = self._book
        sandbox: AsyncLocalSandbox | None = None
        token = current_lease.set(entry.owner())
        try:
            await self._pace()
            if entry.ended is None:
                book.acquire_times.append(time.time())
                sandbox = await AsyncLocalSandbox.acquire(
                    entry.server_names,  # type: ignore[arg-type]  # checked by acquire
                    _driver=self._driver(entry.base_url),
                    base_url=entry.base_url,
                    progress=False,
                    ledger=self._ledger,
                    **entry.options,
                )
        except Exception as exc:  # noqa: BLE001 - the holder's to see (an ApiError, ...)
            book.entries.pop(entry.lease_id, None)
            if entry.ended is None:
                entry.ended = f"its acquire failed: {type(exc).__name__}"
                book.remember_end(entry, entry.ended)
                self._push(entry, ("failed", entry.lease_id, exc))
            self._slot_after_failure(entry.lease_id)
            return
        except BaseException:
            book.entries.pop(entry.lease_id, None)
            self._slot_after_failure(entry.lease_id)
            raise
        finally:
            current_lease.reset(token)
        if sandbox is None:  # ended before its turn: nothing was sent
            book.entries.pop(entry.lease_id, None)
            self._free_slot()
            return
        book.counts["acquired"] += 1
        entry.sandbox = sandbox
        self._record(sandbox, entry)
        if entry.ended is not None:  # released, or its holder died, while it acquired
            book.entries.pop(entry.lease_id, None)
            await self._give_back(entry.key, sandbox)
            return
        entry.state = "held"
        book.granted(entry)
        self._push(entry, ("granted", entry.lease_id, Leased(entry.lease_id, sandbox.handle())))

    async def _warm_one(self, spec: Warm, key: WarmKey) -> None:
        """Acquire (and seed) one warm sandbox of ``spec``; its slot is counted already."""
        book = self._book
        pseudo = f"warm-{uuid.uuid4().hex[:16]}"  # what its attempt record is filed under
        token = current_lease.set({"lease": pseudo, "warm": True})
        sandbox: AsyncLocalSandbox | None = None
        try:
            await self._pace()
            book.acquire_times.append(time.time())
            sandbox = await AsyncLocalSandbox.acquire(
                spec.server_names,
                _driver=self._driver(key[3]),
                base_url=key[3],
                progress=False,
                ledger=self._ledger,
                **spec.acquire_options(),
            )
            book.counts["acquired"] += 1
            self._record(sandbox, None)
            if spec.template is not None:
                await sandbox.seed(spec.template)
        except Exception as exc:  # noqa: BLE001 - logged; tried again after a pause
            log.warning("broker: could not make a warm sandbox of %s: %s", spec.server_names, exc)
            self._warm_retry_at = time.monotonic() + _WARM_BACKOFF
            book.warming[key] -= 1
            if sandbox is not None:
                await self._release_sandbox(sandbox)
                self._free_slot()
            else:
                self._slot_after_failure(pseudo)
            return
        finally:
            current_lease.reset(token)
        book.warming[key] -= 1
        self._keep_idle(key, sandbox, recorded=True)

    def _keep_idle(self, key: WarmKey, sandbox: AsyncLocalSandbox, *, recorded: bool) -> None:
        """``sandbox`` idle and warm for leases of ``key`` (released instead when closing);
        its record written as a warm one unless it already is (``recorded``)."""
        if self._closing:
            self._spawn(self._release_then_free(sandbox))
            return
        self._book.idle.setdefault(key, []).append(Idle(sandbox, time.monotonic()))
        if not recorded:
            self._record(sandbox, None)
        self.dispatch()

    # ----------------------------------------------------------------- giving back
    async def _give_back(self, key: WarmKey, sandbox: AsyncLocalSandbox) -> None:
        """A lease's sandbox, no longer leased: reset and kept warm when its kind is warm and
        fewer than its count are idle (or a lease of its kind waits), else released; its slot
        is given back once that is done."""
        book = self._book
        spec = self._warm_specs().get(key)
        on_the_way = book.idle_count(key) + book.warming.get(key, 0)
        keep = on_the_way < (spec.count if spec else 0) or book.waiting_of(key) > on_the_way
        if spec is not None and keep and not self._closing:
            book.warming[key] = book.warming.get(key, 0) + 1
            try:
                await sandbox.reset()
                if spec.template is not None:
                    await sandbox.seed(spec.template)
            except Exception as exc:  # noqa: BLE001 - not known to be clean: released
                log.warning("broker: reset of warm sandbox %s failed: %s", sandbox.id, exc)
            else:
                book.warming[key] -= 1
                book.counts["warm_resets"] += 1
                self._keep_idle(key, sandbox, recorded=False)  # a lease's until now
                return
            book.warming[key] -= 1
        await self._release_sandbox(sandbox)
        self._free_slot()

    async def _release_then_free(self, sandbox: AsyncLocalSandbox) -> None:
        try:
            await self._release_sandbox(sandbox)
        finally:
            self._free_slot()

    async def _evict(self, idle: Idle) -> None:
        """Release an idle warm sandbox whose slot a waiting lease of another kind needs."""
        try:
            await self._release_sandbox(idle.sandbox)
        finally:
            self._evicting -= 1
            self._free_slot()

    async def _release_sandbox(self, sandbox: AsyncLocalSandbox) -> bool:
        """Release ``sandbox`` and forget its record; False (logged, record kept for the next
        broker) if the service could not be told."""
        try:
            await sandbox.release()
        except Exception as exc:  # noqa: BLE001 - the record stays: the next broker retries
            log.warning("broker: could not release sandbox %s: %s", sandbox.id, exc)
            return False
        self._book.counts["released"] += 1
        try:
            self._store.delete_sandbox(sandbox.id)
        except Exception as exc:  # noqa: BLE001 - a stale record: the next broker finds it gone
            log.warning("broker: could not delete the record of %s: %s", sandbox.id, exc)
        return True
