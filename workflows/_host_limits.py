"""Limits shared by every process of one user on one host: a cap on the sandboxes alive and a
cap on the acquire rate, per (base URL, API key), without a server of their own.

Eight harness processes started by a shell loop each count only their own sandboxes: together
they exceed the account's limit, or its creation rate. With :class:`HostLimits` (a keyword of
every acquire, or ``KLAVIS_HOST_MAX_SANDBOXES`` / ``KLAVIS_HOST_MAX_ACQUIRES_PER_SECOND`` set
once for the loop) every acquire first takes a place under them, in a folder of the user's state
folder (``$KLAVIS_SANDBOX_STATE_DIR``, else the per-user one, where the ledger is):
``host-limits/<digest>/``, mode 0700, the digest a one-way SHA-256 of the base URL and the key's
fingerprint (the key itself is in no file name and no file).

* **The cap** is a counted semaphore of ``max_sandboxes`` slot files: an acquire holds an
  exclusive ``flock`` on a free one (a non-blocking sweep) *before* its request is sent, and
  keeps it while the sandbox lives; ``release()`` (and a failed acquire) gives it back. A process
  that dies, even by SIGKILL, gives back its slots with it: the kernel drops its locks, so
  there is nothing to clean. When every slot is taken the acquire waits, sweeping again with a
  backoff of 10 ms doubling up to 250 ms: interruptible by Ctrl-C (sync face) and by cancelling
  the task (async face, which sleeps on the event loop and never blocks it: each sweep is a few
  non-blocking system calls).
* **The rate** is a file holding the next time an acquire may start, read and moved on under
  an exclusive lock held for microseconds: each acquire reserves ``max(now, next)`` and sets
  next to that plus ``1 / max_acquires_per_second``, then waits until its turn. The turn is
  taken in the acquire's flow just before its request is sent (after its slot and its
  listing, before its ledger line), one per attempt when an acquire is retried. The clock is
  the wall clock, which every process of the host shares; a next time more than a day ahead (a
  clock set back) is ignored.

A slot counts an acquire made with the limits on, from its start to its sandbox's release:
``attach`` and a handle rebuilt in another process take none, and the slot stays with the
process that acquired (a pickle does not carry it): a sandbox released through a handle in
another process keeps its slot here until this process's object is released too (which
gives the slot back even though the service says it was already released) or the process
ends. A pool or a batch waiting for a slot while
it holds idle sandboxes of its own would wait for itself: a pool's worker stops waiting as soon
as one of its pool's sandboxes is idle (:func:`giving_up_when`), and ``bulk_acquire`` refuses a
count over the cap.

What is a library's and what is ours: the slots are ``portalocker``'s ``BoundedSemaphore``
(a well-kept, cross-platform file-locking library without dependencies on POSIX): a counted
semaphore of lock files, each locked without blocking, which is what the kernel gives back
with a dead process. Ours are only the waiting policy (a backoff a pool can end, sleeping on
the event loop for the async face) and the rate file. Looked at and not fit: ``filelock`` and
``fasteners`` lock one file (a mutex, no count); ``posix_ipc``'s named semaphores keep their
count when a holder is SIGKILLed (nothing gives it back); ``sysv_ipc``'s with ``SEM_UNDO`` are
given back at exit, but they are kernel objects no process removes, set up with a race between
creating and initialising the count, from a C extension; ``limits`` keeps its counters in
memory or in a server (Redis, Memcached, MongoDB), and ``pyrate-limiter``'s buckets (SQLite
for several processes) count requests in a window, letting a window's worth through at once,
where an account's creation limit wants them spaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import logging
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ._errors import ConfigurationError, InvalidInputError

if TYPE_CHECKING:  # portalocker is imported where limits are on: `import workflows` stays fast
    import portalocker

    from ._config import Settings
    from ._flows import Flow

__all__ = [
    "HOST_MAX_ACQUIRES_PER_SECOND_ENV",
    "HOST_MAX_SANDBOXES_ENV",
    "HostLimits",
    "HostSlot",
    "SlotWaitAbandoned",
    "acquire_turn",
    "async_host_slot",
    "check_fits",
    "giving_up_when",
    "host_slot",
    "limits_folder",
    "release_all_host_slots",
    "release_host_slot",
    "resolve_host_limits",
]

log = logging.getLogger("workflows")

HOST_MAX_SANDBOXES_ENV = "KLAVIS_HOST_MAX_SANDBOXES"
HOST_MAX_ACQUIRES_PER_SECOND_ENV = "KLAVIS_HOST_MAX_ACQUIRES_PER_SECOND"

_FIRST_DELAY = 0.01
_MAX_DELAY = 0.25
_DAY = 86400.0


@dataclass(frozen=True)
class HostLimits:
    """Limits shared by every process of this user on this host for one base URL and key.

    * ``max_sandboxes``: at most this many sandboxes acquired with these limits alive at once
      (a whole number >= 1; None: no cap). An acquire past it waits for a release.
    * ``max_acquires_per_second``: acquires start at least ``1 / max_acquires_per_second``
      seconds apart (a number > 0; None: no limit).

    Pass it as ``host_limits=`` to any acquire, pool or batch; without it the environment's
    ``KLAVIS_HOST_MAX_SANDBOXES`` and ``KLAVIS_HOST_MAX_ACQUIRES_PER_SECOND`` apply, so a shell
    loop sets them once for all its processes; ``HostLimits()`` turns them off::

        # export KLAVIS_HOST_MAX_SANDBOXES=8
        # for i in $(seq 8); do python harness.py --shard $i & done; wait
        with LocalSandbox.acquire(["git"], host_limits=HostLimits(max_sandboxes=8)) as sb:
            ...
    """

    max_sandboxes: int | None = None
    max_acquires_per_second: float | None = None

    def __post_init__(self) -> None:
        cap = self.max_sandboxes
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise InvalidInputError(
                f"max_sandboxes must be a whole number >= 1 or None, got {cap!r}"
            )
        rate = self.max_acquires_per_second
        if rate is not None and (
            isinstance(rate, bool)
            or not isinstance(rate, int | float)
            or not math.isfinite(rate)
            or rate <= 0
        ):
            raise InvalidInputError(
                f"max_acquires_per_second must be a finite number > 0 or None, got {rate!r}"
            )

    @property
    def active(self) -> bool:
        """Whether any limit is set."""
        return self.max_sandboxes is not None or self.max_acquires_per_second is not None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> HostLimits:
        """The limits ``KLAVIS_HOST_MAX_SANDBOXES`` and ``KLAVIS_HOST_MAX_ACQUIRES_PER_SECOND``
        set (unset or empty: none); ConfigurationError naming the variable when one is bad."""
        env = os.environ if environ is None else environ
        cap_text = env.get(HOST_MAX_SANDBOXES_ENV, "").strip()
        rate_text = env.get(HOST_MAX_ACQUIRES_PER_SECOND_ENV, "").strip()
        cap: int | None = None
        rate: float | None = None
        if cap_text:
            try:
                cap = int(cap_text)
            except ValueError:
                cap = 0
            if cap < 1:
                raise ConfigurationError(
                    f"{HOST_MAX_SANDBOXES_ENV} must be a whole number >= 1, got {cap_text!r}"
                )
        if rate_text:
            try:
                rate = float(rate_text)
            except ValueError:
                rate = math.nan
            if not (math.isfinite(rate) and rate > 0):
                raise ConfigurationError(
                    f"{HOST_MAX_ACQUIRES_PER_SECOND_ENV} must be a finite number > 0, "
                    f"got {rate_text!r}"
                )
        return cls(cap, rate)


def resolve_host_limits(value: object) -> HostLimits | None:
    """The limits an acquire's ``host_limits`` keyword names (None: the environment's), or None
    when none is set."""
    if value is None:
        limits = HostLimits.from_environment()
    elif isinstance(value, HostLimits):
        limits = value
    else:
        raise InvalidInputError(
            f"host_limits must be a workflows.HostLimits or None, got {type(value).__name__}"
        )
    return limits if limits.active else None


def check_fits(count: int, limits: HostLimits | None) -> None:
    """Refuse a batch of ``count`` sandboxes held together that the host's cap cannot hold."""
    if limits is not None and limits.max_sandboxes is not None and count > limits.max_sandboxes:
        raise InvalidInputError(
            f"a batch of {count} sandboxes cannot be held under the host's cap of "
            f"{limits.max_sandboxes} (host_limits, or ${HOST_MAX_SANDBOXES_ENV}): it would wait "
            "for itself; acquire fewer, or raise the cap"
        )


