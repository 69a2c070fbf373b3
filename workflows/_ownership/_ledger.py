"""A per-user JSONL ledger of every acquisition and release, so nothing stays acquired unnoticed.

Each line is one event::

    {"event": "acquired", "sandbox_id": "...", "base_url": "...", "key": "<fingerprint>",
     "pid": 123, "time": "2026-11-22T07:00:00+00:00"}

The key is stored as a one-way fingerprint, never as the key. ``klavis-sandbox reap`` releases
every sandbox whose last event is ``acquired`` and whose process has ended, but those acquired
to outlive their process (``klavis-sandbox acquire``, ``acquire(..., detach=True)``), whose
``acquired`` event says so, with when its TTL ends (``null``: no TTL)::

    {"event": "acquired", ..., "detached": true, "expires": "2026-11-22T09:00:00+00:00"}

They live until their TTL or a release by name; ``reap`` lists them apart (``reap
--include-detached`` releases them too). Versions that knew no such field release them as any
other sandbox whose process has ended, as they did.

Every acquire is also recorded *before* its request is sent, as an ``attempt`` with the servers
asked for and the ids the key already had::

    {"event": "attempt", "attempt": "<hex>", "servers": ["git"], "benchmark": null,
     "known": ["<id>", ...], "base_url": "...", "key": "<fingerprint>", "pid": 123, "time": "..."}

An attempt is settled by an ``acquired`` event carrying its ``attempt`` id, or by an
``attempt-settled`` event when it is known to have created nothing. One that stays open ended
ambiguously (a timeout or a 5xx, then a failed listing; or the process died mid-request): the
sandbox it may have created never reached the ledger by id, so ``reap`` finds it by listing
(see :func:`workflows._ownership._reap.reap`).

When such an acquire has returned or raised (``AcquireAmbiguousError``, Ctrl-C, a cancelled
task) while its process lives on (a notebook kernel, a harness still working), it says so::

    {"event": "attempt-ended", "ended": "<attempt id>", "base_url": "...", "key": "...",
     "pid": 123, "time": "..."}

so that ``reap`` in another process need not wait for that process to exit: nothing in it will
record the sandbox any more. The id is under ``ended``, not ``attempt``: versions that knew no
such event took any other event carrying ``attempt`` for a settlement, and would never have
released the orphan; under ``ended`` they ignore it and wait for the process, as they did.

When the service a sandbox or an attempt was recorded for no longer answers (an emulator
restarted on another port, a host name gone), ``reap --forget`` drops it::

    {"event": "forgotten", "sandbox_id": "...", "base_url": "...", "key": "...", ...}
    {"event": "attempt-forgotten", "attempt": "<hex>", "base_url": "...", "key": "...", ...}

Both read as settled in versions that knew neither event: any last event of a sandbox but
``acquired`` is "not held", any event but ``attempt`` carrying an ``attempt`` id settles it.

The file and its folder are opened as every file of the state folder is
(:mod:`workflows._state_files`): relative to the folder's descriptor, never through a link,
never blocking on a FIFO, owner and mode checked. A ledger that is not safe to use is skipped
with a warning (it must never break the work it records), never written through another user's
link nor read from another user's file.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import IO

from .._state_files import UnsafeStateFile, open_private_file, open_state_folder

STATE_DIR_ENV = "KLAVIS_SANDBOX_STATE_DIR"
_log = logging.getLogger("workflows")
_lock = threading.Lock()


@dataclass(frozen=True)
class LedgerEntry:
    """A sandbox the ledger says is still held (acquired and not released)."""

    sandbox_id: str
    base_url: str
    key: str
    pid: int
    time: str
    detached: bool = False
    """Acquired to outlive its process: released by its TTL or by name, never by ``reap``
    unless asked (``include_detached``)."""
    expires: str | None = None
    """When a detached sandbox's TTL ends (ISO 8601, this machine's clock); None: no TTL."""

    def expires_in(self, now: datetime | None = None) -> float | None:
        """Seconds until a detached sandbox's TTL ends (negative once it has); None without a
        TTL, or for a sandbox that is not detached."""
        if not self.detached or self.expires is None:
            return None
        try:
            ends = datetime.fromisoformat(self.expires)
        except ValueError:  # a hand-edited line: as if its TTL had ended
            return 0.0
        if ends.tzinfo is None:
            ends = ends.replace(tzinfo=timezone.utc)
        return (ends - (now or datetime.now(timezone.utc))).total_seconds()

    def spared(self, now: datetime | None = None) -> bool:
        """Whether ``reap`` keeps it as detached: acquired to outlive its process, its TTL not
        over (or none)."""
        if not self.detached:
            return False
        if self.expires is None:  # no TTL: until released by name
            return True
        left = self.expires_in(now)
        return left is not None and left > 0


@dataclass(frozen=True)
class AcquireAttempt:
    """An acquire recorded before it was sent and never settled: it may have left a sandbox."""

    attempt: str
    base_url: str
    key: str
    servers: tuple[str, ...]
    benchmark: str | None
    known: frozenset[str]
    pid: int
    time: str
    ended: bool = False
    """Its acquire raised or was interrupted: no process will record its sandbox any more."""


def _lock_until_closed(handle: IO[str]) -> None:
    """Lock ``handle``'s file against the other processes of this user until it is closed,
    so its buffered line is written (at close) under the lock."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: the thread lock is all we have
        return
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)


