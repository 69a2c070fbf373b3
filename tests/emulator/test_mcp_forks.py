"""Isolation of the MCP servers started from fork servers (``klavis_emulator._mcp.forks``).

A real emulator in-process (loopback port 0), real bubblewrap, the real git and terminal
servers. Confined, each sandbox's git and terminal servers are children of their kind's fork
server that joined the sandbox bubblewrap made: the tests check from the host that each forked
server sits in exactly its own sandbox's namespaces without a capability, from inside that a
tenant's processes see neither another tenant's processes nor its workspace, and that a reset
(with a spare or without) leaves none of the old forked servers running. Unconfined
(``KLAVIS_EMULATOR_CONFINE=0``) nothing is forked: the servers are processes of their own.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from klavis_emulator import EmulatorServer
from klavis_emulator._exec import sandbox_processes
from klavis_emulator._mcp.host import McpHost
from tests.emulator.mcp_servers import skip_without
from tests.emulator.test_reset_servers import DAEMON, Box, box, emulator_with_spares
from tests.helpers import require_confinement, wait_until
from workflows import _mcp as client

FORKED = ("git", "terminal")
NAMESPACES = ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup")
# what a tenant's python3 (allowed in the terminal) prints: every process it can see
LIST_PROCESSES = (
    "import os\n"
    "for pid in sorted(p for p in os.listdir('/proc') if p.isdigit()):\n"
    "    try: print(pid, open(f'/proc/{pid}/cmdline', 'rb').read().replace(b'\\0', b' '))\n"
    "    except OSError: pass\n"
)


# what a tenant's python3 prints: where, in its /data and /tmp, it finds another's secret
LOOK_FOR = (
    "import os\n"
    "found = []\n"
    "for top in ('/data', '/tmp'):\n"
    "    for folder, _, files in os.walk(top):\n"
    "        for name in files:\n"
    "            try: text = open(os.path.join(folder, name), 'rb').read()\n"
    "            except OSError: continue\n"
    "            if b'{head}' + b'{tail}' in text: found.append(os.path.join(folder, name))\n"
    "print(found or 'nowhere')\n"
)


# what a tenant's python3 prints: whether it can connect to any of ``paths``
KNOCK = (
    "import socket\n"
    "reached = []\n"
    "for path in {paths!r}:\n"
    "    with socket.socket(socket.AF_UNIX) as s:\n"
    "        try: s.connect(path); reached.append(path)\n"
    "        except OSError: pass\n"
    "print(reached or 'unreachable')\n"
)


@pytest.fixture(scope="module")
def confined(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorServer]:
    require_confinement()
    skip_without(FORKED)
    with emulator_with_spares(tmp_path_factory.mktemp("forks-confined"), confined=True) as server:
        yield server


@pytest.fixture(scope="module")
def unconfined(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorServer]:
    skip_without(FORKED)
    with emulator_with_spares(
        tmp_path_factory.mktemp("forks-unconfined"), confined=False
    ) as server:
        yield server


def host(server: EmulatorServer) -> McpHost:
    found: McpHost = server.app.state.mcp
    return found


def _namespaces(pid: int) -> dict[str, str]:
    return {kind: os.readlink(f"/proc/{pid}/ns/{kind}") for kind in NAMESPACES}


def _forked(server: EmulatorServer) -> dict[int, str]:
    """Live children of the emulator's fork servers: pid -> server kind."""
    found: dict[int, str] = {}
    for kind, pid in host(server).processes.forks.pids().items():
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(pid).children():
                with contextlib.suppress(psutil.NoSuchProcess):
                    if child.status() != psutil.STATUS_ZOMBIE:
                        found[child.pid] = kind
    return found


def _servers_of(server: EmulatorServer, sb: Box) -> dict[str, int]:
    """The forked git and terminal servers of ``sb``: kind -> pid. A forked server works in
    ``/data``, the bind of its own sandbox's workspace: the same file as that folder."""
    mine = sb.identity()
    found = {}
    for pid, kind in _forked(server).items():
        with contextlib.suppress(OSError):
            info = os.stat(f"/proc/{pid}/cwd")
            if (info.st_dev, info.st_ino) == mine:
                found[kind] = pid
    return found


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return {k: v.strip() for k, v in (line.split(":", 1) for line in status if ":" in line)}


def _use_servers(sb: Box) -> None:
    sb.call("terminal", "run_command", {"command": "git init -q ."})
    assert "branch" in sb.call("git", "git_status", {"repo_path": sb.seen}).lower()


def test_each_forked_server_is_in_its_own_sandbox_without_privileges(
    confined: EmulatorServer,
) -> None:
    with box(confined, list(FORKED)) as a, box(confined, list(FORKED)) as b:
        for sb in (a, b):
            _use_servers(sb)
        servers = {sb.id: _servers_of(confined, sb) for sb in (a, b)}
        for sb in (a, b):  # both kinds were forked, into this sandbox
            assert set(servers[sb.id]) == set(FORKED), (servers, _forked(confined))
        for pid in [*servers[a.id].values(), *servers[b.id].values()]:
            status = _status(pid)
            for field in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
                assert int(status[field], 16) == 0, (pid, field, status[field])
            assert status["NoNewPrivs"] == "1"
            assert os.readlink(f"/proc/{pid}/cwd") == "/data"
            # inside its PID namespace: a second number, not the host's
            assert len(status["NSpid"].split()) == 2
        # the two tenants' servers share no namespace with each other or with the host
        own = _namespaces(os.getpid())
        for kind in FORKED:
            seen_a = _namespaces(servers[a.id][kind])
            seen_b = _namespaces(servers[b.id][kind])
            for name in ("user", "mnt", "pid", "net", "ipc"):
                assert seen_a[name] != seen_b[name] != own[name] != seen_a[name], (kind, name)