def limits_folder(settings: Settings) -> Path:
    """The folder the processes sharing ``settings``' base URL and key keep their limits in:
    named by a one-way digest, never by the key."""
    from ._ownership import state_folder  # the ownership package imports this module

    digest = hashlib.sha256(
        f"{settings.base_url}\n{settings.api_key.fingerprint}".encode()
    ).hexdigest()[:32]
    root = state_folder() / "host-limits"
    folder = root / digest
    with _cannot_keep_limits(folder):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        for made in (root, folder):
            os.chmod(made, 0o700)
    return folder


@contextlib.contextmanager
def _cannot_keep_limits(where: Path) -> Iterator[None]:
    """An OSError in the limits' folder as a ConfigurationError naming it: limits asked for
    and not kept would be exceeded silently."""
    try:
        yield
    except OSError as exc:
        raise ConfigurationError(
            f"cannot keep the host limits in {where} ({exc.strerror or exc}); make the state "
            f"folder writable or point $KLAVIS_SANDBOX_STATE_DIR at one that is"
        ) from exc


# ----------------------------------------------------------------------- giving up a wait
class SlotWaitAbandoned(Exception):
    """A wait for a slot was given up, as :func:`giving_up_when` asked (nothing was sent)."""


_give_up: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "klavis_host_limits_give_up", default=None
)


