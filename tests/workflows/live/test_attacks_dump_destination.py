"""A dump that cannot finish where it writes: a full disk, SIGTERM, SIGKILL.

Every case runs the dump in a real child process (a user's script calling ``dump_to``, or the
``klavis-sandbox`` CLI) against an emulator on loopback, and checks:

* the outcome: a ``LocalWriteError`` (a ``KlavisError``) naming the destination and the cause
  when the disk cannot hold the dump (a real ``RLIMIT_FSIZE`` in the child: EFBIG); status 143
  when SIGTERM ends it;
* nothing left beside the destination: no ``.klavis-dump-*`` folder or file, the destination as
  it was before (absent, or a folder ``--force`` was to replace, untouched);
* what a kill nobody can catch (SIGKILL) left is removed by the next dump into the same folder,
  while another process's dump in progress there is not.

Children are synchronised on real events: the hostile store counts the download requests it
holds (:meth:`~tests.hostile_storage.HostileStorage.wait_requests`), never sleeps.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from klavis_emulator import EmulatorConfig, EmulatorServer
from tests.crafted import file, tar_gz
from tests.hostile_storage import GZIP_HEAD, HostileStorage
from workflows import LocalSandbox

MiB = 1024 * 1024
FILE_SIZE_LIMIT = 1 * MiB

# A user's script: dump_to under a file size limit (ulimit -f) when one is given; prints what
# it raised as JSON.
_DUMP_SCRIPT = """
import asyncio, json, resource, signal, sys
from workflows import AsyncLocalSandbox, KlavisError, LocalSandbox

sandbox_id, destination, face, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if limit:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))


async def dump_async() -> None:
    async with AsyncLocalSandbox.attach(sandbox_id) as sb:
        await sb.dump_to(destination, progress=False)


try:
    if face == "sync":
        LocalSandbox.attach(sandbox_id).dump_to(destination, progress=False)
    else:
        asyncio.run(dump_async())
except Exception as exc:
    print(json.dumps({
        "type": type(exc).__name__,
        "klavis": isinstance(exc, KlavisError),
        "oserror": isinstance(exc, OSError),
        "errno": getattr(exc, "errno", None),
        "message": str(exc),
    }))
else:
    print("null")
