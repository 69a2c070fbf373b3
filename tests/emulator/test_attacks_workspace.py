"""Attacks from a sandbox's own processes on the emulator's walks of its workspace, and on the
promise of a reset, on a real emulator (``EmulatorServer`` on loopback port 0) with real
bubblewrap.

The attacker is a confined process of the tenant: an execution's ``main.py`` (the races) or a
process an MCP server started in the background (the reset). The races use inotify, as a real
attacker does: the process waits for the emulator to open a large decoy file, then swaps the
folder being walked for a symbolic link to the emulator's data folder while the emulator is
still reading it. Whether the emulator then reads through the link, on the host, is what the
tests look at. They skip where bubblewrap does not confine (the unconfined pass of the corpus:
unconfined, a tenant's process reads the data folder directly, see the README's Safety).

A dump reads the overlay's upper folder, not the overlay (``Folders.workspaces_to_read``), so
no process inside a sandbox can see when it opens a file: there the test plays the tenant's
part from the host at the worst moment (the open, seen by inotify on the folder the dump
reads), doing what a tenant can do (a rename and a link, through the tenant's own view).
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import secrets
import select
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from klavis_emulator import EmulatorConfig, EmulatorServer
from tests.emulator.mcp_servers import host
from tests.helpers import Executions, build_tar_gz, new_tenant, require_confinement
from workflows import _mcp as client

# main.py of the attacker. It makes /data/dir with a large decoy file first (the emulator
# reads it long enough for the swap) and small files named like the emulator's own, waits
# (inotify) until the emulator opens the decoy, then swaps /data/dir for a link to the host
# path of the emulator's data folder (an attacker reads it from /proc/self/mountinfo; here
# the test hands it over, so the test does not depend on the host's mounts).
SWAPPER = r"""
import ctypes, json, os, select, sys
plan = json.load(open("plan.json"))
folder = "/data/dir"
os.makedirs(folder)
with open(folder + "/a-decoy.bin", "wb") as out:
    out.write(os.urandom(plan["decoy_bytes"]))
for name in plan["names"]:
    with open(os.path.join(folder, name), "w") as out:
        out.write("decoy")
libc = ctypes.CDLL(None, use_errno=True)
watcher = libc.inotify_init1(os.O_CLOEXEC)
IN_OPEN = 0x20
if libc.inotify_add_watch(watcher, (folder + "/a-decoy.bin").encode(), IN_OPEN) < 0:
    sys.exit("inotify_add_watch failed: errno %d" % ctypes.get_errno())
print("READY", flush=True)
woken, _, _ = select.select([watcher], [], [], 60)
if not woken:
    sys.exit("the emulator never opened the decoy")
os.rename(folder, "/data/moved")
os.symlink(plan["target"], folder)
print("SWAPPED", flush=True)
"""
DECOY_BYTES = 48 * 1024 * 1024
STOLEN_NAMES = ("emulator.sqlite3", "signing.key")


@pytest.fixture(scope="module")
def confined_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorServer]:
    """A confined emulator of this module's own (MCP servers start on first use)."""
    require_confinement()
    data = tmp_path_factory.mktemp("walks") / "data"
    with EmulatorServer(EmulatorConfig(data_dir=data, mcp_at_acquire=False)) as server:
        assert server.state.run_settings.confinement.enabled
        yield server


@pytest.fixture
def tenant(confined_server: EmulatorServer) -> Iterator[Executions]:
    with new_tenant(confined_server, "walker", timeout=120) as made:
        yield made


def _start_swapper(tenant: Executions, sandbox_id: str) -> None:
    """Start the attacker and wait (a deadline, not a count of polls) until it watches."""
    plan = {
        "decoy_bytes": DECOY_BYTES,
        "names": STOLEN_NAMES,
        "target": str(tenant.emulator.state.data_dir),
    }
    tenant.start(sandbox_id, "swapper", {"main.py": SWAPPER, "plan.json": json.dumps(plan)})
    deadline = time.monotonic() + 120
    while "READY" not in (logs := tenant.logs(sandbox_id, "swapper")["logs"]):
        assert tenant.status(sandbox_id, "swapper").json()["status"] != "failed", logs
        assert time.monotonic() < deadline, f"the attacker never got ready: {logs}"


