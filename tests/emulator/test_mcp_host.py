"""The real MCP servers behind each sandbox's ``mcp_server_url``, through the official client.

Real servers (npm filesystem, mcp-server-git, cli-mcp-server), real HTTP on a loopback port
chosen by the OS, the emulator in-process. Skipped with the reason when a server is not
installed: ``klavis-emulator setup`` installs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import psutil
import pytest

import workflows
from klavis_emulator import EmulatorServer, OffsetClock
from klavis_emulator import create_app as original_create_app
from klavis_emulator._exec.confinement import CONFINE_ENV
from klavis_emulator._mcp.host import McpHost
from klavis_emulator._mcp.launch import HOSTED_SERVERS
from klavis_emulator._mcp.mount import install_mcp
from klavis_emulator._mcp.setup import find_tools
from workflows import _mcp as client

TOOLS = find_tools()
MISSING = {server: TOOLS.missing_outside(server) for server in HOSTED_SERVERS}
FIRST_THREE = ("filesystem", "git", "terminal")  # the others: tests/emulator/test_mcp_servers.py
FILESYSTEM_TOOLS = {
    "read_file", "read_text_file", "read_media_file", "read_multiple_files", "write_file",
    "edit_file", "create_directory", "list_directory", "list_directory_with_sizes",
    "directory_tree", "move_file", "search_files", "get_file_info", "list_allowed_directories",
}  # fmt: skip
GIT_TOOLS = {
    "git_status", "git_diff_unstaged", "git_diff_staged", "git_diff", "git_commit", "git_add",
    "git_reset", "git_log", "git_create_branch", "git_checkout", "git_show", "git_branch",
}  # fmt: skip
TERMINAL_TOOLS = {"run_command", "show_security_rules"}
EXPECTED_TOOLS = {"filesystem": FILESYSTEM_TOOLS, "git": GIT_TOOLS, "terminal": TERMINAL_TOOLS}


def needs(*servers: str) -> pytest.MarkDecorator:
    """Skip when these servers lack something the project cannot install (Node.js, ...);
    a server ``klavis-emulator setup`` should have installed but did not fails its test."""
    missing = [f"{s}: {MISSING[s]}" for s in servers if MISSING[s]]
    return pytest.mark.skipif(bool(missing), reason="; ".join(missing))


@contextlib.contextmanager
def emulator_with_mcp() -> Iterator[EmulatorServer]:
    """An emulator whose app hosts the MCP servers (installing the host if create_app doesn't)."""

    def create_app(config: Any = None) -> Any:
        app = original_create_app(config)
        if getattr(app.state, "mcp", None) is None:
            install_mcp(app)
        return app

    with mock.patch("klavis_emulator._server.create_app", create_app):
        server = EmulatorServer().start()
    try:
        yield server
    finally:
        host(server).shutdown(wait=15)  # ends streams clients still hold, then uvicorn exits
        server.stop()


def host(server: EmulatorServer) -> McpHost:
    found: McpHost = server.app.state.mcp
    return found


@pytest.fixture(scope="module")
def emulator_mcp() -> Iterator[EmulatorServer]:
    """One emulator hosting MCP servers for this module's tests."""
    with emulator_with_mcp() as server:
        yield server


class Sandbox:
    """A sandbox acquired over HTTP with a fresh key: its id, MCP URLs and workspace."""

    def __init__(self, server: EmulatorServer, names: list[str]) -> None:
        self.server = server
        self.http = httpx.Client(
            base_url=server.base_url,
            headers={"Authorization": f"Bearer mcp-{secrets.token_hex(8)}"},
            timeout=30,
        )
        answer = self.http.post("/local-sandbox", json={"server_names": names})
        assert answer.status_code == 201, answer.text
        body = answer.json()
        self.id: str = body["local_sandbox_id"]
        self.urls: dict[str, str] = {s["server_name"]: s["mcp_server_url"] for s in body["servers"]}
        self.workspace: Path = server.state.workspace_path(self.id)
        self.seen = host(server).workspace_as_seen(self.id)

    def path(self, name: str) -> str:
        """``name`` inside the workspace, as the servers see it."""
        return f"{self.seen}/{name}"

    def release(self) -> None:
        assert self.http.delete(f"/local-sandbox/{self.id}").status_code == 200


@pytest.fixture
def sandbox(emulator_mcp: EmulatorServer) -> Iterator[Sandbox]:
    box = Sandbox(emulator_mcp, ["filesystem", "git", "terminal", "canvas"])
    yield box
    box.http.delete(f"/local-sandbox/{box.id}")
    box.http.close()


# ---------------------------------------------------------------------- ready at acquire


@needs(*FIRST_THREE)
def test_servers_start_at_acquire_before_any_request(emulator_mcp: EmulatorServer) -> None:
    box = Sandbox(emulator_mcp, list(FIRST_THREE))
    try:
        host(emulator_mcp).wait_warm(box.id)  # the background start acquire began
        up = {server for sandbox_id, server in host(emulator_mcp).running() if sandbox_id == box.id}
        assert up == set(FIRST_THREE)  # all up, and no MCP request was made
        names = {tool.name for tool in client.list_tools(box.urls["git"], timeout=60)}
        assert names >= GIT_TOOLS
    finally:
        box.release()


def test_without_start_at_acquire_servers_wait_for_the_first_request(
    emulator: EmulatorServer,
) -> None:
    # the suite's shared emulator is made with EmulatorConfig(mcp_at_acquire=False)
    box = Sandbox(emulator, ["filesystem", "git"])
    try:
        host(emulator).wait_warm(box.id)
        assert [key for key in host(emulator).running() if key[0] == box.id] == []
    finally:
        box.release()


# ---------------------------------------------------------------------- each server


@pytest.mark.parametrize("server", FIRST_THREE)
def test_each_server_lists_its_tools_through_the_official_client(
    sandbox: Sandbox, server: str
) -> None:
    if MISSING[server]:
        pytest.skip(f"{server}: {MISSING[server]}")

    async def names() -> list[str]:
        async with client.open_session(sandbox.urls[server]) as session:
            listed = await session.list_tools()
            return [tool.name for tool in listed.tools]

    assert set(asyncio.run(names())) == EXPECTED_TOOLS[server]


@needs("filesystem")
def test_allowed_directory_is_data_when_confined_else_the_host_path(sandbox: Sandbox) -> None:
    result = client.call_tool(sandbox.urls["filesystem"], "list_allowed_directories")
    expected = "/data" if host(sandbox.server).confined else str(sandbox.workspace)
    assert not result.is_error
    assert result.text.splitlines()[-1] == expected


@needs("filesystem")
def test_write_file_through_filesystem_appears_in_dump(emulator_mcp: EmulatorServer) -> None:
    key = f"mcp-{secrets.token_hex(8)}"
    with workflows.LocalSandbox.acquire(
        ["filesystem"], api_key=key, base_url=emulator_mcp.base_url, ledger=False
    ) as sb:
        url = sb.mcp_url("filesystem")
        seen = host(emulator_mcp).workspace_as_seen(sb.id)
        made = client.call_tool(url, "create_directory", {"path": f"{seen}/notes"})
        wrote = client.call_tool(
            url, "write_file", {"path": f"{seen}/notes/hello.txt", "content": "hi from MCP\n"}
        )
        assert not made.is_error
        assert not wrote.is_error, wrote.text
        snapshot = sb.dump()
        assert snapshot.text("notes/hello.txt") == "hi from MCP\n"


@needs("git")
def test_git_status_and_log_on_a_repository_seeded_into_the_workspace(sandbox: Sandbox) -> None:
    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-C", str(sandbox.workspace), *args], check=True, capture_output=True
        )

    git("init", "-q", "-b", "main")
    (sandbox.workspace / "tracked.txt").write_text("one\n")
    git("add", "tracked.txt")
    git("-c", "user.name=T", "-c", "user.email=t@example.invalid", "commit", "-qm", "first")
    (sandbox.workspace / "tracked.txt").write_text("two\n")
    (sandbox.workspace / "new.txt").write_text("new\n")

    status = client.call_tool(sandbox.urls["git"], "git_status", {"repo_path": sandbox.seen})
    log = client.call_tool(sandbox.urls["git"], "git_log", {"repo_path": sandbox.seen})

    assert not status.is_error, status.text
    assert "modified:   tracked.txt" in status.text
    assert "new.txt" in status.text
    assert "first" in log.text


