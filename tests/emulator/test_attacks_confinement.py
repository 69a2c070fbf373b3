"""Attacks on confinement: what a hostile execution of one tenant can reach, on a real emulator
(``EmulatorServer`` on loopback port 0) with real bubblewrap.

The confined cases skip only where ``bwrap`` is not installed, or where confinement is turned
off on purpose (``KLAVIS_EMULATOR_CONFINE=0``: the unconfined pass of the attack corpus in
``scripts/test``). Where ``bwrap`` is installed but cannot confine, the emulator refuses to
start and these tests fail: that is the defect they guard against (a venv under ``/tmp`` once
made the probe fail, and every execution ran unconfined while these tests skipped).

The startup-policy cases (a ``bwrap`` that always fails, the opt-outs) bring their own fake
``bwrap`` and run everywhere.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

import klavis_emulator
from klavis_emulator import EmulatorConfig, EmulatorServer
from klavis_emulator._exec.confinement import (
    CONFINE_ENV,
    LEGACY_CONFINE_ENV,
    ConfinementError,
    decide_confinement,
    python_roots,
)
from klavis_emulator._mcp.setup import find_tools
from tests.emulator.mcp_servers import ServerSandbox
from tests.helpers import Executions, new_tenant, require_confinement, run_cli
from workflows import _mcp as client

SECRET = "tenant-a-secret-7f3c"
#: the last line of a run whose main.py exited 0 (how it ended; the library reads it)
EXITED_0 = "[emulator] main.py exited with status 0."

# main.py of tenant B: try to read each path listed in targets.json (a file of its archive);
# one line per path, then proof that the run ran (its own workspace file).
READER = """
import json, os
for path in json.load(open("targets.json")):
    try:
        if os.path.isdir(path):
            print("READ", path, sorted(os.listdir(path)))
        else:
            print("READ", path, open(path, "rb").read()[:200])
    except OSError as exc:
        print("DENIED", path, type(exc).__name__)
print("OWN", open(os.path.join(os.environ["AGENT_WORKSPACE"], "own.txt")).read())
"""

# main.py of tenant B, after a line "PORT = <n>": connect to the host's loopback port.
CONNECTOR = """
import socket
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=10).close()
    print("CONNECTED")
except OSError as exc:
    print("BLOCKED", type(exc).__name__)
"""


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONFINE_ENV, raising=False)
    monkeypatch.delenv(LEGACY_CONFINE_ENV, raising=False)


@pytest.fixture(scope="module")
def confined_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorServer]:
    """A confined emulator of this module's own. Skips only without bwrap or with
    confinement turned off on purpose; fails (ConfinementError) if bwrap cannot confine."""
    require_confinement()
    with EmulatorServer(
        EmulatorConfig(data_dir=tmp_path_factory.mktemp("confined") / "data")
    ) as server:
        assert server.state.run_settings.confinement.enabled
        yield server


@pytest.fixture
def victim(confined_server: EmulatorServer) -> Iterator[Executions]:
    """Tenant A."""
    with new_tenant(confined_server, "attack-a") as tenant:
        yield tenant


@pytest.fixture
def attacker(confined_server: EmulatorServer) -> Iterator[Executions]:
    """Tenant B."""
    with new_tenant(confined_server, "attack-b") as tenant:
        yield tenant


def _targets(server: EmulatorServer, victim: Executions) -> dict[str, str]:
    """What tenant B's run must not read, by name: tenant A's files, the emulator's own."""
    sandbox_id = victim.acquire()
    workspace = server.state.workspace_path(sandbox_id)
    (workspace / "secret.txt").write_text(SECRET)
    data = server.state.data_dir
    return {
        "victim-file": str(workspace / "secret.txt"),
        "victim-folder": str(workspace),
        "all-workspaces": str(data / "workspaces"),
        "signing-key": str(data / "signing.key"),
        "database": str(data / "emulator.sqlite3"),
        "stored-objects": str(data / "storage"),
        "data-dir": str(data),
    }


def _attack(attacker: Executions, targets: list[str], name: str) -> tuple[str, str]:
    """Run READER as tenant B over ``targets``; its final status and log."""
    sandbox_id = attacker.acquire()
    (attacker.emulator.state.workspace_path(sandbox_id) / "own.txt").write_text("mine")
    files = {"main.py": READER, "targets.json": json.dumps(targets)}
    status = attacker.run(sandbox_id, name, files)
    return status, attacker.logs(sandbox_id, name)["logs"]


