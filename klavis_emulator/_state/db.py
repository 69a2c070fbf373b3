"""Where the state is kept: the data folder (its lock and layout) and the SQLite file (its
migrations, transactions and settings), plus the per-sandbox locks every part takes.

No part of the state opens a connection or a lock of its own: they all go through the one
:class:`Database`, whose transactions are serialized by one lock (SQLite in WAL mode, one
connection shared by the request threads, the TTL reaper and the execution threads).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Final, TypeVar

from .._workspace import remove_tree

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["Database", "Folders", "from_row"]

_Record = TypeVar("_Record", bound="DataclassInstance")


def from_row(kind: type[_Record], row: sqlite3.Row, **given: Any) -> _Record:
    """A record of ``kind`` whose fields are ``row``'s columns of the same names, but the
    ``given`` ones."""
    names = [item.name for item in dataclasses.fields(kind) if item.name not in given]
    return kind(**{name: row[name] for name in names}, **given)


_MIGRATIONS: Final[tuple[str, ...]] = (
    # 1: sandboxes and their servers
    """
    CREATE TABLE sandboxes (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        created_ts REAL NOT NULL,
        updated_ts REAL NOT NULL,
        status TEXT NOT NULL,
        benchmark TEXT,
        test_account_email TEXT,
        ttl_seconds INTEGER,
        expires_ts REAL,
        released_ts REAL,
        release_reason TEXT
    );
    CREATE INDEX sandboxes_by_tenant ON sandboxes (tenant, released_ts, created_ts);
    CREATE INDEX sandboxes_by_expiry ON sandboxes (released_ts, expires_ts);
    CREATE TABLE servers (
        id TEXT PRIMARY KEY,
        sandbox_id TEXT NOT NULL REFERENCES sandboxes (id),
        position INTEGER NOT NULL,
        server_name TEXT NOT NULL,
        status TEXT NOT NULL,
        updated_ts REAL NOT NULL
    );
    CREATE INDEX servers_by_sandbox ON servers (sandbox_id, position);
    """,
    # 2: settings (the clock offset), per-server data documents, executions
    """
    CREATE TABLE settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE server_data (
        sandbox_id TEXT NOT NULL REFERENCES sandboxes (id),
        server_name TEXT NOT NULL,
        document TEXT NOT NULL,
        updated_ts REAL NOT NULL,
        PRIMARY KEY (sandbox_id, server_name)
    );
    CREATE TABLE executions (
        sandbox_id TEXT NOT NULL REFERENCES sandboxes (id),
        name TEXT NOT NULL,
        run_id TEXT NOT NULL,
        status TEXT NOT NULL,
        created_ts REAL NOT NULL,
        started_ts REAL,
        finished_ts REAL,
        exit_code INTEGER,
        PRIMARY KEY (sandbox_id, name)
    );
    CREATE INDEX executions_by_status ON executions (status);
    """,
)


@dataclass(frozen=True)
class Folders:
    """The folders of a data directory (see the layout in :mod:`klavis_emulator._state`).

    ``workspaces`` and ``executions`` hold tenant data only; each has a staging folder of
    its own inside it (``.tmp``: staging copies, trash, spare workspaces), so that what is
    renamed into or out of a tenant folder stays on its file system, the overlay where the
    data folder has one (see :meth:`through`)."""

    root: Path
    workspaces: Path
    executions: Path
    storage: Path
    tmp: Path
    workspaces_tmp: Path
    executions_tmp: Path
    workspaces_to_read: Path
    """``workspaces`` for reading only: where there is an overlay (:meth:`through`), its
    upper folder itself, which holds every file (its lower folder is empty). A dump of 5,000
    small files reads it at 163 MB/s, through the overlay at 107 (measured, the bench's
    ``small_files`` shape). Reading a mounted overlay's upper folder is allowed; writing it
    is not (overlayfs calls it undefined): every write goes through ``workspaces``."""

    @classmethod
    def create(cls, root: Path) -> Folders:
        """Make the folders under ``root`` (which exists); the ``tmp`` folders start empty
        (emptied directly: call it before any overlay is mounted on them)."""
        folders = cls(
            root=root,
            workspaces=root / "workspaces",
            executions=root / "executions",
            storage=root / "storage",
            tmp=root / "tmp",
            workspaces_tmp=root / "workspaces" / ".tmp",
            executions_tmp=root / "executions" / ".tmp",
            workspaces_to_read=root / "workspaces",
        )
        for folder in (folders.workspaces, folders.executions, folders.storage):
            folder.mkdir(exist_ok=True)
        for folder in (folders.tmp, folders.workspaces_tmp, folders.executions_tmp):
            remove_tree(folder)
            folder.mkdir()
        return folders

    def through(self, view: Callable[[Path], Path]) -> Folders:
        """These folders with the tenant ones (and their ``tmp``) reached through ``view``
        (:meth:`~klavis_emulator._exec.data_overlay.DataOverlay.view`); the workspaces are
        still read directly (:attr:`workspaces_to_read`)."""
        return dataclasses.replace(
            self,
            workspaces=view(self.workspaces),
            executions=view(self.executions),
            workspaces_tmp=view(self.workspaces_tmp),
            executions_tmp=view(self.executions_tmp),
        )


def lock_data_dir(data_dir: Path) -> BinaryIO:
    """Lock ``data_dir`` for this process (two emulators on one folder would corrupt it)."""
    handle = (data_dir / "emulator.lock").open("ab")
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no locking
        return handle
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        handle.close()
        raise RuntimeError(
            f"Another emulator is already using the data folder {data_dir}; "
            "stop it or choose another --data-dir."
        ) from exc
    return handle


class Database:
    """The SQLite file of one data directory (migrated to the newest schema on open), the
    data directory's lock, and one re-entrant lock per sandbox.

    Call :meth:`close` once done; :meth:`transaction` raises :class:`RuntimeError` after
    :meth:`refuse_new_work`.
    """

    def __init__(self, data_dir: Path) -> None:
        self._lock_file = lock_data_dir(data_dir)
        self._db_lock = threading.RLock()
        self._locks_lock = threading.Lock()
        self._sandbox_locks: dict[str, threading.RLock] = {}
        self._closed = False
        self._db = sqlite3.connect(
            data_dir / "emulator.sqlite3", check_same_thread=False, isolation_level=None
        )
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._migrate()

    def _migrate(self) -> None:
        with self._db_lock:
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
            for number, script in enumerate(_MIGRATIONS[version:], start=version + 1):
                self._db.executescript(f"BEGIN; {script}; PRAGMA user_version = {number}; COMMIT;")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``), committed on exit, rolled back on error."""
        with self._db_lock:
            if self._closed:
                raise RuntimeError("the emulator state is closed")
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def setting(self, key: str) -> str | None:
        """The stored value of a setting, or ``None``."""
        with self.transaction() as db:
            row = db.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row["value"])

    def put_setting(self, key: str, value: str) -> None:
        """Store a setting (replacing its value)."""
        with self.transaction() as db:
            db.execute(
                "INSERT INTO settings (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def sandbox_lock(self, sandbox_id: str) -> threading.RLock:
        """The lock that serializes changes to one sandbox's folders."""
        with self._locks_lock:
            lock = self._sandbox_locks.get(sandbox_id)
            if lock is None:
                lock = self._sandbox_locks[sandbox_id] = threading.RLock()
            return lock

    def forget_sandbox_lock(self, sandbox_id: str) -> None:
        """Drop the lock of a released sandbox."""
        with self._locks_lock:
            self._sandbox_locks.pop(sandbox_id, None)

    def refuse_new_work(self) -> bool:
        """Make every later :meth:`transaction` raise; ``False`` if that was done already."""
        with self._db_lock:
            if self._closed:
                return False
            self._closed = True
            return True

    def close(self) -> None:
        """Close the SQLite file and release the data directory's lock."""
        with self._db_lock:
            self._db.close()
            self._lock_file.close()  # releases the data-dir lock
