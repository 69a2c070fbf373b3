"""The emulator driven the way public benchmark harnesses drive the service, with code of ours.

MCP-Atlas's client acquires eight servers with ``benchmark=MCP_Atlas`` and no API key in the
MCP URLs, then opens one ``ClientSession`` per server URL with the official SDK (all at once),
lists every server's tools and shows them to the model prefixed by the server's name, under
aliases of its own (``cli-mcp-server`` for the terminal server, ``memory`` for localmemory).
Here: every server the emulator hosts and has installed must open, list and answer a call; a
server it does not host must refuse clearly (501, with a JSON-RPC error saying why, which the
SDK raises with that message) instead of hanging the harness or failing without a reason.

MCPMark's client (its ``KlavisLocalSandbox`` and ``MCPHttpServer``) acquires with
``benchmark=MCP_Mark`` and ``ttl_seconds=7200``, maps each server's name to its URL, opens a
session per URL inside an ``AsyncExitStack`` (initialize under a timeout), lists tools once,
calls them, then reads the workspace back with ``GET /dump`` and its signed URL and extracts the
tar.gz. Here: filesystem and playwright in one sandbox, a page served on loopback read by the
browser (its heading is written by the page's script, so only a browser sees it), written to a
file through filesystem, found in the dump.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import secrets
import tarfile
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from klavis_emulator import EmulatorServer
from klavis_emulator._mcp.catalog import CATALOG
from klavis_emulator._mcp.kinds import NotHosted
from klavis_emulator._mcp.setup import find_tools
from tests.emulator.mcp_servers import failure_message, loopback_site, sdk_session

# MCP-Atlas's servers, under the names its tool prefixes use
ATLAS = {
    "filesystem": "filesystem",
    "git": "git",
    "cli-mcp-server": "terminal",
    "desktop-commander": "desktop-commander",
    "arxiv": "arxiv",
    "code-executor": "code-executor",
    "code-runner": "code-runner",
    "memory": "localmemory",
}
TOOLS = find_tools()


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorServer]:
    server = EmulatorServer().start()
    try:
        yield server
    finally:
        server.app.state.mcp.shutdown(wait=15)
        server.stop()


async def _open_all(urls: dict[str, str]) -> dict[str, Any]:
    """One session per server URL, opened together; each server's prefixed tool names, or the
    HTTP status it refused with."""
    outcome: dict[str, Any] = {}

    async def one(alias: str, url: str) -> None:
        try:
            async with sdk_session(url) as session:
                listed = await session.list_tools()
                outcome[alias] = sorted(f"{alias}__{tool.name}" for tool in listed.tools)
                if alias == "memory":  # one real call through the harness's own session
                    made = await session.call_tool(
                        "create_entities",
                        {"entities": [{"name": "atlas", "entityType": "task", "observations": []}]},
                    )
                    outcome["memory-call-error"] = made.is_error
        except Exception as exc:
            outcome[alias] = failure_message(exc)

    with anyio.fail_after(180):
        await asyncio.gather(*(one(alias, url) for alias, url in urls.items()))
    return outcome


def test_an_mcp_atlas_style_client_opens_every_hosted_server(emulator: EmulatorServer) -> None:
    token = f"atlas-{secrets.token_hex(8)}"
    with httpx.Client(
        base_url=emulator.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as http:
        answer = http.post(
            "/local-sandbox",
            json={"server_names": sorted(set(ATLAS.values())), "benchmark": "MCP_Atlas"},
        )
        assert answer.status_code == 201, answer.text
        by_name = {s["server_name"]: s["mcp_server_url"] for s in answer.json()["servers"]}
        try:
            outcome = asyncio.run(
                _open_all({alias: by_name[name] for alias, name in ATLAS.items()})
            )
        finally:
            http.delete(f"/local-sandbox/{answer.json()['local_sandbox_id']}")

    hosted = {a for a, n in ATLAS.items() if not isinstance(CATALOG[n].install, NotHosted)}
    installed = {a for a in hosted if TOOLS.missing_outside(ATLAS[a]) is None}
    for alias in installed:
        names = outcome[alias]
        assert isinstance(names, list), f"{alias}: {names}"
        assert names, f"{alias} lists no tools"
        assert all(name.startswith(f"{alias}__") for name in names)
    assert outcome.get("memory-call-error") is (False if "memory" in installed else None)
    for alias in set(ATLAS) - hosted:  # the reason reaches the harness, not a bare failure
        install = CATALOG[ATLAS[alias]].install
        assert isinstance(install, NotHosted)
        assert f"does not host the {ATLAS[alias]!r} MCP server" in outcome[alias]
        assert install.reason in outcome[alias]
    for alias in hosted - installed:
        assert f"cannot start the {ATLAS[alias]!r} MCP server" in outcome[alias]
    assert "cli-mcp-server__run_command" in outcome.get("cli-mcp-server", []) or (
        "cli-mcp-server" not in installed
    )
    with contextlib.suppress(TypeError):
        json.dumps(outcome)  # what a harness would log


# ---------------------------------------------------------------------- MCPMark

MARK_TOKEN = secrets.token_hex(4)
MARK_PAGE = (
    "<html><head><title>MCPMark task</title></head><body><h1 id='answer'>loading</h1>"
    f"<script>document.getElementById('answer').textContent = 'answer-' + (6 * 7) + "
    f"'-{MARK_TOKEN}';</script></body></html>"
)
MARK_ANSWER = f"answer-42-{MARK_TOKEN}"


@contextlib.asynccontextmanager
async def _mark_session(url: str) -> AsyncIterator[ClientSession]:
    """A session opened as MCPMark's ``MCPHttpServer.start`` opens it (an exit stack, the
    URL without a trailing slash, ``initialize`` under its 30 s timeout)."""
    async with contextlib.AsyncExitStack() as stack:
        read, write = await stack.enter_async_context(streamable_http_client(url.rstrip("/")))
        session = await stack.enter_async_context(ClientSession(read, write))
        await asyncio.wait_for(session.initialize(), timeout=30)
        yield session


def _text(result: Any) -> str:
    return "\n".join(part.text for part in result.content if getattr(part, "text", None))


async def _mark_task(urls: dict[str, str], page: str) -> dict[str, Any]:
    """What an MCPMark agent does for a browsing task: list both servers' tools, open the
    page, read it, write what it read to a file in the workspace."""
    with anyio.fail_after(120):
        return await _mark_steps(urls, page)


async def _mark_steps(urls: dict[str, str], page: str) -> dict[str, Any]:
    async with (
        _mark_session(urls["filesystem"]) as files,
        _mark_session(urls["playwright"]) as web,
    ):
        tools = {
            name: [tool.model_dump()["name"] for tool in (await session.list_tools()).tools]
            for name, session in (("filesystem", files), ("playwright", web))
        }
        opened = await web.call_tool("browser_navigate", {"url": page})
        snapshot = await web.call_tool("browser_snapshot", {})
        found = re.search(r"answer-\d+-[0-9a-f]+", _text(snapshot))
        allowed = _text(await files.call_tool("list_allowed_directories", {}))
        workspace = allowed.strip().splitlines()[-1]
        wrote = await files.call_tool(
            "write_file",
            {"path": f"{workspace}/answer.txt", "content": found[0] if found else "not found"},
        )
    return {
        "tools": tools,
        "opened": (opened.is_error, _text(opened)),
        "snapshot": _text(snapshot),
        "wrote": (wrote.is_error, _text(wrote)),
    }


def test_an_mcpmark_style_client_reads_a_page_and_writes_what_it_read(
    emulator: EmulatorServer,
) -> None:
    for server in ("filesystem", "playwright"):
        if TOOLS.missing_outside(server):
            pytest.skip(f"{server}: {TOOLS.missing_outside(server)}")
    headers = {"Authorization": f"Bearer mark-{secrets.token_hex(8)}"}
    with (
        loopback_site({"/task.html": MARK_PAGE}) as site,
        httpx.Client(base_url=emulator.base_url, headers=headers, timeout=120) as http,
    ):
        answer = http.post(
            "/local-sandbox",
            json={
                "server_names": ["filesystem", "playwright"],
                "benchmark": "MCP_Mark",
                "ttl_seconds": 7200,
            },
        )
        assert answer.status_code == 201, answer.text
        sandbox_id = answer.json()["local_sandbox_id"]
        urls = {s["server_name"]: s["mcp_server_url"] for s in answer.json()["servers"]}
        try:
            outcome = asyncio.run(_mark_task(urls, f"{site}/task.html"))
            dump = http.get(f"/local-sandbox/{sandbox_id}/dump")
            assert dump.status_code == 200, dump.text
            archive = httpx.get(dump.json()["download_url"], timeout=300)
            assert archive.status_code == 200
            with tarfile.open(fileobj=io.BytesIO(archive.content), mode="r:gz") as tar:
                dumped = {
                    member.name.removeprefix("./"): tar.extractfile(member).read()  # type: ignore[union-attr]
                    for member in tar.getmembers()
                    if member.isfile()
                }
        finally:
            assert http.delete(f"/local-sandbox/{sandbox_id}").status_code == 200

    assert {"write_file", "list_allowed_directories"} <= set(outcome["tools"]["filesystem"])
    assert {"browser_navigate", "browser_snapshot"} <= set(outcome["tools"]["playwright"])
    assert outcome["opened"][0] is False, outcome["opened"][1]
    assert MARK_ANSWER in outcome["snapshot"], outcome["snapshot"]
    assert outcome["wrote"][0] is False, outcome["wrote"][1]
    assert dumped["answer.txt"].decode("utf-8") == MARK_ANSWER