@needs("git")
def test_git_refuses_a_path_outside_the_workspace(sandbox: Sandbox) -> None:
    outside = "/" if host(sandbox.server).confined else str(sandbox.workspace.parent)
    result = client.call_tool(sandbox.urls["git"], "git_status", {"repo_path": outside})
    assert result.is_error
    assert "outside the allowed repository" in result.text


@needs("terminal")
def test_terminal_runs_ls_in_the_workspace(sandbox: Sandbox) -> None:
    (sandbox.workspace / "visible-file.txt").write_text("x")
    listing = client.call_tool(sandbox.urls["terminal"], "run_command", {"command": "ls -a"})
    piped = client.call_tool(sandbox.urls["terminal"], "run_command", {"command": "ls | wc -l"})
    where = client.call_tool(sandbox.urls["terminal"], "run_command", {"command": "pwd"})
    assert "visible-file.txt" in listing.text
    assert "return code: 0" in listing.text
    assert piped.text.split()[0] == "1"
    assert where.text.splitlines()[0] == sandbox.seen


@needs("terminal")
def test_terminal_refuses_commands_off_the_allow_list(sandbox: Sandbox) -> None:
    result = client.call_tool(sandbox.urls["terminal"], "run_command", {"command": "reboot"})
    assert "Security violation" in result.text
    assert "not allowed" in result.text


