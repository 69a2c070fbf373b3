"""The MCP host on the emulator's app: its mount, the ``/x/mcp`` rewrite, its lifespan, its hooks.

:func:`install_mcp` is what :func:`~klavis_emulator.create_app` calls when ``host_mcp`` is
set; the host itself is :class:`~.host.McpHost`.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

from starlette.types import ASGIApp, Receive, Scope, Send

from .._state import LOCAL_SERVER_NAMES, EmulatorState
from .host import SERVER_PARAM, McpHost

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["install_mcp"]

_MCP_PATH_RE: Final = re.compile(r"^/([A-Za-z0-9_.-]+)/mcp$")


class _TrailingSlash:
    """Serve ``/<server>/mcp`` as ``/<server>/mcp/`` instead of answering a 307 redirect."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            match = _MCP_PATH_RE.match(scope["path"])
            if match is not None and match[1] in LOCAL_SERVER_NAMES:
                scope = dict(scope)
                scope["path"] = scope["path"] + "/"
                raw = scope.get("raw_path")
                if isinstance(raw, bytes):
                    scope["raw_path"] = raw.split(b"?", 1)[0] + b"/"
        await self.app(scope, receive, send)


def install_mcp(
    app: FastAPI,
    state: EmulatorState | None = None,
    **options: Any,
) -> McpHost:
    """Serve the real MCP servers on ``app`` at ``/{server}/mcp`` and return the host.

    Call it on the app from ``create_app`` before it starts serving: it mounts the host,
    adds the ``/x/mcp`` -> ``/x/mcp/`` rewrite, runs the host inside the app's lifespan
    (the host stops before the state closes), and subscribes the host to the state's
    listener hook (release, TTL expiry, reset). ``options`` go to :class:`McpHost`. The host is
    also kept as ``app.state.mcp``.
    """
    emulator: EmulatorState = state if state is not None else app.state.emulator
    host = McpHost(emulator, **options)
    app.mount(f"/{{{SERVER_PARAM}}}/mcp", host, name="mcp")
    app.add_middleware(_TrailingSlash)

    original = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(parent: Any) -> AsyncIterator[Any]:
        async with original(parent) as value, host.serving():
            yield value

    app.router.lifespan_context = lifespan
    emulator.add_listener(on_acquired=host.mail.provision)  # before acquire answers: auth_data
    emulator.add_listener(
        on_gone=host.stop,
        on_resetting=host.resets.halt,
        on_reset=host.resets.restart,
        on_acquired=host.warm if host.start_at_acquire else None,
    )
    emulator.supply_fresh_workspaces(host.resets.spare_workspace)
    app.state.mcp = host
    return host