def _swapped(tenant: Executions, sandbox_id: str) -> None:
    """The attacker's swap happened (else the test proved nothing)."""
    assert tenant.wait(sandbox_id, "swapper") == "completed"
    logs = tenant.logs(sandbox_id, "swapper")["logs"]
    assert "SWAPPED" in logs, logs


def _secrets_of(server: EmulatorServer) -> dict[str, bytes]:
    data = server.state.data_dir
    return {
        "signing.key": (data / "signing.key").read_bytes(),
        "emulator.sqlite3": (data / "emulator.sqlite3").read_bytes()[:16],  # b"SQLite format 3"
    }


def _holds_no_secret(files: dict[str, bytes], server: EmulatorServer) -> None:
    for name, secret in _secrets_of(server).items():
        for member, content in files.items():
            assert secret not in content, f"{member} holds the emulator's {name}"


class _SwapOnOpen:
    """The tenant's swap, made from the host when the emulator opens ``watched``: ``folder``
    (a tenant folder, through the tenant's view) is renamed away and replaced by a link to
    ``target``. It is ready (watching) once made; :meth:`swapped` waits for its end."""

    _IN_OPEN = 0x20

    def __init__(self, watched: Path, folder: Path, target: Path) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._watcher = self._libc.inotify_init1(os.O_CLOEXEC)
        assert self._watcher >= 0, f"inotify_init1: errno {ctypes.get_errno()}"
        watch = self._libc.inotify_add_watch(self._watcher, bytes(watched), self._IN_OPEN)
        assert watch >= 0, f"inotify_add_watch: errno {ctypes.get_errno()}"
        self._folder, self._target = folder, target
        self._problem = "the swap never ran"
        self._thread = threading.Thread(target=self._swap, daemon=True)
        self._thread.start()

    def _swap(self) -> None:
        try:
            woken, _, _ = select.select([self._watcher], [], [], 120)
            if not woken:
                self._problem = "the emulator never opened the decoy"
                return
            self._folder.rename(self._folder.with_name("moved"))
            self._folder.symlink_to(self._target)
            self._problem = ""
        finally:
            os.close(self._watcher)

    def swapped(self) -> None:
        """The swap happened (else the test proved nothing)."""
        self._thread.join(120)
        assert not self._thread.is_alive(), "the swap still waits"
        assert not self._problem, self._problem


def test_a_dump_never_reads_through_a_folder_swapped_while_it_walks(
    tenant: Executions, confined_server: EmulatorServer
) -> None:
    sandbox_id = tenant.acquire()
    state = confined_server.state
    folder = state.workspace_path(sandbox_id) / "dir"  # through the overlay, as the tenant
    folder.mkdir()
    (folder / "a-decoy.bin").write_bytes(os.urandom(DECOY_BYTES))
    for name in STOLEN_NAMES:
        (folder / name).write_text("decoy")
    # the dump reads the overlay's upper folder (the same folder where there is no overlay)
    read = state.folders.workspaces_to_read / sandbox_id / "dir" / "a-decoy.bin"
    swap = _SwapOnOpen(read, folder, state.data_dir)
    answer = tenant.http.get(f"/local-sandbox/{sandbox_id}/dump")
    assert answer.status_code == 200, answer.text
    swap.swapped()
    archive = httpx.get(answer.json()["download_url"], timeout=120)
    assert archive.status_code == 200
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(archive.content), mode="r:gz") as tar:
        for member in tar:
            if member.isfile():
                files[member.name] = tar.extractfile(member).read()  # type: ignore[union-attr]
    _holds_no_secret(files, confined_server)
    # what the walk had opened is what it read: the folder as it was, under its old name
    for name in STOLEN_NAMES:
        assert files[f"./dir/{name}"] == b"decoy"