# ---------------------------------------------------------------------- lifecycle


@needs("filesystem")
def test_tool_call_after_release_fails_cleanly(sandbox: Sandbox) -> None:
    url = sandbox.urls["filesystem"]
    assert not client.call_tool(url, "list_allowed_directories").is_error
    assert (sandbox.id, "filesystem") in host(sandbox.server).running()

    async def call_in_open_session() -> BaseException:
        from mcp import MCPError

        async with client.open_session(url) as session:
            await session.call_tool("list_allowed_directories", {})
            sandbox.release()
            with pytest.raises(MCPError) as caught:
                await session.call_tool("list_allowed_directories", {})
            return caught.value

    error = asyncio.run(call_in_open_session())
    # the 404 carries a JSON-RPC error saying why (before, the SDK's "Session terminated")
    assert "was released" in str(error)

    with pytest.raises(workflows.NotFoundError) as not_found:
        client.call_tool(url, "list_allowed_directories")
    assert not_found.value.status_code == 404
    assert sandbox.id in str(not_found.value)
    assert (sandbox.id, "filesystem") not in host(sandbox.server).running()


@needs("filesystem")
def test_reset_and_initialize_restart_the_server_on_the_new_workspace(
    emulator_mcp: EmulatorServer, make_tar_gz: Any
) -> None:
    box = Sandbox(emulator_mcp, ["filesystem"])
    url = box.urls["filesystem"]

    def listing() -> str:
        return client.call_tool(url, "list_directory", {"path": box.seen}).text

    client.call_tool(url, "write_file", {"path": box.path("before.txt"), "content": "1"})
    assert "before.txt" in listing()

    assert box.http.post(f"/local-sandbox/{box.id}/reset").status_code == 200
    assert "before.txt" not in listing()

    upload = box.http.post(f"/local-sandbox/{box.id}/upload-url").json()["upload_url"]
    put = httpx.put(
        upload,
        content=make_tar_gz({"seeded.txt": "from the archive"}),
        headers={"Content-Type": "application/gzip"},
        timeout=30,
    )
    assert put.status_code == 200
    assert box.http.post(f"/local-sandbox/{box.id}/initialize").status_code == 200
    read = client.call_tool(url, "read_text_file", {"path": box.path("seeded.txt")})
    assert read.text == "from the archive"
    box.release()


@needs("filesystem")
def test_expired_sandbox_answers_404_and_its_server_stops(emulator_mcp: EmulatorServer) -> None:
    box = Sandbox(emulator_mcp, ["filesystem"])
    client.list_tools(box.urls["filesystem"])
    assert (box.id, "filesystem") in host(emulator_mcp).running()
    clock = emulator_mcp.state.clock
    assert isinstance(clock, OffsetClock)
    clock.advance(7201)

    with pytest.raises(workflows.NotFoundError):
        client.list_tools(box.urls["filesystem"])
    assert (box.id, "filesystem") not in host(emulator_mcp).running()


@needs("terminal")
def test_sync_calls_work_from_inside_a_running_event_loop(sandbox: Sandbox) -> None:
    async def inside() -> str:
        # a notebook cell is code on a thread whose loop is running
        return client.call_tool(sandbox.urls["terminal"], "run_command", {"command": "pwd"}).text

    assert asyncio.run(inside()).startswith(sandbox.seen)


# ---------------------------------------------------------------------- refusals


def test_unknown_sandbox_answers_404_with_a_json_detail(emulator_mcp: EmulatorServer) -> None:
    ghost = "00000000-0000-4000-8000-000000000000"
    for query in (ghost, "not-a-uuid", "../../etc"):
        answer = httpx.post(
            f"{emulator_mcp.base_url}/filesystem/mcp/?local_sandbox_id={query}", json={}, timeout=30
        )
        assert answer.status_code == 404
        assert "not found" in answer.json()["detail"]

    with pytest.raises(workflows.NotFoundError) as caught:
        client.list_tools(f"{emulator_mcp.base_url}/filesystem/mcp/?local_sandbox_id={ghost}")
    assert caught.value.sandbox_id == ghost


