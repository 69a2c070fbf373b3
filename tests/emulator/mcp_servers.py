"""What the end-to-end tests of the hosted MCP servers share: an emulator hosting them (in the
session's confinement mode or unconfined), sandboxes holding one server, the check that a
server runs confined wherever bubblewrap is installed, and a web site on loopback for the
browser."""

from __future__ import annotations

import contextlib
import http.server
import io
import secrets
import shutil
import tarfile
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from klavis_emulator import EmulatorConfig, EmulatorServer
from klavis_emulator._exec.confinement import CONFINE_ENV, confine_setting_from_env
from klavis_emulator._mcp.host import McpHost
from klavis_emulator._mcp.setup import find_tools

if TYPE_CHECKING:
    from mcp import ClientSession

__all__ = [
    "MODES",
    "ServerSandbox",
    "assert_confinement",
    "failure_message",
    "hosting_emulator",
    "host",
    "loopback_site",
    "mode_of",
    "sandbox_maker",
    "sdk_session",
]

MODES = ("session", "unconfined")
"""The confinement modes each server's tests run in (the module fixture's params)."""


@contextlib.asynccontextmanager
async def sdk_session(url: str) -> AsyncIterator[ClientSession]:
    """A session with the MCP URL ``url``, opened as the public harnesses open one: the
    official SDK's streamable HTTP client, ``initialize`` first."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with (
        streamable_http_client(url) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def failure_message(exc: BaseException) -> str:
    """What a failed open said, as a harness logs it (inside exception groups)."""
    inner = getattr(exc, "exceptions", ())
    return failure_message(inner[0]) if inner else str(exc)


@contextlib.contextmanager
def hosting_emulator(mode: str, *, mcp_at_acquire: bool = True) -> Iterator[EmulatorServer]:
    """An emulator hosting MCP servers, in the session's confinement mode or unconfined."""
    with pytest.MonkeyPatch.context() as patch:
        if mode == "unconfined":
            patch.setenv(CONFINE_ENV, "0")
        server = EmulatorServer(EmulatorConfig(mcp_at_acquire=mcp_at_acquire)).start()
    try:
        yield server
    finally:
        host(server).shutdown(wait=15)
        server.stop()


def skip_without(servers: Sequence[str]) -> None:
    """Skip, naming what is missing, when a server lacks what the project cannot install here
    (Node.js, a program of the distribution, a Python version)."""
    tools = find_tools()
    missing = [f"{s}: {why}" for s in servers if (why := tools.missing_outside(s))]
    if missing:
        pytest.skip("; ".join(missing))


def host(server: EmulatorServer) -> McpHost:
    """The emulator's MCP host."""
    found: McpHost = server.app.state.mcp
    return found


class ServerSandbox:
    """A sandbox holding one server: its MCP URL and workspace (host path and as seen). A
    test skips only when ``missing`` names a piece the project cannot install (Node.js, a
    distribution program, a Python version: ``McpToolPaths.missing_outside``)."""

    def __init__(
        self,
        server: EmulatorServer,
        name: str,
        missing: Mapping[str, str | None],
        *,
        skip_missing: bool = True,
    ) -> None:
        if skip_missing and missing.get(name):
            pytest.skip(f"{name}: {missing[name]}")
        self.server = server
        self.http = httpx.Client(
            base_url=server.base_url,
            headers={"Authorization": f"Bearer srv-{secrets.token_hex(8)}"},
            timeout=60,
        )
        answer = self.http.post("/local-sandbox", json={"server_names": [name]})
        assert answer.status_code == 201, answer.text
        body = answer.json()
        self.id: str = body["local_sandbox_id"]
        self.url: str = body["servers"][0]["mcp_server_url"]
        self.workspace: Path = server.state.workspace_path(self.id)
        self.seen = host(server).workspace_as_seen(self.id)

    def dumped(self) -> dict[str, bytes]:
        """The workspace as ``GET /local-sandbox/{id}/dump`` archives it: member -> bytes."""
        answer = self.http.get(f"/local-sandbox/{self.id}/dump")
        assert answer.status_code == 200, answer.text
        archive = httpx.get(answer.json()["download_url"], timeout=60)
        assert archive.status_code == 200, archive.text
        with tarfile.open(fileobj=io.BytesIO(archive.content), mode="r:gz") as tar:
            return {
                member.name.removeprefix("./"): tar.extractfile(member).read()  # type: ignore[union-attr]
                for member in tar.getmembers()
                if member.isfile()
            }

    def close(self) -> None:
        """Release the sandbox (once: later calls do nothing)."""
        if self.http.is_closed:
            return
        self.http.delete(f"/local-sandbox/{self.id}")
        self.http.close()


@contextlib.contextmanager
def sandbox_maker(
    server: EmulatorServer, missing: Mapping[str, str | None]
) -> Iterator[Callable[..., ServerSandbox]]:
    """A function that acquires sandboxes on ``server``; all released on exit."""
    made: list[ServerSandbox] = []

    def make(name: str, *, skip_missing: bool = True) -> ServerSandbox:
        box = ServerSandbox(server, name, missing, skip_missing=skip_missing)
        made.append(box)
        return box

    try:
        yield make
    finally:
        for box in made:
            box.close()


def mode_of(request: pytest.FixtureRequest) -> str:
    """The confinement mode of the test's module emulator."""
    mode: str = request.node.callspec.params["emulator"]
    return mode


def assert_confinement(server: EmulatorServer, mode: str) -> None:
    """Unconfined when asked; confined wherever bubblewrap is installed otherwise."""
    if mode == "unconfined":
        assert not host(server).confined
    elif shutil.which("bwrap") is not None and confine_setting_from_env() != "off":
        assert host(server).confined


@contextlib.contextmanager
def loopback_site(pages: Mapping[str, str]) -> Iterator[str]:
    """A web site on 127.0.0.1 (a free port) serving ``pages`` (path -> HTML) from a thread;
    yields its base URL (``http://127.0.0.1:PORT``) and stops it on exit."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            page = pages.get(self.path)
            body = (page if page is not None else "not found").encode("utf-8")
            self.send_response(200 if page is not None else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # the test's output is not the place for an access log

    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=site.serve_forever, name="loopback-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{site.server_address[1]}"
    finally:
        site.shutdown()
        site.server_close()
        thread.join()
