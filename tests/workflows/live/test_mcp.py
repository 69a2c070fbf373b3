"""The sandbox's MCP servers through the library: both faces, real servers, real HTTP."""

from __future__ import annotations

import pytest

from tests.helpers import Face, LoopThread
from workflows import NotFoundError


def test_tools_change_the_workspace_that_dump_returns(face: Face, conn: dict[str, str]) -> None:
    with face.acquire(["filesystem", "git", "terminal"], **conn) as sb:
        sb.seed({"hello.txt": "hi"})
        names = {t.name for t in sb.list_tools("filesystem")}
        assert {"write_file", "read_text_file", "list_allowed_directories"} <= names
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


def test_a_released_sandbox_tools_fail_cleanly(face: Face, conn: dict[str, str]) -> None:
    sb = face.acquire(["filesystem"], **conn)
    assert sb.list_tools("filesystem")
    sb.release()
    with pytest.raises(NotFoundError):
        sb.call_tool("filesystem", "list_allowed_directories")
