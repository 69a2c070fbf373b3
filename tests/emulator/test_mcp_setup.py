"""Where ``klavis-emulator setup`` installs, and installing a server on first need.

Real installs into fresh temporary tools folders (``npm ci`` of the filesystem server and
the terminal server's venv: seconds with the machine's npm and uv caches warm), a real
emulator on a loopback port chosen by the OS, the official MCP client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import klavis_emulator
from klavis_emulator import EmulatorConfig, EmulatorServer
from klavis_emulator._exec.confinement import CONFINE_ENV
from klavis_emulator._mcp.catalog import CATALOG
from klavis_emulator._mcp.host import McpHost
from klavis_emulator._mcp.installs import DONE_MARKER
from klavis_emulator._mcp.kinds import OwnVenv
from klavis_emulator._mcp.setup import TOOLS_DIR_ENV, _venv_name, find_tools
from tests.emulator.mcp_servers import failure_message, sdk_session
from workflows import _mcp as client

TOOLS = find_tools()
MISSING = {name: TOOLS.missing_outside(name) for name in ("filesystem", "terminal")}
PACKAGE = Path(klavis_emulator.__file__).resolve().parent


def needs(*servers: str) -> pytest.MarkDecorator:
    """Skip when these servers lack something the project cannot install (Node.js, ...)."""
    missing = [f"{s}: {MISSING[s]}" for s in servers if MISSING[s]]
    return pytest.mark.skipif(bool(missing), reason="; ".join(missing))


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``folder`` (bytecode caches aside): size and mtime."""
    return {
        str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in folder.rglob("*")
        if "__pycache__" not in path.parts
    }