def test_missing_id_and_unknown_server_name_are_refused(emulator_mcp: EmulatorServer) -> None:
    missing = httpx.post(f"{emulator_mcp.base_url}/git/mcp/", json={}, timeout=30)
    unknown = httpx.post(
        f"{emulator_mcp.base_url}/nonsense/mcp/?local_sandbox_id=x", json={}, timeout=30
    )
    assert missing.status_code == 400
    assert "local_sandbox_id" in missing.json()["detail"]
    assert unknown.status_code == 404
    assert "no MCP server called 'nonsense'" in unknown.json()["detail"]


def test_a_server_the_sandbox_does_not_hold_answers_404(emulator_mcp: EmulatorServer) -> None:
    box = Sandbox(emulator_mcp, ["git"])
    url = box.urls["git"].replace("/git/mcp/", "/filesystem/mcp/")
    answer = httpx.post(url, json={}, timeout=30)
    assert answer.status_code == 404
    assert "does not hold the 'filesystem' server" in answer.json()["detail"]
    box.release()


def test_a_server_the_emulator_does_not_host_answers_a_clear_error(sandbox: Sandbox) -> None:
    answer = httpx.post(sandbox.urls["canvas"], json={}, timeout=30)
    assert answer.status_code == 501
    assert "does not host the 'canvas' MCP server" in answer.json()["detail"]

    with pytest.raises(workflows.ServerError) as caught:
        client.list_tools(sandbox.urls["canvas"])
    assert caught.value.status_code == 501
    assert "does not host" in caught.value.message


@needs("filesystem")
def test_the_url_without_trailing_slash_is_served_not_redirected(sandbox: Sandbox) -> None:
    url = sandbox.urls["filesystem"].replace("/mcp/?", "/mcp?")
    tools = client.list_tools(url)
    assert {tool.name for tool in tools} == FILESYSTEM_TOOLS
    raw = httpx.post(url, json={}, timeout=30)  # not an MCP message: the server itself answers
    assert raw.status_code not in (307, 308)


# ---------------------------------------------------------------------- processes


def _server_processes(pids: set[int]) -> list[psutil.Process]:
    alive = []
    for process in psutil.Process().children(recursive=True):
        if process.pid in pids:
            continue
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
    return alive


@needs("filesystem", "git", "terminal")
@pytest.mark.parametrize("confine", ["0", "auto"], ids=["unconfined", "auto"])
def test_no_server_process_outlives_the_emulator(
    confine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CONFINE_ENV, confine)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with emulator_with_mcp() as server:
        box = Sandbox(server, ["filesystem", "git", "terminal"])
        for name in FIRST_THREE:
            assert client.list_tools(box.urls[name])
        # the servers follow the emulator's one decision; with bwrap installed, "auto"
        # means confined (a bwrap that cannot confine stops the emulator at startup)
        assert host(server).confinement == server.state.run_settings.confinement
        if confine == "0":
            assert not host(server).confined
            listed = client.call_tool(box.urls["filesystem"], "list_allowed_directories")
            assert listed.text.splitlines()[-1] == str(box.workspace)
        elif shutil.which("bwrap") is not None:
            assert host(server).confined
        running = _server_processes(before)
        assert len(running) >= 3, running
    assert _server_processes(before) == []


# ---------------------------------------------------------------------- client errors


@needs("git")
def test_a_failed_tool_is_a_result_and_raise_for_error_raises(sandbox: Sandbox) -> None:
    unknown = client.call_tool(sandbox.urls["git"], "no_such_tool")
    missing = client.call_tool(sandbox.urls["git"], "git_status", {})
    assert unknown.is_error
    assert "no_such_tool" in unknown.text
    assert missing.is_error
    assert "repo_path" in missing.text
    with pytest.raises(workflows.McpError) as caught:
        missing.raise_for_error()
    assert caught.value.tool == "git_status"
    assert caught.value.result is missing
    assert isinstance(caught.value, workflows.KlavisError)


def test_an_unreachable_mcp_url_raises_a_connection_error() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/git/mcp/?local_sandbox_id=x"
    with pytest.raises(workflows.ApiConnectionError) as caught:
        client.list_tools(url, timeout=10)
    assert f"127.0.0.1:{port}/git/mcp/" in str(caught.value)
    assert "local_sandbox_id" not in str(caught.value)
