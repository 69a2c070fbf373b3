"""Attacks on confinement: what a confined process learns of the host's folders from ``/proc``
(issue 32, point 9), with real bubblewrap: an execution and a real MCP server on a real
emulator (``EmulatorServer`` on loopback port 0), and every installed server's own confinement.

A confined process reads ``/proc/self/mountinfo``, ``/proc/self/mounts``, ``/proc/self/cgroup``,
``/proc/1/mountinfo`` and ``/proc/1/cmdline``; none may name the emulator's data folder, its
tools folder, the interpreter's prefixes, the emulator's package folder or the home folder,
neither by their host paths nor by their paths inside their file systems (what a mount's root
shows). The documented exception (see ``klavis_emulator/_exec/host_paths.py``): PID 1's command
line ends with the command's own argv (an install's path, the interpreter's). The data folder
is named nowhere: the writable binds at ``/data`` and ``/execution`` are of the overlays held
for the data folder (``klavis_emulator/_exec/data_overlay.py``), whose roots and options name
relative paths only; where those overlays cannot be made, the data folder may show as the
root of those binds, and the tests say so.

These skip where bwrap is not installed, or where confinement is turned off on purpose
(``KLAVIS_EMULATOR_CONFINE=0``, the unconfined pass of the attack corpus): that skip is right
there, as an unconfined process works in the workspace's host folder (its ``AGENT_WORKSPACE``
is that path) and shares the emulator's mount table; there is nothing to hide.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

import klavis_emulator
from klavis_emulator import EmulatorConfig, EmulatorServer
from klavis_emulator._exec.confinement import (
    CONFINE_ENV,
    CONFINED_WORKSPACE,
    bwrap_args,
    decide_confinement,
)
from klavis_emulator._exec.host_paths import command_of
from klavis_emulator._mcp.launch import HOSTED_SERVERS, launch_spec
from klavis_emulator._mcp.setup import default_tools_dir, find_tools
from tests.emulator.mcp_servers import ServerSandbox
from tests.helpers import (
    Executions,
    machine_cannot_overlay,
    new_tenant,
    require_confinement,
    require_data_overlay,
    wait_until,
)
from workflows import _mcp as client

PROC_FILES = (
    "/proc/self/mountinfo",
    "/proc/self/mounts",
    "/proc/self/cgroup",
    "/proc/1/mountinfo",
    "/proc/1/cmdline",
)
WRITABLE_BINDS = ("/data", "/execution")
"""Where the data folder may show, as the root of the bind (see the module docs)."""

# Prints one line: "PROC " + {path: its text (NULs as spaces), or the error's name}.
READER = f"""
import json
found = {{}}
for path in {list(PROC_FILES)!r}:
    try:
        found[path] = open(path, "rb").read().replace(b"\\0", b" ").decode("utf-8", "replace")
    except OSError as exc:
        found[path] = type(exc).__name__
print("PROC " + json.dumps(found))
"""

READER_JS = f"""
const fs = require('fs');
const found = {{}};
for (const path of {json.dumps(list(PROC_FILES))}) {{
  try {{
    found[path] = fs.readFileSync(path).toString('utf-8').split('\\0').join(' ');
  }} catch (error) {{
    found[path] = error.code;
  }}
}}
console.log('PROC ' + JSON.stringify(found));
"""


def _host_mounts() -> list[tuple[str, str]]:
    """The emulator's own mount table: ``(mount point, root inside its file system)``."""
    mounts = []
    with open("/proc/self/mountinfo", encoding="utf-8") as table:
        for line in table:
            fields = line.split()
            mounts.append((fields[4], fields[3]))
    return mounts


def _inside_its_file_system(path: str) -> str:
    """``path`` as a bind of it shows it in ``mountinfo``: below the root of the host mount
    that holds it."""
    point, root = max(
        ((p, r) for p, r in _host_mounts() if path == p or path.startswith(p.rstrip("/") + "/")),
        key=lambda mount: len(mount[0]),
    )
    rest = path[len(point.rstrip("/")) :]
    return (root.rstrip("/") + rest) or "/"


