"""localmemory, code-runner, excel and word, end to end: a sandbox on an in-process emulator,
its MCP URL opened with the official client, ``list_tools`` and one real tool call that
writes the workspace.

Each test runs twice: in the session's confinement mode (where bubblewrap is installed, the
servers must be confined) and unconfined (``KLAVIS_EMULATOR_CONFINE=0``). A test skips only
when something the project cannot install is missing here (Node.js), naming it; a server that
``klavis-emulator setup`` should have installed, or that does not work, fails.
"""

from __future__ import annotations

import shutil
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from klavis_emulator import EmulatorServer
from klavis_emulator._mcp.launchers import MEMORY_FILE
from klavis_emulator._mcp.setup import find_tools
from tests.emulator.mcp_servers import (
    MODES,
    assert_confinement,
    host,
    hosting_emulator,
    mode_of,
    sandbox_maker,
)
from tests.emulator.mcp_servers import ServerSandbox as Sandbox
from workflows import _mcp as client

NEW_SERVERS = ("localmemory", "code-runner", "excel", "word")
TOOLS = find_tools()
MISSING = {server: TOOLS.missing_outside(server) for server in NEW_SERVERS}


@pytest.fixture(scope="module", params=MODES)
def emulator(request: pytest.FixtureRequest) -> Iterator[EmulatorServer]:
    """An emulator hosting MCP servers, in the session's confinement mode or unconfined."""
    with hosting_emulator(request.param) as server:
        yield server


@pytest.fixture
def make_sandbox(emulator: EmulatorServer) -> Iterator[Callable[..., Sandbox]]:
    """Acquire sandboxes on the module's emulator; released after the test."""
    with sandbox_maker(emulator, MISSING) as make:
        yield make


def _xml_text(path: Path) -> str:
    with zipfile.ZipFile(path) as archive:
        return "".join(
            archive.read(name).decode("utf-8", "replace")
            for name in archive.namelist()
            if name.endswith(".xml")
        )


def test_localmemory_keeps_its_graph_in_the_workspace(
    make_sandbox: Callable[[str], Sandbox], emulator: EmulatorServer, request: pytest.FixtureRequest
) -> None:
    box = make_sandbox("localmemory")
    names = {tool.name for tool in client.list_tools(box.url)}
    assert {"create_entities", "read_graph", "search_nodes"} <= names
    assert_confinement(emulator, mode_of(request))

    made = client.call_tool(
        box.url,
        "create_entities",
        {"entities": [{"name": "Ada", "entityType": "person", "observations": ["writes code"]}]},
    )
    assert not made.is_error, made.text
    memory = box.workspace / MEMORY_FILE
    assert memory.is_file()
    assert '"Ada"' in memory.read_text(encoding="utf-8")
    found = client.call_tool(box.url, "search_nodes", {"query": "Ada"})
    assert "writes code" in found.text


def test_code_runner_runs_a_snippet_in_the_workspace_with_a_private_tmp(
    make_sandbox: Callable[[str], Sandbox], emulator: EmulatorServer, request: pytest.FixtureRequest
) -> None:
    box = make_sandbox("code-runner")
    assert [tool.name for tool in client.list_tools(box.url)] == ["run-code"]
    assert_confinement(emulator, mode_of(request))

    snippet = (
        "const fs = require('fs'), os = require('os');\n"
        "fs.writeFileSync('from-code-runner.txt', 'ran\\n');\n"
        "console.log('tmp=' + os.tmpdir());\n"
        "console.log('cwd=' + process.cwd());\n"
    )
    ran = client.call_tool(box.url, "run-code", {"code": snippet, "languageId": "javascript"})
    assert not ran.is_error, ran.text
    said = dict(line.split("=", 1) for line in ran.text.splitlines() if "=" in line)
    assert said["cwd"] == box.seen
    assert (box.workspace / "from-code-runner.txt").read_text() == "ran\n"
    if host(emulator).confined:
        assert said["tmp"] == "/tmp"
    else:  # a folder of its own, outside the workspace and the system's /tmp
        tmp = Path(said["tmp"])
        assert tmp.is_relative_to(emulator.state.data_dir)
        assert not tmp.is_relative_to(box.workspace)
        assert box.id in tmp.name


PYTHON_SNIPPET = """
import importlib.util, os, sys
print("answer", 6 * 7)
print("cwd", os.getcwd())
print("emulator-packages", importlib.util.find_spec("klavis_emulator") is not None)
"""


def test_code_runner_runs_python_as_mcp_atlas_calls_it(
    make_sandbox: Callable[[str], Sandbox], emulator: EmulatorServer, request: pytest.FixtureRequest
) -> None:
    """MCP-Atlas's client calls run-code with languageId "python", which code-runner runs as
    ``python -u``: confined, that is the base interpreter of the emulator's venv (without
    the emulator's packages); unconfined, the ``python`` on the emulator's PATH."""
    confined = mode_of(request) != "unconfined" and host(emulator).confined
    if not confined and shutil.which("python") is None:
        pytest.skip("unconfined, code-runner runs the `python` on PATH, and this machine has none")
    box = make_sandbox("code-runner")
    ran = client.call_tool(box.url, "run-code", {"code": PYTHON_SNIPPET, "languageId": "python"})
    assert not ran.is_error, ran.text
    said = dict(line.split(" ", 1) for line in ran.text.splitlines() if " " in line)
    assert said.get("answer") == "42", ran.text
    assert said["cwd"] == box.seen
    if confined:
        assert said["emulator-packages"] == "False"


def test_excel_creates_a_workbook_and_writes_a_cell(
    make_sandbox: Callable[[str], Sandbox], emulator: EmulatorServer, request: pytest.FixtureRequest
) -> None:
    box = make_sandbox("excel")
    names = {tool.name for tool in client.list_tools(box.url)}
    assert {"create_workbook", "write_range", "read_range"} <= names
    assert_confinement(emulator, mode_of(request))

    book = f"{box.seen}/book.xlsx"
    made = client.call_tool(box.url, "create_workbook", {"path": book})
    assert not made.is_error, made.text
    wrote = client.call_tool(
        box.url,
        "write_range",
        {"path": book, "sheet": "Sheet1", "at": "A1", "rows": [["hello from excel", 42]]},
    )
    assert not wrote.is_error, wrote.text
    assert "hello from excel" in _xml_text(box.workspace / "book.xlsx")
    outside = client.call_tool(box.url, "create_workbook", {"path": "/etc/escape.xlsx"})
    assert outside.is_error  # EXCEL_FILES_PATH keeps it to the workspace


def test_word_creates_a_document_with_a_paragraph(
    make_sandbox: Callable[[str], Sandbox], emulator: EmulatorServer, request: pytest.FixtureRequest
) -> None:
    box = make_sandbox("word")
    names = {tool.name for tool in client.list_tools(box.url)}
    assert {"create_document", "add_paragraph", "get_document_text"} <= names
    assert_confinement(emulator, mode_of(request))

    document = f"{box.seen}/report.docx"
    made = client.call_tool(box.url, "create_document", {"filename": document, "title": "R"})
    assert not made.is_error, made.text
    added = client.call_tool(
        box.url, "add_paragraph", {"filename": document, "text": "hello from word"}
    )
    assert not added.is_error, added.text
    assert "hello from word" in _xml_text(box.workspace / "report.docx")