@needs("filesystem")
def test_setup_writes_nothing_into_the_installed_package(tmp_path: Path) -> None:
    before = _snapshot(PACKAGE)
    done = subprocess.run(
        [sys.executable, "-m", "klavis_emulator", "setup", "--only", "filesystem",
         "--tools-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _snapshot(PACKAGE) == before
    found = find_tools(tmp_path).program("filesystem")
    assert found is not None
    assert found.is_relative_to(tmp_path / "node")
    assert "node_modules" not in {path.name for path in (PACKAGE / "mcp_servers").iterdir()}


def test_a_venv_built_by_another_python_serves_this_one(tmp_path: Path) -> None:
    install = CATALOG["terminal"].install
    assert isinstance(install, OwnVenv)
    other = tmp_path / "venvs" / _venv_name(install, "py399")  # not this interpreter's
    (other / "bin").mkdir(parents=True)
    (other / "bin" / "python").symlink_to(sys.executable)
    script = other / "bin" / install.script
    script.write_text("#!/bin/sh\n")
    assert find_tools(tmp_path).program("terminal") is None  # no done marker: incomplete
    (other / DONE_MARKER).write_text("")
    assert find_tools(tmp_path).program("terminal") == script
    (other / "bin" / "python").unlink()
    (other / "bin" / "python").symlink_to(tmp_path / "uninstalled-python")
    assert find_tools(tmp_path).program("terminal") is None  # its interpreter is gone


@pytest.fixture
def fresh_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty tools folder the emulators of the test install into."""
    tools = tmp_path / "tools"
    monkeypatch.setenv(TOOLS_DIR_ENV, str(tools))
    monkeypatch.setenv(CONFINE_ENV, "0")  # the install is the subject, not the confinement
    return tools


@contextlib.contextmanager
def _emulator(**options: bool | None) -> Iterator[EmulatorServer]:
    server = EmulatorServer(EmulatorConfig(**options)).start()  # type: ignore[arg-type]
    try:
        yield server
    finally:
        _host(server).shutdown(wait=15)
        server.stop()


def _host(server: EmulatorServer) -> McpHost:
    found: McpHost = server.app.state.mcp
    return found


def _acquire(server: EmulatorServer, names: list[str]) -> tuple[str, dict[str, str]]:
    answer = httpx.post(
        f"{server.base_url}/local-sandbox",
        json={"server_names": names},
        headers={"Authorization": f"Bearer setup-{secrets.token_hex(8)}"},
        timeout=60,
    )
    assert answer.status_code == 201, answer.text
    body = answer.json()
    return body["local_sandbox_id"], {
        s["server_name"]: s["mcp_server_url"] for s in body["servers"]
    }


@needs("filesystem", "terminal")
def test_acquiring_installs_a_missing_server_once_for_every_sandbox(fresh_tools: Path) -> None:
    with _emulator() as server:
        host = _host(server)
        first, urls = _acquire(server, ["filesystem", "terminal"])
        second, _ = _acquire(server, ["terminal"])
        host.wait_warm(first, timeout=600)
        host.wait_warm(second, timeout=600)
        assert sorted(host.installer.installed) == ["filesystem", "terminal"]  # once each
        names = {tool.name for tool in client.list_tools(urls["terminal"], timeout=60)}
        assert "run_command" in names
        names = {tool.name for tool in client.list_tools(urls["filesystem"], timeout=60)}
        assert "write_file" in names
    assert [path.name.split("-")[0] for path in (fresh_tools / "node").iterdir()] == ["filesystem"]


def test_with_installing_off_a_missing_server_answers_503_naming_setup_only(
    fresh_tools: Path,
) -> None:
    with _emulator(install_mcp_servers=False) as server:
        _, urls = _acquire(server, ["terminal"])
        answer = httpx.post(urls["terminal"], json={}, timeout=60)
        assert answer.status_code == 503, answer.text
        assert "klavis-emulator setup --only terminal" in answer.json()["detail"]
        assert _host(server).installer.installed == []
    assert not (fresh_tools / "venvs").exists()


def test_a_failed_install_answers_503_naming_setup_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(TOOLS_DIR_ENV, str(blocker / "tools"))  # cannot be made
    monkeypatch.setenv(CONFINE_ENV, "0")
    with _emulator(mcp_at_acquire=False) as server:
        _, urls = _acquire(server, ["terminal"])
        answers = [httpx.post(urls["terminal"], json={}, timeout=60) for _ in range(2)]
        for answer in answers:  # the second at once: a failed install is not tried again
            assert answer.status_code == 503, answer.text
            detail = answer.json()["detail"]
            assert "installing it failed" in detail
            assert "klavis-emulator setup --only terminal" in detail
        assert "terminal" in _host(server).installer.failed


@pytest.fixture
def damaged_filesystem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A damaged install in the emulators' tools folder: the filesystem server's package
    without the MCP SDK it imports (its program's path)."""
    program = TOOLS.program("filesystem")
    assert program is not None
    installed = next(folder.parent for folder in program.parents if folder.name == "node_modules")
    copy = tmp_path / "tools" / "node" / installed.name
    shutil.copytree(installed, copy, symlinks=True)
    shutil.rmtree(copy / "node_modules" / "@modelcontextprotocol" / "sdk")
    monkeypatch.setenv(TOOLS_DIR_ENV, str(tmp_path / "tools"))
    return copy / program.relative_to(installed)


@needs("filesystem")
def test_a_server_that_fails_to_start_is_logged_with_what_it_printed(
    damaged_filesystem: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Node.js prints the error first, then its stack (915 characters); the last 600, all
    # the log said before, began inside the stack and named no error.
    with (
        _emulator(install_mcp_servers=False) as server,
        caplog.at_level(logging.ERROR, logger="klavis_emulator.mcp"),
    ):
        host = _host(server)
        assert host.tools().program("filesystem") == damaged_filesystem
        sandbox_id, _ = _acquire(server, ["filesystem"])
        host.start_servers(sandbox_id)  # as a reset does for a sandbox that used them
        host.wait_warm(sandbox_id, timeout=120)
    failures = [
        record.getMessage() for record in caplog.records if record.name == "klavis_emulator.mcp"
    ]
    assert len(failures) == 1, failures
    prefix = f"MCP filesystem of sandbox {sandbox_id} failed to start; it said: "
    assert failures[0].startswith(prefix), failures[0]
    said = failures[0].removeprefix(prefix)
    assert "Cannot find package '@modelcontextprotocol/sdk'" in said  # the error, first
    assert "Node.js v" in said  # and the end of what it printed


@needs("filesystem")
def test_a_client_of_a_server_that_fails_to_start_hears_why(damaged_filesystem: Path) -> None:
    # the proxy, left to start it on the first request, answered an empty tool list and
    # "Unknown tool" to every call; the client now hears what the server printed
    async def open_and_list(url: str) -> str:
        try:
            async with sdk_session(url) as session:
                listed = await session.list_tools()
        except Exception as exc:
            return failure_message(exc)
        return f"listed {len(listed.tools)} tools"

    with _emulator(install_mcp_servers=False, mcp_at_acquire=False) as server:
        sandbox_id, urls = _acquire(server, ["filesystem"])
        heard = asyncio.run(open_and_list(urls["filesystem"]))
        expected = f"The 'filesystem' MCP server of local sandbox {sandbox_id} did not start"
        assert expected in heard, heard
        assert "Cannot find package '@modelcontextprotocol/sdk'" in heard
        again = httpx.post(urls["filesystem"], json={}, timeout=60)  # tried again, refused again
        assert again.status_code == 503, again.text
        assert again.json()["error"]["message"].startswith(expected)
        with pytest.raises(Exception, match="did not start") as raised:
            client.list_tools(urls["filesystem"], timeout=60)
        assert "Cannot find package" in str(raised.value)