def _system(path: str) -> bool:
    return path == "/" or any(path == f or path.startswith(f + "/") for f in ("/usr", "/etc"))


def host_paths(data_dir: Path) -> dict[str, set[str]]:
    """What must not be named, by name: each folder's host path (as given and resolved) and
    its path inside its file system; the system folders, which every sandbox mounts
    read-only by design, left out (a base interpreter under ``/usr``)."""
    folders: dict[str, list[str | os.PathLike[str]]] = {
        "data folder": [data_dir],
        "tools folder": [default_tools_dir()],
        "interpreter prefix": [sys.prefix, sys.exec_prefix],
        "base interpreter prefix": [sys.base_prefix, sys.base_exec_prefix],
        "package folder": [Path(klavis_emulator.__file__).parent],
        "HOME": [Path.home()],
    }
    named: dict[str, set[str]] = {}
    for name, paths in folders.items():
        variants: set[str] = set()
        for path in paths:
            for variant in (os.path.abspath(path), os.path.realpath(path)):
                variants |= {variant, _inside_its_file_system(variant)}
        named[name] = {variant for variant in variants if not _system(variant)}
    return {name: variants for name, variants in named.items() if variants}


def _names(text: str, path: str) -> bool:
    """Whether ``text`` names ``path`` or something below it, as a whole path (``/root`` is
    not named by ``/newroot``; ``mountinfo`` fields, options and ``lowerdir`` lists split)."""
    return any(
        token == path or token.startswith(path.rstrip("/") + "/")
        for token in re.split(r"[\s,:=]+", text)
    )


def leaks(
    found: dict[str, str], named: dict[str, set[str]], *, binds_show_data: bool = False
) -> list[str]:
    """Each line of ``found`` (the reader's output) that names a folder of ``named`` (with
    ``binds_show_data``, where the data folder has no overlays, but for the data folder as
    the root of a writable bind in a ``mountinfo``); of a ``cmdline`` (PID 1: the init, then
    the command's own argv, which runs at its installed path) only the data folder counts."""
    said = []
    for file, text in found.items():
        for line in text.splitlines():
            fields = line.split()
            for name, paths in named.items():
                if file.endswith("/cmdline") and name != "data folder":
                    continue  # the command's own argv: the installs' paths (see the docs)
                if not any(_names(line, path) for path in paths):
                    continue
                allowed = (
                    binds_show_data
                    and name == "data folder"
                    and file.endswith("/mountinfo")
                    and len(fields) > 4
                    and fields[4] in WRITABLE_BINDS
                    and not any(_names(" ".join(fields[4:]), path) for path in paths)
                )
                if not allowed:
                    said.append(f"{file} names the {name}: {line}")
    return said


def proc_files(output: str) -> dict[str, str]:
    """The reader's ``PROC`` line, checked to have read every file."""
    assert "PROC " in output, output
    found: dict[str, str] = json.loads(output.split("PROC ", 1)[1].splitlines()[0])
    assert set(found) == set(PROC_FILES)
    for path in ("/proc/self/mountinfo", "/proc/self/mounts", "/proc/self/cgroup"):
        assert "\n" in found[path], (path, found[path])  # read, not an error's name
    return found


def assert_nothing_named(found: dict[str, str], server: EmulatorServer) -> None:
    """The reader's files name none of the host's folders (the data folder neither, where it
    has its overlays), and no bwrap command line shows."""
    named = host_paths(server.state.data_dir)
    assert {"data folder", "tools folder", "package folder", "HOME"} <= set(named)
    assert leaks(found, named, binds_show_data=server.state.data_overlay is None) == []
    assert "--bind" not in found["/proc/1/cmdline"]  # bubblewrap's own command line
    cgroups = [line for line in found["/proc/self/cgroup"].splitlines() if line]
    assert cgroups
    assert all(line.endswith(":/") for line in cgroups), cgroups


@pytest.fixture(scope="module")
def confined_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorServer]:
    """A confined emulator of this module's own (skips as the module docs say)."""
    require_confinement()
    with EmulatorServer(
        EmulatorConfig(data_dir=tmp_path_factory.mktemp("host-paths") / "data")
    ) as server:
        assert server.state.run_settings.confinement.enabled
        yield server