def test_initialize_never_copies_through_a_folder_swapped_while_it_copies(
    tenant: Executions, confined_server: EmulatorServer
) -> None:
    sandbox_id = tenant.acquire()
    upload = tenant.http.post(f"/local-sandbox/{sandbox_id}/upload-url").json()["upload_url"]
    put = httpx.put(
        upload,
        content=build_tar_gz({"seed.txt": "seeded"}),
        headers={"Content-Type": "application/gzip"},
        timeout=30,
    )
    assert put.status_code == 200
    _start_swapper(tenant, sandbox_id)
    answer = tenant.http.post(f"/local-sandbox/{sandbox_id}/initialize")
    assert answer.status_code == 200, answer.text
    _swapped(tenant, sandbox_id)
    workspace = confined_server.state.workspace_path(sandbox_id)
    files = {
        str(path.relative_to(workspace)): path.read_bytes()
        for path in workspace.rglob("*")
        if path.is_file() and not path.is_symlink()
    }
    assert files["seed.txt"] == b"seeded"
    _holds_no_secret(files, confined_server)
    assert not any(path.startswith("dir/workspaces") for path in files)


# ---------------------------------------------------------------------- a reset


def _processes_running(marker: str) -> list[psutil.Process]:
    """Processes of this machine whose command line holds ``marker``."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if marker in " ".join(process.info["cmdline"] or ()):
            found.append(process)
    return found


def test_a_reset_ends_every_process_of_the_sandbox_and_restarts_its_servers(
    confined_server: EmulatorServer,
) -> None:
    # only what the project cannot install skips (Node.js); a missing npm install fails
    outside = host(confined_server).tools().missing_outside("code-runner")
    if outside:
        pytest.skip(f"code-runner: {outside}")
    with new_tenant(confined_server, "resetter", timeout=120) as tenant:
        answer = tenant.http.post("/local-sandbox", json={"server_names": ["code-runner"]})
        assert answer.status_code == 201, answer.text
        sandbox_id = answer.json()["local_sandbox_id"]
        url = answer.json()["servers"][0]["mcp_server_url"]
        # Task 1 leaves a process behind, detached from the server (its own session), and a
        # file in the server's private /tmp.
        seconds = f"{1000 + secrets.randbelow(10**6) / 10**6:.6f}"  # marks the process
        snippet = (
            "const { spawn } = require('child_process'), fs = require('fs');\n"
            f"spawn('sleep', ['{seconds}'], {{ detached: true, stdio: 'ignore' }}).unref();\n"
            "fs.writeFileSync('/tmp/task-1', 'left');\n"
            "console.log('started');\n"
        )
        ran = client.call_tool(url, "run-code", {"code": snippet, "languageId": "javascript"})
        assert not ran.is_error, ran.text
        deadline = time.monotonic() + 30
        while not _processes_running(f"sleep {seconds}"):
            assert time.monotonic() < deadline, "the background process never started"
        reset = tenant.http.post(f"/local-sandbox/{sandbox_id}/reset")
        assert reset.status_code == 200, reset.text
        # Once reset answered, nothing of the previous life runs...
        assert _processes_running(f"sleep {seconds}") == []
        # ...and the server is a fresh one: its private /tmp is new.
        probe = "console.log(require('fs').existsSync('/tmp/task-1') ? 'old' : 'new');"
        after = client.call_tool(url, "run-code", {"code": probe, "languageId": "javascript"})
        assert not after.is_error, after.text
        assert after.text.strip().splitlines()[-1] == "new"
        tenant.http.delete(f"/local-sandbox/{sandbox_id}")


def test_a_run_leaves_no_process_behind(
    tenant: Executions, confined_server: EmulatorServer
) -> None:
    sandbox_id = tenant.acquire()
    seconds = f"{2000 + secrets.randbelow(10**6) / 10**6:.6f}"
    main = (
        "import subprocess\n"
        f"subprocess.Popen(['sleep', '{seconds}'], start_new_session=True)\n"
        "print('left it running', flush=True)\n"
    )
    assert tenant.run(sandbox_id, "leaver", {"main.py": main}) == "completed"
    # a run's own processes end with it (its PID namespace): nothing is left to reset
    assert _processes_running(f"sleep {seconds}") == []
    assert tenant.http.post(f"/local-sandbox/{sandbox_id}/reset").status_code == 200
    assert os.listdir(confined_server.state.workspace_path(sandbox_id)) == []
