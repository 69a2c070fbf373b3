"""A holder process's side of the broker: its :class:`Link` to the broker, and its
:class:`Session`.

The link is the broker's Ray actor handle, found again by name when calls to it fail because
the broker died (Ray restarting it answers ``ActorUnavailableError`` for a few seconds; a
broker killed for good answers ``ActorDiedError`` until the next ``connect()`` makes another):
a call is tried again for up to ``broker_wait`` seconds, then raises
:class:`~workflows.BrokerUnavailableError`, never Ray's own exception. Every broker call is
idempotent (a lease is named by its client), so trying one again is safe.

The session is one per process and broker: a daemon thread that keeps one long poll open to
the broker (:meth:`~workflows.ray._broker.Broker.poll`). The poll brings back the grants,
failures and ends of every lease of the process, and is their heartbeat; it is re-issued as
soon as it returns (at least every ``lease_timeout / 3``). So a lease does not depend on its
holder's event loop: an asyncio loop blocked by a ``time.sleep(15)`` keeps its leases (a
thread renews them), and only a process that stops altogether (SIGSTOP, a hung interpreter)
loses them, ``lease_timeout`` seconds later. Opening the session also gives the broker the
ObjectRef through which Ray reports the process's death (see :mod:`workflows.ray._broker`).
When the broker dies, the thread finds the next one, opens the session there again with the
leases it holds (the new broker hands back those it adopted) and the requests still waiting
(asked again), and sends the releases it could not send meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import ray
import ray.exceptions

from .._drivers import drive, drive_async, perform_act, perform_act_async
from .._errors import BrokerUnavailableError, LeaseExpiredError
from .._steps import Act, Flow
from . import _wire
from ._types import DEFAULT_LEASE_TIMEOUT, Leased

__all__ = ["Link", "Session", "session_for"]

log = logging.getLogger("workflows")

_RETRY_PAUSE = 0.5  # seconds between two tries of a broker that died
_ENDED_KEPT = 10_000


class Link:
    """This process's way to the broker named ``name`` (see the module)."""

    def __init__(self, actor: Any, name: str, namespace: str, broker_wait: float) -> None:
        self.actor, self.name, self.namespace, self.broker_wait = (
            actor,
            name,
            namespace,
            broker_wait,
        )

    def _found_again(self, dead: Any) -> None:
        """Take the broker registered under the name now, if it is another actor."""
        with contextlib.suppress(ValueError):  # none yet: Ray is restarting it, or nobody made one
            found = ray.get_actor(self.name, namespace=self.namespace)
            if found._actor_id != dead._actor_id:
                self.actor = found

    def _unavailable(self, method: str, since: float, exc: BaseException) -> BrokerUnavailableError:
        return BrokerUnavailableError(
            f"the sandbox broker {self.name!r} (Ray namespace {self.namespace!r}) did not answer "
            f"{method}() for {time.monotonic() - since:.0f} s: it died ({type(exc).__name__}) "
            "and no broker of its name came back (Ray restarts a crashed one; a broker killed "
            "for good comes back at the next SandboxBroker.connect(), which adopts what it "
            "leased)"
        )

    def calling(
        self, method: str, *args: Any, awaited: bool, wait: float | None = None
    ) -> Flow[Any]:
        """The flow of a call of ``method`` of the broker, tried again while it is dead (up to
        ``wait``, default ``broker_wait``, seconds). Written once for :meth:`call` and
        :meth:`call_async` (``awaited``), and for the flows of the session and the client
        that call the broker (``yield from``): the send and the pause are :class:`Act` steps
        (``_wire.send`` and ``time.sleep``, or ``_wire.send_async`` and ``asyncio.sleep``;
        ``_wire``'s looked up at each try, as a test that replaces it expects)."""
        started = time.monotonic()
        sleep = asyncio.sleep if awaited else time.sleep
        while True:
            actor = self.actor
            send = _wire.send_async if awaited else _wire.send
            try:
                return (yield Act(send, (actor, method, *args)))
            except ray.exceptions.RayActorError as exc:
                if time.monotonic() - started > (self.broker_wait if wait is None else wait):
                    raise self._unavailable(method, started, exc) from None
                self._found_again(actor)
                yield Act(sleep, (_RETRY_PAUSE,))

    def call(self, method: str, *args: Any, wait: float | None = None) -> Any:
        """Call ``method`` of the broker, trying again while it is dead (see :meth:`calling`)."""
        return drive(self.calling(method, *args, awaited=False, wait=wait), perform_act)

    async def call_async(self, method: str, *args: Any, wait: float | None = None) -> Any:
        """:meth:`call`, awaited (the event loop is never blocked)."""
        flow = self.calling(method, *args, awaited=True, wait=wait)
        return await drive_async(flow, perform_act_async)


