"""The emulator's backend state, kept apart from HTTP (no FastAPI here).

State lives in one SQLite file (``emulator.sqlite3``) and a few folders under the data
directory::

    <data_dir>/emulator.sqlite3      sandboxes, servers, per-server data, executions, settings
    <data_dir>/signing.key           the per-emulator HMAC secret for signed URLs
    <data_dir>/workspaces/<id>/      one workspace folder per live sandbox
    <data_dir>/executions/<id>/<name>/   one folder per execution (see ``_runner``)
    <data_dir>/storage/<key>         objects behind signed URLs (uploads, dumps, artifacts)
    <data_dir>/tmp/                  staging folders, emptied on start

Every public method takes the caller's *tenant* (a hash of its bearer token, never the
token) and answers :class:`SandboxNotFound` for sandboxes of other tenants. All times come
from an injectable :class:`~klavis_emulator._clock.Clock`; sandboxes whose TTL ran out are
released before any operation looks at them, and by a background reaper thread every few
seconds. The object is safe to use from several threads at once.

The workspace folder of a sandbox keeps its identity (its inode) for the sandbox's whole
life: ``initialize`` and ``reset`` swap its *contents*, never the folder itself, so
processes that bind-mount it or hold it as their working directory (MCP servers, running
executions) keep seeing the live workspace.

Other modules can follow sandboxes going away through :meth:`EmulatorState.add_listener`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final, Literal, get_args

from ._archive import copy_tree, extract_archive, make_archive
from ._bwrap import decide_confinement
from ._clock import Clock, OffsetClock, isoformat
from ._config import EmulatorConfig
from ._runner import (
    FINAL_STATUSES,
    ExecutionRun,
    RunSettings,
    append_note,
    execution_name_problem,
    read_log,
)
from ._signing import SignedUrl, UrlSigner, is_valid_object_key

__all__ = [
    "BENCHMARKS",
    "LOCAL_SERVER_NAMES",
    "ServerName",
    "REGIONS",
    "EmulatorError",
    "EmulatorState",
    "ExecutionConflict",
    "ExecutionNotFound",
    "InvalidExecutionName",
    "NoUploadedArchive",
    "ObjectNotFound",
    "SandboxNotFound",
    "SandboxRecord",
    "ServerNotInSandbox",
    "ServerRecord",
    "UploadTooLarge",
    "UploadWriter",
    "tenant_for_token",
]

ServerName = Literal[
    "filesystem",
    "git",
    "terminal",
    "desktop-commander",
    "arxiv",
    "excel",
    "word",
    "powerpoint",
    "code-executor",
    "code-runner",
    "pdf-tools",
    "google_cloud",
    "poste_email_toolathlon",
    "canvas",
    "localmemory",
    "playwright",
]
"""The contract's ``LocalSandboxMCPServer`` enum, as a type."""

LOCAL_SERVER_NAMES: Final[tuple[str, ...]] = get_args(ServerName)
BENCHMARKS: Final[tuple[str, ...]] = ("MCP_Atlas", "Toolathlon", "MCP_Mark")
REGIONS: Final[tuple[str, ...]] = ("us", "asia")

Region = Literal["us", "asia"]

_UPLOAD_ROUTE: Final = "/_storage/upload"
_DOWNLOAD_ROUTE: Final = "/_storage/download"
_SANDBOX_KEY_RE = re.compile(r"^sandboxes/([0-9a-f-]{36})/")
_KEPT_DUMPS = 8
_ACTIVE: Final = ("pending", "running")

logger = logging.getLogger("klavis_emulator")

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


class EmulatorError(Exception):
    """Base class of the state's errors; the message is meant for the API's caller."""


class SandboxNotFound(EmulatorError):
    """No live sandbox with that id belongs to the caller's tenant."""

    def __init__(self, sandbox_id: str) -> None:
        shown = sandbox_id if len(sandbox_id) <= 80 else sandbox_id[:80] + "..."
        super().__init__(
            f"Local sandbox {shown!r} not found: it does not exist, was released, "
            "or belongs to another API key."
        )
        self.sandbox_id = sandbox_id


class ServerNotInSandbox(EmulatorError):
    """The sandbox exists but does not hold the requested MCP server."""


class NoUploadedArchive(EmulatorError):
    """``initialize`` was called before any archive was uploaded (for that region)."""


class ObjectNotFound(EmulatorError):
    """A signed URL names an object that does not exist (any more)."""


class UploadTooLarge(EmulatorError):
    """An upload exceeds the emulator's size cap."""


class InvalidExecutionName(EmulatorError):
    """An execution name that cannot name a folder or an object (path separators, ...)."""


class ExecutionNotFound(EmulatorError):
    """The sandbox has no execution of that name (none was started)."""


class ExecutionConflict(EmulatorError):
    """The execution is in the wrong state: still running, or not finished yet."""


