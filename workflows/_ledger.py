"""A per-user JSONL ledger of every acquisition and release, so nothing stays acquired unnoticed.

Each line is one event::

    {"event": "acquired", "sandbox_id": "...", "base_url": "...", "key": "<fingerprint>",
     "pid": 123, "time": "2026-11-22T07:00:00+00:00"}

The key is stored as a one-way fingerprint, never as the key. ``klavis-sandbox reap`` releases
every sandbox whose last event is ``acquired``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

__all__ = ["STATE_DIR_ENV", "Ledger", "LedgerEntry", "default_ledger"]

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


@contextlib.contextmanager
def _locked(handle: IO[str]) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: the thread lock is all we have
        yield
        return
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


class Ledger:
    """Append-only record of acquisitions and releases in one JSONL file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    def _append(self, record: dict[str, object]) -> None:
        line = json.dumps(record, sort_keys=True) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with _lock, open(self.path, "a", encoding="utf-8") as handle, _locked(handle):
                handle.write(line)
        except OSError as exc:  # the ledger must never break the work it records
            _log.warning("could not write the sandbox ledger %s: %s", self.path, exc)

    def record(self, event: str, sandbox_id: str, *, base_url: str, key: str) -> None:
        """Append an ``acquired`` or ``released`` event."""
        self._append(
            {
                "event": event,
                "sandbox_id": sandbox_id,
                "base_url": base_url,
                "key": key,
                "pid": os.getpid(),
                "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            }
        )

    def held(self, *, base_url: str | None = None, key: str | None = None) -> list[LedgerEntry]:
        """Sandboxes whose last event is ``acquired``, optionally for one base URL and key."""
        last: dict[tuple[str, str], dict[str, object]] = {}
        try:
            with open(self.path, encoding="utf-8") as handle:
                for raw in handle:
                    try:
                        item = json.loads(raw)
                    except json.JSONDecodeError:
                        continue  # a torn last line from a killed process
                    if not isinstance(item, dict) or "sandbox_id" not in item:
                        continue
                    last[(str(item.get("base_url")), str(item["sandbox_id"]))] = item
        except FileNotFoundError:
            return []
        out = []
        for item in last.values():
            if item.get("event") != "acquired":
                continue
            entry = LedgerEntry(
                sandbox_id=str(item["sandbox_id"]),
                base_url=str(item.get("base_url", "")),
                key=str(item.get("key", "")),
                pid=int(str(item.get("pid", 0))),
                time=str(item.get("time", "")),
            )
            if base_url is not None and entry.base_url != base_url:
                continue
            if key is not None and entry.key != key:
                continue
            out.append(entry)
        return sorted(out, key=lambda e: (e.time, e.sandbox_id))


def default_ledger() -> Ledger:
    """The ledger in ``$KLAVIS_SANDBOX_STATE_DIR`` or the per-user state folder."""
    folder = os.environ.get(STATE_DIR_ENV)
    if not folder:
        import platformdirs

        folder = platformdirs.user_state_dir("klavis-sandbox", appauthor=False)
    return Ledger(Path(folder) / "ledger.jsonl")
