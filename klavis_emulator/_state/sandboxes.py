"""Sandboxes: their rows, their workspace folder, their tenant and TTL, and their end.

A sandbox is a row of ``sandboxes`` with its ``servers``, owned by one tenant (a hash of its
bearer token, never the token), plus one workspace folder that lives exactly as long as the
sandbox and keeps its identity (its inode) from one reset to the next: the contents change
(see :mod:`.workspaces`), the folder does not, so processes that bind-mount it or hold it as
their working directory (MCP servers, running executions) keep seeing the live workspace. A
reset, which ends all those processes, may give the sandbox another folder at the same path:
one that fresh MCP servers, started ahead, already have as their workspace
(:meth:`Sandboxes.supply_fresh_workspaces`).

Sandboxes whose TTL ran out are released before any operation looks at them
(:meth:`Sandboxes.expire_due`). Releasing and resetting touch what the other parts hold of a
sandbox (per-server data, executions, stored objects): each part is a :class:`SandboxPart`
given to :meth:`Sandboxes.attach`, told when a sandbox is released or reset. Other modules
follow sandboxes going away through :meth:`Sandboxes.add_listener`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias, TypedDict

from .._benchmark_data import BENCHMARKS
from .._clock import Clock, isoformat
from .._contract import contract_enum
from .._exec import end_processes, sandbox_processes
from .._workspace import remove_tree
from .db import Database, Folders, from_row
from .errors import SandboxNotFound, ServerNotInSandbox

__all__ = [
    "AcquireOptions",
    "ListenerHooks",
    "BENCHMARKS",
    "LOCAL_SERVER_NAMES",
    "SandboxPart",
    "SandboxRecord",
    "Sandboxes",
    "ServerName",
    "ServerRecord",
    "FreshWorkspaces",
    "tenant_for_token",
]

logger = logging.getLogger("klavis_emulator")

LOCAL_SERVER_NAMES: Final[tuple[str, ...]] = contract_enum("LocalSandboxMCPServer")
"""The contract's ``LocalSandboxMCPServer`` enum, read from it (:mod:`klavis_emulator._contract`);
the library writes the same names out as its ``ServerName`` type (a type checker reads a
``Literal`` only when it is written out; ``tests/workflows/test_config_errors.py`` holds the
two equal)."""

if TYPE_CHECKING:
    ServerName: TypeAlias = str
else:
    ServerName = Literal[LOCAL_SERVER_NAMES]
"""One of :data:`LOCAL_SERVER_NAMES`, as a type (for pydantic: the enum of the emulator's
``/openapi.json``; for a type checker, which cannot read the contract, a ``str``)."""

FreshWorkspaces = Callable[[str, Sequence[str]], "Path | None"]
"""``(sandbox_id, server_names) -> folder or None``: see
:meth:`Sandboxes.supply_fresh_workspaces`."""


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
    auth_data: Mapping[str, Any] | None = field(default=None, repr=False)
    """What the server item's ``auth_data`` says (see :meth:`Sandboxes.set_auth_data`)."""


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
            "auth_data": None if server.auth_data is None else dict(server.auth_data),
            "tags": None,
        }


class AcquireOptions(TypedDict, total=False):
    """The keywords of :meth:`Sandboxes.acquire` (for what passes them on)."""

    benchmark: str | None
    test_account_email: str | None
    ttl_seconds: int | None


class ListenerHooks(TypedDict, total=False):
    """The hooks of :meth:`Sandboxes.add_listener` (for what passes them on)."""

    on_gone: Callable[[str], None] | None
    on_reset: Callable[[str], None] | None
    on_acquired: Callable[[str], None] | None
    on_resetting: Callable[[str], None] | None


class SandboxPart:
    """What one part of the state holds of each sandbox, and how it lets go of it.

    :class:`Sandboxes` calls these, in the order the parts were attached, when a sandbox is
    released (``stop``, ``forget``, ``remove``) or reset (``stop``, ``forget``, ``clear``).
    Each does nothing unless a part overrides it. A part works on the database, the clock
    and the temporary folder of the :class:`Sandboxes` it serves.
    """

    def __init__(self, sandboxes: Sandboxes) -> None:
        self._sandboxes = sandboxes
        self._db = sandboxes.db
        self._clock = sandboxes.clock
        self._tmp = sandboxes.folders.tmp

    def stop(self, sandbox_id: str) -> None:
        """Stop the sandbox's activity (before its files go); no lock is held."""

    def forget(self, db: sqlite3.Connection, sandbox_id: str) -> None:
        """Delete the sandbox's rows, inside the releasing (or resetting) transaction."""

    def remove(self, sandbox_id: str) -> None:
        """Delete the files of a released sandbox (its lock is held)."""

    def clear(self, sandbox_id: str, workspace: Path) -> None:
        """Empty what a reset empties, after :meth:`forget` (the sandbox's lock is held)."""


