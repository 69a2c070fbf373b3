"""The emulator's backend state, kept apart from HTTP (no FastAPI here).

State lives in one SQLite file (``emulator.sqlite3``) and a few folders under the data
directory::

    <data_dir>/emulator.sqlite3      sandboxes and their servers (one row each)
    <data_dir>/signing.key           the per-emulator HMAC secret for signed URLs
    <data_dir>/workspaces/<id>/      one workspace folder per live sandbox
    <data_dir>/storage/<key>         objects behind signed URLs (uploads, dumps)
    <data_dir>/tmp/                  staging folders, emptied on start

Every public method takes the caller's *tenant* (a hash of its bearer token, never the
token) and answers :class:`SandboxNotFound` for sandboxes of other tenants. All times come
from an injectable :class:`~klavis_emulator._clock.Clock`; sandboxes whose TTL ran out are
released lazily, before any operation looks at them. The object is safe to use from
several threads at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final, Literal

from ._archive import ArchiveLimits, copy_tree, extract_archive, make_archive
from ._clock import Clock, OffsetClock, isoformat
from ._signing import SignedUrl, UrlSigner, is_valid_object_key

__all__ = [
    "BENCHMARKS",
    "LOCAL_SERVER_NAMES",
    "REGIONS",
    "EmulatorError",
    "EmulatorState",
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

LOCAL_SERVER_NAMES: Final[tuple[str, ...]] = (
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
)
BENCHMARKS: Final[tuple[str, ...]] = ("MCP_Atlas", "Toolathlon", "MCP_Mark")
REGIONS: Final[tuple[str, ...]] = ("us", "asia")

Region = Literal["us", "asia"]

_UPLOAD_ROUTE: Final = "/_storage/upload"
_DOWNLOAD_ROUTE: Final = "/_storage/download"
_SANDBOX_KEY_RE = re.compile(r"^sandboxes/([0-9a-f-]{36})/")
_KEPT_DUMPS = 8

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


class EmulatorState:
    """Sandboxes, workspaces and stored objects of one emulator (see the module docs)."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        signed_url_minutes: int = 30,
        max_upload_bytes: int = 1024 * 1024 * 1024,
        archive_limits: ArchiveLimits | None = None,
    ) -> None:
        if signed_url_minutes < 1:
            raise ValueError("signed_url_minutes must be at least 1")
        if max_upload_bytes < 1:
            raise ValueError("max_upload_bytes must be at least 1")
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.clock: Clock = clock if clock is not None else OffsetClock()
        self.signed_url_minutes = signed_url_minutes
        self.max_upload_bytes = max_upload_bytes
        self.archive_limits = archive_limits or ArchiveLimits()

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_file = _lock_data_dir(self.data_dir)
        self._workspaces = self.data_dir / "workspaces"
        self._storage = self.data_dir / "storage"
        self._tmp = self.data_dir / "tmp"
        for folder in (self._workspaces, self._storage):
            folder.mkdir(exist_ok=True)
        shutil.rmtree(self._tmp, ignore_errors=True)
        self._tmp.mkdir()

        self.signer = UrlSigner(self._load_secret(), self.clock)
        self._db_lock = threading.RLock()
        self._locks_lock = threading.Lock()
        self._sandbox_locks: dict[str, threading.RLock] = {}
        self._db = sqlite3.connect(
            self.data_dir / "emulator.sqlite3", check_same_thread=False, isolation_level=None
        )
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._migrate()
        self._closed = False

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

    def close(self) -> None:
        """Close the database (idempotent)."""
        with self._db_lock:
            if not self._closed:
                self._closed = True
                self._db.close()
                self._lock_file.close()  # releases the data-dir lock

    def workspace_path(self, sandbox_id: str) -> Path:
        """The workspace folder of a sandbox (it exists while the sandbox is live)."""
        return self._workspaces / str(uuid.UUID(sandbox_id))

    def object_path(self, key: str) -> Path:
        """The file behind an object key."""
        if not is_valid_object_key(key):
            raise ObjectNotFound("This storage URL does not name a valid object.")
        return self._storage / key

    def now(self) -> float:
        """The emulator clock's current time."""
        return self.clock.time()

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

    def _delete_files(self, sandbox_id: str) -> None:
        with self._sandbox_lock(sandbox_id):
            shutil.rmtree(self.workspace_path(sandbox_id), ignore_errors=True)
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

    def release(self, tenant: str, sandbox_id: str, *, is_ttl: bool = False) -> str:
        """Release a sandbox: it is no longer listed, its workspace and objects are deleted."""
        self._expire_due()
        with self._transaction() as db:
            self._live_row(db, tenant, sandbox_id)
            self._mark_released(db, sandbox_id, self.now(), "ttl" if is_ttl else "api")
        self._delete_files(sandbox_id)
        return (
            f"Local sandbox release started for {sandbox_id}: "
            "it will be released asynchronously in background."
        )

    def reset(self, tenant: str, sandbox_id: str) -> str:
        """Empty the sandbox's workspace; the id and servers stay."""
        self._live(tenant, sandbox_id)
        with self._sandbox_lock(sandbox_id):
            workspace = self._workspace_locked(tenant, sandbox_id)
            old = self._tmp / f"old-{uuid.uuid4()}"
            os.rename(workspace, old)
            workspace.mkdir()
            shutil.rmtree(old, ignore_errors=True)
        self._touch(sandbox_id)
        return f"Local sandbox {sandbox_id} was reset to its initial state (workspace emptied)."

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
                f"(it holds: {', '.join(record.server_names)})."
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

        The archive is checked and extracted into a staging copy of the workspace, which
        replaces the workspace only on success: a refused archive changes nothing.
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
            old = self._tmp / f"old-{uuid.uuid4()}"
            os.rename(workspace, old)
            os.rename(staging, workspace)
            shutil.rmtree(old, ignore_errors=True)
        self._touch(sandbox_id)
        return count

    def dump(self, tenant: str, sandbox_id: str, base_url: str) -> SignedUrl:
        """Archive the workspace (members ``.`` and ``./name``) behind a signed ``GET`` URL."""
        self._live(tenant, sandbox_id)
        key = f"sandboxes/{sandbox_id}/dumps/{uuid.uuid4()}.tar.gz"
        target = self._storage / key
        temp = self._tmp / f"dump-{uuid.uuid4()}.tar.gz"
        with self._sandbox_lock(sandbox_id):
            workspace = self._workspace_locked(tenant, sandbox_id)
            try:
                make_archive(workspace, temp)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(temp, target)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    temp.unlink()
            self._prune_dumps(target.parent)
        return self.signer.sign(
            base_url=base_url,
            route=_DOWNLOAD_ROUTE,
            method="GET",
            key=key,
            minutes=self.signed_url_minutes,
        )

    @staticmethod
    def _prune_dumps(folder: Path) -> None:
        """Keep the newest dumps of a sandbox only (older download URLs then answer 404)."""
        dumps = sorted(folder.glob("*.tar.gz"), key=lambda path: path.stat().st_mtime_ns)
        for old in dumps[:-_KEPT_DUMPS]:
            with contextlib.suppress(FileNotFoundError):
                old.unlink()

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
