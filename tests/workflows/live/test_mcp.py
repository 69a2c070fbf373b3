"""The sandbox's MCP servers through the library: both faces, real servers, real HTTP.

Run again under mcp 1.12.1 by ``scripts/test`` (against an emulator process of the main venv).
"""

from __future__ import annotations

import importlib
import shutil
import socket
import ssl
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Face, LoopThread, SilentService, git_repo
from workflows import (
    ApiConnectionError,
    ApiTimeoutError,
    LocalSandbox,
    McpError,
    McpSession,
    NotFoundError,
    Snapshot,
    _mcp,
    _mcp_compat,
)


def test_tools_change_the_workspace_that_dump_returns(face: Face, conn: dict[str, str]) -> None:
    with face.acquire(["filesystem", "git", "terminal"], **conn) as sb:
        sb.seed({"hello.txt": "hi"})
        tools = {t.name: t for t in sb.list_tools("filesystem")}
        assert {"write_file", "read_text_file", "list_allowed_directories"} <= set(tools)
        # the repr shows how to call it: its arguments, the optional ones marked
        shown = repr(tools["read_text_file"])
        assert shown.startswith("ToolInfo(name='read_text_file', arguments='path: string, ")
        assert "head?: number" in shown
        root = sb.call_tool("filesystem", "list_allowed_directories").text.split()[-1]
        written = sb.call_tool(
            "filesystem", "write_file", {"path": f"{root}/agent.txt", "content": "by agent"}
        )
        assert not written.is_error, written.text
        listing = sb.call_tool("terminal", "run_command", {"command": "ls"})
        assert "agent.txt" in listing.text
        assert "hello.txt" in listing.text
        assert {t.name for t in sb.list_tools("git")} >= {"git_status", "git_log"}
        assert sb.dump()["agent.txt"] == b"by agent"


def test_mcp_session_is_the_official_client(
    face: Face, conn: dict[str, str], loop_thread: LoopThread
) -> None:
    with face.acquire(["git"], **conn) as sb:
        session_cm = sb.mcp("git")

        async def tools() -> list[str]:
            async with session_cm as session:
                listed = await session.list_tools()
                return [t.name for t in listed.tools]

        assert "git_status" in loop_thread.run(tools())


def _session_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "workflows-mcp-session"]


def test_a_blocking_session_serves_many_calls(conn: dict[str, str]) -> None:
    with LocalSandbox.acquire(["filesystem"], **conn) as sb:  # type: ignore[arg-type]
        with sb.mcp_session("filesystem") as fs:
            assert "write_file" in {t.name for t in fs.list_tools()}
            root = fs.call_tool("list_allowed_directories").text.split()[-1]
            wrote = fs.call_tool("write_file", {"path": f"{root}/a.txt", "content": "by agent"})
            assert not wrote.is_error, wrote.text
            assert fs.call_tool("read_text_file", {"path": f"{root}/a.txt"}).text == "by agent"
            assert fs.call_tool("no_such_tool").is_error  # a tool's failure is a result
            with pytest.raises(McpError) as failed:
                fs.call_tool("no_such_tool").raise_for_error()
            assert failed.value.connection_lost is False
            with ThreadPoolExecutor(4) as pool:  # calls from several threads share the session
                texts = list(pool.map(lambda _: fs.call_tool("list_allowed_directories"), "abcd"))
            assert {t.text for t in texts} == {fs.call_tool("list_allowed_directories").text}
            assert _session_threads()
        assert "closed" in repr(fs)
        with pytest.raises(McpError, match="closed") as closed:
            fs.call_tool("list_allowed_directories")
        assert closed.value.connection_lost is False  # the caller closed it: a pool's "task"
        assert sb.dump()["a.txt"] == b"by agent"
    assert not _session_threads()  # closing ends the helper thread


def test_a_blocking_session_outlived_by_its_sandbox_fails_cleanly(conn: dict[str, str]) -> None:
    sb = LocalSandbox.acquire(["filesystem"], api_key=conn["api_key"], base_url=conn["base_url"])
    session = sb.mcp_session("filesystem")
    assert session.list_tools()
    sb.release()
    with pytest.raises((NotFoundError, McpError)):
        session.call_tool("list_allowed_directories")
    session.close()
    session.close()  # idempotent
    assert not _session_threads()


def test_a_blocking_session_that_cannot_open_says_why() -> None:
    with socket.socket() as bound:  # bound, never listening: connecting is refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}/git/mcp/?local_sandbox_id=x"
        with pytest.raises(ApiConnectionError, match="could not reach the MCP server"):
            McpSession(url, timeout=10).open()
    with SilentService() as silent, pytest.raises(ApiTimeoutError):
        McpSession(f"{silent.url}/git/mcp/", timeout=0.5).open()
    assert not _session_threads()


