"""One hosted server of one sandbox behind its fastmcp proxy, and how a request reaches it.

A :class:`Backend` is the proxy app that bridges one (sandbox, server, account) to MCP
Streamable HTTP, and the stdio server process behind it (a :class:`ServerProcess`). The
proxy talks to the process through a :class:`~.relay.ServerRelay`, so that a reset can put a fresh
process behind the same proxy (:meth:`Backend.renew`): the MCP sessions clients hold with
the proxy stay, and nothing of the old process is reachable once it is swapped out.
:func:`forward_once` hands a request to a backend, letting one complete answer through. A
request that cannot reach a backend is answered with a :class:`Refusal` (its status and the
reason).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .launch import LaunchSpec

if TYPE_CHECKING:
    from fastmcp.client.transports import StdioTransport

    from .._state import EmulatorState, SandboxRecord

__all__ = [
    "Backend",
    "Key",
    "Refusal",
    "ServerProcess",
    "forward_once",
    "live_record",
    "start_process",
]

logger = logging.getLogger("klavis_emulator.mcp")

Key = tuple[str, str, str]
"""(sandbox id, server name, account): the account is "" for the sandbox's own, else the
JSON of the :class:`~klavis_emulator._mail.MailAccount` a request chose (``x-email-config``,
mail servers only)."""


class ServerProcess:
    """One start of a server: its stdio transport (the process is spawned when it is first
    connected, see :func:`start_process`), its stderr log, the folder its workspace is (as
    the command line names it) and, unconfined, its private temporary folder.

    A process belongs to one sandbox's life: a reset closes it and gives the backend a new
    one, with a new private temporary folder."""

    def __init__(
        self, spec: LaunchSpec, log_file: Path, folder: Path, tmp_dir: Path | None = None
    ) -> None:
        from fastmcp.client.transports import StdioTransport

        self.spec = spec
        self.log_file = log_file
        self.folder = folder
        self.tmp_dir = tmp_dir
        self.transport: StdioTransport = StdioTransport(
            spec.command,
            list(spec.args),
            env=dict(spec.env),
            cwd=spec.cwd,
            keep_alive=True,
            log_file=log_file,
        )

    def __repr__(self) -> str:
        return f"ServerProcess(folder={str(self.folder)!r}, log={self.log_file.name!r})"

    def rebind(self, spec: LaunchSpec) -> None:
        """Start any later process of this transport with ``spec``: a server started ahead
        on a spare folder that became a sandbox's workspace, if it exits and a request
        starts it again, starts on the workspace's own path (the spare's is gone)."""
        self.spec = spec
        self.transport.command = spec.command
        self.transport.args = list(spec.args)
        self.transport.env = dict(spec.env)
        self.transport.cwd = spec.cwd

    async def close(self) -> None:
        """Stop the process (and, confined, everything it started), drop its log and its
        private temporary folder. Quick when the process was killed already."""
        with anyio.CancelScope(shield=True):
            try:
                await self.transport.close()  # type: ignore[no-untyped-call]
            except Exception:  # noqa: BLE001 - a dying server must not break the shutdown
                logger.warning("stopping the server process on %s failed", self.folder)
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("server process on %s said: %s", self.folder, self.said())
            with contextlib.suppress(OSError):
                self.log_file.unlink()
            if self.tmp_dir is not None:
                shutil.rmtree(self.tmp_dir, ignore_errors=True)

    def said(self, limit: int = 2000) -> str:
        """What the server printed on stderr (for error messages): all of it up to ``limit``
        characters, else its beginning and its end. Both ends matter: Node.js prints the
        error first and its stack after it (a server whose package lost a dependency: 915
        characters, whose last 600, all this said before, named no error), Python a
        traceback with the error last."""
        try:
            text = self.log_file.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return ""
        if len(text) <= limit:
            return text
        half = limit // 2
        return f"{text[:half]}\n[...]\n{text[-half:]}"


async def start_process(process: ServerProcess) -> None:
    """Spawn ``process`` and have it answer MCP's ``initialize`` (see
    :func:`~.relay.start_process`); at once if it runs. Callers bound the wait
    (``anyio.fail_after``)."""
    from .relay import start_process as start

    await start(process.transport)


class Backend:
    """One server of one sandbox: its proxy app, and its current :class:`ServerProcess`."""

    def __init__(
        self,
        key: Key,
        process: ServerProcess,
        make_process: Callable[[], ServerProcess],
    ) -> None:
        from .relay import ServerRelay, proxy_for

        self.key = key
        self.process = process
        self._make_process = make_process
        self.relay = ServerRelay(process.transport)
        self.app: Any = proxy_for(self.relay, f"klavis-emulator-{key[1]}").http_app(path="/")
        self.started = False
        """Whether the current process answered ``initialize`` (:meth:`connect`)."""
        self.stopping = anyio.Event()
        self.stopped = anyio.Event()
        self.stopped_callback: Callable[[Backend], None] | None = None

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Run the proxy app's lifespan until :attr:`stopping` is set, then stop the server."""
        try:
            async with self.app.router.lifespan_context(self.app):
                task_status.started()
                await self.stopping.wait()
        finally:
            with anyio.CancelScope(shield=True):
                await self.process.close()
                self.stopped.set()
                if self.stopped_callback is not None:
                    self.stopped_callback(self)

    @property
    def needs_start(self) -> bool:
        """Whether the current process has not answered ``initialize`` yet, or its last
        start failed (it exited: the proxy would start it again on the next request)."""
        return not self.started or self.relay.failed is self.process.transport

    async def connect(self) -> None:
        """Start the current server process now, unless it runs (see :func:`start_process`)."""
        process = self.process
        await start_process(process)
        if self.process is process:
            self.started = True

    async def start_or_refuse(self, within: float) -> None:
        """Start the current process before a request reaches the proxy, or refuse the
        request (:class:`Refusal`, 503) with why it did not start; ``within``: seconds.

        The proxy starts the process on its first connection itself, but a start that fails
        (a damaged install, a server that exits at once) reaches the client as an empty tool
        list and "Unknown tool" for every call (fastmcp's proxy logs the failure and answers
        as if the server had no tools): a harness never learned why."""
        sandbox_id, server, _ = self.key
        process = self.process
        try:
            with anyio.fail_after(within):
                await self.connect()
        except Exception as exc:
            if self.stopping.is_set() or self.process is not process:
                raise Refusal(
                    503,
                    f"The {server!r} MCP server of local sandbox {sandbox_id} was stopped "
                    "(a reset or a release) while it started; try again.",
                ) from exc
            said = process.said() or "nothing on stderr"
            if isinstance(exc, TimeoutError):
                said = f"no answer to initialize in {within:g} s; {said}"
            logger.warning(
                "MCP %s of sandbox %s failed to start; it said: %s", server, sandbox_id, said
            )
            raise Refusal(
                503,
                f"The {server!r} MCP server of local sandbox {sandbox_id} did not start; "
                f"it said: {said}",
            ) from exc

    async def renew(self, fresh: ServerProcess | None = None) -> None:
        """Put ``fresh`` (a process started ahead) or a new process (spawned on the next
        connection) behind the proxy, then close the old one; requests that begin from now on
        reach the new one only. A backend that is stopping closes ``fresh`` instead."""
        if self.stopping.is_set():
            if fresh is not None:
                await fresh.close()
            return
        new = fresh if fresh is not None else self._make_process()
        old, self.process = self.process, new
        self.started = False
        self.relay.inner = new.transport
        await old.close()