def test_a_tenant_sees_neither_the_others_processes_nor_its_workspace(
    confined: EmulatorServer,
) -> None:
    with box(confined, list(FORKED)) as a, box(confined, list(FORKED)) as b:
        marker = f"{4000 + secrets.randbelow(10**6) / 10**6:.6f}"
        secret = f"secret-{secrets.token_hex(8)}"
        b.call("terminal", "run_command", {"command": f"echo {secret} > b-only.txt"})
        (b.workspace / "d.py").write_text(DAEMON)
        b.call("terminal", "run_command", {"command": f"python3 d.py {marker}"})

        def running() -> bool:
            return any(
                marker in " ".join(p.info["cmdline"] or ())
                for p in psutil.process_iter(["cmdline"])
            )

        wait_until(running, "tenant b's daemon running", 120)
        _use_servers(a)
        (a.workspace / "ps.py").write_text(LIST_PROCESSES)
        (a.workspace / "look.py").write_text(LOOK_FOR.format(head=secret[:9], tail=secret[9:]))
        seen = a.call("terminal", "run_command", {"command": "python3 ps.py"})
        assert marker not in seen
        assert "cli_mcp_server" in seen or "fork server" in seen.lower()  # it sees its own
        listing = a.call("terminal", "run_command", {"command": "ls -a /data"})
        assert "b-only.txt" not in listing
        assert "ps.py" in listing
        assert "nowhere" in a.call("terminal", "run_command", {"command": "python3 look.py"})
        # the fork servers' sockets (in the host's /tmp) are out of a tenant's reach
        sockets = {
            connection.laddr
            for pid in host(confined).processes.forks.pids().values()
            for connection in psutil.Process(pid).net_connections(kind="unix")
            if connection.laddr
        }
        assert sockets
        (a.workspace / "knock.py").write_text(KNOCK.format(paths=sorted(sockets)))
        assert "unreachable" in a.call("terminal", "run_command", {"command": "python3 knock.py"})
        # git in a sees a's repository only: b has none
        assert "branch" in a.call("git", "git_status", {"repo_path": a.seen}).lower()
        assert "b-only.txt" not in a.call("git", "git_status", {"repo_path": a.seen})


def test_a_reset_leaves_none_of_the_forked_servers(confined: EmulatorServer) -> None:
    with box(confined, list(FORKED)) as sb:
        for life in range(2):  # the first reset starts fresh servers, the second takes a spare
            _use_servers(sb)
            old = _servers_of(confined, sb)
            assert set(old) == set(FORKED)
            if life == 1:
                host(confined).wait_idle(timeout=300)
            sb.reset()

            def ended(old: dict[str, int] = old) -> bool:
                return not any(psutil.pid_exists(pid) for pid in old.values())

            # the reset answered: the old servers are gone (zombies reaped by the fork server)
            alive = set(old.values()) & set(_forked(confined))
            assert alive == set(), f"old forked servers still running: {alive}"
            wait_until(ended, "the old forked servers reaped", 60)
            _use_servers(sb)  # fresh servers answer, forked again
            fresh = _servers_of(confined, sb)
            assert set(fresh) == set(FORKED)
            assert not set(fresh.values()) & set(old.values())


def test_unconfined_nothing_is_forked(unconfined: EmulatorServer) -> None:
    with box(unconfined, list(FORKED)) as sb:
        _use_servers(sb)
        assert host(unconfined).processes.forks.pids() == {}
        kinds = [p.cmdline() for p in sandbox_processes(sb.workspace)]
        assert not any("fork server" in " ".join(command) for command in kinds)


def test_acquire_starts_the_fork_server_and_the_first_call_forks(
    confined: EmulatorServer,
) -> None:
    # arxiv: no other test of this module uses it, so its fork server is this test's
    with box(confined, ["arxiv"]) as sb:
        host(confined).wait_warm(sb.id, timeout=300)
        fork_server = host(confined).processes.forks.pids()["arxiv"]
        assert psutil.Process(fork_server).children() == []  # no server process yet
        tools = client.list_tools(sb.urls["arxiv"], timeout=300)
        assert any(tool.name == "list_papers" for tool in tools)
        assert {kind for kind in _servers_of(confined, sb)} == {"arxiv"}


def test_a_dead_fork_server_leaves_its_servers_to_processes_of_their_own(tmp_path: Path) -> None:
    # the server's command (the fork client) finds no fork server: it runs the server itself
    require_confinement()
    skip_without(FORKED)
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    with emulator_with_spares(tmp_path, confined=True) as server, box(server, ["git"]) as sb:
        host(server).wait_warm(sb.id, timeout=300)
        fork_server = psutil.Process(host(server).processes.forks.pids()["git"])
        fork_server.kill()
        fork_server.wait(timeout=60)
        subprocess.run(["git", "init", "-q", str(sb.workspace)], check=True, timeout=60)
        assert "branch" in sb.call("git", "git_status", {"repo_path": sb.seen}).lower()
        assert host(server).processes.forks.pids() == {}
        assert _servers_of(server, sb) == {}  # its own process, not a fork