def tenant_for_token(token: str) -> str:
    """Return the tenant id of a bearer token: a SHA-256 hash, never the token itself."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class ServerRecord:
    """One MCP server item of a sandbox."""

    id: str
    server_name: str
    status: str
    updated_ts: float


@dataclass(frozen=True)
class SandboxRecord:
    """A live sandbox as stored."""

    id: str
    tenant: str
    created_ts: float
    updated_ts: float
    status: str
    benchmark: str | None
    test_account_email: str | None
    ttl_seconds: int | None
    expires_ts: float | None
    servers: tuple[ServerRecord, ...]

    @property
    def server_names(self) -> tuple[str, ...]:
        """The names of the sandbox's servers, in acquisition order."""
        return tuple(server.server_name for server in self.servers)

    def to_info(self, base_url: str) -> dict[str, Any]:
        """Render as the contract's ``LocalSandboxInfo`` (MCP URLs under ``base_url``)."""
        return {
            "local_sandbox_id": self.id,
            "created_at": isoformat(self.created_ts),
            "status": self.status,
            "benchmark": self.benchmark,
            "servers": [self._server_item(server, base_url) for server in self.servers],
        }

    def _server_item(self, server: ServerRecord, base_url: str) -> dict[str, Any]:
        return {
            "server_name": server.server_name,
            "id": server.id,
            "mcp_server_url": (
                f"{base_url.rstrip('/')}/{server.server_name}/mcp/?local_sandbox_id={self.id}"
            ),
            "status": server.status,
            "benchmark": self.benchmark,
            "updated_at": isoformat(server.updated_ts),
            "metadata": None,
            "auth_data": None,
            "tags": None,
        }


