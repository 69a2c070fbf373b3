"""The transport a sandbox's proxy talks through, and the proxy itself.

fastmcp's ``ProxyClient`` keeps one transport for its life, and a ``StdioTransport`` one
command line. :class:`ServerRelay` is a ``ClientTransport`` (fastmcp's extension point for
transports) that passes each connection on to the transport of the server process of the
moment, which a reset swaps (:meth:`~.backend.Backend.renew`). Rejected: a new proxy app per
process (the MCP sessions clients hold with the proxy would end with every reset, answering
404 "session not found").

Imported only when MCP is served (fastmcp is heavy).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator
from typing import Any

from fastmcp.client.logging import LogMessage
from fastmcp.client.transports import ClientTransport, StdioTransport
from fastmcp.client.transports.base import SessionKwargs, TransportOptions
from fastmcp.server import create_proxy
from fastmcp.server.providers.proxy import FastMCPProxy, ProxyClient
from mcp import ClientSession
from typing_extensions import Unpack

__all__ = ["ServerRelay", "proxy_for", "start_process"]


class ServerRelay(ClientTransport):
    """Passes each connection on to :attr:`inner`, the current process's transport."""

    def __init__(self, inner: StdioTransport) -> None:
        self.inner = inner
        self.failed: StdioTransport | None = None
        """The transport whose last start failed (the process exited or closed its stdio
        before answering ``initialize``), if it is still :attr:`inner`'s."""

    def __repr__(self) -> str:
        return f"ServerRelay({self.inner!r})"

    @contextlib.asynccontextmanager
    async def connect_session(
        self,
        *,
        transport_options: TransportOptions | None = None,
        **session_kwargs: Unpack[SessionKwargs],
    ) -> AsyncIterator[ClientSession]:
        """A session with the current process (for the whole connection, even if it is
        swapped meanwhile: the old one is closed, and the connection fails)."""
        inner = self.inner
        entered = False
        try:
            async with inner.connect_session(
                transport_options=transport_options, **session_kwargs
            ) as session:
                entered = True
                if self.failed is inner:
                    self.failed = None
                yield session
        except Exception:
            # fastmcp's proxy turns a connection that fails into an empty tool list (and a
            # call into "Unknown tool"): the host asks this before forwarding a request
            if not entered:
                self.failed = inner
            raise

    async def close(self) -> None:
        """Close the current process's transport."""
        await self.inner.close()  # type: ignore[no-untyped-call]


def proxy_for(transport: ClientTransport, name: str, *, quiet: bool = False) -> FastMCPProxy:
    """The fastmcp proxy of one server, talking to it through ``transport``; ``quiet``: its
    clients drop the log messages the server sends (see :func:`start_process`)."""
    # roots=None: otherwise the filesystem server swaps its allowed directories for
    # the client's roots; mode="legacy" pins the protocol era of the shared session.
    options: dict[str, Any] = {"log_handler": _drop_log} if quiet else {}
    client: ProxyClient[Any] = ProxyClient(transport, roots=None, mode="legacy", **options)
    return create_proxy(client, name=name)


async def _drop_log(message: LogMessage) -> None:
    """Drop a log message a server sent (see :func:`start_process`)."""


async def start_process(transport: StdioTransport) -> None:
    """Spawn the server of ``transport`` and have it answer MCP's ``initialize`` now, as
    the first request of its proxy would: with the same client options, so that the proxy's
    requests share this session rather than start the server again (at once if it runs).

    The client that opens a kept-alive stdio session is the one whose callbacks the session
    keeps; the proxy's own would forward the server's log messages to the request under way,
    and there is none (desktop-commander logs at start: each message was a traceback, "No
    active context found"). This one drops them. (When a first request opened the session,
    its callbacks forwarded later messages to that request's context, long over: log
    messages did not reach later requests' clients then either.)

    Raises:
        Exception: whatever the start raised (a server that exits at once, ...).
    """
    client = proxy_for(transport, "klavis-emulator-start", quiet=True).client_factory()
    if inspect.isawaitable(client):
        client = await client
    async with client:
        pass
