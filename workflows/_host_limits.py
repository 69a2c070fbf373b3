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
* **The rate** is a file of the turns reserved, read and rewritten under an exclusive lock held
  for microseconds: each acquire reserves the earliest time from now on that is
  ``1 / max_acquires_per_second`` away from every turn kept, then waits until it. The turn is
  taken in the acquire's flow just before its request is sent (after its slot and its
  listing, before its ledger line), one per attempt when an acquire is retried. The clock is
  the wall clock, which every process of the host shares. A wait that is interrupted gives
  its turn back; a turn further ahead than the rate allows (written before the clock was set
  back) is ignored; a wait longer than a few turns is logged at WARNING with its reason (the
  rules: :mod:`workflows._host_limits_turns`).
* **The folder and its files** are opened relative to the state folder, never through a
  link, and checked (owner, mode, a regular file): another user who can write where the
  state folder is cannot turn these writes onto a file of theirs choosing, nor hang an acquire
  on a FIFO (:mod:`workflows._host_limits_files`).

A slot counts an acquire made with the limits on, from its start to its sandbox's release:
``attach`` and a handle rebuilt in another process take none, and the slot stays with the
process that acquired (a pickle does not carry it): a sandbox released through a handle in
another process keeps its slot here until this process's object is released too (which
gives the slot back even though the service says it was already released) or the process
ends. A pool or a batch waiting for a slot while
it holds idle sandboxes of its own would wait for itself: a pool's worker stops waiting as soon
as one of its pool's sandboxes is idle (:func:`giving_up_when`), and ``bulk_acquire`` refuses a
count over the cap.

What is a library's and what is ours: the slots are a counted semaphore of lock files, each
locked with ``flock`` without blocking, which is what the kernel gives back with a dead
process. The first version took it from ``portalocker``'s ``BoundedSemaphore``, which opens
its lock files by path (``open(name, "a")``): through another user's link, and blocking for
ever on a FIFO put in a file's place. It takes no descriptor, so what was left of it was its
``lock(fd)``, a wrapper of ``fcntl.flock`` (its POSIX locker), for a module that is POSIX
only anyway (``dir_fd``, ``O_NOFOLLOW``): the stdlib's ``fcntl`` is used instead, and the
dependency is gone (``flock`` is what portalocker took: processes of both versions share the
slots). Ours are the waiting policy (a backoff a pool can end, sleeping on the event loop for
the async face), the safe opening, and the rate file. Looked at and not fit: ``filelock`` and
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
import errno
import hashlib
import logging
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import _host_limits_turns as turns_book
from ._errors import ConfigurationError, InvalidInputError
from ._host_limits_files import LimitsFolder, cannot_keep_limits
from ._state_files import state_folder
from ._steps import Flow, Sleep

if TYPE_CHECKING:
    from ._config import Settings

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
    "open_limits_folder",
    "release_all_host_slots",
    "release_host_slot",
    "resolve_host_limits",
]

log = logging.getLogger("workflows")

HOST_MAX_SANDBOXES_ENV = "KLAVIS_HOST_MAX_SANDBOXES"
HOST_MAX_ACQUIRES_PER_SECOND_ENV = "KLAVIS_HOST_MAX_ACQUIRES_PER_SECOND"

_FIRST_DELAY = 0.01
_MAX_DELAY = 0.25
_FEW_TURNS = 3
"""A wait for a turn longer than this many turns is logged at WARNING, with its reason."""


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


def _digest(settings: Settings) -> str:
    return hashlib.sha256(
        f"{settings.base_url}\n{settings.api_key.fingerprint}".encode()
    ).hexdigest()[:32]


def open_limits_folder(settings: Settings) -> LimitsFolder:
    """The open folder the processes sharing ``settings``' base URL and key keep their limits
    in, named by a one-way digest, never by the key (opened without following links:
    :mod:`workflows._host_limits_files`)."""
    return LimitsFolder(state_folder(), _digest(settings))


def limits_folder(settings: Settings) -> Path:
    """The path of :func:`open_limits_folder` (made and checked, then closed)."""
    with open_limits_folder(settings) as folder:
        return folder.path


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
    """One acquire's place under the host's cap: the open, locked slot file, if capped."""

    def __init__(self, base_url: str, fd: int | None) -> None:
        self._base_url = base_url
        self._capped = fd is not None
        self._fd = fd
        self._lock = threading.Lock()

    def keep(self, sandbox_id: str) -> None:
        """Hold the slot until ``sandbox_id`` is released (:func:`release_host_slot`)."""
        if self._capped:
            with _held_lock:
                _held[(self._base_url, sandbox_id)] = self

    def release(self) -> None:
        """Give the slot back: close its file, which drops the lock (idempotent)."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


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
    the slot. Closing it mid-way (an interrupt, a cancellation) gives back what it took. The
    first try that finds every slot taken says so at INFO."""
    slot = HostSlot(settings.base_url, None)
    try:
        if limits.max_sandboxes is not None:
            with open_limits_folder(settings) as folder:
                delay = _FIRST_DELAY
                said = False
                while (fd := _try_slots(folder, limits.max_sandboxes)) is None:
                    if give_up is not None and give_up():
                        raise SlotWaitAbandoned
                    if not said:
                        log.info(
                            "an acquire waits for a place under the host's cap of %d "
                            "sandboxes: every one is held by this host's processes "
                            "(host_limits' max_sandboxes, or $%s)",
                            limits.max_sandboxes,
                            HOST_MAX_SANDBOXES_ENV,
                        )
                        said = True
                    yield delay
                    delay = min(delay * 2, _MAX_DELAY)
                slot = HostSlot(settings.base_url, fd)
    except BaseException:
        slot.release()
        raise
    return slot