class Refusal(Exception):
    """Why a request to a sandbox's MCP server gets no backend: its status and detail."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail

    def body(self) -> dict[str, Any]:
        """The answer: a JSON-RPC error carrying the reason, beside the API's ``detail``.

        MCP clients read a JSON-RPC error in a non-2xx answer and raise it with its message
        (the official SDK 2.x does); with the API's ``{"detail": ...}`` alone they raised
        "Server returned an error response", and a harness never learnt why. -32000 is the
        JSON-RPC range for errors a server defines; ``id`` is null since the request's was
        not read (clients put their own back)."""
        return {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32000, "message": self.detail},
            "detail": self.detail,
        }


def live_record(state: EmulatorState, sandbox_id: str) -> SandboxRecord | None:
    """The live sandbox with this id, whoever owns it (the MCP URL carries only the id).

    Expired sandboxes are released first, as every state operation does.
    """
    try:
        canonical = str(uuid.UUID(sandbox_id))
    except ValueError:
        return None
    if canonical != sandbox_id:
        return None
    return state.find_live(sandbox_id)


async def forward_once(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Call ``app``, letting through one complete response.

    When a client gives up mid-request, or a proxy stops under an open stream, the MCP
    SDK's server may try to answer a second time (a 500 after the stream it already sent)
    or end without finishing its answer; uvicorn would log an error for each. The second
    answer is dropped, and an unfinished one is finished.
    """
    started = False
    finished = False
    spoiled = False

    async def send_once(message: Message) -> None:
        nonlocal started, finished, spoiled
        if spoiled or finished:
            return
        if message["type"] == "http.response.start":
            if started:
                spoiled = True
                return
            started = True
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            finished = True
        await send(message)

    try:
        await app(scope, receive, send_once)
    except Exception:
        if not started:
            raise
        logger.debug("an MCP request failed after its answer had started", exc_info=True)
    if started and not finished:
        with contextlib.suppress(Exception):  # the client may be gone already
            await send({"type": "http.response.body", "body": b"", "more_body": False})
