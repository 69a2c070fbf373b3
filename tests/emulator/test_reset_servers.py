"""What a reset promises of a sandbox's MCP servers and processes, with spares or without.

A real emulator in-process (loopback port 0), the real servers, real processes: bubblewrap where
it confines (the spares are used only there), unconfined where a test says so. A reset ends
every process of the sandbox's life (what an execution, the terminal server or a double-forked
daemon started), gives it fresh servers (no state of the old ones: localmemory's graph,
desktop-commander's configuration, code-runner's private /tmp), an empty workspace (or the
benchmark's pack again), a first MCP call that works at once; resets of several sandboxes do
not mix, and a release during a reset leaves nothing. The first reset of a shape starts fresh
servers in the background (there is no spare yet); the next one, once a spare is ready
(``McpHost.wait_idle``), takes it: the workspace is then the spare's folder (a new inode).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import psutil
import pytest

from klavis_emulator import EmulatorConfig, EmulatorServer
from klavis_emulator._exec import sandbox_processes
from klavis_emulator._exec.confinement import CONFINE_ENV
from klavis_emulator._mcp.host import McpHost
from tests.emulator.mcp_servers import skip_without
from tests.helpers import Executions, require_confinement, wait_until
from workflows import _mcp as client

STATEFUL = ("filesystem", "terminal", "localmemory", "desktop-commander", "code-runner")
PACK = {"task.md": "Find the answer.\n", "data/input.csv": "a,b\n1,2\n"}

# A daemon as a tenant makes one: two forks, a new session, its standard streams closed;
# it then becomes `sleep <marker>`, which names it in the process table.
DAEMON = (
    "import os, sys\n"
    "if os.fork(): os._exit(0)\n"
    "os.setsid()\n"
    "if os.fork(): os._exit(0)\n"
    "null = os.open(os.devnull, os.O_RDWR)\n"
    "for fd in (0, 1, 2): os.dup2(null, fd)\n"
    "os.execvp('sleep', ['sleep', sys.argv[1]])\n"
)
# an execution that starts a child and keeps running while the sandbox is reset
EXECUTION = (
    "import subprocess, time\n"
    "subprocess.Popen(['sleep', open('marker').read()])\n"
    "print('started', flush=True)\n"
    "time.sleep(600)\n"
)


@contextlib.contextmanager
def emulator_with_spares(tmp: Path, *, confined: bool) -> Iterator[EmulatorServer]:
    """An emulator of its own keeping one spare server set per shape, confined or not (fork
    servers as by default), its MCP-Atlas data a small pack."""
    with pytest.MonkeyPatch.context() as patch:
        if not confined:
            patch.setenv(CONFINE_ENV, "0")
        patch.delenv("KLAVIS_EMULATOR_MCP_FORK", raising=False)
        config = EmulatorConfig(
            data_dir=tmp / "data", mcp_spares=1, benchmark_data={"MCP_Atlas": _pack(tmp)}
        )
        server = EmulatorServer(config).start()
    try:
        assert host(server).confined is confined
        yield server
    finally:
        host(server).shutdown(wait=30)
        server.stop()


def _pack(tmp: Path) -> Path:
    folder = tmp / "atlas-pack"
    for name, text in PACK.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


@pytest.fixture(scope="module")
def confined(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorServer]:
    """A confined emulator that keeps one spare per shape (this module's own)."""
    require_confinement()
    with emulator_with_spares(tmp_path_factory.mktemp("confined"), confined=True) as server:
        yield server


@pytest.fixture(scope="module")
def unconfined(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorServer]:
    """An unconfined emulator (``KLAVIS_EMULATOR_CONFINE=0``): no spares there."""
    with emulator_with_spares(tmp_path_factory.mktemp("unconfined"), confined=False) as server:
        yield server


@pytest.fixture(params=["confined", "unconfined"])
def emulator_in_mode(request: pytest.FixtureRequest) -> EmulatorServer:
    server: EmulatorServer = request.getfixturevalue(request.param)
    return server


def host(server: EmulatorServer) -> McpHost:
    found: McpHost = server.app.state.mcp
    return found


class Box:
    """A sandbox of a fresh tenant: its id, MCP URLs, workspace; released on close."""

    def __init__(
        self, server: EmulatorServer, servers: Sequence[str], benchmark: str | None = None
    ) -> None:
        self.server = server
        self.token = f"reset-{secrets.token_hex(8)}"
        self.http = httpx.Client(
            base_url=server.base_url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=180,
        )
        body: dict[str, object] = {"server_names": list(servers)}
        if benchmark is not None:
            body["benchmark"] = benchmark
        answer = self.http.post("/local-sandbox", json=body)
        assert answer.status_code == 201, answer.text
        self.id: str = answer.json()["local_sandbox_id"]
        self.urls = {s["server_name"]: s["mcp_server_url"] for s in answer.json()["servers"]}
        self.workspace = server.state.workspace_path(self.id)
        self.seen = host(server).workspace_as_seen(self.id)

    def call(self, server: str, tool: str, arguments: dict[str, object]) -> str:
        result = client.call_tool(self.urls[server], tool, arguments, timeout=120)
        assert not result.is_error, result.text
        return result.text

    def write(self, name: str, content: str) -> None:
        self.call("filesystem", "write_file", {"path": f"{self.seen}/{name}", "content": content})

    def run_code(self, code: str) -> str:
        """Run JavaScript with code-runner; what it printed."""
        return self.call("code-runner", "run-code", {"code": code, "languageId": "javascript"})

    def reset(self) -> None:
        answer = self.http.post(f"/local-sandbox/{self.id}/reset")
        assert answer.status_code == 200, answer.text

    def identity(self) -> tuple[int, int]:
        info = self.workspace.stat()
        return info.st_dev, info.st_ino

    def close(self) -> None:
        self.http.delete(f"/local-sandbox/{self.id}")
        self.http.close()


@contextlib.contextmanager
def box(
    server: EmulatorServer, servers: Sequence[str], benchmark: str | None = None
) -> Iterator[Box]:
    skip_without(servers)
    made = Box(server, servers, benchmark)
    try:
        yield made
    finally:
        made.close()


def _marker() -> str:
    """A number of seconds no other test sleeps: it names this test's processes."""
    return f"{4000 + secrets.randbelow(10**6) / 10**6:.6f}"


def _running(marker: str) -> list[int]:
    """Pids of this machine's live processes whose command line holds ``marker``."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if marker in " ".join(process.info["cmdline"] or ()):
            found.append(process.pid)
    return found


def _wait_running(marker: str, what: str) -> None:
    def running() -> bool:
        return bool(_running(marker))

    wait_until(running, f"{what}'s process running", 120)


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.add(pid)
    return alive


def _fill_the_stock(server: EmulatorServer) -> None:
    """Wait until the background starts (the sandbox's servers, a spare) are over."""
    host(server).wait_idle(timeout=300)


# ---------------------------------------------------------------------- no process survives


def test_no_process_of_the_tenant_survives_a_reset_with_or_without_a_spare(
    confined: EmulatorServer,
) -> None:
    with box(confined, ["terminal", "filesystem", "code-runner"]) as sb:
        runs = Executions(confined, sb.http, sb.token)
        identities = [sb.identity()]
        for life in range(2):  # the first reset starts fresh servers, the second takes a spare
            markers = {name: _marker() for name in ("daemon", "code-runner", "execution")}
            sb.write("d.py", DAEMON)
            sb.call("terminal", "run_command", {"command": f"python3 d.py {markers['daemon']}"})
            sb.run_code(
                f"require('child_process').spawn('sleep', ['{markers['code-runner']}'], "
                "{ detached: true, stdio: 'ignore' }).unref();"
            )
            runs.start(sb.id, f"job{life}", {"main.py": EXECUTION, "marker": markers["execution"]})
            for name, marker in markers.items():
                _wait_running(marker, name)
            old_servers = {p.pid for p in sandbox_processes(sb.workspace)}
            if life == 1:
                _fill_the_stock(confined)
                assert host(confined).resets.spares.ready()  # a spare waits for this reset
            sb.reset()
            # once the reset answered, nothing of the old life runs...
            for name, marker in markers.items():
                assert _running(marker) == [], f"{name}'s process survived the reset"
            assert _alive(old_servers) == set()
            # ...and the servers answer at once, on the emptied workspace
            assert "d.py" not in sb.call("terminal", "run_command", {"command": "ls -a"})
            identities.append(sb.identity())
            assert runs.status(sb.id, f"job{life}").status_code == 404
        # the second reset took the spare: its folder is the workspace now
        assert identities[0] == identities[1] != identities[2]


def test_unconfined_a_reset_ends_the_servers_and_running_executions(
    unconfined: EmulatorServer,
) -> None:
    # Unconfined, what a process detached from the emulator's tree cannot be told apart from
    # the user's other processes (see klavis_emulator._exec.processes): not asked here.
    with box(unconfined, ["terminal", "filesystem"]) as sb:
        runs = Executions(unconfined, sb.http, sb.token)
        marker = _marker()
        runs.start(sb.id, "job", {"main.py": EXECUTION, "marker": marker})
        _wait_running(marker, "the execution's child")
        sb.call("terminal", "run_command", {"command": "pwd"})
        old_servers = {p.pid for p in sandbox_processes(sb.workspace)}
        assert old_servers
        sb.reset()
        assert _running(marker) == []
        assert _alive(old_servers) == set()
        assert sb.call("terminal", "run_command", {"command": "pwd"}).startswith(sb.seen)
        assert host(unconfined).resets.spares.ready() == {}  # never unconfined


# ---------------------------------------------------------------------- fresh servers


def _leave_state(sb: Box) -> None:
    """Give each stateful server something to remember, in the workspace and in itself."""
    made = client.call_tool(
        sb.urls["localmemory"],
        "create_entities",
        {"entities": [{"name": "Ada", "entityType": "person", "observations": ["old life"]}]},
    )
    assert not made.is_error, made.text
    sb.call("desktop-commander", "set_config_value", {"key": "fileReadLineLimit", "value": 7})
    assert '"fileReadLineLimit": 7' in sb.call("desktop-commander", "get_config", {})
    sb.run_code("require('fs').writeFileSync(require('os').tmpdir() + '/old-life', 'x');")
    sb.write("notes.txt", "old")


def _assert_fresh(sb: Box) -> None:
    """No state of the old servers, and each answers its first call (made right away)."""
    graph = json.loads(sb.call("localmemory", "read_graph", {}))
    assert graph["entities"] == []
    config = sb.call("desktop-commander", "get_config", {})
    assert '"fileReadLineLimit": 1000' in config, config
    ran = sb.run_code(
        "console.log(require('fs').existsSync(require('os').tmpdir() + '/old-life')"
        " ? 'old' : 'new');"
    )
    assert ran.strip().splitlines()[-1] == "new", ran
    assert "notes.txt" not in sb.call("filesystem", "list_directory", {"path": sb.seen})
    # localmemory still writes (its folder went with the emptying: it makes it again)
    again = client.call_tool(
        sb.urls["localmemory"],
        "create_entities",
        {"entities": [{"name": "Bob", "entityType": "person", "observations": ["new life"]}]},
    )
    assert not again.is_error, again.text


def test_a_reset_gives_fresh_servers_and_an_empty_workspace(
    emulator_in_mode: EmulatorServer,
) -> None:
    with box(emulator_in_mode, STATEFUL) as sb:
        identities = [sb.identity()]
        for _ in range(2):  # the second reset takes a spare, where spares are kept
            _leave_state(sb)
            _fill_the_stock(emulator_in_mode)
            sb.reset()
            assert os.listdir(sb.workspace) == []
            _assert_fresh(sb)
            identities.append(sb.identity())
        took_a_spare = identities[2] != identities[1]
        assert took_a_spare is host(emulator_in_mode).confined
        assert identities[0] == identities[1]


def test_a_benchmark_sandbox_gets_its_pack_again_with_fresh_servers(
    confined: EmulatorServer,
) -> None:
    with box(confined, ["filesystem", "localmemory"], benchmark="MCP_Atlas") as sb:
        before = sb.identity()
        for _ in range(2):
            sb.write("task.md", "changed")
            sb.write("extra.txt", "x")
            _fill_the_stock(confined)
            sb.reset()
            files = {
                str(path.relative_to(sb.workspace)): path.read_text()
                for path in sb.workspace.rglob("*")
                if path.is_file()
            }
            assert files == PACK
            read = sb.call("filesystem", "read_text_file", {"path": f"{sb.seen}/task.md"})
            assert read == PACK["task.md"]
            made = client.call_tool(
                sb.urls["localmemory"],
                "create_entities",
                {"entities": [{"name": "Ada", "entityType": "person", "observations": ["x"]}]},
            )
            assert not made.is_error, made.text
        assert sb.identity() != before  # a spare was taken


def test_an_mcp_session_held_across_a_reset_goes_on_with_the_fresh_server(
    confined: EmulatorServer,
) -> None:
    with box(confined, ["filesystem"]) as sb, client.McpSession(sb.urls["filesystem"]) as fs:
        fs.call_tool("write_file", {"path": f"{sb.seen}/old.txt", "content": "1"})
        _fill_the_stock(confined)
        sb.reset()
        listing = fs.call_tool("list_directory", {"path": sb.seen})
        assert not listing.is_error, listing.text
        assert "old.txt" not in listing.text


# ---------------------------------------------------------------------- several sandboxes


def test_concurrent_resets_of_several_sandboxes_do_not_mix(confined: EmulatorServer) -> None:
    servers = ["filesystem", "terminal"]
    with contextlib.ExitStack() as stack:
        boxes = [stack.enter_context(box(confined, servers)) for _ in range(3)]
        for round_ in range(2):  # in the second, one of them takes the spare the first made
            for index, sb in enumerate(boxes):
                sb.write(f"mine-{index}", sb.id)
            _fill_the_stock(confined)
            before = [sb.identity() for sb in boxes]
            threads = [threading.Thread(target=sb.reset) for sb in boxes]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(300)
            after = [sb.identity() for sb in boxes]
            swapped = sum(b != a for b, a in zip(before, after, strict=True))
            assert swapped == (0 if round_ == 0 else 1)
            for index, sb in enumerate(boxes):
                assert os.listdir(sb.workspace) == []
                name = f"new-{index}-{round_}"
                sb.write(name, sb.id)
                listing = sb.call("terminal", "run_command", {"command": "ls"})
                assert name in listing
                assert not any(f"new-{other}-" in listing for other in range(3) if other != index)
                assert (sb.workspace / name).read_text() == sb.id


# ---------------------------------------------------------------------- release during a reset


def test_a_release_during_a_reset_leaves_nothing(confined: EmulatorServer) -> None:
    servers = ["filesystem", "terminal"]
    state = confined.state
    with box(confined, servers) as sb:
        sb.write("a.txt", "1")
        sb.reset()  # its servers were used: the shape is wanted from now on, a spare starts
        _fill_the_stock(confined)
        status = httpx.get(f"{confined.base_url}/_emulator/mcp", timeout=30).json()
        assert status["busy"] is False
        assert status["spares"] == {"filesystem,terminal": 1}
        sb.write("b.txt", "2")  # this life used its servers too: the next reset takes a spare
        spares = state.spares_folder
        folders = [spares / name for name in os.listdir(spares)]
        released: list[int] = []

        def release() -> None:
            released.append(sb.http.delete(f"/local-sandbox/{sb.id}").status_code)

        releasing = threading.Thread(target=release)
        supplier = host(confined).resets.spare_workspace

        def release_midway(sandbox_id: str, names: Sequence[str]) -> Path | None:
            folder = supplier(sandbox_id, names)
            assert folder is not None  # the reset took the spare...
            releasing.start()  # ...and the release marks the sandbox released meanwhile
            wait_until(lambda: state.find_live(sandbox_id) is None, "the sandbox released", 60)
            return folder

        state.supply_fresh_workspaces(release_midway)
        try:
            answer = sb.http.post(f"/local-sandbox/{sb.id}/reset")
        finally:
            state.supply_fresh_workspaces(supplier)
        releasing.join(120)
        assert answer.status_code in (200, 404), answer.text
        assert released == [200]
        _fill_the_stock(confined)
        wait_until(
            lambda: sandbox_processes(sb.workspace, *folders) == [],
            "every server process of the sandbox and its spare gone",
            60,
        )
        assert not sb.workspace.exists()
        assert host(confined).resets.spares.ready() == {}  # no live sandbox wants the shape
        assert os.listdir(spares) == []
        assert (sb.id, "filesystem") not in host(confined).running()


# ---------------------------------------------------------------------- a reset during a start


def _freeze_the_start(sb: Box) -> bool:
    """Once the start of the sandbox's filesystem server that the last reset began in the
    background has spawned it, stop its processes (SIGSTOP: a loaded machine leaves a process
    unscheduled as long); whether the start was caught before the server said anything (it
    writes its first line to stderr before it reads the client's ``initialize``, so an empty
    log means the start is still under way). Not caught: its processes go on.

    Only processes that have run their program are stopped: a child forked by the emulator
    that has yet to (the emulator's command line, already in the workspace folder when
    unconfined) would hold the emulator's loop, which waits for that ``exec``."""
    frozen: dict[int, psutil.Process] = {}
    ours = psutil.Process().cmdline()
    deadline = time.monotonic() + 120
    while True:  # until every process of the start is stopped, none left to appear
        new = [
            process
            for process in sandbox_processes(sb.workspace)
            if process.pid not in frozen and _command(process) not in ([], ours)
        ]
        for process in new:
            with contextlib.suppress(psutil.Error):
                process.suspend()
            frozen[process.pid] = process
        if frozen and not new:
            break
        assert time.monotonic() < deadline, "the reset started no filesystem server"
        time.sleep(0.01)  # polls for the spawn (a server takes 0.4 s and more to answer)
    logs = list((sb.server.state.data_dir / "mcp-logs").glob(f"{sb.id}-filesystem-*.log"))
    if len(logs) == 1 and logs[0].read_text() == "":
        return True
    for process in frozen.values():
        with contextlib.suppress(psutil.Error):
            process.resume()
    return False


def _command(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def test_a_reset_while_the_last_reset_starts_the_servers_logs_no_failure(
    emulator_in_mode: EmulatorServer, caplog: pytest.LogCaptureFixture
) -> None:
    # notebooks/10: a Ray pool's task used the sandbox's servers; its reset starts them
    # again in the background; the next task's worker dies at once (os._exit) and the pool
    # resets the sandbox again, while that start runs. The reset kills the starting server,
    # which ends with the life it was started for: no failure (it was logged as "failed to
    # start; it said: " with nothing said), and the sandbox's next call gets a fresh server.
    mcp = host(emulator_in_mode)
    for _attempt in range(5):  # until a start is caught under way (the first, in practice)
        with (
            box(emulator_in_mode, ["filesystem"]) as sb,
            caplog.at_level(logging.ERROR, logger="klavis_emulator.mcp"),
        ):
            sb.call("filesystem", "list_allowed_directories", {})
            sb.reset()
            if not _freeze_the_start(sb):
                mcp.wait_warm(sb.id)
                continue
            sb.reset()  # the worker died: nothing asked of the sandbox in between
            mcp.wait_idle()
            failures = [
                record.getMessage()
                for record in caplog.records
                if record.name == "klavis_emulator.mcp" and record.levelno >= logging.ERROR
            ]
            assert failures == []
            listed = sb.call("filesystem", "list_allowed_directories", {})
            assert listed.strip().endswith(sb.seen)
            return
    pytest.fail("no reset was caught while the servers of the one before were starting")


# ---------------------------------------------------------------------- without MCP


def test_a_reset_of_a_sandbox_whose_servers_got_no_request_starts_none(
    confined: EmulatorServer,
) -> None:
    # a pool running code without MCP: its resets start no server, and no spare for it
    with box(confined, ["filesystem", "git"]) as sb:
        identity = sb.identity()
        for _ in range(2):
            sb.reset()
            _fill_the_stock(confined)
            assert sandbox_processes(sb.workspace) == []
            assert ("filesystem", "git") not in host(confined).resets.spares.ready()
        assert sb.identity() == identity
        # its servers still answer, started by their first request
        assert sb.call("filesystem", "list_allowed_directories", {}).strip().endswith(sb.seen)