class Ledger:
    """Append-only record of acquisitions and releases in one JSONL file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    def _open(self, access: int) -> int:
        """The ledger's file, opened as :mod:`workflows._state_files` opens state files."""
        folder = open_state_folder(self.path.parent)
        try:
            return open_private_file(folder, self.path.name, self.path, access)
        finally:
            os.close(folder)

    def _append(self, record: dict[str, object]) -> None:
        line = json.dumps(record, sort_keys=True) + "\n"
        try:
            with _lock:
                fd = self._open(os.O_WRONLY | os.O_APPEND | os.O_CREAT)
                with open(fd, "a", encoding="utf-8") as handle:
                    _lock_until_closed(handle)
                    handle.write(line)
        except (OSError, UnsafeStateFile) as exc:  # it must never break the work it records
            _log.warning("could not write the sandbox ledger %s: %s", self.path, exc)

    def record(
        self,
        event: str,
        sandbox_id: str,
        *,
        base_url: str,
        key: str,
        attempt: str | None = None,
        detached: bool = False,
        ttl_seconds: int | None = None,
    ) -> None:
        """Append an ``acquired`` or ``released`` event (``attempt``: the acquire it settles;
        ``detached``: acquired to outlive its process, its TTL ending ``ttl_seconds`` from now,
        None: never)."""
        record: dict[str, object] = {
            "event": event,
            "sandbox_id": sandbox_id,
            "base_url": base_url,
            "key": key,
            "pid": os.getpid(),
            "time": _now(),
        }
        if attempt is not None:
            record["attempt"] = attempt
        if detached:
            record["detached"] = True
            record["expires"] = None if ttl_seconds is None else _now(ttl_seconds)
        self._append(record)

    def record_attempt(
        self,
        attempt: str,
        *,
        base_url: str,
        key: str,
        servers: tuple[str, ...],
        benchmark: str | None,
        known: frozenset[str],
    ) -> None:
        """Append an ``attempt``: an acquire about to be sent (see the module docstring)."""
        self._append(
            {
                "event": "attempt",
                "attempt": attempt,
                "servers": sorted(servers),
                "benchmark": benchmark,
                "known": sorted(known),
                "base_url": base_url,
                "key": key,
                "pid": os.getpid(),
                "time": _now(),
            }
        )

    def settle_attempt(self, attempt: str, *, base_url: str, key: str) -> None:
        """Append ``attempt-settled``: the acquire is known to have left no sandbox behind."""
        self._append(
            {
                "event": "attempt-settled",
                "attempt": attempt,
                "base_url": base_url,
                "key": key,
                "pid": os.getpid(),
                "time": _now(),
            }
        )

    def forget_attempt(self, attempt: str, *, base_url: str, key: str) -> None:
        """Append ``attempt-forgotten``: the attempt's service does not answer, and the user
        asked ``reap`` to stop looking for what it left (it settles the attempt)."""
        self._append(
            {
                "event": "attempt-forgotten",
                "attempt": attempt,
                "base_url": base_url,
                "key": key,
                "pid": os.getpid(),
                "time": _now(),
            }
        )

    def end_attempt(self, attempt: str, *, base_url: str, key: str) -> None:
        """Append ``attempt-ended``: the acquire raised, leaving its attempt open; nothing in
        this process will record its sandbox (see the module docstring)."""
        self._append(
            {
                "event": "attempt-ended",
                "ended": attempt,
                "base_url": base_url,
                "key": key,
                "pid": os.getpid(),
                "time": _now(),
            }
        )

    def _items(self) -> Iterator[dict[str, object]]:
        try:
            fd = self._open(os.O_RDONLY)
        except FileNotFoundError:
            return
        except (OSError, UnsafeStateFile) as exc:
            _log.warning("could not read the sandbox ledger %s: %s", self.path, exc)
            return
        with open(fd, encoding="utf-8") as handle:
            for raw in handle:
                try:
                    item = json.loads(raw)
                except json.JSONDecodeError:
                    continue  # a torn last line from a killed process
                if isinstance(item, dict):
                    yield item

    def known_ids(self, *, base_url: str) -> set[str]:
        """Every sandbox id any process of this user recorded for ``base_url``."""
        return {
            str(item["sandbox_id"])
            for item in self._items()
            if "sandbox_id" in item and item.get("base_url") == base_url
        }

    def open_attempts(
        self, *, base_url: str | None = None, key: str | None = None
    ) -> list[AcquireAttempt]:
        """Attempts never settled (oldest first), optionally for one base URL and key; those
        whose acquire has ended say so (``ended``)."""
        opened: dict[str, dict[str, object]] = {}
        settled: set[str] = set()
        ended: set[str] = set()
        for item in self._items():
            if item.get("event") == "attempt-ended" and isinstance(item.get("ended"), str):
                ended.add(str(item["ended"]))
                continue
            attempt = item.get("attempt")
            if not isinstance(attempt, str):
                continue
            if item.get("event") == "attempt":
                opened[attempt] = item
            else:
                settled.add(attempt)
        out = []
        for attempt, item in opened.items():
            if attempt in settled:
                continue
            if base_url is not None and item.get("base_url") != base_url:
                continue
            if key is not None and item.get("key") != key:
                continue
            servers = item.get("servers")
            known = item.get("known")
            benchmark = item.get("benchmark")
            out.append(
                AcquireAttempt(
                    attempt=attempt,
                    base_url=str(item.get("base_url", "")),
                    key=str(item.get("key", "")),
                    servers=tuple(str(s) for s in servers) if isinstance(servers, list) else (),
                    benchmark=benchmark if isinstance(benchmark, str) else None,
                    known=frozenset(str(k) for k in known) if isinstance(known, list) else _NONE,
                    pid=_pid(item.get("pid")),
                    time=str(item.get("time", "")),
                    ended=attempt in ended,
                )
            )
        return sorted(out, key=lambda a: (a.time, a.attempt))

    def held(self, *, base_url: str | None = None, key: str | None = None) -> list[LedgerEntry]:
        """Sandboxes whose last event is ``acquired``, optionally for one base URL and key."""
        last: dict[tuple[str, str], dict[str, object]] = {}
        for item in self._items():
            if "sandbox_id" in item:
                last[(str(item.get("base_url")), str(item["sandbox_id"]))] = item
        out = []
        for item in last.values():
            if item.get("event") != "acquired":
                continue
            expires = item.get("expires")
            entry = LedgerEntry(
                sandbox_id=str(item["sandbox_id"]),
                base_url=str(item.get("base_url", "")),
                key=str(item.get("key", "")),
                pid=_pid(item.get("pid")),
                time=str(item.get("time", "")),
                detached=item.get("detached") is True,
                expires=expires if isinstance(expires, str) else None,
            )
            if base_url is not None and entry.base_url != base_url:
                continue
            if key is not None and entry.key != key:
                continue
            out.append(entry)
        return sorted(out, key=lambda e: (e.time, e.sandbox_id))


_NONE: frozenset[str] = frozenset()


def _pid(value: object) -> int:
    """The pid of a record; 0 (no live process) when a hand-edited line holds something else."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def process_running(pid: int) -> bool:
    """Whether another process with this pid runs on this machine (False for this one's)."""
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it runs, as another user
        return True
    return True


def _now(later: float = 0.0) -> str:
    """Now (or ``later`` seconds from now), UTC, ISO 8601, to the second."""
    moment = datetime.now(timezone.utc) + timedelta(seconds=later)
    return moment.isoformat(timespec="seconds")


def state_folder() -> Path:
    """``$KLAVIS_SANDBOX_STATE_DIR``, or the per-user state folder: the ledger's, and the host
    limits' (:mod:`workflows._host_limits`)."""
    folder = os.environ.get(STATE_DIR_ENV)
    if not folder:
        import platformdirs

        folder = platformdirs.user_state_dir("klavis-sandbox", appauthor=False)
    return Path(folder)


def default_ledger() -> Ledger:
    """The ledger in ``$KLAVIS_SANDBOX_STATE_DIR`` or the per-user state folder."""
    return Ledger(state_folder() / "ledger.jsonl")
