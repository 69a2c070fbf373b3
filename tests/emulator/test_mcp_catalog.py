"""The catalog of MCP servers: it covers the contract, and what the emulator answers and
prints from it (501 for servers it does not host, 503 for hosted ones not installed here,
``klavis-emulator check`` and ``setup --only``)."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import httpx
import pytest

from klavis_emulator import EmulatorConfig, EmulatorServer
from klavis_emulator.__main__ import _commands_line
from klavis_emulator._exec.confinement import SANDBOX_COMMANDS, missing_commands, sandbox_commands
from klavis_emulator._mcp.catalog import CATALOG, HOSTED_SERVERS
from klavis_emulator._mcp.host import McpHost
from klavis_emulator._mcp.kinds import NotHosted
from klavis_emulator._mcp.setup import McpSetupError, McpToolPaths, setup_mcp_servers
from klavis_emulator._state import LOCAL_SERVER_NAMES
from tests.helpers import require_confinement


def test_the_catalog_describes_every_server_of_the_contract_once() -> None:
    assert sorted(CATALOG) == sorted(LOCAL_SERVER_NAMES)
    for name, entry in CATALOG.items():
        assert entry.name == name
        assert entry.summary
        if isinstance(entry.install, NotHosted):
            assert len(entry.install.reason) > 30  # a reason, not a shrug
        else:
            assert entry.launch is not None
    assert {"filesystem", "git", "terminal"} <= set(HOSTED_SERVERS)
    for offline_impossible in ("google_cloud", "canvas", "code-executor"):
        install = CATALOG[offline_impossible].install
        assert isinstance(install, NotHosted)
        assert not install.offline_feasible


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorServer]:
    # started on first use: a test replaces what is installed before its first request
    server = EmulatorServer(EmulatorConfig(host_mcp=True, mcp_at_acquire=False)).start()
    try:
        yield server
    finally:
        host: McpHost = server.app.state.mcp
        host.shutdown(wait=15)
        server.stop()


def _acquire(server: EmulatorServer, names: list[str]) -> tuple[httpx.Client, dict[str, str]]:
    http = httpx.Client(
        base_url=server.base_url,
        headers={"Authorization": f"Bearer cat-{secrets.token_hex(8)}"},
        timeout=30,
    )
    answer = http.post("/local-sandbox", json={"server_names": names})
    assert answer.status_code == 201, answer.text
    return http, {s["server_name"]: s["mcp_server_url"] for s in answer.json()["servers"]}


@pytest.mark.parametrize("name", ["google_cloud", "canvas", "code-executor"])
def test_a_server_that_cannot_run_offline_answers_501_saying_why(
    emulator: EmulatorServer, name: str
) -> None:
    http, urls = _acquire(emulator, [name])
    answer = httpx.post(urls[name], json={}, timeout=30)
    http.close()
    install = CATALOG[name].install
    assert isinstance(install, NotHosted)
    assert answer.status_code == 501
    detail = answer.json()["detail"]
    assert f"does not host the {name!r} MCP server" in detail
    assert install.reason in detail


def test_a_hosted_server_not_installed_here_answers_503_naming_the_fix(
    emulator: EmulatorServer,
) -> None:
    http, urls = _acquire(emulator, ["terminal", "filesystem"])
    with mock.patch.object(McpHost, "tools", return_value=McpToolPaths(node=None)):
        terminal = httpx.post(urls["terminal"], json={}, timeout=30)
        filesystem = httpx.post(urls["filesystem"], json={}, timeout=30)
    http.close()
    assert terminal.status_code == 503
    assert "not installed on this machine" in terminal.json()["detail"]
    assert "klavis-emulator setup" in terminal.json()["detail"]
    assert filesystem.status_code == 503
    assert "Node.js" in filesystem.json()["detail"]


def _command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "klavis_emulator", *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def test_check_prints_a_row_per_server_of_the_contract() -> None:
    done = _command("check")
    table = done.stdout  # the whole table, problems included (tests/emulator/test_cli_commands.py)
    rows = {line.split()[0]: line for line in table.splitlines() if line.strip()}
    assert rows["server"].split()[:3] == ["server", "installed", "version"]
    for name in LOCAL_SERVER_NAMES:
        assert name in rows, table
    install = CATALOG["canvas"].install
    assert isinstance(install, NotHosted)
    assert install.reason in rows["canvas"]
    problems = [name for name in HOSTED_SERVERS if rows[name].split()[1] == "no"]
    assert done.returncode == (1 if problems else 0), table
    assert rows["commands"].startswith(("commands (", "commands missing (")), table


def test_check_says_which_commands_a_sandbox_lacks() -> None:
    line, lacking = _commands_line(["node", "npm", "npx"], confined=True)
    assert lacking
    assert line == (
        "commands missing (inside the confinement): node npm npx; install Node.js, npm "
        "(code-runner, terminal and desktop-commander run them by name)"
    )
    line, lacking = _commands_line([], confined=False)
    assert not lacking
    assert line == "commands (on PATH, unconfined): " + " ".join(SANDBOX_COMMANDS)


def test_missing_commands_are_looked_for_where_the_processes_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unconfined, on the emulator's PATH; confined, inside the confinement, where exactly
    the commands the host lacks are missing, and never Python."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "python").symlink_to(sys.executable)
    with monkeypatch.context() as patch:
        patch.setenv("PATH", str(folder))
        assert missing_commands(None) == [name for name in SANDBOX_COMMANDS if name != "python"]
    confinement = require_confinement()
    missing = missing_commands(confinement.bwrap)
    assert "python" not in missing
    assert "python3" not in missing
    assert set(missing) == set(SANDBOX_COMMANDS) - set(sandbox_commands())


def test_setup_only_installs_and_reports_just_the_named_servers(tmp_path: Path) -> None:
    # git needs nothing installed: a quick, real run of the command
    done = _command("setup", "--only", "git", "--tools-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    rows = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    assert "git" in rows
    assert "terminal" not in rows
    assert not (tmp_path / "venvs").exists()  # nothing else was installed


def test_setup_only_refuses_names_it_cannot_install(tmp_path: Path) -> None:
    with pytest.raises(McpSetupError, match="Google Cloud"):
        setup_mcp_servers(tools_dir=tmp_path, only=["google_cloud"])
    with pytest.raises(ValueError, match="not an MCP server"):
        setup_mcp_servers(tools_dir=tmp_path, only=["nope"])
    done = _command("setup", "--only", "nope", "--tools-dir", str(tmp_path))
    assert done.returncode == 2
    assert "'nope' is not an MCP server" in done.stderr


def test_the_version_of_an_npm_program_outside_its_package_is_unknown(tmp_path: Path) -> None:
    import dataclasses

    from klavis_emulator._mcp.setup import find_tools, installed_version

    tools = find_tools()
    stray = tmp_path / "bin" / "index.js"  # no folder named after the package above it
    moved = dataclasses.replace(tools, programs={**tools.programs, "filesystem": stray})
    assert installed_version("filesystem", moved) is None


def test_only_pieces_the_project_cannot_install_count_as_outside() -> None:
    from klavis_emulator._mcp.setup import McpToolPaths

    no_node = McpToolPaths(node=None)
    assert "Node.js" in (no_node.missing_outside("filesystem") or "")
    assert no_node.missing("filesystem") == no_node.missing_outside("filesystem")
    # node is there but our npm install is not: a project failure, never a reason to skip
    no_install = McpToolPaths(node=Path("/usr/bin/node"), system={"rg": Path("/usr/bin/rg")})
    assert no_install.missing_outside("filesystem") is None
    assert "klavis-emulator setup" in (no_install.missing("filesystem") or "")
    assert no_install.missing_outside("terminal") is None
    assert "klavis-emulator setup" in (no_install.missing("terminal") or "")
    no_rg = McpToolPaths(node=Path("/usr/bin/node"))
    assert "apt-get install ripgrep" in (no_rg.missing_outside("desktop-commander") or "")
    no_chromium = McpToolPaths(node=Path("/usr/bin/node"), system={"rg": Path("/usr/bin/rg")})
    assert "apt-get install chromium" in (no_chromium.missing_outside("playwright") or "")


def test_a_distribution_program_off_path_is_found_at_its_known_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from klavis_emulator._mcp.launchers import CHROMIUM
    from klavis_emulator._mcp.setup import find_tools

    known = next((Path(p) for p in CHROMIUM.paths if Path(p).is_file()), None)
    if known is None:
        pytest.skip("needs Chromium: apt-get install chromium")
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: nothing found on PATH
    system = find_tools().system
    assert system[CHROMIUM.key] == known
    assert "rg" not in system  # ripgrep has no known paths: missing