"""

# The CLI under a file size limit.
_CLI_UNDER_LIMIT = """
import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = int(sys.argv.pop(1))
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
sys.argv[0] = "klavis-sandbox"
runpy.run_module("workflows", run_name="__main__")
"""


def _env(token: str, base_url: str, tmp_path: Path) -> dict[str, str]:
    """A child's environment: this test's tenant and ledger, a temporary folder of its own."""
    temporary = tmp_path / "child-tmp"
    temporary.mkdir(exist_ok=True)
    return {
        **os.environ,
        "KLAVIS_API_KEY": token,
        "KLAVIS_BASE_URL": base_url,
        "TMPDIR": str(temporary),
    }


def _listing(folder: Path) -> dict[str, list[str]]:
    """Everything under ``folder``, by relative path (links not followed)."""
    return {
        os.path.relpath(root, folder): sorted(dirs + files) for root, dirs, files in os.walk(folder)
    }


# --------------------------------------------------------------------------- a full disk


@pytest.fixture
def seeded(emulator: EmulatorServer, token: str) -> Iterator[LocalSandbox]:
    """A sandbox of this test's tenant holding 3 MiB that does not compress (``random.bin``),
    or 3 MiB of zeros that do (``zeros.bin``), as each case asks (see ``_seed``)."""
    with LocalSandbox.acquire(
        ["filesystem"], ttl_seconds=600, api_key=token, base_url=emulator.base_url, progress=False
    ) as sb:
        yield sb


def _seed(sb: LocalSandbox, content: str) -> None:
    if content == "random":
        sb.seed({"random.bin": os.urandom(3 * MiB)})
    else:
        sb.seed({"zeros.bin": bytes(3 * MiB)})


def _dump_under_limit(
    sb: LocalSandbox, destination: str, face: str, env: dict[str, str], cwd: Path
) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _DUMP_SCRIPT, sb.id, destination, face, str(FILE_SIZE_LIMIT)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    raised: dict[str, Any] = json.loads(done.stdout)
    return raised


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize(
    ("target", "content", "where"),
    [
        ("out", "random", "the temporary folder"),  # the download itself
        ("ws.tar.gz", "random", "ws.tar.gz"),  # the kept archive, beside the destination
        ("out", "zeros", "'zeros.bin' under"),  # a small download, a big file extracted
    ],
    ids=["folder-download", "tar.gz", "folder-extract"],
)
def test_a_dump_the_disk_cannot_hold_raises_local_write_error_and_leaves_nothing(
    seeded: LocalSandbox,
    token: str,
    emulator: EmulatorServer,
    tmp_path: Path,
    face: str,
    target: str,
    content: str,
    where: str,
) -> None:
    _seed(seeded, content)
    parent = tmp_path / "dumps"
    parent.mkdir()
    (parent / "keep.txt").write_text("the user's")
    before = _listing(parent)
    env = _env(token, emulator.base_url, tmp_path)
    raised = _dump_under_limit(seeded, f"sub/{target}", face, env, cwd=parent)
    assert raised["type"] == "LocalWriteError", raised
    assert raised["klavis"]
    assert raised["oserror"]  # what it was before: `except OSError` still catches it
    assert raised["errno"] == errno.EFBIG
    message = raised["message"]
    assert f"'sub/{target}'" in message, message  # the destination the user named
    assert "File too large" in message  # the cause
    assert where in message
    assert token not in message
    assert _listing(parent) == before  # not even the parent folder it made
    assert os.listdir(env["TMPDIR"]) == []


@pytest.mark.parametrize(("target", "content"), [("out", "random"), ("ws.tar", "zeros")])
def test_the_cli_names_the_full_destination_and_keeps_what_force_would_replace(
    seeded: LocalSandbox,
    token: str,
    emulator: EmulatorServer,
    tmp_path: Path,
    target: str,
    content: str,
) -> None:
    _seed(seeded, content)
    parent = tmp_path / "dumps"
    (parent / target).mkdir(parents=True)
    (parent / target / "old.txt").write_text("what --force would replace")
    if target.endswith(".tar"):  # a file is there instead
        (parent / target / "old.txt").unlink()
        (parent / target).rmdir()
        (parent / target).write_text("an old archive")
    before = _listing(parent)
    content_before = {p: p.read_bytes() for p in parent.rglob("*") if p.is_file()}
    limited = [sys.executable, "-c", _CLI_UNDER_LIMIT, str(FILE_SIZE_LIMIT)]
    done = subprocess.run(
        [*limited, "dump", seeded.id, "-o", target, "--force", "-q"],
        capture_output=True,
        text=True,
        env=_env(token, emulator.base_url, tmp_path),
        cwd=parent,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.splitlines()  # one line, no traceback
    assert line.startswith("klavis-sandbox: error: cannot "), line
    assert f"'{target}'" in line  # the path given, not the temporary folder's
    assert ".klavis-dump-" not in line
    assert "File too large" in line
    assert _listing(parent) == before
    assert {p: p.read_bytes() for p in parent.rglob("*") if p.is_file()} == content_before


# --------------------------------------------------------------------------- SIGTERM, SIGKILL


@pytest.fixture(scope="module")
def storage() -> Iterator[HostileStorage]:
    """A store whose downloads stall: a dump is in progress for as long as a case needs."""
    with HostileStorage() as server:
        yield server


@pytest.fixture(scope="module")
def stalling_emulator(storage: HostileStorage) -> Iterator[EmulatorServer]:
    """An emulator whose signed dump URLs lead to the stalling store."""
    with EmulatorServer(EmulatorConfig(public_url=storage.url)) as server:
        yield server


@pytest.fixture
def stalled(
    storage: HostileStorage, stalling_emulator: EmulatorServer, token: str
) -> Iterator[LocalSandbox]:
    """A sandbox whose dumps stall after the gzip header, until the case ends."""
    storage.reset()
    storage.stall(GZIP_HEAD, 120)
    with LocalSandbox.acquire(
        ["filesystem"],
        ttl_seconds=600,
        api_key=token,
        base_url=stalling_emulator.base_url,
        progress=False,
    ) as sb:
        yield sb
    storage.reset()


def _start_dump(
    how: str, sb: LocalSandbox, destination: Path, env: dict[str, str]
) -> subprocess.Popen[str]:
    if how == "cli":
        argv = ["-m", "workflows", "dump", sb.id, "-o", str(destination), "--no-progress"]
    elif how == "cli --force":
        argv = ["-m", "workflows", "dump", sb.id, "-o", str(destination), "--force", "-q"]
    else:  # a script calling dump_to: "sync" or "async"
        argv = ["-c", _DUMP_SCRIPT, sb.id, str(destination), how, "0"]
    return subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _staging_entries(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith(".klavis-dump-"))


@pytest.mark.parametrize("how", ["cli", "cli --force", "sync", "async"])
def test_sigterm_mid_dump_removes_the_temporary_entry(
    stalled: LocalSandbox,
    storage: HostileStorage,
    stalling_emulator: EmulatorServer,
    token: str,
    tmp_path: Path,
    how: str,
) -> None:
    parent = tmp_path / "dumps"
    destination = parent / "out"
    destination.mkdir(parents=True)
    if how == "cli --force":
        (destination / "old.txt").write_text("what --force would replace")
    before = _listing(parent)
    env = _env(token, stalling_emulator.base_url, tmp_path)
    with _start_dump(how, stalled, destination, env) as child:
        try:
            assert storage.wait_requests(1), "the dump never started its download"
            assert _staging_entries(parent) != []  # the dump is writing beside its destination
            child.send_signal(signal.SIGTERM)  # what CI, `timeout` and `docker stop` send
            _, err = child.communicate(timeout=60)
        finally:
            child.kill()
    assert child.returncode == 143, err
    if how.startswith("cli"):
        assert err.splitlines()[-1] == "klavis-sandbox: terminated"
        assert "Traceback" not in err
    assert _listing(parent) == before
    if how == "cli --force":
        assert (destination / "old.txt").read_text() == "what --force would replace"


def test_a_later_dump_removes_what_a_killed_dump_left_and_keeps_a_running_one_s(
    stalled: LocalSandbox,
    storage: HostileStorage,
    stalling_emulator: EmulatorServer,
    token: str,
    tmp_path: Path,
) -> None:
    parent = tmp_path / "dumps"
    parent.mkdir()
    env = _env(token, stalling_emulator.base_url, tmp_path)
    with _start_dump("sync", stalled, parent / "killed", env) as killed:
        try:
            assert storage.wait_requests(1)
            (left,) = _staging_entries(parent)
            assert left.startswith(f".klavis-dump-{killed.pid}-")  # named for its process
            killed.send_signal(signal.SIGKILL)  # nothing can clean up after this
            killed.communicate(timeout=60)
        finally:
            killed.kill()
    assert _staging_entries(parent) == [left]
    with _start_dump("sync", stalled, parent / "running", env) as running:
        try:
            assert storage.wait_requests(2)
            (in_progress,) = [n for n in _staging_entries(parent) if n != left]
            storage.body(tar_gz([file("a.txt", "A")]))  # the next download is served whole
            stalled.dump_to(parent / "mine", progress=False)
            assert (parent / "mine" / "a.txt").read_text() == "A"
            # the killed dump's entry is gone; the running dump's is not
            assert _staging_entries(parent) == [in_progress]
            running.send_signal(signal.SIGTERM)
            running.communicate(timeout=60)
        finally:
            running.kill()
    assert running.returncode == 143
    assert sorted(os.listdir(parent)) == ["mine"]