def test_one_shot_calls_share_one_tls_context(
    conn: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each one-shot call builds an HTTP client; none loads the system's certificates again
    (about 20 ms of CPU each time, on loopback where no TLS is used)."""
    loads: list[object] = []
    load = ssl.SSLContext.load_verify_locations

    def counted(context: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args)
        load(context, *args, **kwargs)

    with LocalSandbox.acquire(["filesystem"], **conn) as sb:  # type: ignore[arg-type]
        monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
        for _ in range(3):
            assert "write_file" in {t.name for t in sb.list_tools("filesystem")}
            assert not sb.call_tool("filesystem", "list_allowed_directories").is_error
    assert len(loads) <= 1  # the first use in this process, if no test came before


def test_a_released_sandbox_tools_fail_cleanly(face: Face, conn: dict[str, str]) -> None:
    sb = face.acquire(["filesystem"], **conn)
    assert sb.list_tools("filesystem")
    sb.release()
    with pytest.raises(NotFoundError):
        sb.call_tool("filesystem", "list_allowed_directories")


def test_an_unreachable_server_is_a_connection_error() -> None:
    with socket.socket() as bound:  # bound, never listening: connecting is refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}/git/mcp/?local_sandbox_id=x"
        with pytest.raises(ApiConnectionError, match="could not reach the MCP server"):
            _mcp.list_tools(url, timeout=10)


def test_a_silent_server_is_a_timeout() -> None:
    with SilentService() as silent, pytest.raises(ApiTimeoutError):
        _mcp.call_tool(f"{silent.url}/git/mcp/", "git_status", timeout=0.5)


def test_a_session_opened_the_notebooks_way_reads_like_the_helpers(
    conn: dict[str, str], loop_thread: LoopThread
) -> None:
    """Klavis's notebooks and MCP-Atlas open the session themselves: under 1.x with the
    three-value ``streamablehttp_client``, under 2.x with ``streamable_http_client``. The
    library's readers of tools and results agree with its helpers on what they return."""
    transport: Any = importlib.import_module("mcp.client.streamable_http")
    from mcp import ClientSession

    async def native(url: str) -> tuple[list[Any], Any]:
        if _mcp_compat.is_legacy():
            opened = transport.streamablehttp_client(url)
        else:
            opened = transport.streamable_http_client(url)
        async with opened as streams, ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            listed = await session.list_tools()
            called = await session.call_tool("list_allowed_directories", {})
            return list(listed.tools), called

    face = Face("sync", None)
    with face.acquire(["filesystem"], **conn) as sb:
        tools, called = loop_thread.run(native(sb.mcp_url("filesystem")))
        helpers = sb.list_tools("filesystem")
        assert [_mcp_compat.tool_fields(t)[0] for t in tools] == [t.name for t in helpers]
        assert [_mcp_compat.tool_fields(t)[2] for t in tools] == [t.input_schema for t in helpers]
        result = _mcp._tool_result("list_allowed_directories", called)
        assert result.text == sb.call_tool("filesystem", "list_allowed_directories").text
        assert not result.is_error


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_seeded_repository_dumped_untouched_diffs_empty(
    face: Face, conn: dict[str, str], tmp_path: Path
) -> None:
    # the git server's first command rewrites .git/index's stat cache (new inodes and times in
    # the sandbox): what the index says is unchanged, so the diff is empty
    repo = git_repo(tmp_path / "repo")
    local = Snapshot.from_directory(repo)
    with face.acquire(["filesystem", "git"], **conn) as sb:
        sb.seed_directory(repo)
        root = sb.call_tool("filesystem", "list_allowed_directories").text.split()[-1]
        status = sb.call_tool("git", "git_status", {"repo_path": root})
        assert not status.is_error, status.text
        assert "nothing to commit" in status.text
        dumped = sb.dump()
        assert local.diff(dumped, exact=True).modified == (".git/index",)  # it was rewritten
        assert not local.diff(dumped), str(local.diff(dumped))
        sb.call_tool("filesystem", "write_file", {"path": f"{root}/a.txt", "content": "new\n"})
        sb.call_tool("git", "git_add", {"repo_path": root, "files": ["a.txt"]})
        assert local.diff(sb.dump()).modified == (".git/index", "a.txt")


def _sdk_error(code: int, message: str) -> BaseException:
    """The SDK's own JSON-RPC error (its class and constructor differ between 1.x and 2.x)."""
    if _mcp_compat.is_legacy():
        error_data: Any = importlib.import_module("mcp.types").ErrorData
        legacy: Any = importlib.import_module("mcp.shared.exceptions").McpError
        return legacy(error_data(code=code, message=message))  # type: ignore[no-any-return]
    sdk: Any = importlib.import_module("mcp").MCPError
    return sdk(code=code, message=message)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("code", "lost"),
    [(-32000, True), (-32001, True), (408, True), (-32602, False), (-32603, False)],
)
def test_a_jsonrpc_error_says_whether_the_connection_failed(code: int, lost: bool) -> None:
    """Connection closed and request timed out are the session failing (a pool counts them as
    infrastructure); an error the server answered is not."""
    url = "http://127.0.0.1:9/filesystem/mcp/?local_sandbox_id=sb-1"
    error = _mcp._translate(_sdk_error(code, "from the SDK"), url, _mcp._HttpErrors())
    assert isinstance(error, McpError)
    assert (error.code, error.connection_lost) == (code, lost)
    assert "local_sandbox_id" not in str(error)