@dataclass(frozen=True)
class _Listener:
    on_gone: Callable[[str], None] | None
    on_reset: Callable[[str], None] | None
    on_acquired: Callable[[str], None] | None = None
    on_resetting: Callable[[str], None] | None = None


class Sandboxes:
    """The sandboxes of one emulator: acquire, look up, release, reset, expire."""

    def __init__(self, db: Database, folders: Folders, clock: Clock) -> None:
        self.db = db
        self.folders = folders
        self.clock = clock
        self._parts: list[SandboxPart] = []
        self._listeners: list[_Listener] = []
        self._listeners_lock = threading.Lock()
        # (sandbox id, server) -> auth_data; kept in memory: what it describes (a mail
        # server's processes) does not outlive the emulator either
        self._auth_data: dict[tuple[str, str], Mapping[str, Any]] = {}
        self._auth_data_lock = threading.Lock()
        self._fresh_workspaces: FreshWorkspaces | None = None

    def attach(self, part: SandboxPart) -> None:
        """Tell ``part`` about releases and resets from now on (after the parts before it)."""
        self._parts.append(part)

    def supply_fresh_workspaces(self, supplier: FreshWorkspaces | None) -> None:
        """Let a reset ask ``supplier(sandbox_id, server_names)`` for a fresh workspace
        folder (None: keep the sandbox's own); None: ask no one.

        It is asked once the sandbox's processes have all ended, with the sandbox's lock
        held, and answers an empty folder in the workspaces' staging folder
        (:attr:`~.db.Folders.workspaces_tmp`: on their file system, the overlay where there
        is one) that processes started ahead (the MCP host's spare servers) have as their
        workspace: the reset renames the old workspace away and the given folder to the
        workspace's path, then empties it as any reset does. If the rename fails, the old
        folder stays (emptied) and the given one is left where it was (the supplier finds
        out from the workspace's inode, and closes what it started)."""
        self._fresh_workspaces = supplier

    # ------------------------------------------------------------------ folders

    def workspace_path(self, sandbox_id: str) -> Path:
        """The workspace folder of a sandbox (it exists while the sandbox is live)."""
        return self.folders.workspaces / str(uuid.UUID(sandbox_id))

    def workspace_to_read(self, sandbox_id: str) -> Path:
        """The workspace folder of a sandbox, for reading only (:attr:`.db.Folders.
        workspaces_to_read`): never write through this path."""
        return self.folders.workspaces_to_read / str(uuid.UUID(sandbox_id))

    def workspace_locked(self, tenant: str, sandbox_id: str) -> Path:
        """Re-check liveness once the sandbox lock is held; return the (existing) workspace.

        A release that happened between the caller's first check and taking the lock
        must not be undone by recreating the workspace folder.
        """
        with self.db.transaction() as db:
            self._live_row(db, tenant, sandbox_id)
        workspace = self.workspace_path(sandbox_id)
        workspace.mkdir(exist_ok=True)
        return workspace

    # ------------------------------------------------------------------ listeners

    def add_listener(
        self,
        on_gone: Callable[[str], None] | None = None,
        on_reset: Callable[[str], None] | None = None,
        on_acquired: Callable[[str], None] | None = None,
        on_resetting: Callable[[str], None] | None = None,
    ) -> Callable[[], None]:
        """Subscribe to sandboxes being acquired, going away or being reset; returns an
        unsubscribe function.

        ``on_gone(sandbox_id)`` is called once a sandbox was released (through the API or
        because its TTL ran out, whichever thread noticed it), after its workspace and
        executions were removed. ``on_reset(sandbox_id)`` is called after a reset emptied
        the workspace, per-server data and executions (same id and servers).
        ``on_acquired(sandbox_id)`` is called once a new sandbox exists (its workspace made),
        before acquire answers. ``on_resetting(sandbox_id)`` is called when a reset begins,
        before anything is stopped or emptied: a listener that runs processes of the sandbox
        ends them before it returns (it may block), and may start them again in
        ``on_reset``, which follows even when the reset fails.

        Callbacks run synchronously on the thread that made the change (a request worker
        thread or the TTL reaper), outside the state's locks: keep them short and
        thread-safe (hand work to an event loop with ``call_soon_threadsafe``). Their
        exceptions are logged and otherwise ignored.
        """
        listener = _Listener(
            on_gone=on_gone, on_reset=on_reset, on_acquired=on_acquired, on_resetting=on_resetting
        )
        with self._listeners_lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._listeners_lock, contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return remove

    def _notify(
        self, event: Literal["gone", "reset", "resetting", "acquired"], sandbox_id: str
    ) -> None:
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            callback = {
                "gone": listener.on_gone,
                "reset": listener.on_reset,
                "resetting": listener.on_resetting,
                "acquired": listener.on_acquired,
            }[event]
            if callback is None:
                continue
            try:
                callback(sandbox_id)
            except Exception:
                logger.exception("a %s listener failed for sandbox %s", event, sandbox_id)

    # ------------------------------------------------------------------ records

    def set_auth_data(
        self, sandbox_id: str, server_name: str, auth_data: Mapping[str, Any] | None
    ) -> None:
        """Set what the ``auth_data`` of a live sandbox's server item says (the service
        puts the address of a server's backing service there, e.g. a mail server); dropped
        when the sandbox is released. Set from an ``on_acquired`` listener, it is in the
        acquire answer."""
        with self._auth_data_lock:
            if auth_data is None:
                self._auth_data.pop((sandbox_id, server_name), None)
            else:
                self._auth_data[(sandbox_id, server_name)] = dict(auth_data)

    def _load(self, db: sqlite3.Connection, row: sqlite3.Row) -> SandboxRecord:
        with self._auth_data_lock:
            auth_data = {
                name: data
                for (sandbox, name), data in self._auth_data.items()
                if sandbox == row["id"]
            }
        servers = tuple(
            from_row(ServerRecord, server, auth_data=auth_data.get(server["server_name"]))
            for server in db.execute(
                "SELECT * FROM servers WHERE sandbox_id = ? ORDER BY position", (row["id"],)
            )
        )
        return from_row(SandboxRecord, row, servers=servers)

    def _live_row(self, db: sqlite3.Connection, tenant: str, sandbox_id: str) -> sqlite3.Row:
        row: sqlite3.Row | None = db.execute(
            "SELECT * FROM sandboxes WHERE id = ? AND tenant = ? AND released_ts IS NULL",
            (sandbox_id, tenant),
        ).fetchone()
        if row is None:
            raise SandboxNotFound(sandbox_id)
        return row

    def live(self, tenant: str, sandbox_id: str) -> SandboxRecord:
        """One live sandbox of the tenant (expired ones released first), or
        :class:`SandboxNotFound`."""
        self.expire_due()
        with self.db.transaction() as db:
            return self._load(db, self._live_row(db, tenant, sandbox_id))

    def is_live(self, sandbox_id: str) -> bool:
        """Whether a sandbox with this id is live, whatever its tenant (no expiry first)."""
        with self.db.transaction() as db:
            row = db.execute(
                "SELECT 1 FROM sandboxes WHERE id = ? AND released_ts IS NULL", (sandbox_id,)
            ).fetchone()
        return row is not None

    def touch(self, sandbox_id: str) -> None:
        """Record that the sandbox (and its servers) changed now."""
        now = self.clock.time()
        with self.db.transaction() as db:
            db.execute("UPDATE sandboxes SET updated_ts = ? WHERE id = ?", (now, sandbox_id))
            db.execute("UPDATE servers SET updated_ts = ? WHERE sandbox_id = ?", (now, sandbox_id))

    # ------------------------------------------------------------------ the end of sandboxes

    def expire_due(self) -> None:
        """Release every sandbox whose TTL has run out by the clock."""
        now = self.clock.time()
        with self.db.transaction() as db:
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
        for part in self._parts:
            part.forget(db, sandbox_id)
        with self._auth_data_lock:
            for key in [key for key in self._auth_data if key[0] == sandbox_id]:
                del self._auth_data[key]

    def _delete_files(self, sandbox_id: str) -> None:
        for part in self._parts:
            part.stop(sandbox_id)
        with self.db.sandbox_lock(sandbox_id):
            remove_tree(self.workspace_path(sandbox_id))
            for part in self._parts:
                part.remove(sandbox_id)
        self.db.forget_sandbox_lock(sandbox_id)

    # ------------------------------------------------------------------ operations

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
        self.expire_due()
        now = self.clock.time()
        sandbox_id = str(uuid.uuid4())
        self.workspace_path(sandbox_id).mkdir()
        with self.db.transaction() as db:
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
        self._notify("acquired", sandbox_id)
        with self.db.transaction() as db:  # with what the listeners set (auth_data)
            return self._load(db, self._live_row(db, tenant, sandbox_id))

    def list_sandboxes(self, tenant: str) -> list[SandboxRecord]:
        """The tenant's live sandboxes, oldest first."""
        self.expire_due()
        with self.db.transaction() as db:
            rows = db.execute(
                "SELECT * FROM sandboxes WHERE tenant = ? AND released_ts IS NULL "
                "ORDER BY created_ts, id",
                (tenant,),
            ).fetchall()
            return [self._load(db, row) for row in rows]

    def find_live(self, sandbox_id: str) -> SandboxRecord | None:
        """The live sandbox with this id, whatever its tenant; ``None`` if there is none.

        For URLs that carry only the sandbox id (MCP server URLs, as on the service).
        Expired sandboxes are released first; a closed state answers ``None``.
        """
        try:
            self.expire_due()
            with self.db.transaction() as db:
                row = db.execute(
                    "SELECT * FROM sandboxes WHERE id = ? AND released_ts IS NULL", (sandbox_id,)
                ).fetchone()
                return None if row is None else self._load(db, row)
        except RuntimeError:  # closed: the emulator is stopping
            return None

    def release(self, tenant: str, sandbox_id: str, *, is_ttl: bool = False) -> str:
        """Release a sandbox: it is no longer listed; its workspace, data, executions
        (running ones are killed) and objects are deleted."""
        self.expire_due()
        with self.db.transaction() as db:
            self._live_row(db, tenant, sandbox_id)
            self._mark_released(db, sandbox_id, self.clock.time(), "ttl" if is_ttl else "api")
        self._delete_files(sandbox_id)
        self._notify("gone", sandbox_id)
        return (
            f"Local sandbox release started for {sandbox_id}: "
            "it will be released asynchronously in background."
        )

    def reset(
        self, tenant: str, sandbox_id: str, *, refill: Callable[[], None] | None = None
    ) -> str:
        """Start the sandbox's life again: every process of its life so far ends (its
        executions, its MCP servers and whatever they started: see :mod:`.._exec.processes`), then
        the workspace, the per-server data and the executions are emptied; the id and the
        servers stay. ``refill`` gives it its initial contents again (a benchmark's pack)
        before the ``reset`` listeners hear of it (the MCP host starts fresh servers then)."""
        record = self.live(tenant, sandbox_id)
        self._notify("resetting", sandbox_id)
        try:
            for part in self._parts:
                part.stop(sandbox_id)
            with self.db.sandbox_lock(sandbox_id):
                workspace = self.workspace_locked(tenant, sandbox_id)
                for part in self._parts:
                    part.stop(sandbox_id)  # one may have started meanwhile
                left = end_processes(sandbox_processes(workspace))
                if left:
                    logger.warning(
                        "reset of sandbox %s: processes %s did not end within the wait",
                        sandbox_id,
                        left,
                    )
                with self.db.transaction() as db:
                    for part in self._parts:
                        part.forget(db, sandbox_id)
                self._swap_in_fresh_folder(sandbox_id, record.server_names, workspace)
                for part in self._parts:
                    part.clear(sandbox_id, workspace)
            if refill is not None:
                refill()
            self.touch(sandbox_id)
        finally:  # servers stopped for the reset start again, even if it failed half-way
            self._notify("reset", sandbox_id)
        return (
            f"Local sandbox {sandbox_id} was reset to its initial state "
            "(workspace, server data and executions emptied)."
        )

    def _swap_in_fresh_folder(
        self, sandbox_id: str, server_names: Sequence[str], workspace: Path
    ) -> None:
        """Make a fresh folder from the supplier the sandbox's workspace, if it gives one
        (see :meth:`supply_fresh_workspaces`); the sandbox's lock is held."""
        supplier = self._fresh_workspaces
        if supplier is None:
            return
        try:
            fresh = supplier(sandbox_id, server_names)
        except Exception:
            logger.exception("the fresh workspace for sandbox %s could not be had", sandbox_id)
            return
        if fresh is None:
            return
        old = self.folders.workspaces_tmp / f"old-{uuid.uuid4()}"
        try:
            os.rename(workspace, old)  # the tenant's processes have ended: nothing else moves
            try:
                os.rename(fresh, workspace)
            except OSError:
                os.rename(old, workspace)
                raise
        except OSError:
            logger.exception("a fresh workspace for sandbox %s could not be moved in", sandbox_id)
            return
        remove_tree(old)

    def require_server(self, tenant: str, sandbox_id: str, server_name: str) -> SandboxRecord:
        """The sandbox, if it holds ``server_name`` (else :class:`ServerNotInSandbox`)."""
        record = self.live(tenant, sandbox_id)
        if server_name not in record.server_names:
            raise ServerNotInSandbox(
                f"Local sandbox {sandbox_id} does not hold the {server_name!r} server "
                f"(it holds: {', '.join(record.server_names)}); acquire a sandbox with "
                f"{server_name!r} in server_names to use its data."
            )
        return record
