"""How a reset reaches a sandbox's MCP servers: requests held, processes killed, fresh ones in.

The state's reset (:meth:`~klavis_emulator._state.sandboxes.Sandboxes.reset`) calls the host
three times, from the resetting request's thread:

1. :meth:`Resets.halt` (``on_resetting``), before anything is emptied: the sandbox's MCP
   requests are held (a request that arrives waits), and its server processes, with all
   they started, are killed at once (SIGKILL, one pass; it returns when they have ended),
   even one the reset before is still starting in the background (that start ends with the
   life it was for, quietly: see :meth:`Resets.life`). The state then ends whatever else of
   the sandbox runs (executions).
2. :meth:`Resets.spare_workspace`, with the sandbox's lock held: the folder of a spare server
   set of the sandbox's shape, started ahead (see :mod:`.spares`), which the state then makes
   the workspace (the old one is renamed away and deleted) before emptying it as ever.
3. :meth:`Resets.restart` (``on_reset``), after the workspace was emptied (and refilled, for
   a benchmark's sandbox): each proxy of the sandbox gets a fresh process, the spare's when
   the workspace is the spare's folder, else a new one; the old processes are closed (they
   were killed); the held requests go on. If the sandbox's servers got a request in the life
   that ended, the new processes start in the background, and another spare of the shape
   once they are up; else they start on their first request, as after an acquire.

So when a reset answers, no process of the sandbox's old life runs, and its servers are up
(a spare's), starting, or started by their first request (which waits for its server: it
reaches the transport of the new process, never an old one).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import anyio

from .._exec import end_processes, sandbox_processes
from .._state import EmulatorState
from .backend import Backend, Key, ServerProcess
from .catalog import CATALOG, HOSTED_SERVERS
from .loop import LoopBridge
from .mail_servers import SandboxMail
from .processes import ProcessMaker
from .setup import McpToolPaths
from .spares import Shape, Spares

__all__ = ["ResettableHost", "Resets"]

logger = logging.getLogger("klavis_emulator.mcp")


class ResettableHost(Protocol):
    """What the reset side needs of its host (:class:`~.host.McpHost` is the one), written
    here so that this module does not import the host that holds it."""

    state: EmulatorState
    processes: ProcessMaker
    bridge: LoopBridge
    mail: SandboxMail
    start_at_acquire: bool
    # each member as McpHost's (see its docstrings)

    @property
    def confined(self) -> bool: ...

    def tools(self) -> McpToolPaths: ...
    def used(self, sandbox_id: str) -> bool: ...
    def begin_life(self, sandbox_id: str) -> bool: ...
    def start_servers(self, sandbox_id: str) -> None: ...
    def warming(self, sandbox_id: str) -> asyncio.Task[None] | None: ...
    def backends_of(self, sandbox_id: str) -> dict[Key, Backend]: ...
    async def starts_done(self, sandbox_id: str) -> None: ...
    async def adopt(self, key: Key, process: ServerProcess) -> None: ...


class Resets:
    """The reset side of one :class:`~.host.McpHost` (its ``resets``)."""

    def __init__(self, host: ResettableHost, spares: int, startup_timeout: float) -> None:
        self._host = host
        self._startup_timeout = startup_timeout
        self._held: dict[str, asyncio.Event] = {}  # sandbox id -> set when its reset ends
        self._begun: dict[str, int] = {}  # sandbox id -> resets begun (the loop's only)
        self.refilling: set[asyncio.Task[None]] = set()
        self.spares = Spares(
            host.state.spares_folder,  # emptied when the state starts
            spares,
            lambda server, folder: host.processes.new(server, "spare", folder),
            startup_timeout,
        )

    def __repr__(self) -> str:
        return f"Resets(held={len(self._held)}, spares={self.spares!r})"

    def life(self, sandbox_id: str) -> int:
        """Which life of the sandbox this is: how many of its resets have begun (on the
        loop). A start made for one life compares it after a failure: a reset that began
        meanwhile killed the process (see :meth:`halt`), which is no failure of the server."""
        return self._begun.get(sandbox_id, 0)

    async def passed(self, sandbox_id: str) -> None:
        """Wait while the sandbox is being reset (its requests go on with fresh servers)."""
        gate = self._held.get(sandbox_id)
        if gate is not None:
            with anyio.fail_after(self._startup_timeout):
                await gate.wait()

    # ------------------------------------------------------------------ 1. halt

    def halt(self, sandbox_id: str, *args: object, **kwargs: object) -> None:
        """Hold the sandbox's MCP requests until :meth:`restart`, and kill its server
        processes (and all they started), blocking until they have ended. Safe from any
        thread but the host's loop's (from there it only holds the requests). Extra
        arguments are ignored (listener hook)."""
        folders = self._host.bridge.run(self._hold(sandbox_id))
        if folders is not None:
            workspace = self._host.state.workspace_path(sandbox_id)
            left = end_processes(sandbox_processes(workspace, *folders))
            if left:
                logger.warning("reset of %s: server processes %s outlived a kill", sandbox_id, left)

    async def _hold(self, sandbox_id: str) -> list[Path]:
        """Hold the requests; the folders the sandbox's server processes were started on, as
        their command lines say (the workspace, or the old path of a spare's folder it was
        given; a process that a server's exit made the transport start again is on the
        workspace's path, see :meth:`~.backend.ServerProcess.rebind`)."""
        self._held.setdefault(sandbox_id, asyncio.Event())
        self._begun[sandbox_id] = self._begun.get(sandbox_id, 0) + 1  # before any kill
        backends = self._host.backends_of(sandbox_id).values()
        return sorted({backend.process.folder for backend in backends})

    # ------------------------------------------------------------------ 2. a spare

    def spare_workspace(self, sandbox_id: str, server_names: Sequence[str]) -> Path | None:
        """For the state, while it resets ``sandbox_id`` (its lock held): the folder of a
        ready spare of the sandbox's shape, which the state is to make the sandbox's
        workspace; None when there is none, when the sandbox's servers got no request in
        the life that ends, or when none are kept (unconfined, ``spares=0``, without
        ``start_at_acquire``)."""
        host = self._host
        if self.spares.per_shape == 0 or not host.start_at_acquire or not host.confined:
            return None
        if not host.used(sandbox_id):  # a life without MCP: the next one likely too
            return None
        return self.spares.reserve(sandbox_id, self.shape(server_names))

    def shape(self, server_names: Sequence[str]) -> Shape:
        """The servers of a spare for a sandbox holding ``server_names``: the hosted and
        installed ones, mail servers aside (each is tied to its sandbox's mail server)."""
        tools = self._host.tools()
        return tuple(
            sorted(
                server
                for server in set(server_names)
                if server in HOSTED_SERVERS
                and not CATALOG[server].mail_server
                and tools.missing(server) is None
            )
        )

    # ------------------------------------------------------------------ 3. restart

    def restart(self, sandbox_id: str, *args: object, **kwargs: object) -> None:
        """Give a sandbox that was reset fresh servers: its mailboxes (if it has a mail
        server) are emptied, each of its proxies gets a fresh process, the old ones are
        closed, its held requests go on (see the module docs). Blocks like :meth:`halt`.
        Extra arguments are ignored (listener hook)."""
        try:
            mail = self._host.mail.get(sandbox_id)
            if mail is not None:  # the service resets its servers' data: the mailboxes too
                mail.clear()
        finally:  # a mail server that fails to empty must not keep the servers held
            self._host.bridge.run(self._restart(sandbox_id))

    async def _restart(self, sandbox_id: str) -> None:
        host = self._host
        try:
            # a backend being made when the reset began: let it be made (new starts wait
            # for the gate), then renew its process like the others'
            await host.starts_done(sandbox_id)
            workspace = host.state.workspace_path(sandbox_id)
            spare = await self.spares.claim(sandbox_id, workspace)
            given = {} if spare is None else dict(spare.processes)
            for server, process in given.items():  # if it ever restarts: on the workspace
                process.rebind(host.processes.spec(server, workspace))
            async with anyio.create_task_group() as group:
                for key, backend in host.backends_of(sandbox_id).items():
                    fresh = given.pop(key[1], None) if not key[2] else None
                    group.start_soon(backend.renew, fresh)
                for server, process in given.items():  # servers nobody asked for yet
                    group.start_soon(self._adopt, sandbox_id, server, process)
        finally:
            gate = self._held.pop(sandbox_id, None)
            if gate is not None:
                gate.set()
        if host.begin_life(sandbox_id) and host.start_at_acquire:
            host.start_servers(sandbox_id)
            shape = self.spares.wanted(sandbox_id)
            if shape is not None:
                self._refill(sandbox_id, shape)

    async def _adopt(self, sandbox_id: str, server: str, process: ServerProcess) -> None:
        try:
            await self._host.adopt((sandbox_id, server, ""), process)
        except Exception as exc:  # noqa: BLE001 - released meanwhile, the host stopping...
            logger.debug("a spare %s for %s serves no one: %s", server, sandbox_id, exc)
            await process.close()

    def _refill(self, sandbox_id: str, shape: Shape) -> None:
        """Start spares of ``shape`` again, once the sandbox's own servers are up (they
        would share the CPU)."""

        async def refill() -> None:
            warming = self._host.warming(sandbox_id)
            if warming is not None:
                await asyncio.wait({warming})
            await self.spares.fill(shape)

        task = self._host.bridge.spawn(refill())
        self.refilling.add(task)
        task.add_done_callback(self.refilling.discard)

    # ------------------------------------------------------------------ the end

    async def forget(self, sandbox_id: str) -> None:
        """The sandbox is gone: its spares go if no other sandbox wants them."""
        self._begun.pop(sandbox_id, None)
        await self.spares.forget(sandbox_id)

    async def close(self) -> None:
        """Cancel the starts of spares under way and close every spare (the host stops)."""
        with anyio.CancelScope(shield=True):
            for task in list(self.refilling):
                task.cancel()
            if self.refilling:
                await asyncio.wait(set(self.refilling))
            await self.spares.close_all()