@contextlib.contextmanager
def giving_up_when(check: Callable[[], bool]) -> Iterator[None]:
    """Within this block (and the tasks it starts), an acquire waiting for a slot stops,
    raising :class:`SlotWaitAbandoned`, as soon as ``check()`` is true: a pool's worker passes
    "one of my pool's sandboxes is idle, or the pool closed"."""
    token = _give_up.set(check)
    try:
        yield
    finally:
        _give_up.reset(token)


# ----------------------------------------------------------------------- holding a slot
_held: dict[tuple[str, str], HostSlot] = {}
_held_lock = threading.Lock()


class HostSlot:
    """One acquire's place under the host's cap (the lock on its slot file, if capped)."""

    def __init__(self, base_url: str, semaphore: portalocker.BoundedSemaphore | None) -> None:
        self._base_url = base_url
        self._semaphore = semaphore

    def keep(self, sandbox_id: str) -> None:
        """Hold the slot until ``sandbox_id`` is released (:func:`release_host_slot`)."""
        if self._semaphore is not None:
            with _held_lock:
                _held[(self._base_url, sandbox_id)] = self

    def release(self) -> None:
        """Give the slot back (idempotent)."""
        if self._semaphore is not None:
            self._semaphore.release()


def release_host_slot(base_url: str, sandbox_id: str) -> None:
    """The sandbox was released: give back the slot its acquire held, if any."""
    with _held_lock:
        slot = _held.pop((base_url, sandbox_id), None)
    if slot is not None:
        slot.release()


def release_all_host_slots() -> None:
    """Give back every slot this process holds (for tests, through ``_ownership.clear``)."""
    with _held_lock:
        slots = list(_held.values())
        _held.clear()
    for slot in slots:
        slot.release()


def held_slots() -> int:
    """How many slots this process holds (for tests and diagnostics)."""
    with _held_lock:
        return len(_held)


def _entering(
    limits: HostLimits, settings: Settings, give_up: Callable[[], bool] | None
) -> Generator[float, None, HostSlot]:
    """Take a slot under ``limits``' cap: yields the seconds to sleep between tries, returns
    the slot. Closing it mid-way (an interrupt, a cancellation) gives back what it took."""
    slot = HostSlot(settings.base_url, None)
    try:
        if limits.max_sandboxes is not None:
            folder = limits_folder(settings)
            import portalocker

            semaphore = portalocker.BoundedSemaphore(
                limits.max_sandboxes,
                name="slot",
                filename_pattern="{name}.{number:03d}.lock",
                directory=str(folder),
            )
            names = semaphore.get_filenames()
            delay = _FIRST_DELAY
            while not _try_slots(semaphore, names, folder):
                if give_up is not None and give_up():
                    raise SlotWaitAbandoned
                yield delay
                delay = min(delay * 2, _MAX_DELAY)
            slot = HostSlot(settings.base_url, semaphore)
    except BaseException:
        slot.release()
        raise
    return slot


