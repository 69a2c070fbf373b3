"""desktop-commander and playwright, end to end: a sandbox on an in-process emulator, its MCP
URL opened with the official client, ``list_tools`` and real tool calls.

Each test runs twice: in the session's confinement mode (where bubblewrap is installed, the
servers must be confined) and unconfined (``KLAVIS_EMULATOR_CONFINE=0``). The server needs
a program of the distribution (ripgrep): where it is missing, the test skips naming it, and
the test of the 503 answer checks that the URL says the same; a missing npm install (which
``klavis-emulator setup`` makes) or a server that does not work fails.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import httpx
import pytest

from klavis_emulator import EmulatorServer
from klavis_emulator.__main__ import _check_rows
from klavis_emulator._mcp_catalog import CATALOG, DESKTOP_COMMANDER_CONFIG, NpmPackage
from klavis_emulator._mcp_host import McpHost
from klavis_emulator._mcp_setup import McpToolPaths, find_tools
from tests.emulator.mcp_servers import (
    MODES,
    assert_confinement,
    hosting_emulator,
    mode_of,
    sandbox_maker,
)
from tests.emulator.mcp_servers import ServerSandbox as Sandbox
from workflows import _mcp as client

NEW_SERVERS = ("desktop-commander",)
TOOLS = find_tools()
MISSING = {server: TOOLS.missing_outside(server) for server in NEW_SERVERS}


@pytest.fixture(scope="module", params=MODES)
def emulator(request: pytest.FixtureRequest) -> Iterator[EmulatorServer]:
    """An emulator hosting MCP servers, in the session's confinement mode or unconfined;
    they start on first use (a test replaces what is installed before its first request)."""
    with hosting_emulator(request.param, mcp_at_acquire=False) as server:
        yield server


@pytest.fixture
def make_sandbox(emulator: EmulatorServer) -> Iterator[Callable[..., Sandbox]]:
    """Acquire sandboxes on the module's emulator; released after the test."""
    with sandbox_maker(emulator, MISSING) as make:
        yield make


# ---------------------------------------------------------------------- desktop-commander


def test_desktop_commander_writes_reads_and_searches_the_workspace(
    make_sandbox: Callable[..., Sandbox], emulator: EmulatorServer, request: pytest.FixtureRequest
) -> None:
    box = make_sandbox("desktop-commander")
    names = {tool.name for tool in client.list_tools(box.url)}
    assert {"write_file", "read_file", "start_search", "get_config"} <= names
    assert_confinement(emulator, mode_of(request))

    target = f"{box.seen}/todo.txt"
    wrote = client.call_tool(
        box.url, "write_file", {"path": target, "content": "buy milk\nfind the needle-42\n"}
    )
    assert not wrote.is_error, wrote.text
    assert (box.workspace / "todo.txt").read_text(encoding="utf-8").startswith("buy milk")
    read = client.call_tool(box.url, "read_file", {"path": target})
    assert "needle-42" in read.text, read.text

    search = client.call_tool(
        box.url,
        "start_search",
        {"path": box.seen, "pattern": "needle-42", "searchType": "content"},
    )
    assert not search.is_error, search.text
    text = search.text
    if "todo.txt" not in text:  # the search still runs: read its results (it waits for them)
        session = next(word.strip("`'\".,:") for word in text.split() if word.startswith("search_"))
        more = client.call_tool(box.url, "get_more_search_results", {"sessionId": session})
        text = more.text
    assert "todo.txt" in text, text


def test_desktop_commander_keeps_to_the_workspace_and_its_private_config(
    make_sandbox: Callable[..., Sandbox], emulator: EmulatorServer, request: pytest.FixtureRequest
) -> None:
    home_config = Path.home() / DESKTOP_COMMANDER_CONFIG
    before = home_config.stat().st_mtime_ns if home_config.exists() else None
    box = make_sandbox("desktop-commander")
    config = client.call_tool(box.url, "get_config", {})
    assert box.seen in config.text, config.text
    assert '"telemetryEnabled": false' in config.text, config.text
    outside = client.call_tool(box.url, "read_file", {"path": "/etc/hostname"})
    assert outside.is_error, outside.text
    assert_confinement(emulator, mode_of(request))
    # its configuration is in the sandbox's private folder: not in the workspace (it would
    # be dumped), not in the emulator user's home (shared by every sandbox)
    assert not (box.workspace / DESKTOP_COMMANDER_CONFIG).exists()
    after = home_config.stat().st_mtime_ns if home_config.exists() else None
    assert after == before


# ---------------------------------------------------------------------- missing pieces


@pytest.mark.parametrize(("server", "package"), [("desktop-commander", "ripgrep")])
def test_a_missing_system_program_is_named_by_check_and_by_a_503(
    server: str, package: str, emulator: EmulatorServer
) -> None:
    """Without the distribution's program, ``check`` says not installed and the URL answers
    503, both naming the package to install (whether or not the npm install is here)."""
    install = CATALOG[server].install
    assert isinstance(install, NpmPackage)
    entry = Path("/nonexistent/node_modules", install.package, install.entry)
    without = McpToolPaths(node=Path("/usr/bin/node"), programs={server: entry}, system={})
    problem = without.missing(server)
    assert problem is not None
    assert f"apt-get install {package}" in problem
    rows = {row[0]: row for row in _check_rows(without, "confined", [server])}
    assert rows[server][1] == "no"
    assert rows[server][3] == problem

    http = httpx.Client(
        base_url=emulator.base_url, headers={"Authorization": f"Bearer srv-{secrets.token_hex(8)}"}
    )
    acquired = http.post("/local-sandbox", json={"server_names": [server]})
    assert acquired.status_code == 201, acquired.text
    url = acquired.json()["servers"][0]["mcp_server_url"]
    try:
        with mock.patch.object(McpHost, "tools", return_value=without):
            answer = httpx.post(url, json={})
    finally:
        http.delete(f"/local-sandbox/{acquired.json()['local_sandbox_id']}")
        http.close()
    assert answer.status_code == 503, answer.text
    assert f"apt-get install {package}" in answer.json()["detail"]