def _try_slots(folder: LimitsFolder, count: int) -> int | None:
    """One sweep: the first slot file of ``count`` that locks without waiting, open and
    locked (``flock``: the kernel drops it with the process), or None when all are taken."""
    import fcntl

    for number in range(count):
        fd = folder.open_file(f"slot.{number:03d}.lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        except BaseException as exc:
            os.close(fd)
            if isinstance(exc, OSError):
                with cannot_keep_limits(folder.path / f"slot.{number:03d}.lock"):
                    raise
            raise
        return fd
    return None


# ----------------------------------------------------------------------- the rate
def acquire_turn(limits: HostLimits | None, settings: Settings) -> Flow[None]:
    """Wait for this acquire's turn under ``limits``' rate: a flow step of
    :func:`~workflows._flows.acquire_attempt`, just before its request is sent (after the
    listing it makes first, whose time varies; only its ledger line comes between), so that
    requests, not their preparations, are spaced; each attempt of a retried acquire takes a
    turn of its own. The turn is logged at DEBUG; a wait of more than a few turns at WARNING,
    with the reason; a wait that is interrupted (the flow closed by Ctrl-C, a cancel, a
    pool's close) gives its turn back."""
    if limits is None or limits.max_acquires_per_second is None:
        return
    spacing = 1.0 / limits.max_acquires_per_second
    with open_limits_folder(settings) as folder:
        reserving = _reserve_turn(folder, spacing)
        try:
            while True:
                yield Sleep(next(reserving))
        except StopIteration as done:
            reservation: turns_book.Reservation = done.value
        finally:
            reserving.close()
    mine = reservation.mine
    try:  # from here on, an interrupt (GeneratorExit: the driver closes the flow) gives it back
        log.debug("acquire turn under the host's rate: %.6f", mine.turn)
        wait = mine.turn - time.time()
        if wait > _FEW_TURNS * mine.spacing:
            log.warning(
                "an acquire waits %.1f s for its turn under the host's rate of %g acquires "
                "per second: %d acquires of this host's processes wait for earlier turns "
                "(host_limits' max_acquires_per_second, or $%s)",
                wait,
                1.0 / mine.spacing,
                reservation.waiting_ahead,
                HOST_MAX_ACQUIRES_PER_SECOND_ENV,
            )
        while (left := mine.turn - time.time()) > 0:
            yield Sleep(left)
    except BaseException:
        _give_back_turn(settings, mine.token)
        raise


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    size = 0
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
        size += len(chunk)
        if size > turns_book.MAX_FILE_BYTES:
            return b""  # not ours to read whole: start afresh
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _reserve_turn(
    folder: LimitsFolder, spacing: float, clock: Callable[[], float] = time.time
) -> Generator[float, None, turns_book.Reservation]:
    """Reserve the next turn under a rate of one acquire every ``spacing`` seconds, in
    ``folder``'s ``rate`` file (the rules: :mod:`workflows._host_limits_turns`); yields the
    seconds to sleep while another process holds the file's lock (for microseconds)."""
    import fcntl

    fd = folder.open_file("rate")
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                yield 0.001  # held for the microseconds of a read and a write
        with cannot_keep_limits(folder.path / "rate"):
            turns = turns_book.parse(_read_all(fd))
            reservation = turns_book.reserve(turns, clock(), spacing, os.urandom(8).hex())
            _write_all(fd, turns_book.dump(reservation.turns))
    finally:
        os.close(fd)  # drops the lock
    if reservation.dropped:
        log.warning(
            "ignored %d acquire turns in %s that were further ahead than the host's rate "
            "allows (written before the clock was set back?)",
            reservation.dropped,
            folder.path / "rate",
        )
    return reservation


def _give_back_turn(settings: Settings, token: str) -> None:
    """Remove the turn ``token`` from the rate file: its acquire was interrupted while it
    waited. Never raises (it runs while an interrupt goes on): a failure is logged."""
    import fcntl

    try:
        with open_limits_folder(settings) as folder:
            fd = folder.open_file("rate")
            try:
                for _ in range(1000):  # the lock is held for microseconds; bounded all the same
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        time.sleep(0.001)
                else:
                    raise OSError(errno.EWOULDBLOCK, "its lock stayed taken")
                turns = turns_book.give_back(turns_book.parse(_read_all(fd)), token)
                _write_all(fd, turns_book.dump(turns))
            finally:
                os.close(fd)
    except (OSError, ConfigurationError) as exc:
        log.warning("an interrupted acquire could not give back its host rate turn: %s", exc)


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
