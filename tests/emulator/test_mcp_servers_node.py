"""desktop-commander and playwright, end to end: a sandbox on an in-process emulator, its MCP
URL opened with the official client, ``list_tools`` and real tool calls.

Each test runs twice: in the session's confinement mode (where bubblewrap is installed, the
servers must be confined) and unconfined (``KLAVIS_EMULATOR_CONFINE=0``). Each server needs
a program of the distribution (ripgrep, Chromium): where it is missing, the test skips naming
it, and the test of the 503 answer checks that the URL says the same; a missing npm install
(which ``klavis-emulator setup`` makes) or a server that does not work fails.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import httpx
import psutil
import pytest

from klavis_emulator import EmulatorServer
from klavis_emulator.__main__ import _check_rows
from klavis_emulator._exec.data_overlay import inside_path
from klavis_emulator._mcp.catalog import CATALOG
from klavis_emulator._mcp.host import McpHost
from klavis_emulator._mcp.kinds import NpmPackage
from klavis_emulator._mcp.launchers import DESKTOP_COMMANDER_CONFIG, PLAYWRIGHT_OUTPUT
from klavis_emulator._mcp.setup import McpToolPaths, find_tools
from tests.emulator.mcp_servers import (
    MODES,
    assert_confinement,
    host,
    hosting_emulator,
    loopback_site,
    mode_of,
    sandbox_maker,
)
from tests.emulator.mcp_servers import ServerSandbox as Sandbox
from tests.helpers import wait_until
from workflows import _mcp as client

NEW_SERVERS = ("desktop-commander", "playwright")
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
    found = [search.text]
    if "todo.txt" not in found[0]:  # the search still runs (ripgrep in the background): poll
        session = next(
            word.strip("`'\".,:") for word in found[0].split() if word.startswith("search_")
        )

        def finished() -> bool:  # get_more_search_results answers at once, running or not
            found[0] = client.call_tool(
                box.url, "get_more_search_results", {"sessionId": session}
            ).text
            return "todo.txt" in found[0] or "IN PROGRESS" not in found[0]

        wait_until(finished, "the search finished", deadline=120)
    assert "todo.txt" in found[0], found[0]


def _pdf(pages: int) -> bytes:
    """A minimal valid PDF of ``pages`` empty pages (objects, cross-reference table, trailer)."""
    kids = " ".join(f"{3 + i} 0 R" for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode(),
        *[b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] >>"] * pages,
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return bytes(out)


def test_desktop_commander_edits_excel_word_and_pdf_files(
    make_sandbox: Callable[..., Sandbox],
) -> None:
    # The libraries these tools use are loaded on their first use (launchers'
    # _load_on_first_use): each tool here is the first to use its library in this server.
    box = make_sandbox("desktop-commander")
    sheet = f"{box.seen}/stock.xlsx"
    wrote = client.call_tool(
        box.url, "write_file", {"path": sheet, "content": '[["fruit","qty"],["apples",3]]'}
    )
    assert not wrote.is_error, wrote.text
    assert (box.workspace / "stock.xlsx").read_bytes()[:2] == b"PK"
    read = client.call_tool(box.url, "read_file", {"path": sheet})
    assert "apples" in read.text, read.text

    document = f"{box.seen}/note.docx"
    wrote = client.call_tool(
        box.url, "write_file", {"path": document, "content": "<p>buy milk</p>"}
    )
    assert not wrote.is_error, wrote.text
    read = client.call_tool(box.url, "read_file", {"path": document})
    assert not read.is_error, read.text
    assert "1 paragraphs" in read.text, read.text

    (box.workspace / "three.pdf").write_bytes(_pdf(3))
    edited = client.call_tool(
        box.url,
        "write_pdf",
        {
            "path": f"{box.seen}/three.pdf",
            "content": [{"type": "delete", "pageIndexes": [0]}],
            "outputPath": f"{box.seen}/two.pdf",
        },
    )
    assert not edited.is_error, edited.text
    assert (box.workspace / "two.pdf").read_bytes().startswith(b"%PDF-")
    read = client.call_tool(box.url, "read_file", {"path": f"{box.seen}/two.pdf"})
    assert not read.is_error, read.text
    assert "(2 pages)" in read.text, read.text


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


# ---------------------------------------------------------------------- playwright

MARKER = f"loopback-marker-{secrets.token_hex(4)}"
PAGE = f"<html><head><title>Loopback</title></head><body><h1>{MARKER}</h1></body></html>"


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    """A page on loopback (``/index.html``, holding :data:`MARKER`), served by a thread."""
    with loopback_site({"/index.html": PAGE}) as url:
        yield url


def _is_chromium(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return process.name().startswith(("chromium", "chrome"))
    return False


def _browser_processes(box: Sandbox) -> list[psutil.Process]:
    """The Chromium processes of ``box``'s playwright server: in the process tree of the
    server (the emulator's child whose command line names the workspace), and Chromium's
    crash handlers, which leave that tree (their parent becomes init; unconfined, their
    command line names the server's private folder, which carries the sandbox id)."""
    found: dict[int, psutil.Process] = {}
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if inside_path(box.workspace)[1] in " ".join(child.cmdline()):
                found.update((p.pid, p) for p in child.children(recursive=True))
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if _is_chromium(process) and box.id in " ".join(process.cmdline()):
                found[process.pid] = process
    return [process for process in found.values() if _is_chromium(process)]


def _still_running(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Wait (up to 30 s) for ``processes`` to end; those still running (zombies are ended)."""
    _, alive = psutil.wait_procs(processes, timeout=30)
    running = []
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.status() != psutil.STATUS_ZOMBIE:
                running.append(process)
    return running


def test_playwright_reads_a_page_on_loopback_and_saves_a_screenshot_then_release_ends_chromium(
    make_sandbox: Callable[..., Sandbox],
    emulator: EmulatorServer,
    request: pytest.FixtureRequest,
    site: str,
) -> None:
    box = make_sandbox("playwright")
    names = {tool.name for tool in client.list_tools(box.url)}
    assert {"browser_navigate", "browser_snapshot", "browser_take_screenshot"} <= names
    assert_confinement(emulator, mode_of(request))

    opened = client.call_tool(box.url, "browser_navigate", {"url": f"{site}/index.html"})
    assert not opened.is_error, opened.text
    snapshot = client.call_tool(box.url, "browser_snapshot", {})
    assert MARKER in snapshot.text, snapshot.text
    # a name of ours lands in the workspace; an automatic one in <workspace>/.playwright-mcp
    named = client.call_tool(box.url, "browser_take_screenshot", {"filename": "page.png"})
    assert not named.is_error, named.text
    automatic = client.call_tool(box.url, "browser_take_screenshot", {})
    assert not automatic.is_error, automatic.text
    dumped = box.dumped()
    assert dumped["page.png"].startswith(b"\x89PNG")
    automatic_files = [name for name in dumped if name.startswith(f"{PLAYWRIGHT_OUTPUT}/")]
    assert any(name.endswith(".png") for name in automatic_files), sorted(dumped)

    browsers = _browser_processes(box)
    assert browsers, "no Chromium process found under the playwright server"
    box.close()
    assert _still_running(browsers) == []


# ---------------------------------------------------------------------- missing pieces


@pytest.mark.parametrize(
    ("server", "package"), [("desktop-commander", "ripgrep"), ("playwright", "chromium")]
)
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
        base_url=emulator.base_url,
        headers={"Authorization": f"Bearer srv-{secrets.token_hex(8)}"},
        timeout=30,
    )
    acquired = http.post("/local-sandbox", json={"server_names": [server]})
    assert acquired.status_code == 201, acquired.text
    url = acquired.json()["servers"][0]["mcp_server_url"]
    try:
        with mock.patch.object(McpHost, "tools", return_value=without):
            answer = httpx.post(url, json={}, timeout=30)
    finally:
        http.delete(f"/local-sandbox/{acquired.json()['local_sandbox_id']}")
        http.close()
    assert answer.status_code == 503, answer.text
    assert f"apt-get install {package}" in answer.json()["detail"]


def test_playwright_cannot_reach_the_control_routes_of_its_emulator(
    make_sandbox: Callable[..., Sandbox], emulator: EmulatorServer, request: pytest.FixtureRequest
) -> None:
    """The playwright server shares the emulator's network (its browser loads pages on
    loopback), so a tenant's page or code reaches the emulator's loopback port; the control
    routes, which answer loopback clients without a token, must still refuse it when it runs
    confined. Unconfined servers are the documented opt-out: they run as the emulator's user
    (the writes below set what is already set, so the module's emulator is unchanged)."""
    box = make_sandbox("playwright")
    assert_confinement(emulator, mode_of(request))
    faults = f"{emulator.base_url}/_emulator/faults"
    assert (
        httpx.get(faults, timeout=30).status_code == 200
    )  # the user's own loopback client is answered
    opened = client.call_tool(box.url, "browser_navigate", {"url": faults})
    assert not opened.is_error, opened.text
    page = client.call_tool(box.url, "browser_snapshot", {}).text
    code = (
        f"async (page) => {{ const r = await page.request.post({faults!r}, "
        "{data: {rate: 0}}); return 'status=' + r.status(); }"
    )
    posted = client.call_tool(box.url, "browser_run_code_unsafe", {"code": code})
    if host(emulator).confined:
        assert "do not answer a sandbox's own processes" in page, page
        assert "status=403" in posted.text, posted.text
    else:
        assert "do not answer" not in page, page
        assert "status=200" in posted.text, posted.text


def test_check_says_which_confined_servers_share_the_network() -> None:
    if MISSING["playwright"]:
        pytest.skip(MISSING["playwright"])
    rows = {row[0]: row for row in _check_rows(TOOLS, "yes (bwrap)", ["playwright", "git"])}
    assert rows["playwright"][3] == "yes (bwrap), sharing the network"
    assert rows["git"][3] == "yes (bwrap)"
    unconfined = _check_rows(TOOLS, "no (turned off)", ["playwright"])[1]
    assert unconfined[3] == "no (turned off)"
