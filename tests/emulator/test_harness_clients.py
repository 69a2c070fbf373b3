"""The emulator driven the way public benchmark harnesses drive the service, with code of ours.

MCP-Atlas's client acquires eight servers with ``benchmark=MCP_Atlas`` and no API key in the
MCP URLs, then opens one ``ClientSession`` per server URL with the official SDK (all at once),
lists every server's tools and shows them to the model prefixed by the server's name, under
aliases of its own (``cli-mcp-server`` for the terminal server, ``memory`` for localmemory).
Here: every server the emulator hosts and has installed must open, list and answer a call; a
server it does not host must refuse clearly (501, with a JSON-RPC error saying why, which the
SDK raises with that message) instead of hanging the harness or failing without a reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from klavis_emulator import EmulatorServer
from klavis_emulator._mcp_catalog import CATALOG, NotHosted
from klavis_emulator._mcp_setup import find_tools

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
            async with (
                streamable_http_client(url) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                listed = await session.list_tools()
                outcome[alias] = sorted(f"{alias}__{tool.name}" for tool in listed.tools)
                if alias == "memory":  # one real call through the harness's own session
                    made = await session.call_tool(
                        "create_entities",
                        {"entities": [{"name": "atlas", "entityType": "task", "observations": []}]},
                    )
                    outcome["memory-call-error"] = made.is_error
        except Exception as exc:
            outcome[alias] = _message_of(exc)

    with anyio.fail_after(180):
        await asyncio.gather(*(one(alias, url) for alias, url in urls.items()))
    return outcome


def _message_of(exc: BaseException) -> str:
    """What a failed open said, as the harness logs it (inside exception groups)."""
    inner = getattr(exc, "exceptions", ())
    return _message_of(inner[0]) if inner else str(exc)


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