@pytest.mark.parametrize(
    "target",
    [
        "victim-file",
        "victim-folder",
        "all-workspaces",
        "signing-key",
        "database",
        "stored-objects",
        "data-dir",
    ],
)
def test_a_run_cannot_read_another_tenant_or_the_emulator(
    confined_server: EmulatorServer, victim: Executions, attacker: Executions, target: str
) -> None:
    path = _targets(confined_server, victim)[target]
    assert os.path.exists(path)  # it is there, for the emulator
    status, logs = _attack(attacker, [path], f"read-{target}")
    assert status == "completed", logs
    assert "OWN mine" in logs  # the run did run, and saw its own workspace
    assert f"DENIED {path} " in logs, logs
    assert "READ" not in logs
    assert SECRET not in logs
    # confined: no line about confinement, no probe failure; only the last line, how it ended
    assert [line for line in logs.splitlines() if "[emulator]" in line] == [EXITED_0]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP listener on a free loopback port of the host, polled without blocking."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        yield server


def _accepted(server: socket.socket) -> bool:
    """Whether a connection is waiting (the run has ended, so any would be queued)."""
    try:
        connection, _ = server.accept()
    except BlockingIOError:
        return False
    connection.close()
    return True


def test_a_run_cannot_reach_the_network(attacker: Executions, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    sandbox_id = attacker.acquire()
    main = f"PORT = {port}\n{CONNECTOR}"
    assert attacker.run(sandbox_id, "connect", {"main.py": main}) == "completed"
    logs = attacker.logs(sandbox_id, "connect")["logs"]
    assert "BLOCKED" in logs, logs
    assert "CONNECTED" not in logs
    assert not _accepted(listener)


# ---------------------------------------------------------------------- host root's secrets

# main.py: try to lift what covers each path of targets.json (umount2, MNT_DETACH), then read
# it; one JSON line: path -> "read" / "listed" (something came back), "empty", or the error.
SECRETS_READER = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
found = {}
for path in json.load(open("targets.json")):
    libc.umount2(path.encode(), 2)
    try:
        if os.path.isdir(path):
            found[path] = "listed" if os.listdir(path) else "empty"
        else:
            with open(path, "rb") as handle:
                found[path] = "read" if handle.read(1) else "empty"
    except OSError as exc:
        found[path] = type(exc).__name__
print("RESULT", json.dumps(found))
"""

# The same through code-runner's run-code (javascript), after "const TARGETS = [...];".
SECRETS_READER_JS = """
const fs = require('fs');
const found = {};
for (const path of TARGETS) {
  try {
    if (fs.statSync(path).isDirectory()) {
      found[path] = fs.readdirSync(path).length ? 'listed' : 'empty';
    } else {
      const fd = fs.openSync(path, 'r');
      found[path] = fs.readSync(fd, Buffer.alloc(1), 0, 1, null) ? 'read' : 'empty';
      fs.closeSync(fd);
    }
  } catch (error) {
    found[path] = error.code;
  }
}
console.log('RESULT ' + JSON.stringify(found));
"""

SYSTEM_VIEW = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""The host folders a confined process sees (those that are folders, not links into /usr)."""
NOBODY = 65534


def _hidden_from_unprivileged_users() -> list[str]:
    """Every path of the system view that the host's unprivileged users cannot read, found by
    one of them (``find`` run as nobody: the kernel's own permission checks, ACLs included),
    and everything below the folders among them (found as root)."""
    setpriv, find = shutil.which("setpriv"), shutil.which("find")
    if setpriv is None or find is None:
        pytest.skip("needs setpriv (util-linux) and find to list what nobody can read")
    roots = [root for root in SYSTEM_VIEW if os.path.isdir(root) and not os.path.islink(root)]
    unreadable_folder = ["-type", "d", "(", "!", "-readable", "-o", "!", "-executable", ")"]
    unreadable_file = ["!", "-type", "d", "!", "-type", "l", "!", "-readable"]
    done = subprocess.run(
        [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", find, *roots,
         "(", *unreadable_folder, "-prune", "-print0", ")", "-o",
         "(", *unreadable_file, "-print0", ")"],
        capture_output=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    hidden = [os.fsdecode(path) for path in done.stdout.split(b"\0") if path]
    below: list[str] = []
    for path in hidden:
        if os.path.isdir(path) and not os.path.islink(path):
            for folder, names, files in os.walk(path):
                below += [os.path.join(folder, name) for name in (*names, *files)]
    return sorted({*hidden, *below})


@pytest.fixture(scope="module")
def root_secrets(confined_server: EmulatorServer) -> list[str]:
    """What host root can read of the system view and its unprivileged users cannot; skips
    unless the emulator runs as root (as an unprivileged user, confined processes run as
    that user and root's files are closed to them by the kernel)."""
    if os.geteuid() != 0:
        pytest.skip("the emulator does not run as root here: its confined processes run as "
                    "an unprivileged user, whom the kernel keeps from root's files")  # fmt: skip
    hidden = _hidden_from_unprivileged_users()
    assert "/etc/shadow" in hidden  # the password hashes: on every Linux distribution
    return hidden


def _leaks(result_line: str) -> dict[str, str]:
    """The targets a reader's ``RESULT`` line says it read something of."""
    found: dict[str, str] = json.loads(result_line.split("RESULT ", 1)[1].splitlines()[0])
    return {path: what for path, what in found.items() if what in ("read", "listed")}


def test_a_run_reads_nothing_the_hosts_unprivileged_users_cannot(
    attacker: Executions, root_secrets: list[str]
) -> None:
    """Run by a root emulator, a confined process is uid 0 mapped to host root: without the
    masks it read /etc/shadow, /etc/ssl/private and every other file of root's."""
    sandbox_id = attacker.acquire()
    files = {"main.py": SECRETS_READER, "targets.json": json.dumps(root_secrets)}
    status = attacker.run(sandbox_id, "secrets", files)
    logs = attacker.logs(sandbox_id, "secrets")["logs"]
    assert status == "completed", logs
    assert "RESULT " in logs, logs
    assert _leaks(logs) == {}
    assert "root:" not in logs


def test_a_servers_tool_reads_nothing_the_hosts_unprivileged_users_cannot(
    confined_server: EmulatorServer, root_secrets: list[str]
) -> None:
    """The same through an MCP server: code-runner's run-code, which runs any tenant's code."""
    missing = {"code-runner": find_tools().missing_outside("code-runner")}
    box = ServerSandbox(confined_server, "code-runner", missing)
    try:
        snippet = f"const TARGETS = {json.dumps(root_secrets)};\n{SECRETS_READER_JS}"
        ran = client.call_tool(box.url, "run-code", {"code": snippet, "languageId": "javascript"})
    finally:
        box.close()
    assert not ran.is_error, ran.text
    assert "RESULT " in ran.text, ran.text
    assert _leaks(ran.text) == {}
    assert "root:" not in ran.text


# ---------------------------------------------------------------------- capabilities

# main.py: the capabilities it holds, and whether it can make a read-only mount writable.
REMOUNTER = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
status = open("/proc/self/status").read()
print("CAPS", [line.split()[1] for line in status.splitlines() if line.startswith("CapEff")][0])
MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND = 2, 4, 32, 4096
for path in ("/usr", "/etc"):
    done = libc.mount(None, path.encode(), None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, None)
    said = "remounted" if done == 0 else os.strerror(ctypes.get_errno())
    print("REMOUNT", path, said, "writable" if os.access(path, os.W_OK) else "read-only")
"""


def test_a_run_holds_no_capabilities_and_cannot_make_the_system_writable(
    attacker: Executions,
) -> None:
    """bubblewrap started by root keeps nearly every capability for the sandboxed process;
    with them it remounted its read-only view of the host's /usr writable. (Only checks
    access: nothing is written.)"""
    sandbox_id = attacker.acquire()
    assert attacker.run(sandbox_id, "remount", {"main.py": REMOUNTER}) == "completed"
    logs = attacker.logs(sandbox_id, "remount")["logs"]
    assert "CAPS 0000000000000000\n" in logs, logs
    for path in ("/usr", "/etc"):
        assert f"REMOUNT {path} Operation not permitted read-only\n" in logs, logs


# ---------------------------------------------------------------------- the install step

# An in-tree PEP 517 build backend: importing it (pip does, to build the project) POSTs the
# emulator's clock forward from inside the run's install step, which has the network (PyPI),
# hence the host's loopback, where the control routes answer without a control token. It
# also leaves a file in the sandbox's workspace, so the build is seen even where the POST
# would not get through.
HOSTILE_BACKEND = """
import json, os, urllib.request
open(os.path.join(os.environ["AGENT_WORKSPACE"], "BUILT"), "w").write("built")
try:
    urllib.request.urlopen(urllib.request.Request(
        "http://127.0.0.1:%s/_emulator/clock/advance" % open("/execution/port.txt").read(),
        data=json.dumps({"seconds": 999999}).encode(),
        headers={"Content-Type": "application/json"}, method="POST"), timeout=10).read()
except Exception as exc:
    print("CONTROL-ERR", exc)
def get_requires_for_build_wheel(config_settings=None):
    return []
def prepare_metadata_for_build_wheel(*args, **kwargs):
    raise SystemExit("built")
build_wheel = prepare_metadata_for_build_wheel
"""
HOSTILE_PYPROJECT = """[build-system]
requires = []
build-backend = "backend"
backend-path = ["."]
[project]
name = "evil"
version = "0"
"""


def _hostile_sdist() -> bytes:
    """``evil-0.tar.gz``: the same hostile project as a source archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in (("pyproject.toml", HOSTILE_PYPROJECT), ("backend.py", HOSTILE_BACKEND)):
            data = text.encode()
            info = tarfile.TarInfo(f"evil-0/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("requirements", "refused"),
    [
        ("./evil\n", "line 1 ('./evil')"),
        ("evil/\n", "line 1 ('evil/')"),
        ("-e ./evil\n", "line 1 ('-e ./evil')"),
        ("--edit ./evil\n", "line 1 ('--edit ./evil')"),  # optparse takes abbreviations
        ("-e./evil\n", "line 1 ('-e./evil')"),
        ("evil @ file:///execution/evil\n", "line 1"),
        ("git+file:///execution/evil\n", "line 1"),
        ("./evil-0.tar.gz\n", "line 1 ('./evil-0.tar.gz')"),
        ("evil-0.tar.gz\n", "line 1 ('evil-0.tar.gz')"),
        ("--only-binary :none:\n./evil-0.tar.gz\n", "line 2 ('./evil-0.tar.gz')"),
        ("--no-binary :all:\nevil\n", "line 1 ('--no-binary :all:')"),
        ("# wheels only\n\\\n./ev\\\nil\n", "line 2 ('./evil')"),
        ("-r more.txt\n", "line 1 ('-r more.txt')"),
        ("-c more.txt\n./evil\n", "line 1 ('-c more.txt')"),
        ("evil --config-settings=x=y\n", "line 1"),
        ("${HOME}/../execution/evil\n", "line 1"),
    ],
)
def test_requirements_cannot_run_a_build_that_reaches_the_control_routes(
    confined_server: EmulatorServer, attacker: Executions, requirements: str, refused: str
) -> None:
    port = confined_server.base_url.rsplit(":", 1)[1]
    clock = confined_server.state.clock
    offset = getattr(clock, "offset")  # noqa: B009 - the server's OffsetClock
    sandbox_id = attacker.acquire()
    files: dict[str, bytes | str] = {
        "main.py": "print('main ran')",
        "requirements.txt": requirements,
        "more.txt": "./evil\n",
        "port.txt": port,
        "evil/pyproject.toml": HOSTILE_PYPROJECT,
        "evil/backend.py": HOSTILE_BACKEND,
        "evil-0.tar.gz": _hostile_sdist(),
    }
    assert attacker.run(sandbox_id, "build", files) == "failed"
    logs = attacker.logs(sandbox_id, "build")["logs"]
    assert f"[emulator] requirements.txt {refused}" in logs, logs
    assert "is refused" in logs
    assert "wheels only" in logs
    assert "main ran" not in logs
    assert "CONTROL" not in logs
    assert getattr(clock, "offset") == offset  # noqa: B009 - the clock did not move
    workspace = confined_server.state.workspace_path(sandbox_id)
    assert not (workspace / "BUILT").exists()


def test_the_archives_own_pip_or_venv_package_is_never_run(
    confined_server: EmulatorServer, attacker: Executions
) -> None:
    """``python -m pip`` / ``-m venv`` with the archive as the working directory used to
    import the archive's ``pip/`` (confined, with the network) and ``venv/`` (unconfined, as
    the emulator's user)."""
    sandbox_id = attacker.acquire()
    hijack = "import os; print('HIJACKED', os.getcwd())\n"
    files = {
        "main.py": "print('main ran')",
        "requirements.txt": "--no-index\n",
        "pip/__init__.py": "",
        "pip/__main__.py": hijack,
        "venv/__init__.py": "",
        "venv/__main__.py": hijack,
    }
    assert attacker.run(sandbox_id, "hijack", files) == "completed"
    logs = attacker.logs(sandbox_id, "hijack")["logs"]
    assert "HIJACKED" not in logs, logs
    assert "main ran" in logs


# ---------------------------------------------------------------------- the startup policy


@pytest.fixture
def failing_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``bwrap`` first on PATH that always fails (and leaves a mark when it is run), with
    confinement left to its default."""
    folder = tmp_path / "fake-bin"
    folder.mkdir()
    mark = tmp_path / "fake-bwrap-ran"
    fake = folder / "bwrap"
    fake.write_text(
        f"#!/bin/sh\ntouch {mark}\necho 'bwrap: setting up uid map: Permission denied' >&2\n"
        "exit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    _clean_env(monkeypatch)
    return mark


def test_a_bwrap_that_fails_stops_the_emulator_at_startup(
    tmp_path: Path, failing_bwrap: Path
) -> None:
    data = tmp_path / "data"
    server = EmulatorServer(EmulatorConfig(data_dir=data))
    with pytest.raises(ConfinementError) as raised:
        server.start()
    message = str(raised.value)
    assert "bubblewrap is installed but cannot confine" in message
    assert "setting up uid map: Permission denied" in message  # bwrap's own words
    assert str(failing_bwrap.parent / "fake-bin" / "bwrap") in message
    assert "--no-confine" in message
    assert "confine_executions=False" in message
    assert f"{CONFINE_ENV}=0" in message
    assert failing_bwrap.exists()  # it was tried
    assert not data.exists()  # nothing was created or locked
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.base_url


@pytest.mark.parametrize("how", ["argument", "env", "legacy-env"])
def test_the_opt_out_runs_unconfined_even_with_a_failing_bwrap(
    tmp_path: Path,
    failing_bwrap: Path,
    monkeypatch: pytest.MonkeyPatch,
    listener: socket.socket,
    how: str,
) -> None:
    """Unconfined on purpose: the same attacks now succeed, which shows they are real."""
    if how == "env":
        monkeypatch.setenv(CONFINE_ENV, "0")
    elif how == "legacy-env":
        monkeypatch.setenv(LEGACY_CONFINE_ENV, "0")
    with (
        EmulatorServer(
            EmulatorConfig(data_dir=tmp_path / "data", confine_executions=how != "argument")
        ) as server,
        new_tenant(server, "attack-a") as victim,
        new_tenant(server, "attack-b") as attacker,
    ):
        confinement = server.state.run_settings.confinement
        assert not confinement.enabled
        expected = {
            "argument": "confinement was turned off (--no-confine)",
            "env": f"confinement turned off by {CONFINE_ENV}=0",
            "legacy-env": f"confinement turned off by {LEGACY_CONFINE_ENV}=0",
        }[how]
        assert confinement.reason == expected
        path = _targets(server, victim)["victim-file"]
        status, logs = _attack(attacker, [path], "read")
        assert status == "completed", logs
        assert f"[emulator] Not confined: {expected};" in logs
        # one line about confinement, and the last line (how main.py ended), nothing else
        assert logs.count("[emulator]") == 2
        assert logs.endswith(f"\n{EXITED_0}\n")
        assert SECRET in logs  # unconfined, tenant B reads tenant A's workspace
        sandbox_id = attacker.acquire()
        main = f"PORT = {listener.getsockname()[1]}\n{CONNECTOR}"
        assert attacker.run(sandbox_id, "connect", {"main.py": main}) == "completed"
        assert "CONNECTED" in attacker.logs(sandbox_id, "connect")["logs"]
        assert _accepted(listener)
    assert not failing_bwrap.exists()  # an opt-out does not even try bwrap


def test_a_typo_in_the_variable_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONFINE_ENV, "nope")
    with pytest.raises(ConfinementError, match="KLAVIS_EMULATOR_CONFINE='nope'"):
        decide_confinement()


def test_without_bwrap_the_emulator_runs_unconfined_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _clean_env(monkeypatch)
    empty = tmp_path / "no-bwrap-here"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # the emulator needs no program from PATH to start
    with (
        caplog.at_level("INFO", logger="klavis_emulator"),
        EmulatorServer(EmulatorConfig(data_dir=tmp_path / "data")) as server,
    ):
        confinement = server.state.run_settings.confinement
    assert not confinement.enabled
    assert confinement.reason == "bubblewrap (bwrap) is not installed"
    said = [r.getMessage() for r in caplog.records if "confined" in r.getMessage()]
    assert said == [
        "executions and MCP servers are NOT confined: bubblewrap (bwrap) is not installed"
    ]
    monkeypatch.setenv(CONFINE_ENV, "1")  # asked for, it is an error instead
    with pytest.raises(ConfinementError, match="not installed"):
        decide_confinement()


# ---------------------------------------------------------------------- an interpreter in /tmp


@pytest.fixture
def venv_under_tmp() -> Iterator[Path]:
    """A virtual environment in /tmp itself, as in a CI checkout or a `mktemp -d` clone,
    that imports this checkout's packages (a .pth adds the current site folders)."""
    folder = Path(tempfile.mkdtemp(prefix="klavis-venv-", dir="/tmp"))
    try:
        venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
        site_packages = next(folder.glob("lib/python3*/site-packages"))
        sites = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
        root = Path(klavis_emulator.__file__).resolve().parents[1]
        lines = [f"import site; site.addsitedir({site!r})" for site in sites]
        (site_packages / "this_checkout.pth").write_text("\n".join([str(root), *lines]) + "\n")
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


UNDER_TMP_SCRIPT = """
import json, sys
import httpx
from klavis_emulator import EmulatorConfig, EmulatorServer
from tests.helpers import Executions

main = (
    "import os, subprocess, sys; print('prefix', sys.prefix); "
    "print('ws', os.environ['AGENT_WORKSPACE']); "
    "base = subprocess.run(['/opt/klavis/bin/python', '-c', 'import sys; print(sys.prefix)'], "
    "capture_output=True, text=True); print('base', base.stdout.strip() or base.stderr)"
)
with EmulatorServer(EmulatorConfig(data_dir=sys.argv[1])) as server, httpx.Client(
    base_url=server.base_url, headers={"Authorization": "Bearer under-tmp"}, timeout=30
) as http:
    runs = Executions(server, http, "under-tmp")
    sandbox_id = runs.acquire()
    status = runs.run(sandbox_id, "probe", {"main.py": main})
    print(json.dumps({
        "prefix": sys.prefix,
        "confined": server.state.run_settings.confinement.enabled,
        "status": status,
        "logs": runs.logs(sandbox_id, "probe")["logs"],
    }))
"""


def test_an_interpreter_under_tmp_is_confined(
    venv_under_tmp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The emulator running from a venv in /tmp confines its executions (it once probed
    with /tmp mounted over the venv, failed, and ran every execution unconfined)."""
    require_confinement()
    _clean_env(monkeypatch)
    python = venv_under_tmp / "bin" / "python"
    done = subprocess.run(
        [str(python), "-c", UNDER_TMP_SCRIPT, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=Path(klavis_emulator.__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["prefix"] == str(venv_under_tmp)  # it really ran from /tmp
    assert report["confined"] is True
    assert report["status"] == "completed", report["logs"]
    assert f"prefix {venv_under_tmp}\n" in report["logs"]  # the venv is visible inside
    assert "ws /data\n" in report["logs"]
    assert f"base {sys.base_prefix}\n" in report["logs"]  # the commands' python runs too
    assert [line for line in report["logs"].splitlines() if "[emulator]" in line] == [EXITED_0]


def test_every_link_from_a_venv_to_its_interpreter_is_made_visible(tmp_path: Path) -> None:
    """A venv made with another venv's python links to that python on Python 3.10 (not to
    the base interpreter): the outer venv must be bound too, or ``execvp`` fails inside."""
    real = os.path.realpath(sys.executable)
    outer, inner = tmp_path / "outer", tmp_path / "inner"
    for venv_dir, target in ((outer, real), (inner, str(outer / "bin" / "python"))):
        (venv_dir / "bin").mkdir(parents=True)
        (venv_dir / "bin" / "python").symlink_to(target)
    roots = python_roots(str(inner / "bin" / "python"))
    for needed in (inner, outer, Path(real).parent.parent):
        assert any(needed == Path(root) or Path(root) in needed.parents for root in roots), (
            needed,
            roots,
        )


def test_the_cli_demo_answers_a_broken_bwrap_with_one_line(
    tmp_path: Path, failing_bwrap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    done = run_cli(["demo"])
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("klavis-sandbox: error: the embedded emulator cannot start:")
    assert "--no-confine" in lines[0]
    assert failing_bwrap.exists()