class UploadWriter:
    """Receives an upload chunk by chunk into a temporary file, then publishes it atomically."""

    def __init__(
        self,
        final_path: Path,
        temp_path: Path,
        max_bytes: int,
        publish: Callable[[Path, Path], None],
    ) -> None:
        self._final = final_path
        self._temp = temp_path
        self._publish = publish
        self._max_bytes = max_bytes
        self._size = 0
        self._file: BinaryIO | None = temp_path.open("xb")

    @property
    def size(self) -> int:
        """Bytes received so far."""
        return self._size

    def write(self, chunk: bytes) -> None:
        """Append ``chunk``; raise :class:`UploadTooLarge` past the cap (and discard)."""
        if self._file is None:
            raise RuntimeError("this upload is already finished")
        self._size += len(chunk)
        if self._size > self._max_bytes:
            self.abort()
            raise UploadTooLarge(
                f"The upload is larger than the emulator's limit of {self._max_bytes} bytes."
            )
        self._file.write(chunk)

    def commit(self) -> None:
        """Publish the received bytes as the object (replacing an earlier upload)."""
        if self._file is None:
            raise RuntimeError("this upload is already finished")
        self._file.close()
        self._file = None
        try:
            self._publish(self._temp, self._final)
        finally:
            self.abort()

    def abort(self) -> None:
        """Discard the received bytes (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        with contextlib.suppress(FileNotFoundError):
            self._temp.unlink()


def _lock_data_dir(data_dir: Path) -> BinaryIO:
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


@dataclass(frozen=True)
class _Listener:
    on_gone: Callable[[str], None] | None
    on_reset: Callable[[str], None] | None


@dataclass(frozen=True)
class ExecutionRecord:
    """An execution as stored."""

    sandbox_id: str
    name: str
    run_id: str
    status: str
    created_ts: float
    started_ts: float | None
    finished_ts: float | None
    exit_code: int | None


class EmulatorState:
    """Sandboxes, workspaces and stored objects of one emulator (see the module docs)."""

    def __init__(self, config: EmulatorConfig) -> None:
        """Open (or create) the state in ``config.data_dir`` (see :class:`EmulatorConfig`
        for the tunables this reads: data dir, clock, signed URLs, uploads, archives,
        executions, confinement and the TTL reaper).

        Raises:
            ConfinementError: bubblewrap is installed but cannot confine here (and
                confinement was not turned off); nothing was created or locked yet.
        """
        # First, before the data dir is touched: a confinement that does not work stops the
        # emulator here, with the reason and the way out (never a line in every run's log).
        confinement = decide_confinement(config.confine_executions)
        if confinement.enabled:
            logger.info("executions and MCP servers are %s", confinement.reason)
        else:
            logger.warning("executions and MCP servers are NOT confined: %s", confinement.reason)
        self.config = config
        self.data_dir = config.resolved_data_dir().expanduser().resolve()
        self.signed_url_minutes = config.signed_url_minutes
        self.max_upload_bytes = config.max_upload_bytes
        self.archive_limits = config.archive_limits

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_file = _lock_data_dir(self.data_dir)
        self._workspaces = self.data_dir / "workspaces"
        self._executions = self.data_dir / "executions"
        self._storage = self.data_dir / "storage"
        self._tmp = self.data_dir / "tmp"
        for folder in (self._workspaces, self._executions, self._storage):
            folder.mkdir(exist_ok=True)
        shutil.rmtree(self._tmp, ignore_errors=True)
        self._tmp.mkdir()

        self._db_lock = threading.RLock()
        self._locks_lock = threading.Lock()
        self._sandbox_locks: dict[str, threading.RLock] = {}
        self._closed = False
        self._db = sqlite3.connect(
            self.data_dir / "emulator.sqlite3", check_same_thread=False, isolation_level=None
        )
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._migrate()

        clock = config.clock
        if clock is None:
            owned = OffsetClock(offset=self._load_clock_offset())
            owned.on_advance(self._save_clock_offset)
            clock = owned
        self.clock: Clock = clock
        self.signer = UrlSigner(self._load_secret(), self.clock)

        self.run_settings = RunSettings(
            timeout=config.execution_timeout,
            allow_network=config.allow_network,
            confinement=confinement,
        )
        self._runs: dict[tuple[str, str], ExecutionRun] = {}
        self._runs_lock = threading.Lock()
        self._status_changed = threading.Condition()
        self._status_version = 0
        self._listeners: list[_Listener] = []
        self._fail_interrupted_executions()

        self._stop_reaper = threading.Event()
        self._reaper: threading.Thread | None = None
        if config.reaper_interval is not None:
            self._reaper = threading.Thread(
                target=self._reap,
                args=(config.reaper_interval,),
                name="klavis-ttl-reaper",
                daemon=True,
            )
            self._reaper.start()

    def __repr__(self) -> str:
        return f"EmulatorState(data_dir={str(self.data_dir)!r})"

    # ------------------------------------------------------------------ plumbing

    def _load_secret(self) -> bytes:
        path = self.data_dir / "signing.key"
        try:
            secret = path.read_bytes()
        except FileNotFoundError:
            secret = secrets.token_bytes(32)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(secret)
        if len(secret) < 16:
            raise RuntimeError(f"the signing key {path} is too short; delete it to make a new one")
        return secret

    def _migrate(self) -> None:
        with self._db_lock:
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
            for number, script in enumerate(_MIGRATIONS[version:], start=version + 1):
                self._db.executescript(f"BEGIN; {script}; PRAGMA user_version = {number}; COMMIT;")

    def _load_clock_offset(self) -> float:
        with self._transaction() as db:
            row = db.execute("SELECT value FROM settings WHERE key = 'clock_offset'").fetchone()
        try:
            return max(0.0, float(row["value"])) if row is not None else 0.0
        except ValueError:
            return 0.0

    def _save_clock_offset(self, offset: float) -> None:
        with contextlib.suppress(RuntimeError), self._transaction() as db:
            db.execute(
                "INSERT INTO settings (key, value) VALUES ('clock_offset', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (repr(offset),),
            )

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
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

    def _sandbox_lock(self, sandbox_id: str) -> threading.RLock:
        with self._locks_lock:
            lock = self._sandbox_locks.get(sandbox_id)
            if lock is None:
                lock = self._sandbox_locks[sandbox_id] = threading.RLock()
            return lock

    def _reap(self, interval: float) -> None:
        while not self._stop_reaper.wait(interval):
            try:
                self._expire_due()
            except RuntimeError:  # closed meanwhile
                return
            except Exception:
                logger.exception("the TTL reaper failed")

    def close(self) -> None:
        """Stop running executions and the reaper, then close the database (idempotent).

        Executions that were running stay ``running`` in the database; the next start on
        the same data dir marks them ``failed`` (see :meth:`__init__`).
        """
        self._stop_reaper.set()
        if self._reaper is not None and self._reaper is not threading.current_thread():
            self._reaper.join(10)
        with self._db_lock:
            if self._closed:
                return
            self._closed = True
        with self._runs_lock:
            runs = list(self._runs.values())
            self._runs.clear()
        for run in runs:
            run.kill()
        with self._db_lock:
            self._db.close()
            self._lock_file.close()  # releases the data-dir lock

    def workspace_path(self, sandbox_id: str) -> Path:
        """The workspace folder of a sandbox (it exists while the sandbox is live)."""
        return self._workspaces / str(uuid.UUID(sandbox_id))

    def execution_path(self, sandbox_id: str, name: str) -> Path:
        """The folder of one execution (``work/``, ``output.log``, ...)."""
        problem = execution_name_problem(name)
        if problem is not None:
            raise InvalidExecutionName(problem)
        return self._executions / str(uuid.UUID(sandbox_id)) / name

    def object_path(self, key: str) -> Path:
        """The file behind an object key."""
        if not is_valid_object_key(key):
            raise ObjectNotFound("This storage URL does not name a valid object.")
        return self._storage / key

    def now(self) -> float:
        """The emulator clock's current time."""
        return self.clock.time()

    def advance_clock(self, seconds: float) -> float:
        """Move the clock forward (if it can be moved), release what expired; the new time.

        Raises :class:`TypeError` when the clock has no ``advance`` method.
        """
        advance: Callable[[float], float] | None = getattr(self.clock, "advance", None)
        if advance is None:
            raise TypeError("this emulator's clock cannot be moved")
        advance(seconds)
        self._expire_due()
        return self.now()

    # ------------------------------------------------------------------ listeners

    def add_listener(
        self,
        on_gone: Callable[[str], None] | None = None,
        on_reset: Callable[[str], None] | None = None,
    ) -> Callable[[], None]:
        """Subscribe to sandboxes going away or being reset; returns an unsubscribe function.

        ``on_gone(sandbox_id)`` is called once a sandbox was released (through the API or
        because its TTL ran out, whichever thread noticed it), after its workspace and
        executions were removed. ``on_reset(sandbox_id)`` is called after a reset emptied
        the workspace, per-server data and executions (same id and servers).

        Callbacks run synchronously on the thread that made the change (a request worker
        thread or the TTL reaper), outside the state's locks: keep them short and
        thread-safe (hand work to an event loop with ``call_soon_threadsafe``). Their
        exceptions are logged and otherwise ignored.
        """
        listener = _Listener(on_gone=on_gone, on_reset=on_reset)
        with self._locks_lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._locks_lock, contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return remove

    def _notify(self, event: Literal["gone", "reset"], sandbox_id: str) -> None:
        with self._locks_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            callback = listener.on_gone if event == "gone" else listener.on_reset
            if callback is None:
                continue
            try:
                callback(sandbox_id)
            except Exception:
                logger.exception("a %s listener failed for sandbox %s", event, sandbox_id)

    # ------------------------------------------------------------------ records

    def _load(self, db: sqlite3.Connection, row: sqlite3.Row) -> SandboxRecord:
        servers = tuple(
            ServerRecord(
                id=server["id"],
                server_name=server["server_name"],
                status=server["status"],
                updated_ts=server["updated_ts"],
            )
            for server in db.execute(
                "SELECT * FROM servers WHERE sandbox_id = ? ORDER BY position", (row["id"],)
            )
        )
        return SandboxRecord(
            id=row["id"],
            tenant=row["tenant"],
            created_ts=row["created_ts"],
            updated_ts=row["updated_ts"],
            status=row["status"],
            benchmark=row["benchmark"],
            test_account_email=row["test_account_email"],
            ttl_seconds=row["ttl_seconds"],
            expires_ts=row["expires_ts"],
            servers=servers,
        )

    def _live_row(self, db: sqlite3.Connection, tenant: str, sandbox_id: str) -> sqlite3.Row:
        row: sqlite3.Row | None = db.execute(
            "SELECT * FROM sandboxes WHERE id = ? AND tenant = ? AND released_ts IS NULL",
            (sandbox_id, tenant),
        ).fetchone()
        if row is None:
            raise SandboxNotFound(sandbox_id)
        return row

    def _expire_due(self) -> None:
        """Release every sandbox whose TTL has run out by the clock."""
        now = self.now()
        with self._transaction() as db:
            due = [
                str(row["id"])
                for row in db.execute(
                    "SELECT id FROM sandboxes WHERE released_ts IS NULL AND expires_ts <= ?",
                    (now,),
                )
            ]
            for sandbox_id in due:
                self._mark_released(db, sandbox_id, now, "ttl")
        for sandbox_id in due:
            self._delete_files(sandbox_id)
        for sandbox_id in due:
            self._notify("gone", sandbox_id)

    def _mark_released(
        self, db: sqlite3.Connection, sandbox_id: str, now: float, reason: str
    ) -> None:
        db.execute(
            "UPDATE sandboxes SET released_ts = ?, release_reason = ?, updated_ts = ?, "
            "status = 'idle' WHERE id = ?",
            (now, reason, now, sandbox_id),
        )
        db.execute(
            "UPDATE servers SET status = 'idle', updated_ts = ? WHERE sandbox_id = ?",
            (now, sandbox_id),
        )
        db.execute("DELETE FROM server_data WHERE sandbox_id = ?", (sandbox_id,))
        db.execute("DELETE FROM executions WHERE sandbox_id = ?", (sandbox_id,))

    def _delete_files(self, sandbox_id: str) -> None:
        self._stop_runs(sandbox_id)
        with self._sandbox_lock(sandbox_id):
            shutil.rmtree(self.workspace_path(sandbox_id), ignore_errors=True)
            shutil.rmtree(self._executions / sandbox_id, ignore_errors=True)
            shutil.rmtree(self._storage / "sandboxes" / sandbox_id, ignore_errors=True)
        with self._locks_lock:
            self._sandbox_locks.pop(sandbox_id, None)

    def _workspace_locked(self, tenant: str, sandbox_id: str) -> Path:
        """Re-check liveness once the sandbox lock is held; return the (existing) workspace.

        A release that happened between the caller's first check and taking the lock
        must not be undone by recreating the workspace folder.
        """
        with self._transaction() as db:
            self._live_row(db, tenant, sandbox_id)
        workspace = self.workspace_path(sandbox_id)
        workspace.mkdir(exist_ok=True)
        return workspace

    def _live(self, tenant: str, sandbox_id: str) -> SandboxRecord:
        self._expire_due()
        with self._transaction() as db:
            return self._load(db, self._live_row(db, tenant, sandbox_id))

    def _swap_contents(self, workspace: Path, replacement: Path | None) -> None:
        """Replace what ``workspace`` holds by what ``replacement`` holds (or by nothing).

        The folder itself stays (same inode): bind mounts and working directories of
        processes that use the workspace keep pointing at the live contents.
        """
        old = self._tmp / f"old-{uuid.uuid4()}"
        old.mkdir()
        try:
            for name in os.listdir(workspace):
                os.rename(workspace / name, old / name)
            if replacement is not None:
                for name in os.listdir(replacement):
                    os.rename(replacement / name, workspace / name)
                os.chmod(workspace, replacement.stat().st_mode & 0o7777)
        finally:
            shutil.rmtree(old, ignore_errors=True)
            if replacement is not None:
                shutil.rmtree(replacement, ignore_errors=True)

    # ------------------------------------------------------------------ lifecycle

    def acquire(
        self,
        tenant: str,
        server_names: Sequence[str] | Literal["ALL"],
        *,
        benchmark: str | None = None,
        test_account_email: str | None = None,
        ttl_seconds: int | None = 7200,
    ) -> SandboxRecord:
        """Create a sandbox holding ``server_names`` (``"ALL"``: every local server)."""
        names = LOCAL_SERVER_NAMES if server_names == "ALL" else tuple(dict.fromkeys(server_names))
        unknown = [name for name in names if name not in LOCAL_SERVER_NAMES]
        if unknown or not names:
            raise ValueError(f"invalid server names: {unknown or names!r}")
        if benchmark is not None and benchmark not in BENCHMARKS:
            raise ValueError(f"invalid benchmark: {benchmark!r}")
        if ttl_seconds is not None and not 60 <= ttl_seconds <= 86400:
            raise ValueError("ttl_seconds must be between 60 and 86400, or None")
        self._expire_due()
        now = self.now()
        sandbox_id = str(uuid.uuid4())
        self.workspace_path(sandbox_id).mkdir()
        with self._transaction() as db:
            db.execute(
                "INSERT INTO sandboxes (id, tenant, created_ts, updated_ts, status, benchmark, "
                "test_account_email, ttl_seconds, expires_ts) "
                "VALUES (?, ?, ?, ?, 'occupied', ?, ?, ?, ?)",
                (
                    sandbox_id,
                    tenant,
                    now,
                    now,
                    benchmark,
                    test_account_email,
                    ttl_seconds,
                    None if ttl_seconds is None else now + ttl_seconds,
                ),
            )
            db.executemany(
                "INSERT INTO servers (id, sandbox_id, position, server_name, status, updated_ts) "
                "VALUES (?, ?, ?, ?, 'occupied', ?)",
                [(str(uuid.uuid4()), sandbox_id, i, name, now) for i, name in enumerate(names)],
            )
            return self._load(db, self._live_row(db, tenant, sandbox_id))

    def list_sandboxes(self, tenant: str) -> list[SandboxRecord]:
        """The tenant's live sandboxes, oldest first."""
        self._expire_due()
        with self._transaction() as db:
            rows = db.execute(
                "SELECT * FROM sandboxes WHERE tenant = ? AND released_ts IS NULL "
                "ORDER BY created_ts, id",
                (tenant,),
            ).fetchall()
            return [self._load(db, row) for row in rows]

    def get(self, tenant: str, sandbox_id: str) -> SandboxRecord:
        """One live sandbox of the tenant, or :class:`SandboxNotFound`."""
        return self._live(tenant, sandbox_id)

    def find_live(self, sandbox_id: str) -> SandboxRecord | None:
        """The live sandbox with this id, whatever its tenant; ``None`` if there is none.

        For URLs that carry only the sandbox id (MCP server URLs, as on the service).
        Expired sandboxes are released first; a closed state answers ``None``.
        """
        try:
            self._expire_due()
            with self._transaction() as db:
                row = db.execute(
                    "SELECT * FROM sandboxes WHERE id = ? AND released_ts IS NULL", (sandbox_id,)
                ).fetchone()
                return None if row is None else self._load(db, row)
        except RuntimeError:  # closed: the emulator is stopping
            return None

    def release(self, tenant: str, sandbox_id: str, *, is_ttl: bool = False) -> str:
        """Release a sandbox: it is no longer listed; its workspace, data, executions
        (running ones are killed) and objects are deleted."""
        self._expire_due()
        with self._transaction() as db:
            self._live_row(db, tenant, sandbox_id)
            self._mark_released(db, sandbox_id, self.now(), "ttl" if is_ttl else "api")
        self._delete_files(sandbox_id)
        self._notify("gone", sandbox_id)
        return (
            f"Local sandbox release started for {sandbox_id}: "
            "it will be released asynchronously in background."
        )

    def reset(self, tenant: str, sandbox_id: str) -> str:
        """Empty the workspace, the per-server data and the executions (running ones are
        killed); the id and the servers stay."""
        self._live(tenant, sandbox_id)
        self._stop_runs(sandbox_id)
        with self._sandbox_lock(sandbox_id):
            workspace = self._workspace_locked(tenant, sandbox_id)
            self._stop_runs(sandbox_id)  # one may have started meanwhile
            with self._transaction() as db:
                db.execute("DELETE FROM server_data WHERE sandbox_id = ?", (sandbox_id,))
                db.execute("DELETE FROM executions WHERE sandbox_id = ?", (sandbox_id,))
            folder = self._executions / sandbox_id
            if folder.exists():
                trash = self._tmp / f"old-{uuid.uuid4()}"
                os.rename(folder, trash)
                shutil.rmtree(trash, ignore_errors=True)
            self._swap_contents(workspace, None)
        self._touch(sandbox_id)
        self._status_bump()
        self._notify("reset", sandbox_id)
        return (
            f"Local sandbox {sandbox_id} was reset to its initial state "
            "(workspace, server data and executions emptied)."
        )

    def _touch(self, sandbox_id: str) -> None:
        now = self.now()
        with self._transaction() as db:
            db.execute("UPDATE sandboxes SET updated_ts = ? WHERE id = ?", (now, sandbox_id))
            db.execute("UPDATE servers SET updated_ts = ? WHERE sandbox_id = ?", (now, sandbox_id))

    def require_server(self, tenant: str, sandbox_id: str, server_name: str) -> SandboxRecord:
        """The sandbox, if it holds ``server_name`` (else :class:`ServerNotInSandbox`)."""
        record = self._live(tenant, sandbox_id)
        if server_name not in record.server_names:
            raise ServerNotInSandbox(
                f"Local sandbox {sandbox_id} does not hold the {server_name!r} server "
                f"(it holds: {', '.join(record.server_names)}); acquire a sandbox with "
                f"{server_name!r} in server_names to use its data."
            )
        return record

    # ------------------------------------------------------------------ workspace archives

    @staticmethod
    def _upload_key(sandbox_id: str, region: str) -> str:
        return f"sandboxes/{sandbox_id}/workspace-upload-{region}.tar.gz"

    def upload_url(self, tenant: str, sandbox_id: str, region: Region, base_url: str) -> SignedUrl:
        """A signed ``PUT`` URL where the workspace archive for ``region`` is to be uploaded."""
        self._live(tenant, sandbox_id)
        return self.signer.sign(
            base_url=base_url,
            route=_UPLOAD_ROUTE,
            method="PUT",
            key=self._upload_key(sandbox_id, region),
            minutes=self.signed_url_minutes,
        )

    def initialize(self, tenant: str, sandbox_id: str, region: Region) -> int:
        """Extract the uploaded archive into the workspace; return the number of members.

        The archive is checked and extracted into a staging copy of the workspace, whose
        contents replace the workspace's only on success: a refused archive changes nothing.
        """
        self._live(tenant, sandbox_id)
        archive = self._storage / self._upload_key(sandbox_id, region)
        with self._sandbox_lock(sandbox_id):
            workspace = self._workspace_locked(tenant, sandbox_id)
            if not archive.is_file():
                raise NoUploadedArchive(
                    f"No archive was uploaded for local sandbox {sandbox_id} in region "
                    f"{region!r}: PUT a tar.gz to the URL from POST /local-sandbox/"
                    f"{sandbox_id}/upload-url?region={region} first."
                )
            staging = self._tmp / f"staging-{uuid.uuid4()}"
            try:
                copy_tree(workspace, staging)
                count = extract_archive(archive, staging, self.archive_limits)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            self._swap_contents(workspace, staging)
        self._touch(sandbox_id)
        return count

    def dump(self, tenant: str, sandbox_id: str, base_url: str) -> SignedUrl:
        """Archive the workspace (members ``.`` and ``./name``) behind a signed ``GET`` URL."""
        self._live(tenant, sandbox_id)
        key = f"sandboxes/{sandbox_id}/dumps/{uuid.uuid4()}.tar.gz"
        with self._sandbox_lock(sandbox_id):
            workspace = self._workspace_locked(tenant, sandbox_id)
            self._archive_to(workspace, key)
        return self._download_url(key, base_url)

    def _archive_to(self, folder: Path, key: str) -> None:
        """Write ``folder`` as a tar.gz object under ``key``, keeping a few per folder."""
        target = self._storage / key
        temp = self._tmp / f"archive-{uuid.uuid4()}.tar.gz"
        try:
            make_archive(folder, temp)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(temp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
        self._prune_dumps(target.parent)

    def _download_url(self, key: str, base_url: str) -> SignedUrl:
        return self.signer.sign(
            base_url=base_url,
            route=_DOWNLOAD_ROUTE,
            method="GET",
            key=key,
            minutes=self.signed_url_minutes,
        )

    @staticmethod
    def _prune_dumps(folder: Path) -> None:
        """Keep the newest archives of a folder only (older download URLs then answer 404)."""
        dumps = sorted(folder.glob("*.tar.gz"), key=lambda path: path.stat().st_mtime_ns)
        for old in dumps[:-_KEPT_DUMPS]:
            with contextlib.suppress(FileNotFoundError):
                old.unlink()

    # ------------------------------------------------------------------ per-server data

    def initialize_server_data(
        self, tenant: str, sandbox_id: str, server_name: str, document: Mapping[str, Any]
    ) -> None:
        """Store ``document`` (already validated) as the data of one of the sandbox's servers,
        replacing what it held."""
        self.require_server(tenant, sandbox_id, server_name)
        text = json.dumps(document, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
        with self._sandbox_lock(sandbox_id):
            self._workspace_locked(tenant, sandbox_id)
            with self._transaction() as db:
                db.execute(
                    "INSERT INTO server_data (sandbox_id, server_name, document, updated_ts) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT (sandbox_id, server_name) DO UPDATE SET "
                    "document = excluded.document, updated_ts = excluded.updated_ts",
                    (sandbox_id, server_name, text, self.now()),
                )
        self._touch(sandbox_id)

    def dump_server_data(
        self, tenant: str, sandbox_id: str, server_name: str
    ) -> dict[str, Any] | None:
        """The stored data of one of the sandbox's servers (``None``: never initialized)."""
        self.require_server(tenant, sandbox_id, server_name)
        with self._transaction() as db:
            row = db.execute(
                "SELECT document FROM server_data WHERE sandbox_id = ? AND server_name = ?",
                (sandbox_id, server_name),
            ).fetchone()
        if row is None:
            return None
        document: dict[str, Any] = json.loads(row["document"])
        return document

    # ------------------------------------------------------------------ executions

    @staticmethod
    def _check_execution_name(name: str) -> None:
        problem = execution_name_problem(name)
        if problem is not None:
            raise InvalidExecutionName(problem)

    @staticmethod
    def _execution_upload_key(sandbox_id: str, name: str, region: str) -> str:
        return f"sandboxes/{sandbox_id}/execution-uploads/{region}/{name}.tar.gz"

    def _execution_row(self, db: sqlite3.Connection, sandbox_id: str, name: str) -> ExecutionRecord:
        row = db.execute(
            "SELECT * FROM executions WHERE sandbox_id = ? AND name = ?", (sandbox_id, name)
        ).fetchone()
        if row is None:
            raise ExecutionNotFound(
                f"Local sandbox {sandbox_id} has no execution named {name!r}: upload an archive "
                "with POST .../execution-upload-url, then start it with POST .../execute."
            )
        return ExecutionRecord(
            sandbox_id=row["sandbox_id"],
            name=row["name"],
            run_id=row["run_id"],
            status=row["status"],
            created_ts=row["created_ts"],
            started_ts=row["started_ts"],
            finished_ts=row["finished_ts"],
            exit_code=row["exit_code"],
        )

    def get_execution(self, tenant: str, sandbox_id: str, name: str) -> ExecutionRecord:
        """One execution of a sandbox (:class:`ExecutionNotFound` if none was started)."""
        self._live(tenant, sandbox_id)
        self._check_execution_name(name)
        with self._transaction() as db:
            return self._execution_row(db, sandbox_id, name)

    def execution_upload_url(
        self, tenant: str, sandbox_id: str, name: str, region: Region, base_url: str
    ) -> SignedUrl:
        """A signed ``PUT`` URL for the archive (``main.py``, ...) of execution ``name``."""
        self._live(tenant, sandbox_id)
        self._check_execution_name(name)
        return self.signer.sign(
            base_url=base_url,
            route=_UPLOAD_ROUTE,
            method="PUT",
            key=self._execution_upload_key(sandbox_id, name, region),
            minutes=self.signed_url_minutes,
        )

    def execute(self, tenant: str, sandbox_id: str, name: str, region: Region) -> None:
        """Unpack the execution's uploaded archive and start running it in the background.

        The archive is checked like a workspace archive (:class:`ArchiveRejected` before
        anything runs). A finished execution of the same name is replaced; a pending or
        running one is a :class:`ExecutionConflict`.
        """
        self._live(tenant, sandbox_id)
        self._check_execution_name(name)
        archive = self._storage / self._execution_upload_key(sandbox_id, name, region)
        with self._sandbox_lock(sandbox_id):
            workspace = self._workspace_locked(tenant, sandbox_id)
            with self._transaction() as db, contextlib.suppress(ExecutionNotFound):
                current = self._execution_row(db, sandbox_id, name)
                if current.status in _ACTIVE:
                    raise ExecutionConflict(
                        f"Execution {name!r} of local sandbox {sandbox_id} is still "
                        f"{current.status}; wait for it to finish before running it again."
                    )
            if not archive.is_file():
                raise NoUploadedArchive(
                    f"No archive was uploaded for execution {name!r} of local sandbox "
                    f"{sandbox_id} in region {region!r}: PUT a tar.gz to the URL from POST "
                    f"/local-sandbox/{sandbox_id}/execution-upload-url?region={region} first."
                )
            staging = self._tmp / f"execution-{uuid.uuid4()}"
            try:
                (staging / "work").mkdir(parents=True)
                extract_archive(archive, staging / "work", self.archive_limits)
                (staging / "output.log").touch()
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            folder = self.execution_path(sandbox_id, name)
            folder.parent.mkdir(parents=True, exist_ok=True)
            if folder.exists():
                trash = self._tmp / f"old-{uuid.uuid4()}"
                os.rename(folder, trash)
                shutil.rmtree(trash, ignore_errors=True)
            os.rename(staging, folder)
            run_id = str(uuid.uuid4())
            with self._transaction() as db:
                db.execute(
                    "INSERT INTO executions (sandbox_id, name, run_id, status, created_ts) "
                    "VALUES (?, ?, ?, 'pending', ?) ON CONFLICT (sandbox_id, name) DO UPDATE SET "
                    "run_id = excluded.run_id, status = 'pending', created_ts = "
                    "excluded.created_ts, started_ts = NULL, finished_ts = NULL, exit_code = NULL",
                    (sandbox_id, name, run_id, self.now()),
                )
            run = ExecutionRun(
                folder=folder,
                workspace=workspace,
                settings=self.run_settings,
                on_running=lambda: self._execution_running(sandbox_id, name, run_id),
                on_finished=lambda status, code: self._execution_finished(
                    sandbox_id, name, run_id, status, code
                ),
                label=f"{sandbox_id}/{name}",
            )
            with self._runs_lock:
                self._runs[(sandbox_id, name)] = run
            run.start()
        self._touch(sandbox_id)

    def _execution_running(self, sandbox_id: str, name: str, run_id: str) -> None:
        with contextlib.suppress(RuntimeError), self._transaction() as db:
            db.execute(
                "UPDATE executions SET status = 'running', started_ts = ? "
                "WHERE sandbox_id = ? AND name = ? AND run_id = ? AND status = 'pending'",
                (self.now(), sandbox_id, name, run_id),
            )
        self._status_bump()

    def _status_bump(self) -> None:
        with self._status_changed:
            self._status_version += 1
            self._status_changed.notify_all()

    def _execution_finished(
        self, sandbox_id: str, name: str, run_id: str, status: str, exit_code: int | None
    ) -> None:
        with contextlib.suppress(RuntimeError), self._transaction() as db:
            db.execute(
                "UPDATE executions SET status = ?, finished_ts = ?, exit_code = ? "
                "WHERE sandbox_id = ? AND name = ? AND run_id = ? "
                "AND status IN ('pending', 'running')",
                (status, self.now(), exit_code, sandbox_id, name, run_id),
            )
        self._status_bump()

    def _stop_runs(self, sandbox_id: str) -> None:
        """Kill the sandbox's running executions (their outcome is not recorded)."""
        with self._runs_lock:
            keys = [key for key in self._runs if key[0] == sandbox_id]
            runs = [self._runs.pop(key) for key in keys]
        for run in runs:
            run.kill()

    def _fail_interrupted_executions(self) -> None:
        """Mark executions that were pending or running when the emulator stopped as failed."""
        with self._transaction() as db:
            rows = db.execute(
                "SELECT sandbox_id, name FROM executions WHERE status IN ('pending', 'running')"
            ).fetchall()
            for row in rows:
                with contextlib.suppress(OSError, InvalidExecutionName, ValueError):
                    append_note(
                        self.execution_path(row["sandbox_id"], row["name"]) / "output.log",
                        "The emulator restarted while this execution was running; "
                        "it was stopped and is marked failed.",
                    )
            db.execute(
                "UPDATE executions SET status = 'failed', finished_ts = ? "
                "WHERE status IN ('pending', 'running')",
                (self.now(),),
            )

    def execution_status(self, tenant: str, sandbox_id: str, name: str) -> str:
        """``pending``, ``running``, ``completed`` or ``failed``."""
        return self.get_execution(tenant, sandbox_id, name).status

    def execution_logs(
        self, tenant: str, sandbox_id: str, name: str, cursor: int
    ) -> tuple[str, str, int]:
        """``(status, text after the byte cursor, next cursor)``; see :func:`read_log`."""
        if cursor < 0:
            raise ValueError("the cursor must not be negative")
        record = self.get_execution(tenant, sandbox_id, name)
        text, next_cursor = read_log(
            self.execution_path(sandbox_id, name) / "output.log",
            cursor,
            final=record.status in FINAL_STATUSES,
        )
        return record.status, text, next_cursor

    def export_artifacts(self, tenant: str, sandbox_id: str, name: str, base_url: str) -> SignedUrl:
        """Archive a finished execution's working directory behind a signed ``GET`` URL."""
        record = self.get_execution(tenant, sandbox_id, name)
        if record.status not in FINAL_STATUSES:
            raise ExecutionConflict(
                f"Execution {name!r} of local sandbox {sandbox_id} is still {record.status}; "
                "its artifacts can be exported once it has completed or failed."
            )
        key = f"sandboxes/{sandbox_id}/artifacts/{name}/{uuid.uuid4()}.tar.gz"
        with self._sandbox_lock(sandbox_id):
            self._workspace_locked(tenant, sandbox_id)
            work = self.execution_path(sandbox_id, name) / "work"
            work.mkdir(parents=True, exist_ok=True)
            self._archive_to(work, key)
        return self._download_url(key, base_url)

    def wait_for_execution(
        self,
        tenant: str,
        sandbox_id: str,
        name: str,
        *,
        statuses: Collection[str] = FINAL_STATUSES,
        timeout: float = 60.0,
    ) -> str:
        """Block until the execution's status is one of ``statuses``; return it (for tests).

        Raises :class:`TimeoutError` after ``timeout`` seconds, and
        :class:`ExecutionNotFound` / :class:`SandboxNotFound` if it disappears.
        """
        deadline = time.monotonic() + timeout
        while True:
            with self._status_changed:
                version = self._status_version
            status = self.execution_status(tenant, sandbox_id, name)
            if status in statuses:
                return status
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"execution {name!r} is still {status} after {timeout} s")
            with self._status_changed:
                self._status_changed.wait_for(
                    functools.partial(self._status_moved_since, version), timeout=remaining
                )

    def _status_moved_since(self, version: int) -> bool:
        return self._status_version != version

    # ------------------------------------------------------------------ signed storage

    def _storage_sandbox_is_live(self, key: str, *, expire: bool = True) -> bool:
        match = _SANDBOX_KEY_RE.match(key)
        if match is None:
            return False
        if expire:
            self._expire_due()
        with self._transaction() as db:
            row = db.execute(
                "SELECT 1 FROM sandboxes WHERE id = ? AND released_ts IS NULL", (match[1],)
            ).fetchone()
        return row is not None

    def begin_upload(
        self, key: str, *, expires: str | None, signature: str | None, content_length: int | None
    ) -> UploadWriter:
        """Check a signed ``PUT`` and return a writer for its body.

        Raises :class:`~klavis_emulator._signing.SignatureError` (bad or expired signature),
        :class:`ObjectNotFound` (the sandbox is gone) or :class:`UploadTooLarge`.
        """
        self.signer.verify(method="PUT", key=key, expires=expires, signature=signature)
        path = self.object_path(key)
        if not self._storage_sandbox_is_live(key):
            raise ObjectNotFound("The sandbox this upload URL was issued for no longer exists.")
        if content_length is not None and content_length > self.max_upload_bytes:
            raise UploadTooLarge(
                f"The upload ({content_length} bytes) is larger than the emulator's limit of "
                f"{self.max_upload_bytes} bytes."
            )
        temp = self._tmp / f"upload-{uuid.uuid4()}"
        return UploadWriter(path, temp, self.max_upload_bytes, self._publish_upload)

    def _publish_upload(self, temp: Path, final: Path) -> None:
        """Move a received upload into place, unless its sandbox was released meanwhile."""
        key = final.relative_to(self._storage).as_posix()
        match = _SANDBOX_KEY_RE.match(key)
        if match is None:  # pragma: no cover - begin_upload only accepts sandbox keys
            raise ObjectNotFound("This storage URL does not name a valid object.")
        self._expire_due()  # not under the sandbox lock: expiry takes that lock itself
        with self._sandbox_lock(match[1]):
            if not self._storage_sandbox_is_live(key, expire=False):
                raise ObjectNotFound("The sandbox this upload URL was issued for no longer exists.")
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(temp, final)

    def open_download(
        self, key: str, *, expires: str | None, signature: str | None
    ) -> tuple[BinaryIO, int]:
        """Check a signed ``GET``; return the object opened for reading and its size.

        The caller closes the file. It stays readable even if the sandbox is released
        while it is being streamed.
        """
        self.signer.verify(method="GET", key=key, expires=expires, signature=signature)
        path = self.object_path(key)
        if self._storage_sandbox_is_live(key):
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                stream = path.open("rb")
                return stream, os.fstat(stream.fileno()).st_size
        raise ObjectNotFound(
            "The object behind this download URL no longer exists (its sandbox was released)."
        )
