"""powerpoint, arxiv and pdf-tools, end to end: a sandbox on an in-process emulator, its MCP
URL opened with the official client, ``list_tools`` and one real tool call that writes or
reads the workspace.

Each test runs twice: in the session's confinement mode (where bubblewrap is installed, the
servers must be confined) and unconfined (``KLAVIS_EMULATOR_CONFINE=0``). A test skips only
when something the project cannot install is missing here (pdf-tools needs a Python 3.12 on
the machine), naming it; a server that ``klavis-emulator setup`` should have installed, or
that does not work, fails.
"""

from __future__ import annotations

import json
import secrets
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import httpx
import pytest

from klavis_emulator import EmulatorConfig, EmulatorServer
from klavis_emulator import __main__ as cli
from klavis_emulator._mcp import setup as mcp_setup
from klavis_emulator._mcp.host import McpHost
from klavis_emulator._mcp.launchers import ARXIV_STORAGE
from klavis_emulator._mcp.setup import McpToolPaths, find_tools
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

NEW_SERVERS = ("powerpoint", "arxiv", "pdf-tools")
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


def test_powerpoint_saves_a_presentation_with_a_slide_in_the_workspace(
    make_sandbox: Callable[[str], Sandbox], emulator: EmulatorServer, request: pytest.FixtureRequest
) -> None:
    box = make_sandbox("powerpoint")
    names = {tool.name for tool in client.list_tools(box.url)}
    assert {"create_presentation", "add_slide", "save_presentation"} <= names
    assert_confinement(emulator, mode_of(request))

    made = client.call_tool(box.url, "create_presentation", {"id": "deck"})
    assert not made.is_error, made.text
    added = client.call_tool(
        box.url, "add_slide", {"title": "hello from powerpoint", "presentation_id": "deck"}
    )
    assert not added.is_error, added.text
    assert "error" not in json.loads(added.text), added.text  # its failures are dicts
    saved = client.call_tool(
        box.url,
        "save_presentation",
        {"file_path": f"{box.seen}/deck.pptx", "presentation_id": "deck"},
    )
    assert not saved.is_error, saved.text
    assert "error" not in json.loads(saved.text), saved.text  # its failures are dicts
    with zipfile.ZipFile(box.workspace / "deck.pptx") as deck:
        slides = [name for name in deck.namelist() if name.startswith("ppt/slides/slide")]
        assert slides == ["ppt/slides/slide1.xml"]
        assert "hello from powerpoint" in deck.read(slides[0]).decode("utf-8")


def _store_paper(storage: Path, paper_id: str, title: str, text: str) -> None:
    """A paper as download_paper stores it (arxiv-mcp-server 0.8.2, tools/list_papers.py):
    ``<id>.md``, its text as markdown, beside ``<id>.meta.json``, its metadata."""
    storage.mkdir(parents=True, exist_ok=True)
    (storage / f"{paper_id}.md").write_text(f"# {title}\n\n{text}\n", encoding="utf-8")
    meta = {
        "id": paper_id,
        "title": title,
        "authors": ["Ada Lovelace"],
        "published": "2024-01-02",
        "arxiv_version": "v1",
    }
    (storage / f"{paper_id}.meta.json").write_text(json.dumps(meta), encoding="utf-8")


def test_arxiv_lists_and_reads_papers_stored_in_the_workspace_and_search_fails_offline(
    make_sandbox: Callable[[str], Sandbox], emulator: EmulatorServer, request: pytest.FixtureRequest
) -> None:
    box = make_sandbox("arxiv")
    names = {tool.name for tool in client.list_tools(box.url)}
    assert {"search_papers", "download_paper", "list_papers", "read_paper"} <= names
    assert_confinement(emulator, mode_of(request))

    _store_paper(box.workspace / ARXIV_STORAGE, "2401.00001", "A Stored Paper", "hello arxiv")
    listed = client.call_tool(box.url, "list_papers", {})
    assert not listed.is_error, listed.text
    assert "2401.00001" in listed.text
    assert "A Stored Paper" in listed.text
    read = client.call_tool(box.url, "read_paper", {"paper_id": "2401.00001"})
    assert not read.is_error, read.text
    assert "hello arxiv" in read.text

    # arxiv.org is out of reach (no network when confined; offline here anyway): a tool
    # error, bounded by the launch's ARXIV_* settings rather than the server's 50 s.
    searched = client.call_tool(box.url, "search_papers", {"query": "transformers"}, timeout=60)
    assert searched.is_error, searched.text
    assert "error" in searched.text.lower()


def _minimal_pdf(text: str) -> bytes:
    """A one-page PDF showing ``text`` in Helvetica, with a correct cross-reference table."""
    stream = f"BT /F1 24 Tf 72 720 Td ({text}) Tj ET".encode("ascii")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def test_pdf_tools_reads_a_pdf_in_the_workspace_and_refuses_one_outside(
    make_sandbox: Callable[[str], Sandbox], emulator: EmulatorServer, request: pytest.FixtureRequest
) -> None:
    box = make_sandbox("pdf-tools")
    names = {tool.name for tool in client.list_tools(box.url)}
    assert {"read_pdf_pages", "get_pdf_info", "merge_pdfs", "search_pdf_content"} <= names
    assert_confinement(emulator, mode_of(request))

    (box.workspace / "doc.pdf").write_bytes(_minimal_pdf("hello from pdf"))
    info = client.call_tool(box.url, "get_pdf_info", {"pdf_file_path": f"{box.seen}/doc.pdf"})
    assert not info.is_error, info.text
    assert "1" in info.text  # one page
    read = client.call_tool(
        box.url, "read_pdf_pages", {"pdf_file_path": "doc.pdf", "start_page": 1, "end_page": 1}
    )
    assert not read.is_error, read.text
    assert "hello from pdf" in read.text
    outside = client.call_tool(box.url, "get_pdf_info", {"pdf_file_path": "/etc/passwd"})
    assert "outside the allowed workspace" in outside.text


def test_pdf_tools_without_a_python_3_12_answers_503_and_check_says_so() -> None:
    # as on a machine whose Pythons, the emulator's own included, are all older than 3.12
    with (
        mock.patch.object(mcp_setup, "find_python", return_value=None),
        mock.patch.object(mcp_setup, "_own_python_suffices", return_value=False),
    ):
        problem = McpToolPaths(node=None).missing("pdf-tools")
        rows = {row[0]: row for row in cli._check_rows(McpToolPaths(node=None), "-", ["pdf-tools"])}
        server = EmulatorServer(EmulatorConfig(host_mcp=True, mcp_at_acquire=False)).start()
        try:
            http = httpx.Client(
                base_url=server.base_url,
                headers={"Authorization": f"Bearer doc-{secrets.token_hex(8)}"},
                timeout=30,
            )
            answer = http.post("/local-sandbox", json={"server_names": ["pdf-tools"]})
            url = answer.json()["servers"][0]["mcp_server_url"]
            with mock.patch.object(McpHost, "tools", return_value=McpToolPaths(node=None)):
                served = httpx.post(url, json={}, timeout=30)
            http.close()
        finally:
            host(server).shutdown(wait=15)
            server.stop()
    assert problem is not None
    assert "Python 3.12" in problem
    assert rows["pdf-tools"][1] == "n/a"  # said, but setup and check do not fail for it
    assert served.status_code == 503
    assert "Python 3.12" in served.json()["detail"]
