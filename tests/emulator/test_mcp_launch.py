"""How the hosted MCP servers are started (pure command lines), installed, and imported."""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from klavis_emulator._exec.confinement import (
    CONFINE_ENV,
    CONFINED_WORKSPACE,
    PRIVATE_TMP,
    SANDBOX_BIN,
    bwrap_args,
    decide_confinement,
    masked_paths,
)
from klavis_emulator._exec.host_paths import command_of
from klavis_emulator._mcp.launch import HOSTED_SERVERS, TERMINAL_ALLOWED_COMMANDS, launch_spec
from klavis_emulator._mcp.launchers import EMAILS_CONFIG
from klavis_emulator._mcp.setup import McpToolPaths, find_tools, setup_mcp_servers
from tests.emulator.mcp_servers import skip_without


@pytest.fixture(scope="module")
def bwrap() -> str:
    """The bwrap that confines here. Skips only where bwrap is not installed; where it is
    installed but cannot confine, the test fails (ConfinementError names the reason)."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    confinement = decide_confinement(environ={CONFINE_ENV: "1"})
    assert confinement.bwrap is not None
    return confinement.bwrap


@pytest.fixture
def fake_tools(tmp_path: Path) -> McpToolPaths:
    """Tool paths laid out like a real install (nothing is run)."""
    entry = tmp_path / "pkg" / "node_modules" / "@modelcontextprotocol" / "server-filesystem"
    (entry / "dist").mkdir(parents=True)
    (entry / "dist" / "index.js").write_text("")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "cli-mcp-server").write_text("")
    (venv / "bin" / "python").symlink_to(sys.executable)
    return McpToolPaths(
        node=Path("/usr/bin/node"),
        programs={
            "filesystem": entry / "dist" / "index.js",
            "git": Path(sys.executable),
            "terminal": venv / "bin" / "cli-mcp-server",
        },
    )


def test_unconfined_servers_get_the_host_workspace(
    fake_tools: McpToolPaths, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    filesystem = launch_spec("filesystem", workspace, fake_tools, bwrap=None)
    git = launch_spec("git", workspace, fake_tools, bwrap=None)
    terminal = launch_spec("terminal", workspace, fake_tools, bwrap=None, command_timeout=7)

    assert not filesystem.confined
    assert filesystem.args[-1] == str(workspace)
    assert filesystem.cwd == str(workspace)
    assert str(fake_tools.program("filesystem")) in filesystem.args
    assert git.args[-1] == str(workspace)
    assert "create_server" in git.args[-2]  # confined to the workspace by the server itself
    assert terminal.env["ALLOWED_DIR"] == str(workspace)
    assert terminal.env["COMMAND_TIMEOUT"] == "7"
    assert terminal.env["ALLOWED_FLAGS"] == "all"
    assert {"ls", "cat", "git", "python3", "grep"} <= set(
        terminal.env["ALLOWED_COMMANDS"].split(",")
    )
    assert terminal.workspace_as_seen == str(workspace)


def test_everyday_commands_are_allowed_and_privileged_ones_are_not() -> None:
    allowed = set(TERMINAL_ALLOWED_COMMANDS)
    assert {"ls", "cat", "echo", "pwd", "mkdir", "cp", "mv", "rm", "sed", "sort", "find"} <= allowed
    assert not {"sudo", "su", "mount", "reboot", "curl", "wget", "ssh"} & allowed


def test_confined_servers_see_the_workspace_at_data(
    fake_tools: McpToolPaths, tmp_path: Path, bwrap: str
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    spec = launch_spec("terminal", workspace, fake_tools, bwrap=bwrap)
    args = list(spec.args)

    assert spec.confined
    assert spec.command == bwrap
    assert spec.workspace_as_seen == CONFINED_WORKSPACE
    for flag in ("--die-with-parent", "--unshare-all", "--clearenv", "--new-session"):
        assert flag in args
    bind = args.index("--bind")
    assert args[bind + 1 : bind + 3] == [str(workspace), CONFINED_WORKSPACE]
    assert args[args.index("--chdir") + 1] == CONFINED_WORKSPACE
    setenv = {args[i + 1]: args[i + 2] for i, arg in enumerate(args) if arg == "--setenv"}
    assert setenv["ALLOWED_DIR"] == CONFINED_WORKSPACE
    assert setenv["AGENT_WORKSPACE"] == CONFINED_WORKSPACE
    cli_server = fake_tools.program("terminal")
    assert cli_server is not None
    venv = str(cli_server.parent.parent)
    assert venv in args  # the server's own venv is mounted (read-only)
    assert command_of(args)[0] == str(cli_server)


def test_only_playwright_shares_the_network_and_its_browser_is_the_distributions(
    fake_tools: McpToolPaths, tmp_path: Path, bwrap: str
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    cli = tmp_path / "pkg" / "node_modules" / "@playwright" / "mcp" / "cli.js"
    cli.parent.mkdir(parents=True)
    cli.write_text("")
    chromium = Path("/usr/bin/chromium")  # nothing is run: any path would do
    tools = McpToolPaths(
        node=fake_tools.node,
        programs={**fake_tools.programs, "playwright": cli},
        system={"chromium": chromium},
    )
    browser = list(launch_spec("playwright", workspace, tools, bwrap=bwrap).args)
    files = list(launch_spec("filesystem", workspace, tools, bwrap=bwrap).args)

    assert "--share-net" in browser[: browser.index("--")]  # pages on loopback load
    assert "--share-net" not in files
    command = command_of(browser)
    assert command[command.index("--executable-path") + 1] == str(chromium)
    assert {"--headless", "--isolated", "--no-sandbox"} <= set(command)
    assert command[command.index("--output-dir") + 1] == f"{CONFINED_WORKSPACE}/.playwright-mcp"
    config = json.loads(command[command.index("sh") + 2])  # written to the private /tmp
    args = config["browser"]["launchOptions"]["args"]
    assert {"--disable-background-networking", "--disable-component-update"} <= set(args)
    assert "channel" not in config["browser"]["launchOptions"]  # not Google Chrome


def test_a_confined_process_sees_only_its_workspace(
    fake_tools: McpToolPaths, tmp_path: Path, bwrap: str
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "mine.txt").write_text("x")
    (tmp_path / "secret.txt").write_text("not for the sandbox")
    spec = launch_spec("git", workspace, fake_tools, bwrap=bwrap)
    args = list(spec.args)
    wrapper = [spec.command, *args[: len(args) - len(command_of(args))]]  # with the init
    shown = subprocess.run(
        [*wrapper, "/bin/sh", "-c", f"pwd; ls; ls {tmp_path} 2>&1; echo $HOME"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    lines = shown.stdout.splitlines()
    assert lines[0] == CONFINED_WORKSPACE
    assert lines[1] == "mine.txt"
    assert "secret.txt" not in shown.stdout
    assert lines[-1] == "/tmp"


def test_the_private_tmp_comes_before_every_bind(fake_tools: McpToolPaths, tmp_path: Path) -> None:
    """bwrap mounts in argument order: a tmpfs mounted after a bind below /tmp hides it."""
    spec = launch_spec("terminal", tmp_path, fake_tools, bwrap="/usr/bin/bwrap")
    args = list(spec.args)
    tmpfs = args.index("--tmpfs")
    assert args[tmpfs + 1] == PRIVATE_TMP
    binds = [i for i, arg in enumerate(args) if arg in ("--bind", "--ro-bind", "--symlink")]
    assert binds
    assert tmpfs < min(binds)


def test_the_masks_come_after_the_system_folders_and_turn_read_only_last(tmp_path: Path) -> None:
    """A mask must cover the system folders (mounted before it), must not cover a bind
    made after it, and its folder becomes read-only only once every mount point is made."""
    files, folders = masked_paths()
    if not files and not folders:
        pytest.skip("nothing to mask: the emulator does not run as root here")
    args = bwrap_args("/usr/bin/bwrap", workspace=tmp_path, env={}, read_only=[tmp_path])

    def where(option: str, value: str | None = None) -> list[int]:
        pairs = itertools.pairwise(args)
        return [i for i, (a, b) in enumerate(pairs) if a == option and value in (None, b)]

    system = max(where("--ro-bind", "/usr") + where("--ro-bind", "/etc"))
    masks = where("--ro-bind", "/dev/null") + where("--perms")
    binds = [i for i in where("--ro-bind") + where("--bind") if i > system and i not in masks]
    remounts = where("--remount-ro")
    assert masks
    assert system < min(masks)
    assert max(masks) < min(binds)
    assert max(binds) < min(remounts)
    assert [args[i + 1] for i in remounts] == [*folders, SANDBOX_BIN]


@pytest.fixture
def folder_under_tmp() -> Iterator[Path]:
    """A folder in /tmp itself (where CI checkouts and `mktemp -d` clones live)."""
    folder = Path(tempfile.mkdtemp(prefix="klavis-under-tmp-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_read_only_folder_under_tmp_stays_visible(folder_under_tmp: Path, bwrap: str) -> None:
    tool = folder_under_tmp / "tool"
    tool.mkdir()
    (tool / "hello.sh").write_text("echo hello from $(pwd)\n")
    workspace = folder_under_tmp / "ws"
    workspace.mkdir()
    args = bwrap_args(bwrap, workspace=workspace, env={"PATH": "/usr/bin:/bin"}, read_only=[tool])
    done = subprocess.run(
        [*args, "/bin/sh", str(tool / "hello.sh")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"hello from {CONFINED_WORKSPACE}\n"


def test_unknown_server_is_refused(fake_tools: McpToolPaths, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not host"):
        launch_spec("canvas", tmp_path, fake_tools, bwrap=None)


def test_missing_tools_say_how_to_install_them() -> None:
    nothing = McpToolPaths(node=None)
    assert "Node.js" in (nothing.missing("filesystem") or "")
    no_package = McpToolPaths(node=Path("/usr/bin/node"))
    assert "klavis-emulator setup" in (no_package.missing("filesystem") or "")
    assert "mcp-server-git" in (nothing.missing("git") or "")
    assert "klavis-emulator setup" in (nothing.missing("terminal") or "")
    assert nothing.missing("canvas") is None


def test_setup_is_silent_when_everything_is_installed() -> None:
    tools = find_tools()
    missing = [f"{s}: {why}" for s in HOSTED_SERVERS if (why := tools.missing_outside(s))]
    if missing:
        pytest.skip("; ".join(missing))
    steps: list[str] = []
    again = setup_mcp_servers(log=steps.append)
    assert steps == []
    assert again == tools


def test_importing_workflows_does_not_import_the_mcp_sdk() -> None:
    code = (
        "import sys, workflows, workflows._mcp\n"
        "heavy = [m for m in ('mcp', 'httpx2', 'fastmcp') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == ""


def test_the_emails_server_gets_its_account_outside_the_workspace_and_the_network(
    fake_tools: McpToolPaths, tmp_path: Path, bwrap: str
) -> None:
    script = tmp_path / "venv" / "bin" / "emails-mcp"
    script.write_text("")
    tools = dataclasses.replace(
        fake_tools,
        programs={**fake_tools.programs, "poste_email_toolathlon": script},
        system={"dovecot": Path("/usr/sbin/dovecot")},
    )
    workspace, private = tmp_path / "ws", tmp_path / "private"
    workspace.mkdir()
    private.mkdir()
    with pytest.raises(ValueError, match="mail server"):
        launch_spec("poste_email_toolathlon", workspace, tools, bwrap=None, tmp_dir=private)
    mail = {"email": "a@mcp.com", "password": "pw", "imap_port": 1, "smtp_port": 2}
    spec = launch_spec(
        "poste_email_toolathlon", workspace, tools, bwrap=None, tmp_dir=private, mail=mail
    )
    args = list(spec.args)
    config = args[args.index("--config_file") + 1]
    assert config == f"{private}/{EMAILS_CONFIG}"  # written by the launch, then it execs
    assert json.loads(args[args.index(config) + 1]) == mail
    for option in ("--attachment_upload_path", "--email_export_path"):
        assert args[args.index(option) + 1] == str(workspace)

    confined = list(
        launch_spec("poste_email_toolathlon", workspace, tools, bwrap=bwrap, mail=mail).args
    )
    assert "--share-net" in confined  # to reach its mail server on the emulator's loopback
    assert confined[confined.index("--config_file") + 1] == f"/tmp/{EMAILS_CONFIG}"


@pytest.mark.parametrize("confined", [True, False], ids=["confined", "unconfined"])
def test_desktop_commander_searches_with_the_found_ripgrep_and_leaks_no_launch_variable(
    tmp_path: Path, confined: bool, request: pytest.FixtureRequest
) -> None:
    # The real launch (bubblewrap, environment, --import arguments), with the server's entry
    # script swapped for a module that asks the server's own ripgrep resolver which rg it
    # uses and prints what its commands would inherit.
    skip_without(["desktop-commander"])
    tools = find_tools()
    bwrap = request.getfixturevalue("bwrap") if confined else None
    workspace = tmp_path / "ws"
    workspace.mkdir()
    spec = launch_spec("desktop-commander", workspace, tools, bwrap=bwrap, tmp_dir=tmp_path / "t")
    program = tools.program("desktop-commander")
    assert program is not None
    resolver = program.parent / "utils" / "ripgrep-resolver.js"
    probe = (
        f"const m = await import({json.dumps(resolver.as_uri())});"
        " console.log(JSON.stringify({rg: await m.getRipgrepPath(),"
        " arch: process.env.npm_config_arch ?? null,"
        " arenas: process.env.MALLOC_ARENA_MAX ?? null}));"
    )
    args = [spec.command, *spec.args]
    args[args.index(str(program)) :] = ["--input-type=module", "-e", probe]
    assert not any("register" in arg for arg in args)  # no module hooks: no second V8 isolate
    done = subprocess.run(
        args, env=spec.env or None, cwd=spec.cwd, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"rg": str(tools.system["rg"]), "arch": None, "arenas": None}
