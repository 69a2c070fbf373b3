"""The emulator's backend state, kept apart from HTTP (no FastAPI here).

State lives in one SQLite file (``emulator.sqlite3``) and a few folders under the data
directory::

    <data_dir>/emulator.sqlite3      sandboxes, servers, per-server data, executions, settings
    <data_dir>/signing.key           the per-emulator HMAC secret for signed URLs
    <data_dir>/workspaces/<id>/      one workspace folder per live sandbox
    <data_dir>/workspaces/.tmp/      its staging copies, trash and spares, emptied on start
    <data_dir>/executions/<id>/<name>/   one folder per execution (see ``_exec/runner.py``)
    <data_dir>/executions/.tmp/      their staging and trash, emptied on start
    <data_dir>/storage/<key>         objects behind signed URLs (uploads, dumps, artifacts)
    <data_dir>/tmp/                  staging folders of storage, emptied on start
    <data_dir>/.overlay/             the overlays' empty layer, work folders and lock

Confined, ``workspaces/`` and ``executions/`` are overlays held by a process of their own,
and every access to them goes through it (:attr:`EmulatorState.folders` are those paths):
see :mod:`klavis_emulator._exec.data_overlay`.

:class:`EmulatorState` is the one object the routes, the MCP host and the tests use. It is
made of one part per resource, each in its own module:

=================  ==================================================================
``db``             the data folder's lock and layout, SQLite, migrations, locks
``sandboxes``      sandboxes and their workspace folder: acquire, TTL, release, reset
``workspaces``     a workspace's contents: seed from an archive, dump, empty
``server_data``    the per-server data documents
``executions``     executions and their runs
``storage``        objects behind signed URLs: uploads, downloads, dumps
``errors``         the :class:`EmulatorError` tree
=================  ==================================================================

Every public method takes the caller's *tenant* (a hash of its bearer token, never the
token) and answers :class:`SandboxNotFound` for sandboxes of other tenants. All times come
from an injectable :class:`~klavis_emulator._clock.Clock`; sandboxes whose TTL ran out are
released before any operation looks at them, and by a background reaper thread every few
seconds. The object is safe to use from several threads at once.

The workspace folder of a sandbox keeps its identity (its inode) from one reset to the next:
``initialize`` and ``reset`` swap its *contents*, so processes that bind-mount it or hold it
as their working directory (MCP servers, running executions) keep seeing the live workspace.
A reset, which ends all those processes, may instead make a fresh folder the workspace, one
that MCP servers started ahead already use (see :meth:`EmulatorState.supply_fresh_workspaces`).

Other modules can follow sandboxes going away through :meth:`EmulatorState.add_listener`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Final, Literal

from .._benchmark_data import SERVER_DATA_FOLDER, BenchmarkPack, load_packs
from .._clock import Clock, OffsetClock
from .._config import EmulatorConfig
from .._exec import RunSettings, decide_confinement
from .._exec.data_overlay import DataOverlay, start_data_overlay
from .._signing import SignedUrl
from .db import Database, Folders
from .errors import (
    EmulatorError,
    ExecutionConflict,
    ExecutionNotFound,
    InvalidExecutionName,
    NoUploadedArchive,
    ObjectNotFound,
    OutOfSpace,
    SandboxNotFound,
    ServerNotInSandbox,
    UploadTooLarge,
)
from .executions import ExecutionRecord, Executions, WaitOptions
from .sandboxes import (
    BENCHMARKS,
    LOCAL_SERVER_NAMES,
    AcquireOptions,
    FreshWorkspaces,
    ListenerHooks,
    Sandboxes,
    SandboxRecord,
    ServerName,
    ServerRecord,
    tenant_for_token,
)
from .server_data import ServerData
from .storage import REGIONS, Region, Storage, UploadWriter
from .workspaces import Workspaces

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "AcquireOptions",
    "ListenerHooks",
    "WaitOptions",
    "BENCHMARKS",
    "LOCAL_SERVER_NAMES",
    "ServerName",
    "REGIONS",
    "EmulatorError",
    "DataOverlay",
    "EmulatorState",
    "ExecutionConflict",
    "ExecutionNotFound",
    "ExecutionRecord",
    "InvalidExecutionName",
    "NoUploadedArchive",
    "ObjectNotFound",
    "OutOfSpace",
    "Region",
    "SandboxNotFound",
    "SandboxRecord",
    "ServerNotInSandbox",
    "ServerRecord",
    "UploadTooLarge",
    "UploadWriter",
    "tenant_for_token",
]

logger = logging.getLogger("klavis_emulator")

_CLOCK_OFFSET: Final = "clock_offset"


class EmulatorState:
    """Sandboxes, workspaces and stored objects of one emulator (see the module docs).

    The parts are attributes (``sandboxes``, ``workspaces``, ``server_data``,
    ``executions``, ``storage``); the methods below are the state's one public surface and
    hand each call to its part.
    """

    def __init__(self, config: EmulatorConfig) -> None:
        """Open (or create) the state in ``config.data_dir`` (see :class:`EmulatorConfig`
        for the tunables this reads: data dir, clock, signed URLs, uploads, archives,
        executions, confinement and the TTL reaper).

        Without ``config.clock``, the state uses an :class:`~klavis_emulator.OffsetClock`
        whose offset is stored in the data dir, so time moved forward by
        ``/_emulator/clock/advance`` stays moved across a restart.

        Raises:
            ConfinementError: bubblewrap is installed but cannot confine here (and
                confinement was not turned off); nothing was created or locked yet.
        """
        # First, before the data dir is touched: a confinement that does not work stops the
        # emulator here, with the reason and the way out (never a line in every run's log).
        confinement = decide_confinement(config.confine_executions)
        self._packs = load_packs(config.benchmark_data)  # a bad pack stops it here too
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
        self._db = Database(self.data_dir)
        folders = Folders.create(self.data_dir)
        # Confined, the tenant folders are overlays held by a process of their own, and
        # reached only through it from here on (see klavis_emulator/_exec/data_overlay.py).
        self._overlay: DataOverlay | None = None
        self.data_overlay_problem = "unconfined: nothing is mounted for anyone"
        """Why the tenant folders have no overlays (``""`` when they have)."""
        if confinement.enabled:
            made = start_data_overlay(self.data_dir)
            if isinstance(made, str):
                self.data_overlay_problem = made
            else:
                self._overlay, self.data_overlay_problem = made, ""
                folders = folders.through(made.view)
        self.folders = folders

        clock = config.clock
        if clock is None:
            owned = OffsetClock(offset=self._load_clock_offset())
            owned.on_advance(self._save_clock_offset)
            clock = owned
        self.clock: Clock = clock

        self._sandboxes = Sandboxes(self._db, folders, clock)
        self._storage = Storage(
            self._sandboxes,
            signed_url_minutes=config.signed_url_minutes,
            max_upload_bytes=config.max_upload_bytes,
        )
        self.signer = self._storage.signer
        self._workspaces = Workspaces(self._sandboxes, self._storage, config.archive_limits)
        self._server_data = ServerData(self._sandboxes)
        self.run_settings = RunSettings(
            timeout=config.execution_timeout,
            allow_network=config.allow_network,
            confinement=confinement,
        )
        self._executions = Executions(
            self._sandboxes,
            self._storage,
            run_settings=self.run_settings,
            archive_limits=config.archive_limits,
        )
        # The order in which a release or reset reaches them: rows of server data, then of
        # executions; files of executions, then of storage; the workspace is emptied last.
        for part in (self._server_data, self._executions, self._storage, self._workspaces):
            self._sandboxes.attach(part)

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

    def _load_clock_offset(self) -> float:
        value = self._db.setting(_CLOCK_OFFSET)
        try:
            return max(0.0, float(value)) if value is not None else 0.0
        except ValueError:
            return 0.0

    def _save_clock_offset(self, offset: float) -> None:
        with contextlib.suppress(RuntimeError):
            self._db.put_setting(_CLOCK_OFFSET, repr(offset))

    def _reap(self, interval: float) -> None:
        while not self._stop_reaper.wait(interval):
            try:
                self._sandboxes.expire_due()
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
        if not self._db.refuse_new_work():
            return
        self._executions.kill_all()
        self._db.close()
        if self._overlay is not None:
            self._overlay.close()

    @property
    def data_overlay(self) -> DataOverlay | None:
        """The holder of the tenant folders' overlays, or ``None`` (unconfined, or where
        they could not be made: see :mod:`klavis_emulator._exec.data_overlay`)."""
        return self._overlay

    @property
    def spares_folder(self) -> Path:
        """Where spare servers' workspaces are made (on the workspaces' file system: a
        reset renames one into place); emptied when the state starts."""
        return self.folders.workspaces_tmp / "spares"

    def workspace_path(self, sandbox_id: str) -> Path:
        """The workspace folder of a sandbox (it exists while the sandbox is live)."""
        return self._sandboxes.workspace_path(sandbox_id)

    def execution_path(self, sandbox_id: str, name: str) -> Path:
        """The folder of one execution (``work/``, ``output.log``, ...)."""
        return self._executions.path(sandbox_id, name)

    def object_path(self, key: str) -> Path:
        """The file behind an object key."""
        return self._storage.object_path(key)

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
        self._sandboxes.expire_due()
        return self.now()

    def set_auth_data(
        self, sandbox_id: str, server_name: str, auth_data: Mapping[str, Any] | None
    ) -> None:
        """Set the ``auth_data`` of a live sandbox's server item (see :meth:`Sandboxes.set_auth_data
        <.sandboxes.Sandboxes.set_auth_data>`)."""
        self._sandboxes.set_auth_data(sandbox_id, server_name, auth_data)

    def supply_fresh_workspaces(self, supplier: FreshWorkspaces | None) -> None:
        """Let resets take fresh workspace folders from ``supplier`` (see
        :meth:`Sandboxes.supply_fresh_workspaces
        <.sandboxes.Sandboxes.supply_fresh_workspaces>`)."""
        self._sandboxes.supply_fresh_workspaces(supplier)

    def add_listener(self, **hooks: Unpack[ListenerHooks]) -> Callable[[], None]:
        """Subscribe to sandboxes being acquired, going away or being reset; returns an
        unsubscribe function (see :meth:`Sandboxes.add_listener
        <.sandboxes.Sandboxes.add_listener>`)."""
        return self._sandboxes.add_listener(**hooks)

    # ------------------------------------------------------------------ sandboxes

    def acquire(
        self,
        tenant: str,
        server_names: Sequence[str] | Literal["ALL"],
        **options: Unpack[AcquireOptions],
    ) -> SandboxRecord:
        """Create a sandbox holding ``server_names`` (``"ALL"``: every local server; see
        :meth:`Sandboxes.acquire <.sandboxes.Sandboxes.acquire>`), with the benchmark's data
        when the configuration has a pack for it."""
        record = self._sandboxes.acquire(tenant, server_names, **options)
        pack = self._packs.get(record.benchmark) if record.benchmark is not None else None
        if pack is not None:
            try:
                self._apply_pack(tenant, record, pack)
            except BaseException:
                with contextlib.suppress(EmulatorError):  # nothing half-made stays acquired
                    self._sandboxes.release(tenant, record.id)
                raise
        return record

    def _apply_pack(self, tenant: str, record: SandboxRecord, pack: BenchmarkPack) -> None:
        """Give a sandbox its benchmark's files and the documents of the servers it holds."""
        self._workspaces.fill_from(tenant, record.id, pack.root, leave_out=SERVER_DATA_FOLDER)
        for server, document in pack.documents.items():
            if server in record.server_names:
                self._server_data.initialize(tenant, record.id, server, document)

    def list_sandboxes(self, tenant: str) -> list[SandboxRecord]:
        """The tenant's live sandboxes, oldest first."""
        return self._sandboxes.list_sandboxes(tenant)

    def get(self, tenant: str, sandbox_id: str) -> SandboxRecord:
        """One live sandbox of the tenant, or :class:`SandboxNotFound`."""
        return self._sandboxes.live(tenant, sandbox_id)

    def find_live(self, sandbox_id: str) -> SandboxRecord | None:
        """The live sandbox with this id, whatever its tenant; ``None`` if there is none
        (or the state is closed). For URLs that carry only the id (MCP server URLs)."""
        return self._sandboxes.find_live(sandbox_id)

    def release(self, tenant: str, sandbox_id: str, *, is_ttl: bool = False) -> str:
        """Release a sandbox: it is no longer listed; its workspace, data, executions
        (running ones are killed) and objects are deleted."""
        return self._sandboxes.release(tenant, sandbox_id, is_ttl=is_ttl)

    def reset(self, tenant: str, sandbox_id: str) -> str:
        """Start the sandbox's life again: its processes end (executions, MCP servers and what
        they started), the workspace, the per-server data and the executions are emptied; the
        id and the servers stay. A sandbox of a benchmark with a pack gets the pack again:
        that is its initial state."""
        record = self._sandboxes.live(tenant, sandbox_id)
        pack = self._packs.get(record.benchmark) if record.benchmark is not None else None
        refill = None if pack is None else functools.partial(self._apply_pack, tenant, record, pack)
        return self._sandboxes.reset(tenant, sandbox_id, refill=refill)

    def require_server(self, tenant: str, sandbox_id: str, server_name: str) -> SandboxRecord:
        """The sandbox, if it holds ``server_name`` (else :class:`ServerNotInSandbox`)."""
        return self._sandboxes.require_server(tenant, sandbox_id, server_name)

    # ------------------------------------------------------------------ workspaces

    def upload_url(self, tenant: str, sandbox_id: str, region: Region, base_url: str) -> SignedUrl:
        """A signed ``PUT`` URL where the workspace archive for ``region`` is to be uploaded."""
        return self._workspaces.upload_url(tenant, sandbox_id, region, base_url)

    def initialize(self, tenant: str, sandbox_id: str, region: Region) -> int:
        """Extract the uploaded archive into the workspace (all or nothing); return the number
        of members."""
        return self._workspaces.initialize(tenant, sandbox_id, region)

    def dump(self, tenant: str, sandbox_id: str, base_url: str) -> SignedUrl:
        """Archive the workspace (members ``.`` and ``./name``) behind a signed ``GET`` URL."""
        return self._workspaces.dump(tenant, sandbox_id, base_url)

    # ------------------------------------------------------------------ per-server data

    def initialize_server_data(
        self, tenant: str, sandbox_id: str, server_name: str, document: Mapping[str, Any]
    ) -> None:
        """Store ``document`` (already validated) as the data of one of the sandbox's servers,
        replacing what it held."""
        self._server_data.initialize(tenant, sandbox_id, server_name, document)

    def dump_server_data(
        self, tenant: str, sandbox_id: str, server_name: str
    ) -> dict[str, Any] | None:
        """The stored data of one of the sandbox's servers (``None``: never initialized)."""
        return self._server_data.dump(tenant, sandbox_id, server_name)

    # ------------------------------------------------------------------ executions

    def get_execution(self, tenant: str, sandbox_id: str, name: str) -> ExecutionRecord:
        """One execution of a sandbox (:class:`ExecutionNotFound` if none was started)."""
        return self._executions.get(tenant, sandbox_id, name)

    def execution_upload_url(
        self, tenant: str, sandbox_id: str, name: str, region: Region, base_url: str
    ) -> SignedUrl:
        """A signed ``PUT`` URL for the archive (``main.py``, ...) of execution ``name``."""
        return self._executions.upload_url(tenant, sandbox_id, name, region, base_url)

    def execute(self, tenant: str, sandbox_id: str, name: str, region: Region) -> None:
        """Unpack the execution's uploaded archive and start running it in the background
        (a pending or running one of that name is a :class:`ExecutionConflict`)."""
        self._executions.execute(tenant, sandbox_id, name, region)

    def execution_status(self, tenant: str, sandbox_id: str, name: str) -> str:
        """``pending``, ``running``, ``completed`` or ``failed``."""
        return self._executions.status(tenant, sandbox_id, name)

    def execution_logs(
        self, tenant: str, sandbox_id: str, name: str, cursor: int
    ) -> tuple[str, str, int]:
        """``(status, text after the byte cursor, next cursor)``."""
        return self._executions.logs(tenant, sandbox_id, name, cursor)

    def export_artifacts(self, tenant: str, sandbox_id: str, name: str, base_url: str) -> SignedUrl:
        """Archive a finished execution's working directory behind a signed ``GET`` URL."""
        return self._executions.export_artifacts(tenant, sandbox_id, name, base_url)

    def wait_for_execution(
        self, tenant: str, sandbox_id: str, name: str, **options: Unpack[WaitOptions]
    ) -> str:
        """Block until the execution's status is one of ``statuses`` (default: a final one);
        return it (for tests; see :meth:`Executions.wait <.executions.Executions.wait>`)."""
        return self._executions.wait(tenant, sandbox_id, name, **options)

    # ------------------------------------------------------------------ signed storage

    def begin_upload(
        self, key: str, *, expires: str | None, signature: str | None, content_length: int | None
    ) -> UploadWriter:
        """Check a signed ``PUT`` and return a writer for its body (see
        :meth:`Storage.begin_upload <.storage.Storage.begin_upload>`)."""
        return self._storage.begin_upload(
            key, expires=expires, signature=signature, content_length=content_length
        )

    def open_download(
        self, key: str, *, expires: str | None, signature: str | None
    ) -> tuple[BinaryIO, int]:
        """Check a signed ``GET``; return the object opened for reading and its size (the
        caller closes it; it stays readable if the sandbox is released meanwhile)."""
        return self._storage.open_download(key, expires=expires, signature=signature)
