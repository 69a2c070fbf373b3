"""The real MCP servers at each sandbox's ``mcp_server_url``, over MCP Streamable HTTP.

A sandbox's server item carries ``<base>/<server>/mcp/?local_sandbox_id=<id>``, as on the
service. :class:`McpHost` is the ASGI app mounted at ``/{server}/mcp`` that serves those
URLs: it checks the sandbox id against the registry of live sandboxes (404 for an unknown
or released one, whatever the tenant: the URL carries only the id), checks that the
sandbox holds the server (404), answers 501 for servers of the contract's enum that the
emulator does not run (saying why, from :mod:`klavis_emulator._mcp.catalog`) and 503 for a
hosted server that is not installed on this machine (naming the missing piece and the fix).
For the hosted servers it starts the real stdio server over the sandbox's workspace on the
first request (see :mod:`klavis_emulator._mcp.launch`) and bridges it with a fastmcp proxy,
one per sandbox and server, reused by later sessions (:mod:`.backend`). A server with a
mail server (``poste_email_toolathlon``) gets its sandbox's (:mod:`.mail_servers`); an
``x-email-config`` header picks another account, with an MCP server process of its own.

Lifecycle: each proxy app's lifespan runs in its own task of the host's task group (opened
by the parent app's lifespan, see :func:`~.mount.install_mcp`). A server is stopped when its
sandbox is released or expires (through the state's listener hook, with a periodic sweep
and a check on every request as a backstop), and every server is stopped when the emulator
shuts down. A reset holds the sandbox's MCP requests and kills its server processes while
the state ends every other process of the sandbox and empties it, then puts fresh processes
behind the same proxies: a spare set started ahead, whose folder the state made the
workspace, or processes started in the background, which the first request waits for (see
:mod:`.resets` and :mod:`.spares`); the proxies, and the MCP sessions clients hold with them,
stay. Server processes run in their own process group,
killed as a group; with bubblewrap each runs in a PID namespace of its own, and everything it
started ends with it (and with the emulator if it is killed).

``klavis-emulator setup`` installs the npm and venv parts
(:func:`~klavis_emulator._mcp.setup.setup_mcp_servers`); a server whose parts are missing is
installed when a sandbox holding it is acquired or its URL is first called (``install``; one
install per server however many sandboxes ask, logged), unless that is turned off
(``$KLAVIS_EMULATOR_INSTALL_SERVERS=0``: then it answers 503 naming ``klavis-emulator setup
--only NAME``, as it does when the install fails).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs

import anyio
import anyio.abc
import anyio.to_thread
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from .._exec import CONFINE_ENV, CONFINED_WORKSPACE, Confinement, decide_confinement
from .._state import LOCAL_SERVER_NAMES, EmulatorState
from .backend import Backend, Key, Refusal, ServerProcess, forward_once, live_record
from .catalog import CATALOG, HOSTED_SERVERS
from .forks import FORK_ENV
from .kinds import NotHosted
from .launch import DEFAULT_COMMAND_TIMEOUT
from .loop import LoopBridge
from .mail_servers import SandboxMail, chosen_account
from .on_demand import INSTALL_ENV, OnDemandInstaller
from .processes import ProcessMaker
from .resets import Resets
from .setup import McpToolPaths, find_tools

__all__ = ["SERVER_PARAM", "McpHost"]

logger = logging.getLogger("klavis_emulator.mcp")

SERVER_PARAM: Final = "mcp_server"
"""The path parameter of the mount (``/{mcp_server}/mcp``) naming the server."""


class McpHost:
    """Serves each sandbox's hosted MCP servers; mount it with :func:`~.mount.install_mcp`.

    Args:
        state: the emulator state (its registry of live sandboxes and their workspaces).
        confine: run the servers in bubblewrap with the workspace at ``/data``; None (the
            default) follows the emulator's one decision, made when the state was built
            (``state.run_settings.confinement``: ``confine_executions``, ``--no-confine``,
            ``$KLAVIS_EMULATOR_CONFINE``); True requires bubblewrap
            (:class:`~klavis_emulator._exec.confinement.ConfinementError` when the host starts
            serving if it is missing or fails); False never confines.
        tools_dir: where :func:`setup_mcp_servers` installed the tools (default: the
            per-user cache dir or ``$KLAVIS_EMULATOR_TOOLS_DIR``).
        command_timeout: ``COMMAND_TIMEOUT`` of the terminal server, in seconds.
        sweep_seconds: how often servers of released or expired sandboxes are looked for
            (a backstop for the state's listener hook).
        startup_timeout: how long a request waits for a server's proxy to come up.
        start_at_acquire: make a sandbox's servers ready in the background as soon as it
            is acquired (:meth:`warm`: their proxies, installs; their processes start on the
            first request, since fastmcp 4), and after a reset start again the servers of a
            sandbox that used them (:meth:`start_servers`; see :mod:`.resets`).
        spares: how many spare server sets of each shape to keep started ahead for resets,
            confined and with ``start_at_acquire`` only (see :mod:`.spares`); 0: none, a
            reset starts fresh servers in the background.
        install: install a server whose parts are missing (npm tree, venv) when it is first
            needed, into ``tools_dir``; None (the default): yes unless
            ``$KLAVIS_EMULATOR_INSTALL_SERVERS`` is ``0``.
        fork_servers: start the Python servers that have a fork recipe (git, terminal,
            arxiv) from a fork server of their kind when confined, sharing their imported
            code between sandboxes (see :mod:`.forks`); None (the default): yes unless
            ``$KLAVIS_EMULATOR_MCP_FORK`` is ``0``.
    """

    def __init__(
        self,
        state: EmulatorState,
        *,
        confine: bool | None = None,
        tools_dir: str | os.PathLike[str] | None = None,
        command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
        sweep_seconds: float = 30.0,
        startup_timeout: float = 60.0,
        start_at_acquire: bool = True,
        install: bool | None = None,
        spares: int = 1,
        fork_servers: bool | None = None,
    ) -> None:
        if command_timeout < 1:
            raise ValueError("command_timeout must be at least 1 second")
        if spares < 0:
            raise ValueError("spares must not be negative")
        if sweep_seconds <= 0:
            raise ValueError("sweep_seconds must be positive")
        self.state = state
        self._confine_setting = confine
        self._tools_dir = Path(tools_dir) if tools_dir is not None else None
        self._sweep_seconds = sweep_seconds
        self._startup_timeout = startup_timeout
        self.start_at_acquire = start_at_acquire
        self.installer = OnDemandInstaller(
            lambda: self.tools(),  # patchable, as for the mail servers
            tools_dir,
            enabled=install if install is not None else os.environ.get(INSTALL_ENV) != "0",
        )
        self._warming: dict[str, asyncio.Task[None]] = {}
        self._used: set[str] = set()  # sandboxes whose servers got a request in this life
        self._used_lock = threading.Lock()
        self._backends: dict[Key, Backend] = {}
        self._alive: set[Backend] = set()  # started and not yet stopped, listed or not
        self._starting: dict[Key, anyio.Lock] = {}
        self._task_group: anyio.abc.TaskGroup | None = None
        self.bridge = LoopBridge()
        self._closing = False
        self._confinement: Confinement | None = None
        self.mail = SandboxMail(state, lambda: self.tools(), self.stop)  # tools: patchable
        self.processes = ProcessMaker(
            state.data_dir,
            lambda: self.tools(),  # patchable
            lambda: self.confinement,
            command_timeout,
            fork=fork_servers if fork_servers is not None else os.environ.get(FORK_ENV) != "0",
        )
        self.resets = Resets(self, spares, startup_timeout)

    def __repr__(self) -> str:
        known = None if self._confinement is None else self._confinement.enabled
        return f"McpHost(running={len(self._backends)}, confined={known})"

    # ------------------------------------------------------------------ facts

    @property
    def confinement(self) -> Confinement:
        """How the servers are confined (decided once; see ``confine``)."""
        if self._confinement is None:
            setting = self._confine_setting
            if setting is None:
                self._confinement = self.state.run_settings.confinement
            elif setting:
                self._confinement = decide_confinement(environ={CONFINE_ENV: "1"})
            else:
                self._confinement = Confinement(
                    False, "confinement was turned off (McpHost(confine=False))"
                )
        return self._confinement

    @property
    def confined(self) -> bool:
        """Whether servers run in bubblewrap with the workspace at ``/data``."""
        return self.confinement.enabled

    def workspace_as_seen(self, sandbox_id: str) -> str:
        """The workspace path the servers report (``/data`` when confined, else host path)."""
        if self.confined:
            return CONFINED_WORKSPACE
        return str(self.state.workspace_path(sandbox_id))

    def running(self) -> list[tuple[str, str]]:
        """``(sandbox id, server)`` of every backend currently up."""
        return sorted({key[:2] for key in self._backends})

    def tools(self) -> McpToolPaths:
        """Where the hosted servers' programs are (None entries: not installed)."""
        return find_tools(self._tools_dir)

    # ------------------------------------------------------------------ lifecycle

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[McpHost]:
        """Run the host (from the parent app's lifespan): its task group and sweeper."""
        if self._task_group is not None:
            raise RuntimeError("this McpHost is already serving")
        self._closing = False
        self.mail.open()
        await anyio.to_thread.run_sync(self._prepare)
        try:
            async with anyio.create_task_group() as group:
                self._task_group = group
                self.bridge.attach()
                sweeper = anyio.CancelScope()

                async def sweep_forever() -> None:
                    with sweeper:
                        while True:
                            await anyio.sleep(self._sweep_seconds)
                            await self.sweep()

                group.start_soon(sweep_forever)
                try:
                    yield self
                finally:
                    self._closing = True
                    sweeper.cancel()
                    self._stop_all()
                    await self.resets.close()
        finally:
            await anyio.to_thread.run_sync(self.mail.stop_all)
            await anyio.to_thread.run_sync(self.processes.close)
            self._task_group = None
            self.bridge.detach()

    def _prepare(self) -> None:
        """Decide confinement (fails here, not on a request) and drop server logs and
        temporary folders a killed emulator left behind."""
        _ = self.confinement
        self.processes.drop_leftovers()

    def stop(self, sandbox_id: str, *args: object, **kwargs: object) -> None:
        """Stop the servers of one sandbox (released or expired); safe from any thread.

        Returns at once; the processes end shortly after. Extra arguments are ignored,
        so this can be given to the state's listener hook as is.
        """

        def stop_now() -> None:
            for key in [key for key in self._backends if key[0] == sandbox_id]:
                self._backends.pop(key).stopping.set()
            for key in [key for key in self._starting if key[0] == sandbox_id]:
                del self._starting[key]
            self.bridge.spawn(self.resets.forget(sandbox_id))
            with self._used_lock:
                self._used.discard(sandbox_id)

        self.bridge.call_soon(stop_now)
        mail = self.mail.pop(sandbox_id)
        if mail is not None:  # its processes end shortly after (not a daemon: even at exit)
            threading.Thread(target=mail.stop, name="mail-stop").start()

    def warm(self, sandbox_id: str, *args: object, **kwargs: object) -> None:
        """Make the proxies of the sandbox's hosted, installed servers in the background (and
        install what is missing), safe from any thread, returns at once (the state calls it at
        acquire); their processes start on the first request. A server that fails is logged;
        its first request tries again and reports why. Extra arguments are ignored (listener
        hook)."""
        self._begin_warm(sandbox_id, processes=False)

    def start_servers(self, sandbox_id: str) -> None:
        """Like :meth:`warm`, and start the servers' processes too (after a reset, for a
        sandbox whose servers were used: see :mod:`.resets`)."""
        self._begin_warm(sandbox_id, processes=True)

    def _begin_warm(self, sandbox_id: str, *, processes: bool) -> None:
        def warm_now() -> None:
            if self._task_group is None or self._closing:
                return
            life = self.resets.life(sandbox_id)
            task = self.bridge.spawn(self._warm(sandbox_id, processes, life))
            self._warming[sandbox_id] = task

            def done(finished: asyncio.Task[None]) -> None:
                if self._warming.get(sandbox_id) is finished:
                    del self._warming[sandbox_id]

            task.add_done_callback(done)

        self.bridge.call_soon(warm_now)

    async def _warm(self, sandbox_id: str, processes: bool, life: int) -> None:
        """Make the sandbox's backends, and with ``processes`` start their processes, for
        its life ``life`` (:meth:`.resets.Resets.life`). A reset that begins meanwhile ends
        that life: a process not started yet is left to the next life's first request, and
        one being started is killed by the reset (its connection closes at once, before the
        server said anything): neither is a failure, and neither is logged as one (a Ray
        worker that died under its task had its sandbox reset again while the reset before
        was still starting the servers: "failed to start; it said: " with nothing said)."""
        record = await anyio.to_thread.run_sync(live_record, self.state, sandbox_id)
        if record is None:
            return
        tools = self.tools()
        wanted = [
            server
            for server in record.server_names
            if server in HOSTED_SERVERS
            and (tools.missing(server) is None or self.installer.installable(server, tools))
        ]
        if not processes:  # the first start of a forked kind then costs a fork only
            try:
                installed = [server for server in wanted if tools.missing(server) is None]
                workspace = self.state.workspace_path(sandbox_id)
                self.processes.prepare_forks(installed, workspace)
            except Exception:  # its starts fall back to processes of their own
                logger.exception("the fork servers of sandbox %s's servers failed", sandbox_id)

        async def start(server: str) -> None:
            key = (sandbox_id, server, "")
            try:
                await self.resets.passed(sandbox_id)
                async with self._starting.setdefault(key, anyio.Lock()):
                    backend = await self._ensure_backend(key)
            except Refusal as refusal:  # released meanwhile, or the host is stopping
                logger.debug("MCP %s of sandbox %s not started: %s", server, sandbox_id, refusal)
                return
            except Exception:
                logger.exception("MCP %s of sandbox %s failed to start", server, sandbox_id)
                return
            if not processes or self.resets.life(sandbox_id) != life:
                return
            process = backend.process
            try:
                with anyio.fail_after(self._startup_timeout):
                    await backend.connect()
            except Exception as exc:
                if self.resets.life(sandbox_id) != life or backend.stopping.is_set():
                    # a reset or a release ended the life it was started for: no failure
                    logger.debug("MCP %s of sandbox %s: start ended (%r)", server, sandbox_id, exc)
                    return
                logger.exception(
                    "MCP %s of sandbox %s failed to start; it said: %s",
                    server,
                    sandbox_id,
                    process.said() or "nothing (on stderr)",
                )

        async with anyio.create_task_group() as group:
            for server in wanted:
                group.start_soon(start, server)

    def wait_warm(self, sandbox_id: str, timeout: float = 60.0) -> None:
        """Block (from another thread than the host's loop) until the background start of
        the sandbox's servers (:meth:`warm`) has ended; at once if none is under way. For
        tests and benchmarks: no polling."""
        loop = self.bridge.loop
        if loop is None or loop.is_closed():
            return

        async def waiting() -> None:
            task = self._warming.get(sandbox_id)
            if task is not None:
                await asyncio.wait({task})

        asyncio.run_coroutine_threadsafe(waiting(), loop).result(timeout)

    def status(self) -> dict[str, Any]:
        """On the loop: the servers up (their count), whether servers or spares are being
        started in the background (``busy``), the spare sets ready by shape (servers joined by
        commas)."""
        return {
            "servers": len(self._backends),
            "busy": bool(self._warming or self.resets.refilling),
            "spares": {",".join(shape): n for shape, n in self.resets.spares.ready().items()},
        }

    def warming(self, sandbox_id: str) -> asyncio.Task[None] | None:
        """The background start of the sandbox's servers under way (on the loop), if any."""
        return self._warming.get(sandbox_id)

    def wait_idle(self, timeout: float = 120.0) -> None:
        """Block (from another thread than the host's loop) until no background start of a
        sandbox's servers, and no start of spares, is under way (tests, benchmarks)."""
        loop = self.bridge.loop
        if loop is None or loop.is_closed():
            return

        async def waiting() -> None:
            while busy := {*self._warming.values(), *self.resets.refilling}:
                await asyncio.wait(busy)

        asyncio.run_coroutine_threadsafe(waiting(), loop).result(timeout)

    # ------------------------------------------------------------------ for resets

    def used(self, sandbox_id: str) -> bool:
        """Whether the sandbox's servers got an MCP request in its life so far (since it was
        acquired or last reset); safe from any thread."""
        with self._used_lock:
            return sandbox_id in self._used

    def begin_life(self, sandbox_id: str) -> bool:
        """Start counting the sandbox's requests again (a reset); whether its last life used
        its servers."""
        with self._used_lock:
            was = sandbox_id in self._used
            self._used.discard(sandbox_id)
            return was

    def backends_of(self, sandbox_id: str) -> dict[Key, Backend]:
        """The sandbox's backends (on the loop)."""
        return {key: backend for key, backend in self._backends.items() if key[0] == sandbox_id}

    async def starts_done(self, sandbox_id: str) -> None:
        """Wait until no backend of the sandbox is being made."""
        for key, lock in list(self._starting.items()):
            if key[0] == sandbox_id:
                async with lock:
                    pass

    async def adopt(self, key: Key, process: ServerProcess) -> None:
        """Make ``process`` (started ahead) the process of the backend of ``key``."""
        async with self._starting.setdefault(key, anyio.Lock()):
            await self._ensure_backend(key, process)

    def shutdown(self, *, wait: float | None = None) -> None:
        """Stop every server and refuse new MCP requests (503); safe from any thread.

        With ``wait`` (seconds), called from another thread than the emulator's event
        loop, block until the servers are gone. ``EmulatorServer.stop`` should call it
        before telling uvicorn to exit: stopping the proxies ends the MCP streams clients
        still hold open, which uvicorn would otherwise wait for.
        """

        async def stop_all() -> None:
            self._closing = True
            backends = self._stop_all()
            await self.resets.close()
            for backend in backends:
                await backend.stopped.wait()

        if wait is None or self.bridge.on_loop():

            def start() -> None:
                self.bridge.spawn(stop_all())

            self.bridge.call_soon(start)
            return
        self.bridge.run(stop_all(), wait)

    def _stop_all(self) -> list[Backend]:
        """Tell every backend to stop (in the loop's thread); return them."""
        backends = list(self._alive)
        self._backends.clear()
        for backend in backends:
            backend.stopping.set()
        return backends

    async def sweep(self) -> None:
        """Stop the servers of sandboxes that are no longer live (expired TTL, released)."""
        for sandbox_id in {key[0] for key in self._backends}:
            record = await anyio.to_thread.run_sync(live_record, self.state, sandbox_id)
            if record is None:
                self.stop(sandbox_id)

    # ------------------------------------------------------------------ requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point (mounted at ``/{server}/mcp``)."""
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            return
        server = str(scope.get("path_params", {}).get(SERVER_PARAM, ""))
        try:
            backend = await self._backend_for(server, scope)
        except Refusal as refusal:
            await JSONResponse(refusal.body(), status_code=refusal.status)(scope, receive, send)
            return
        await forward_once(backend.app, scope, receive, send)

    async def _backend_for(self, server: str, scope: Scope) -> Backend:
        if server not in LOCAL_SERVER_NAMES:
            raise Refusal(
                404,
                f"There is no MCP server called {server[:80]!r} (known: "
                f"{', '.join(LOCAL_SERVER_NAMES)}).",
            )
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        ids = query.get("local_sandbox_id", [])
        if not ids or not ids[0]:
            raise Refusal(
                400, "The MCP URL needs the query parameter local_sandbox_id=<sandbox id>."
            )
        sandbox_id = ids[0]
        record = await anyio.to_thread.run_sync(live_record, self.state, sandbox_id)
        if record is None:
            if any(key[0] == sandbox_id for key in self._backends):
                self.stop(sandbox_id)  # gone without us hearing of it: reap its servers
            shown = sandbox_id if len(sandbox_id) <= 80 else sandbox_id[:80] + "..."
            raise Refusal(
                404,
                f"Local sandbox {shown!r} not found: it does not exist or was released, so "
                "its MCP servers are gone.",
            )
        if server not in record.server_names:
            raise Refusal(
                404,
                f"Local sandbox {sandbox_id} does not hold the {server!r} server (it holds: "
                f"{', '.join(record.server_names)}).",
            )
        install = CATALOG[server].install
        if isinstance(install, NotHosted):
            raise Refusal(
                501,
                f"The emulator does not host the {server!r} MCP server: {install.reason}. "
                f"Only {', '.join(HOSTED_SERVERS)} run for real here; use the Klavis "
                "service for the others.",
            )
        if self._task_group is None or self._closing:
            raise Refusal(503, "The emulator's MCP host is not running (starting or stopping).")
        key = (sandbox_id, server, chosen_account(scope) if CATALOG[server].mail_server else "")
        await self.resets.passed(sandbox_id)
        lock = self._starting.setdefault(key, anyio.Lock())
        async with lock:
            backend = await self._ensure_backend(key)
        if backend.needs_start:
            await backend.start_or_refuse(self._startup_timeout)
        with self._used_lock:
            self._used.add(sandbox_id)
        return backend

    async def _ensure_backend(self, key: Key, process: ServerProcess | None = None) -> Backend:
        """The backend of ``key``, made if there is none (with ``process``, a spare's, as its
        first process, else a new one, started on its first connection)."""
        sandbox_id, server, account = key
        workspace_path = self.state.workspace_path(sandbox_id)
        if not workspace_path.is_dir():
            raise Refusal(404, f"Local sandbox {sandbox_id!r} was released.")
        backend = self._backends.get(key)
        if backend is not None:
            if process is not None:
                await backend.renew(process)
            return backend
        tools = self.tools()
        if self.installer.installable(server, tools):
            tools = await self.installer.install(server)
        problem = tools.missing(server)
        if problem is not None:
            why = self.installer.failed.get(server)
            raise Refusal(
                503,
                f"The emulator hosts the {server!r} MCP server, but it is not installed on "
                f"this machine: {why or problem}",
            )
        mail = None
        if CATALOG[server].mail_server:
            mail = await anyio.to_thread.run_sync(self.mail.start, sandbox_id, server, account)

        def new_process() -> ServerProcess:
            return self.processes.new(server, sandbox_id, workspace_path, mail)

        started = time.monotonic()
        backend = Backend(key, process or new_process(), new_process)
        group = self._task_group
        if group is None or self._closing:
            await backend.process.close()
            raise Refusal(503, "The emulator's MCP host is stopping.")
        self._alive.add(backend)
        backend.stopped_callback = self._alive.discard
        with anyio.fail_after(self._startup_timeout):
            await group.start(backend.run)
        # the sandbox may have been released, or the host told to stop, meanwhile
        if self._closing:
            backend.stopping.set()
            raise Refusal(503, "The emulator's MCP host is stopping.")
        if await anyio.to_thread.run_sync(live_record, self.state, sandbox_id) is None:
            backend.stopping.set()
            raise Refusal(404, f"Local sandbox {sandbox_id!r} was released.")
        self._backends[key] = backend
        logger.info(
            "MCP %s proxy for sandbox %s ready in %.0f ms (%s)",
            server,
            sandbox_id,
            (time.monotonic() - started) * 1000,
            "confined at /data" if self.confined else "unconfined",
        )
        return backend