def _try_slots(
    semaphore: portalocker.BoundedSemaphore, names: Sequence[Path], folder: Path
) -> bool:
    with _cannot_keep_limits(folder):
        return semaphore.try_lock(names)


def acquire_turn(limits: HostLimits | None, settings: Settings) -> Flow[None]:
    """Wait for this acquire's turn under ``limits``' rate: a flow step of
    :func:`~workflows._flows.acquire_attempt`, just before its request is sent (after the
    listing it makes first, whose time varies; only its ledger line comes between), so that
    requests, not their preparations, are spaced; each attempt of a retried acquire takes a
    turn of its own. The turn is logged at DEBUG."""
    from ._flows import Sleep  # the flows import the ownership package, which imports this

    if limits is None or limits.max_acquires_per_second is None:
        return
    spacing = 1.0 / limits.max_acquires_per_second
    reserving = _reserve_turn(limits_folder(settings) / "rate", spacing)
    try:
        while True:
            yield Sleep(next(reserving))
    except StopIteration as done:
        turn: float = done.value
    log.debug("acquire turn under the host's rate: %.6f", turn)
    while (left := turn - time.time()) > 0:
        yield Sleep(left)


def _reserve_turn(path: Path, spacing: float) -> Generator[float, None, float]:
    """Reserve the next time an acquire may start, ``spacing`` seconds after the one before."""
    import portalocker

    with _cannot_keep_limits(path):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    with os.fdopen(fd, "r+", encoding="ascii") as handle:
        while True:
            try:
                portalocker.lock(handle, portalocker.LOCK_EX | portalocker.LOCK_NB)
                break
            except portalocker.AlreadyLocked:
                yield 0.001  # held for the microseconds of a read and a write
        try:
            now = time.time()
            try:
                following = float(handle.read().strip() or "0")
            except ValueError:  # a torn or hand-edited file: start afresh
                following = 0.0
            if not math.isfinite(following) or following > now + _DAY:
                following = 0.0
            turn = max(now, following)
            handle.seek(0)
            handle.truncate()
            handle.write(repr(turn + spacing))
            handle.flush()
        finally:
            portalocker.unlock(handle)
    return turn


@contextlib.contextmanager
def host_slot(limits: HostLimits | None, settings: Settings) -> Iterator[HostSlot]:
    """Around one acquire: wait for a slot under ``limits``' cap (None, or no cap: none
    needed), give it back if the block raises; the block calls ``slot.keep(sandbox_id)`` once
    it has the sandbox. (The rate is waited for later, in the acquire's flow.)"""
    if limits is None or limits.max_sandboxes is None:
        yield HostSlot(settings.base_url, None)
        return
    steps = _entering(limits, settings, _give_up.get())
    try:
        while True:
            time.sleep(next(steps))
    except StopIteration as done:
        slot: HostSlot = done.value
    finally:
        steps.close()  # an interrupt during a sleep: give back what was taken
    try:
        yield slot
    except BaseException:
        slot.release()
        raise


@contextlib.asynccontextmanager
async def async_host_slot(limits: HostLimits | None, settings: Settings) -> AsyncIterator[HostSlot]:
    """:func:`host_slot` for the async face: it sleeps on the event loop (each try is a few
    non-blocking system calls), so a cancelled task stops waiting and gives back its slot."""
    if limits is None or limits.max_sandboxes is None:
        yield HostSlot(settings.base_url, None)
        return
    steps = _entering(limits, settings, _give_up.get())
    try:
        while True:  # noqa: ASYNC110 - polls locks of other processes: no event to wait on
            await asyncio.sleep(next(steps))
    except StopIteration as done:
        slot: HostSlot = done.value
    finally:
        steps.close()
    try:
        yield slot
    except BaseException:
        slot.release()
        raise
