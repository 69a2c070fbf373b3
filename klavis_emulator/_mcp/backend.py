"""One hosted server of one sandbox behind its fastmcp proxy, and how a request reaches it.

A :class:`Backend` is the stdio server process of one (sandbox, server, account) and the
proxy app that bridges it to MCP Streamable HTTP; :func:`forward_once` hands it a request,
letting one complete answer through. A request that cannot reach a backend is answered
with a :class:`Refusal` (its status and the reason).
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
    from .._state import EmulatorState, SandboxRecord

__all__ = ["Backend", "Key", "Refusal", "forward_once", "live_record"]

logger = logging.getLogger("klavis_emulator.mcp")

Key = tuple[str, str, str]
"""(sandbox id, server name, account): the account is "" for the sandbox's own, else the
JSON of the :class:`~klavis_emulator._mail.MailAccount` a request chose (``x-email-config``,
mail servers only)."""


class Backend:
    """One stdio server of one sandbox, behind its own fastmcp proxy app."""

    def __init__(
        self,
        key: Key,
        spec: LaunchSpec,
        log_file: Path,
        tmp_dir: Path | None = None,
    ) -> None:
        from fastmcp.client.transports import StdioTransport
        from fastmcp.server import create_proxy
        from fastmcp.server.providers.proxy import ProxyClient

        self.key = key
        self.spec = spec
        self.log_file = log_file
        self.tmp_dir = tmp_dir
        self.transport = StdioTransport(
            spec.command,
            list(spec.args),
            env=dict(spec.env),
            cwd=spec.cwd,
            keep_alive=True,
            log_file=log_file,
        )
        # roots=None: otherwise the filesystem server swaps its allowed directories for
        # the client's roots; mode="legacy" pins the protocol era of the shared session.
        client: ProxyClient[Any] = ProxyClient(self.transport, roots=None, mode="legacy")
        proxy = create_proxy(client, name=f"klavis-emulator-{key[1]}")
        self.app: Any = proxy.http_app(path="/")
        self.stopping = anyio.Event()
        self.stopped = anyio.Event()
        self.stopped_callback: Callable[[Backend], None] | None = None
        self.restart_lock = anyio.Lock()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Run the proxy app's lifespan until :attr:`stopping` is set, then stop the server."""
        try:
            async with self.app.router.lifespan_context(self.app):
                task_status.started()
                await self.stopping.wait()
        finally:
            with anyio.CancelScope(shield=True):
                await self._close_transport()
                if logger.isEnabledFor(logging.DEBUG):
                    logger.debug(
                        "%s server of %s said: %s", self.key[1], self.key[0], self.log_tail()
                    )
                with contextlib.suppress(OSError):
                    self.log_file.unlink()
                if self.tmp_dir is not None:
                    shutil.rmtree(self.tmp_dir, ignore_errors=True)
                self.stopped.set()
                if self.stopped_callback is not None:
                    self.stopped_callback(self)

    async def _close_transport(self) -> None:
        try:
            await self.transport.close()  # type: ignore[no-untyped-call]
        except Exception:  # noqa: BLE001 - a dying server must not break the shutdown
            logger.warning("stopping the %s server of %s failed", self.key[1], self.key[0])

    async def stop_process(self) -> None:
        """Stop the server process (and, confined, everything it started); the proxy stays,
        and the next request starts a fresh process."""
        async with self.restart_lock:
            await self._close_transport()

    def log_tail(self, limit: int = 600) -> str:
        """The end of the server's stderr (for error messages)."""
        try:
            text = self.log_file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return text.strip()[-limit:]


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