def test_the_test_finds_what_the_old_mounts_showed(tmp_path: Path) -> None:
    """The checker itself: a ``mountinfo`` line of the old builder (the interpreter bound at
    its own path) is a leak; the overlay at a neutral place is not; the workspace bind may
    show the data folder as its root only."""
    named = host_paths(tmp_path)
    prefix = os.path.realpath(sys.prefix)
    old = f"97 65 254:0 {prefix} {prefix} ro,nosuid - ext4 /dev/vda rw"
    new = "45 65 0:51 / /opt/klavis/installs/0 ro - overlay overlay ro,lowerdir=/.klavis-stage/0"
    workspace = f"99 65 254:0 {tmp_path}/workspaces/x /data rw - ext4 /dev/vda rw"
    overlay = (
        "99 65 0:39 /x /data rw - overlay overlay rw,lowerdir=.overlay/empty,"
        "upperdir=workspaces,workdir=.overlay/work-workspaces,userxattr"
    )
    assert leaks({"/proc/self/mountinfo": old}, named)
    assert leaks({"/proc/self/mountinfo": f"{new}\n{overlay}"}, named) == []
    assert leaks({"/proc/self/mountinfo": workspace}, named)
    assert leaks({"/proc/self/mountinfo": workspace}, named, binds_show_data=True) == []
    assert leaks({"/proc/self/mounts": f"/dev/vda {tmp_path}/x /data ext4 rw"}, named)


def test_an_execution_reads_no_host_path_in_proc(confined_server: EmulatorServer) -> None:
    with new_tenant(confined_server, "host-paths") as tenant:
        runs: Executions = tenant
        sandbox_id = runs.acquire()
        status = runs.run(sandbox_id, "proc", {"main.py": READER})
        logs = runs.logs(sandbox_id, "proc")["logs"]
    assert status == "completed", logs
    found = proc_files(logs)
    assert_nothing_named(found, confined_server)
    mounts = found["/proc/self/mountinfo"]
    assert " /opt/klavis/installs/0 " in mounts  # the interpreter is there, as an overlay
    assert " /data " in mounts
    assert " /execution " in mounts


def test_a_node_servers_tool_reads_no_host_path_in_proc(confined_server: EmulatorServer) -> None:
    """code-runner (an npm server under node) runs the reader with its run-code tool."""
    missing = {"code-runner": find_tools().missing_outside("code-runner")}
    box = ServerSandbox(confined_server, "code-runner", missing)
    try:
        ran = client.call_tool(box.url, "run-code", {"code": READER_JS, "languageId": "javascript"})
    finally:
        box.close()
    assert not ran.is_error, ran.text
    assert_nothing_named(proc_files(ran.text), confined_server)