class _Done(Exception):
    """The session's thread ends (it holds nothing, its broker was shut down, or this process
    left Ray); the next lease starts another."""


@dataclass
class _Waiting:
    request: dict[str, Any]
    future: Future[Leased]


def _holder_prefix() -> str:
    """Who this process is, in Ray's words: its actor, else its worker, else its job's driver."""
    with contextlib.suppress(Exception):  # outside Ray: the pid alone names it
        context = ray.get_runtime_context()
        actor_id = context.get_actor_id()
        if actor_id:
            return f"actor:{actor_id}"
        if getattr(context, "worker", None) and context.worker.mode == ray.WORKER_MODE:
            return f"worker:{context.get_worker_id()}"
        return f"driver:{context.get_job_id()}"
    return "process"


class Session:
    """This process's session with one broker (see the module)."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.holder = f"{_holder_prefix()}:pid {os.getpid()}"
        self.session_id = f"{self.holder}:{uuid.uuid4().hex[:12]}"
        self.lease_timeout = DEFAULT_LEASE_TIMEOUT
        self._lock = threading.Lock()
        self._waiting: dict[str, _Waiting] = {}
        self._held: dict[str, str] = {}  # lease id -> sandbox id
        self._ended: OrderedDict[str, str] = OrderedDict()  # lease id -> why it ended
        self._to_release: dict[str, str] = {}  # releases the broker could not take yet
        self._ack = 0
        self._opened = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: Any = None  # the ObjectRef Ray reports this process's death through
        self._down_since: float | None = None
        self._key = (link.name, link.namespace, os.getpid())
        self._closing = False
        self._idle_since: float | None = None

    # ----------------------------------------------------------------- the thread
    def _start_locked(self) -> None:
        """Start the thread unless it runs (``self._lock`` held)."""
        if self._thread is None and not self._closing:
            self._opened.clear()
            self._idle_since = None
            self._thread = threading.Thread(
                target=self._run, name=f"sandbox-broker-session-{self.link.name}", daemon=True
            )
            self._thread.start()

    def ensure(self) -> None:
        """Start the thread (if it does not run) and wait until the session is open."""
        with self._lock:
            self._start_locked()
        if not self._opened.wait(self.link.broker_wait + 30):
            raise BrokerUnavailableError(
                f"could not open a session with the sandbox broker {self.link.name!r} within "
                f"{self.link.broker_wait + 30:.0f} s"
            )

    def _run(self) -> None:
        try:
            self._loop()
        except _Done as done:
            log.info("sandbox broker session %s ends: %s", self.session_id, done)

    def reopen(self) -> None:
        """The broker does not know this session: open it again at the thread's next turn
        (its poll, if one is parked, comes back within lease_timeout / 3)."""
        self._opened.clear()

    def close(self) -> None:
        """Stop the thread for good (its broker was shut down), at its next turn."""
        self._closing = True
        with _SESSIONS_LOCK:
            if _SESSIONS.get(self._key) is self:
                del _SESSIONS[self._key]

    def _idle(self) -> bool:
        """Whether this process holds, waits for and owes nothing (``self._lock`` held)."""
        return not (self._held or self._waiting or self._to_release)

    def _retire(self, why: str) -> None:
        """End the thread if still idle (a new lease since starts no thread: this one goes
        on); the next lease starts another. A process with no lease needs no heartbeat, and
        a thread that outlives ``ray.shutdown()`` must not call Ray (Ray ends the process)."""
        with self._lock:
            if not self._idle():
                self._opened.clear()  # the broker may have closed it: open it again
                return
            self._thread = None
            self._opened.clear()
        raise _Done(why)

    def _idle_long(self) -> bool:
        """Idle for ``lease_timeout`` seconds (counted from the first poll it was idle at)."""
        with self._lock:
            if not self._idle():
                self._idle_since = None
                return False
        if self._idle_since is None:
            self._idle_since = time.monotonic()
        return time.monotonic() - self._idle_since > self.lease_timeout

    def _loop(self) -> None:
        pause = _RETRY_PAUSE
        while True:
            if self._closing or not ray.is_initialized():  # shut down, or left Ray
                with self._lock:
                    self._thread = None
                raise _Done("closed" if self._closing else "this process left Ray")
            actor = self.link.actor
            try:
                if not self._opened.is_set():
                    self._open(actor)
                self._poll(actor)
                self._down_since, pause = None, _RETRY_PAUSE
            except ray.exceptions.RayActorError as exc:
                self._broker_down(actor, exc)
                continue
            except Exception as exc:  # noqa: BLE001 - logged; the loop must go on
                log.warning("sandbox broker session %s: %s", self.session_id, exc)
                self._opened.clear()
                time.sleep(pause)
                pause = min(2 * pause, 10.0)
                continue
            if self._idle_long():
                with contextlib.suppress(Exception):  # the broker forgets it (else it expires)
                    _wire.send(actor, "close_session", self.session_id)
                self._idle_since = None
                self._retire("it held nothing for lease_timeout")

    def _broker_down(self, actor: Any, exc: BaseException) -> None:
        """The broker died: look for the next one (ending at once if this process holds
        nothing); fail the waiting leases past broker_wait."""
        self._opened.clear()
        if self._closing:
            raise _Done("closed")
        self._retire("its broker died and it holds nothing")
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = now
            log.warning(
                "sandbox broker %r died (%s): waiting for it", self.link.name, type(exc).__name__
            )
        elif now - self._down_since > self.link.broker_wait:
            # gone for longer than its clients wait: the waiting leases fail, and the releases
            # owed are dropped (a broker that comes later releases what nobody claims back)
            error = self.link._unavailable("poll", self._down_since, exc)
            with self._lock:
                waiting, self._waiting = self._waiting, {}
                dropped, self._to_release = self._to_release, {}
            for item in waiting.values():
                if not item.future.done():
                    item.future.set_exception(error)
            if dropped:
                log.warning(
                    "sandbox broker %r gone for %.0f s: %d release(s) left to the next broker",
                    self.link.name,
                    now - self._down_since,
                    len(dropped),
                )
            self._retire("its broker is gone and it holds nothing")
        if ray.is_initialized():
            self.link._found_again(actor)
        # a block still holds a sandbox of the dead broker: look again, less and less often
        time.sleep(min(_RETRY_PAUSE * 2 ** ((now - self._down_since) // 10), 5.0))

    def _open(self, actor: Any) -> None:
        watch = actor.park.remote(session_id=self.session_id)  # by name: see _wire._call
        with self._lock:
            held = list(self._held)
            waiting = [item.request for item in self._waiting.values()]
            releases, self._to_release = self._to_release, {}
        try:
            if releases:
                for reason in set(releases.values()):
                    ids = [lease for lease, why in releases.items() if why == reason]
                    _wire.send(actor, "release_many", ids, reason)
            answer = _wire.send(
                actor, "open_session", self.session_id, [watch], self.holder, held, waiting
            )
        except BaseException:
            with self._lock:
                self._to_release.update(releases)
            raise
        self._watch, self._ack = watch, 0
        self.lease_timeout = float(answer["lease_timeout"])
        for lease_id, reason in answer["lost"].items():
            self._lease_ended(lease_id, reason)
        self._opened.set()
        log.info(
            "sandbox broker session %s open (incarnation %s)",
            self.session_id,
            answer["incarnation"],
        )

    def _poll(self, actor: Any) -> None:
        answer = _wire.send(actor, "poll", self.session_id, self._ack, self.lease_timeout / 3)
        self.lease_timeout = float(answer["lease_timeout"])
        if answer.get("unknown"):
            self._opened.clear()
            return
        for seq, event in answer["events"]:
            if seq > self._ack:
                self._ack = seq
                self._event(*event)

    def _event(self, kind: str, lease_id: str, payload: Any) -> None:
        with self._lock:
            item = self._waiting.pop(lease_id, None)
        if kind == "granted":
            if item is None or not item.future.set_running_or_notify_cancel():
                self.release(lease_id, "its holder stopped waiting")  # nobody wants it now
                return
            with self._lock:
                self._held[lease_id] = payload.handle.id
            item.future.set_result(payload)
        elif kind == "failed":
            if item is not None and not item.future.done():
                item.future.set_exception(payload)
        elif kind == "ended":
            self._lease_ended(lease_id, str(payload))
            if item is not None and not item.future.done():
                item.future.set_exception(ended_error(lease_id, None, str(payload)))

    def _lease_ended(self, lease_id: str, reason: str) -> None:
        with self._lock:
            self._held.pop(lease_id, None)
            self._ended[lease_id] = reason
            while len(self._ended) > _ENDED_KEPT:
                self._ended.popitem(last=False)

    # ----------------------------------------------------------------- leases
    def expect(self, lease_id: str, request: dict[str, Any]) -> Future[Leased]:
        """Register a lease about to be asked for (its grant may come by the poll)."""
        future: Future[Leased] = Future()
        with self._lock:
            self._waiting[lease_id] = _Waiting({"lease_id": lease_id, **request}, future)
            self._start_locked()  # the thread may have retired since ensure()
        return future

    def granted_now(self, lease_id: str, leased: Leased) -> None:
        """The broker granted the lease in its answer (a warm sandbox)."""
        with self._lock:
            item = self._waiting.pop(lease_id, None)
            self._held[lease_id] = leased.handle.id
        if item is not None and item.future.set_running_or_notify_cancel():
            item.future.set_result(leased)

    def forget_held(self, lease_ids: list[str]) -> None:
        """These leases are released another way (a pool's close): nothing to renew."""
        with self._lock:
            for lease_id in lease_ids:
                self._held.pop(lease_id, None)

    def forget_waiting(self, lease_id: str) -> None:
        with self._lock:
            item = self._waiting.pop(lease_id, None)
        if item is not None:
            item.future.cancel()

    def request_args(self, lease_id: str, request: dict[str, Any]) -> tuple[Any, ...]:
        return (
            self.session_id,
            lease_id,
            request["server_names"],
            request["options"],
            request["base_url"],
            request["holder"],
        )

    def ended_reason(self, lease_id: str) -> str | None:
        """Why the broker ended this lease, as far as this process knows."""
        with self._lock:
            return self._ended.get(lease_id)

    def releasing(self, lease_id: str, reason: str, *, awaited: bool) -> Flow[bool]:
        """End a lease through the broker; a broker that stays unavailable gets it later (the
        session sends it to the next broker), and the flow returns False, never raises.
        Written once for :meth:`release` and :meth:`release_async` (``awaited``)."""
        self.forget_waiting(lease_id)
        with self._lock:
            self._held.pop(lease_id, None)
        try:
            return bool(
                (yield from self.link.calling("release", lease_id, reason, awaited=awaited))
            )
        except BrokerUnavailableError as exc:
            self._defer(lease_id, reason, exc)
            return False

    def release(self, lease_id: str, reason: str = "released by its holder") -> bool:
        """End a lease through the broker (see :meth:`releasing`): whether this ended it."""
        return drive(self.releasing(lease_id, reason, awaited=False), perform_act)

    async def release_async(self, lease_id: str, reason: str = "released by its holder") -> bool:
        """:meth:`release`, awaited."""
        return await drive_async(self.releasing(lease_id, reason, awaited=True), perform_act_async)

    def _defer(self, lease_id: str, reason: str, exc: BaseException) -> None:
        log.warning("lease %s is released when a broker answers again (%s)", lease_id, exc)
        with self._lock:
            self._to_release[lease_id] = reason


def ended_error(lease_id: str, sandbox_id: str | None, reason: str) -> LeaseExpiredError:
    """The error of a lease the broker ended (an infrastructure failure: says why)."""
    what = f"sandbox {sandbox_id} is" if sandbox_id else "the sandbox is"
    return LeaseExpiredError(
        f"{what} no longer this holder's: the broker ended lease {lease_id} ({reason}); what "
        "the episode did in it since is lost, through no fault of its own (an infrastructure "
        "failure)",
        lease_id=lease_id,
        sandbox_id=sandbox_id,
        reason=reason,
    )


_SESSIONS: dict[tuple[str, str, int], Session] = {}
_SESSIONS_LOCK = threading.Lock()


def session_for(link: Link) -> Session:
    """This process's session with the broker of ``link`` (made at first use)."""
    key = (link.name, link.namespace, os.getpid())
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(key)
        if session is None:
            session = _SESSIONS[key] = Session(link)
        elif session.link.actor._actor_id != link.actor._actor_id:
            session.link.actor = link.actor  # the handle just connected to (or unpickled)
        return session
