"""``klavis-emulator --exit-with-fd N``, ``--exit-with-parent PID`` and ``--remove-data-dir``:
the emulator ends with the process that started it, each link alone (a real pipe, a real
parent killed by SIGKILL), and its sandboxes' MCP servers and data folder with it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from klavis_emulator import _owner
from klavis_emulator.__main__ import main
from tests.helpers import wait_until
from workflows import LocalSandbox

EMULATOR = [sys.executable, "-m", "klavis_emulator", "--port", "0", "--log-level", "warning"]
LISTENING = "Klavis emulator listening on "
WAIT = 120.0  # seconds before a process that should have ended fails the test


def _ended(process: psutil.Process) -> bool:
    """Gone, or a zombie nobody reaps (an orphan's new parent may not reap it)."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _family_serving_git(pid: int, base_url: str) -> list[psutil.Process]:
    """Acquire a git sandbox on the emulator at ``base_url`` and start its MCP server: the
    emulator and every process under it."""
    sandbox = LocalSandbox.acquire(["git"], base_url=base_url, api_key="k", progress=False)
    assert {t.name for t in sandbox.list_tools("git")} >= {"git_status"}
    emulator = psutil.Process(pid)
    family = [emulator, *emulator.children(recursive=True)]
    assert len(family) > 1  # the MCP server, under bubblewrap or not
    return family


@pytest.fixture
def leftovers() -> Iterator[list[psutil.Process]]:
    """Processes to kill if the test fails (never leave an emulator behind)."""
    family: list[psutil.Process] = []
    yield family
    for process in family:
        with contextlib.suppress(psutil.Error):
            process.kill()


def test_the_end_of_the_pipe_stops_it_and_removes_its_data(
    tmp_path: Path, leftovers: list[psutil.Process]
) -> None:
    """The pipe alone (no parent-death signal; the parent, this test, lives on)."""
    data = tmp_path / "data"
    watched, kept = os.pipe()
    process = subprocess.Popen(
        [*EMULATOR, "--data-dir", str(data), "--exit-with-fd", str(watched), "--remove-data-dir"],
        pass_fds=(watched,),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(watched)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith(LISTENING), line
        leftovers.extend(_family_serving_git(process.pid, line[len(LISTENING) :].strip()))
        assert data.is_dir()
        assert process.poll() is None
    finally:
        os.close(kept)  # the owner's end: as when it dies
    _, err = process.communicate(timeout=WAIT)
    assert process.returncode == 0, err
    assert f"the pipe at file descriptor {watched} ended: stopping" in err
    wait_until(lambda: all(map(_ended, leftovers)), "the MCP servers ended", WAIT)
    assert not data.exists()


PARENT = textwrap.dedent(
    """
    import os, subprocess, sys
    emulator = subprocess.Popen(
        [*sys.argv[1:], "--exit-with-parent", str(os.getpid())],
        stdout=subprocess.PIPE,
        text=True,
    )
    print(emulator.pid, flush=True)
    print(emulator.stdout.readline(), end="", flush=True)
    sys.stdin.read()
    """
)


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="a parent-death signal is Linux's (prctl)"
)
def test_a_parent_killed_by_sigkill_stops_it_without_a_pipe(
    tmp_path: Path, leftovers: list[psutil.Process]
) -> None:
    data = tmp_path / "data"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, *EMULATOR, "--data-dir", str(data), "--remove-data-dir"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        leftovers.append(psutil.Process(pid))
        line = parent.stdout.readline()
        assert line.startswith(LISTENING), line
        leftovers.extend(_family_serving_git(pid, line[len(LISTENING) :].strip()))
        parent.kill()
        parent.wait(timeout=WAIT)
        wait_until(lambda: all(map(_ended, leftovers)), "the emulator and its servers ended", WAIT)
        wait_until(lambda: not data.exists(), f"{data} removed", WAIT)
    finally:
        parent.kill()
        parent.communicate()


def test_a_parent_already_gone_means_it_does_not_start(tmp_path: Path) -> None:
    """The parent died before the signal could be asked for (it would never come)."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    data = tmp_path / "data"
    linked = ["--remove-data-dir", "--exit-with-parent", str(gone.pid)]
    done = subprocess.run(
        [*EMULATOR, "--data-dir", str(data), *linked],
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert f"its parent (pid {gone.pid}) is gone: not starting" in done.stderr
    assert not data.exists()


def test_a_variable_naming_no_pipe_is_ignored(tmp_path: Path) -> None:
    """A wrapper between owner and emulator may close the descriptor, or open a file under its
    number: the emulator says so and serves (reading a file to its end would stop it)."""
    other = tmp_path / "some-file"
    other.write_text("not a pipe")
    with other.open() as handle:
        fd = handle.fileno()
        process = subprocess.Popen(
            [*EMULATOR, "--data-dir", str(tmp_path / "data")],
            pass_fds=(fd,),
            env={**os.environ, _owner.EXIT_WITH_FD_ENV: str(fd)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith(LISTENING), line
        process.terminate()
        _, err = process.communicate(timeout=WAIT)
        assert f"${_owner.EXIT_WITH_FD_ENV}={fd} is not an open pipe: ignored" in err
        assert process.returncode == 0, err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--remove-data-dir"], "--remove-data-dir needs --data-dir"),
        (["--exit-with-fd", "987"], "--exit-with-fd: 987 is not an open pipe"),
        (["--exit-with-fd", "-1"], "not a number >= 0: '-1'"),
        (["--exit-with-parent", "one"], "not a number >= 0: 'one'"),
    ],
)
def test_owner_options_that_cannot_work_are_refused(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--port", "0", *args])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