@pytest.mark.parametrize("server", HOSTED_SERVERS)
def test_each_servers_confinement_shows_no_host_path(
    confined_server: EmulatorServer, server: str
) -> None:
    """Every installed server's own mounts (its npm folder and node, its venv and the Python
    under it, the emulator's Python), with the reader run in place of the server."""
    confinement = confined_server.state.run_settings.confinement
    tools = find_tools()
    why = tools.missing(server)
    if why is not None:
        if tools.missing_outside(server) is None:  # the project installs it: a failure
            pytest.fail(f"{server} is not installed: {why}")
        pytest.skip(f"{server}: {why}")
    workspace = confined_server.state.workspace_path(str(uuid.uuid4()))  # through the overlay
    workspace.mkdir()
    spec = launch_spec(
        server,
        workspace,
        tools,
        bwrap=confinement.bwrap,
        mail={"host": "127.0.0.1", "port": 1},  # where a server needs one (nothing connects)
    )
    args = [spec.command, *spec.args]
    wrapper = args[: len(args) - len(command_of(args))]
    done = subprocess.run(
        [*wrapper, "/opt/klavis/bin/python", "-I", "-c", READER],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = proc_files(done.stdout)
    assert_nothing_named(found, confined_server)
    assert f" {CONFINED_WORKSPACE} " in found["/proc/self/mountinfo"]


def test_where_overlays_fail_the_trees_are_bound_as_before_and_the_log_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``bwrap`` that refuses the init's capabilities (as a host that forbids overlayfs in
    user namespaces would fail its mounts): confinement still works, without the layers."""
    real = shutil.which("bwrap")
    if real is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    folder = tmp_path / "fake-bin"
    folder.mkdir()
    fake = folder / "bwrap"
    fake.write_text(
        '#!/bin/sh\nfor arg; do [ "$arg" = CAP_SYS_ADMIN ] && { echo "no caps" >&2; exit 1; }; '
        f'done\nexec {real} "$@"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv(CONFINE_ENV, "1")
    with caplog.at_level("WARNING", logger="klavis_emulator"):
        confinement = decide_confinement()
    assert confinement.enabled
    assert confinement.bwrap == str(fake)
    said = [record.getMessage() for record in caplog.records]
    assert any("mounting them as overlays failed" in line and "no caps" in line for line in said)
    args = bwrap_args(str(fake), workspace=tmp_path, env={})
    assert "CAP_SYS_ADMIN" not in args
    prefix = os.path.realpath(sys.prefix)
    assert ["--ro-bind", prefix, prefix] == args[args.index(prefix) - 1 : args.index(prefix) + 2]
    done = subprocess.run(
        [*args, sys.executable, "-I", "-c", READER],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = proc_files(done.stdout)
    assert leaks(found, host_paths(tmp_path))  # as before issue 32: the interpreter shows
    assert "--bind" not in found["/proc/1/cmdline"]  # the init is PID 1 all the same


def test_the_tenant_folders_are_overlays_where_the_machine_allows(
    confined_server: EmulatorServer,
) -> None:
    """Confined, ``workspaces/`` and ``executions/`` are overlays held for the data folder, and
    the state reaches them only through the holder (its folders are views); a skip names what
    the machine lacks (the holder's own reason)."""
    state = confined_server.state
    holder = require_data_overlay(state)
    assert holder.alive()
    for folder in (state.folders.workspaces, state.folders.executions):
        assert str(folder).startswith(f"/proc/{holder.pid}/root/")
    ours = os.stat(state.folders.workspaces)
    assert ours.st_dev != os.stat(state.data_dir / "workspaces").st_dev  # the overlay's own
    assert os.stat(state.data_dir).st_dev != ours.st_dev


def test_the_holder_goes_when_the_emulator_is_killed(tmp_path: Path) -> None:
    """An emulator started as a process of its own, then SIGKILLed: its holder ends too (its
    parent-death signal, and its life pipe at EOF)."""
    require_confinement()
    data = tmp_path / "data"
    emulator = subprocess.Popen(
        [sys.executable, "-m", "klavis_emulator", "--data-dir", str(data), "--port", "0",
         "--no-mcp-at-acquire", "--mcp-spares", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:

        def holder_of(pid: int) -> psutil.Process | None:
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(pid).children():
                    line = child.cmdline()
                    if len(line) > 6 and line[5:7] == [str(pid), str(data)]:
                        return child
            return None

        wait_until(
            lambda: holder_of(emulator.pid) is not None or emulator.poll() is not None,
            "a holder started",
        )
        holder = holder_of(emulator.pid)
        if holder is None:
            said = emulator.stderr.read().decode() if emulator.stderr else ""
            reason = machine_cannot_overlay(tmp_path)
            if reason is not None and "overlays could not be made" in said:
                pytest.skip(f"the data folder's overlays cannot be made here: {reason}")
            pytest.fail(f"the emulator ended or made no holder: {said[-2000:]}")
        emulator.send_signal(signal.SIGKILL)
        emulator.wait()
        wait_until(lambda: not holder.is_running() or holder.status() == "zombie", "gone")
    finally:
        if emulator.poll() is None:
            emulator.kill()
            emulator.wait()
        if emulator.stderr is not None:
            emulator.stderr.close()
