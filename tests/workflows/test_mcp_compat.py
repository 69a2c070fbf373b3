"""The MCP helpers' view of the installed SDK, without a server: the SDK's objects are built
from MCP's wire JSON (the same under mcp 1.x and 2.x), so this module runs under both
(``scripts/test`` runs it again under mcp 1.12.1)."""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import os
from collections.abc import Iterator
from typing import Any

import pytest

from workflows import ConfigurationError, McpError, _mcp, _mcp_compat

TOOL = {
    "name": "write_file",
    "description": "Write a file",
    "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
    "outputSchema": {"type": "object"},
}


@pytest.fixture
def fresh_version() -> Iterator[None]:
    """The compat layer reads the installed version again (and forgets what it read after)."""
    _mcp_compat._version.cache_clear()
    yield
    _mcp_compat._version.cache_clear()


def test_the_installed_sdk_is_the_line_this_run_expects() -> None:
    # scripts/test runs these tests again in a venv with mcp 1.12.1 and says so; without that
    # the dev install's 2.x is expected
    expected = os.environ.get("KLAVIS_TEST_MCP_MAJOR", "2")
    assert importlib.metadata.version("mcp").startswith(f"{expected}.")
    assert _mcp_compat.is_legacy() is (expected == "1")


def test_under_mcp_1_the_emulator_extra_is_not_here() -> None:
    """The mcp 1.x run is a benchmark harness's venv: the emulator's extra cannot be installed
    beside mcp 1.x, so its emulator (the emulator_url fixture's) runs from another venv."""
    from klavis_emulator._extra import missing

    harness = os.environ.get("KLAVIS_TEST_MCP_MAJOR", "2") == "1"
    assert bool(missing()) is harness
    assert (importlib.util.find_spec("fastmcp") is None) is harness


def test_tools_read_the_same_under_both_lines() -> None:
    from mcp.types import Tool

    fields = _mcp_compat.tool_fields(Tool.model_validate(TOOL))
    assert fields == ("write_file", "Write a file", TOOL["inputSchema"], {"type": "object"})
    bare = Tool.model_validate({"name": "ls", "inputSchema": {"type": "object"}})
    assert _mcp_compat.tool_fields(bare) == ("ls", None, {"type": "object"}, None)


def test_tool_results_read_the_same_under_both_lines() -> None:
    from mcp.types import CallToolResult

    raw = CallToolResult.model_validate(
        {
            "content": [{"type": "text", "text": "no such file"}, {"type": "text", "text": "x"}],
            "isError": True,
            "structuredContent": {"missing": "a.txt"},
        }
    )
    result = _mcp._tool_result("read", raw)
    assert (result.text, result.is_error, result.structured) == (
        "no such file\nx",
        True,
        {"missing": "a.txt"},
    )
    assert len(result.content) == 2
    with pytest.raises(McpError, match="no such file"):
        result.raise_for_error()


def test_the_sdks_json_rpc_error_is_recognised() -> None:
    from mcp.types import ErrorData

    data = ErrorData(code=-32602, message="bad arguments")
    error: Exception
    if _mcp_compat.is_legacy():
        from mcp.shared import exceptions

        error = exceptions.McpError(data)  # type: ignore[attr-defined]  # 1.x only
    else:
        from mcp import MCPError

        error = MCPError.from_error_data(data)
    assert _mcp_compat.jsonrpc_error_code(error) == -32602
    assert _mcp_compat.jsonrpc_error_code(ValueError("x")) is None


class _PagedSession:
    """Answers tools/list in two pages, taking the cursor the way the installed SDK does."""

    def __init__(self) -> None:
        from mcp.types import ListToolsResult

        self.pages = {
            None: ListToolsResult.model_validate({"tools": [TOOL], "nextCursor": "2"}),
            "2": ListToolsResult.model_validate({"tools": [{**TOOL, "name": "b"}]}),
        }

    async def list_tools(self, **kwargs: Any) -> Any:
        if _mcp_compat.is_legacy():
            cursor = kwargs["cursor"]
        else:
            params = kwargs["params"]
            cursor = None if params is None else params.cursor
        return self.pages[cursor]


def test_pages_of_tools_follow_the_cursor() -> None:
    session: Any = _PagedSession()

    async def walk() -> list[tuple[list[str], str | None]]:
        first, cursor = await _mcp_compat.list_tools_page(session, None)
        second, end = await _mcp_compat.list_tools_page(session, cursor)
        return [([t.name for t in first], cursor), ([t.name for t in second], end)]

    assert asyncio.run(walk()) == [(["write_file"], "2"), (["b"], None)]


@pytest.mark.usefixtures("fresh_version")
@pytest.mark.parametrize("found", ["1.11.0", "3.0.0", "0.9"])
def test_an_unsupported_sdk_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, found: str
) -> None:
    monkeypatch.setattr(importlib.metadata, "version", lambda name: found)
    with pytest.raises(ConfigurationError, match=rf"mcp>=1\.12,<3, found mcp {found}"):
        _mcp_compat.is_legacy()
