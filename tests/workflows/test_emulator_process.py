"""``EmulatorProcess``: the emulator started as a real ``klavis-emulator`` process (this venv's,
which has the extra), found as a user's harness finds it, and always stopped.

The same class driven from a venv with mcp 1.12.1 and the library only (no emulator extra),
against the emulator of another venv, is tested by ``scripts/test`` (its mcp1 section) and
``tests/package/test_harness_venv.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import httpx
import psutil
import pytest

from klavis_emulator import _owner
from klavis_emulator._extra import EXTRA_MODULES
from tests.helpers import expect_children_to_get_sigint, wait_until
from workflows import (
    EmulatorProcess,
    EmulatorStartError,
    InvalidInputError,
    LocalSandbox,
    _emulator_process,
)

PYTHON_EMULATOR = [sys.executable, "-m", "klavis_emulator"]
WAIT = 120.0  # seconds before a process that should have ended fails the test


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_it_serves_then_stops_and_removes_its_data() -> None:
    with EmulatorProcess(PYTHON_EMULATOR, args=["--no-mcp-at-acquire"]) as emulator:
        pid, data = emulator.pid, emulator.data_dir
        assert pid is not None
        assert emulator.running
        assert emulator.command == PYTHON_EMULATOR
        assert data is not None
        assert data.is_dir()
        assert emulator.base_url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{emulator.base_url}/_emulator/health", timeout=30).status_code == 200
        with LocalSandbox.acquire(
            ["filesystem"], base_url=emulator.base_url, api_key="k", progress=False
        ) as sb:
            sb.seed({"a.txt": "hi"})
            assert sb.dump()["a.txt"] == b"hi"
    assert not emulator.running
    assert (emulator.pid, emulator.data_dir) == (None, None)
    assert _gone(pid)
    assert not data.exists()
    # stop waits for the end of its output: every line is in
    assert f"Data folder: {data}\n" in emulator.output
    with pytest.raises(RuntimeError, match="not started"):
        _ = emulator.base_url


def test_a_given_data_folder_is_kept(tmp_path: Path) -> None:
    with EmulatorProcess(PYTHON_EMULATOR, data_dir=tmp_path / "state") as emulator:
        assert emulator.data_dir == tmp_path / "state"
        assert httpx.get(f"{emulator.base_url}/_emulator/health", timeout=30).status_code == 200
    assert f"Data folder: {tmp_path / 'state'}\n" in emulator.output
    assert any((tmp_path / "state").iterdir())  # its state, kept


def test_the_command_can_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    line = " ".join([*PYTHON_EMULATOR, "--no-mcp-at-acquire"])
    monkeypatch.setenv(_emulator_process.COMMAND_ENV, line)
    assert _emulator_process.find_emulator_command() == [*PYTHON_EMULATOR, "--no-mcp-at-acquire"]
    with EmulatorProcess() as emulator:
        assert httpx.get(f"{emulator.base_url}/_emulator/health", timeout=30).status_code == 200


def _script(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    program = folder / "klavis-emulator"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    return program


def test_path_search_skips_this_venvs_script_only_without_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(_emulator_process.COMMAND_ENV, raising=False)
    own = sysconfig.get_path("scripts")
    assert Path(own, "klavis-emulator").is_file()  # the install put it there
    tool = _script(tmp_path / "tool-bin")
    search = os.pathsep.join([str(tmp_path / "empty"), own, str(tool.parent)])
    # with the extra here (this venv), the venv's own command serves and comes first
    assert _emulator_process.find_emulator_command(search) == [str(Path(own, "klavis-emulator"))]
    # without it (as in a harness's venv), the next one on PATH: the tool install
    monkeypatch.setattr(_emulator_process, "SERVING_MODULES", ("no_such_module_installed",))
    assert _emulator_process.find_emulator_command(search) == [str(tool)]
    assert _emulator_process.find_emulator_command(own) is None


def test_nothing_found_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_emulator_process.COMMAND_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EmulatorStartError) as caught:
        EmulatorProcess().start()
    assert str(caught.value) == (
        "no klavis-emulator that can serve was found on PATH: install the emulator in an "
        "environment of its own: pipx install 'klavis-sandbox[emulator]' (or uv tool install "
        "'klavis-sandbox[emulator]'), then klavis-emulator setup; or pass command=[...] or set "
        "$KLAVIS_EMULATOR_COMMAND"
    )


def test_the_library_checks_modules_of_the_emulator_extra() -> None:
    assert set(_emulator_process.SERVING_MODULES) <= set(EXTRA_MODULES)


def test_a_command_that_stops_before_listening_is_reported_with_its_output() -> None:
    failing = [sys.executable, "-c", "print('cannot bind'); raise SystemExit(3)"]
    emulator = EmulatorProcess(failing)
    with pytest.raises(EmulatorStartError, match=r"stopped \(exit code 3\) before it listened"):
        emulator.start()
    assert "cannot bind" in emulator.output
    assert not emulator.running


def test_a_silent_command_is_stopped_after_the_startup_timeout() -> None:
    silent = [sys.executable, "-c", "import time; time.sleep(600)"]
    emulator = EmulatorProcess(silent, startup_timeout=0.5)
    with pytest.raises(EmulatorStartError, match=r"printed no URL within 0\.5 s"):
        emulator.start()
    assert not emulator.running
    assert emulator._proc is not None
    assert emulator._proc.returncode == -signal.SIGTERM


@pytest.mark.parametrize("command", ["klavis-emulator", []])
def test_a_bad_command_is_refused_before_anything_runs(command: object) -> None:
    with pytest.raises(InvalidInputError, match="non-empty sequence"):
        EmulatorProcess(command)  # type: ignore[arg-type]


OWNER = textwrap.dedent(
    """
    import gc, sys, threading
    from workflows import EmulatorProcess
    emulator = EmulatorProcess([sys.executable, "-m", "klavis_emulator"])
    emulator.start()
    print(emulator.pid, flush=True)
    if sys.argv[1] == "ctrl-c":
        threading.Event().wait()
    elif sys.argv[1] == "collected":
        del emulator
        gc.collect()
        print("collected", flush=True)
        threading.Event().wait()
    """
)


@pytest.mark.parametrize("end", ["ctrl-c", "exit", "collected"])
def test_the_emulator_never_outlives_its_owner(end: str) -> None:
    """Ctrl-C in the owner (SIGINT to it alone: a terminal would send it to the emulator too),
    its interpreter exiting without stopping it, or the object dropped while the owner goes
    on: the emulator is stopped."""
    expect_children_to_get_sigint()
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, end],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    try:
        pid = int(owner.stdout.readline())
        if end == "collected":
            assert owner.stdout.readline() == "collected\n"
            assert _gone(pid)  # while the owner still runs
            return
        if end == "ctrl-c":
            owner.send_signal(signal.SIGINT)
        _, err = owner.communicate(timeout=120)
        assert owner.returncode == (-signal.SIGINT if end == "ctrl-c" else 0), err
        assert ("KeyboardInterrupt" in err) is (end == "ctrl-c"), err
        assert _gone(pid)
    finally:
        owner.kill()
        owner.communicate()


def test_the_variables_that_link_the_emulator_to_its_owner_are_the_emulators() -> None:
    assert _emulator_process.OWNER_ENV == (
        _owner.EXIT_WITH_FD_ENV,
        _owner.EXIT_WITH_PARENT_ENV,
        _owner.REMOVE_DATA_DIR_ENV,
    )


KILLED_OWNER = textwrap.dedent(
    """
    import json, signal, sys, threading
    from workflows import EmulatorProcess, LocalSandbox
    started = []

    def start():
        emulator = EmulatorProcess([sys.executable, "-m", "klavis_emulator"])
        emulator.start()
        started.append(emulator)

    if sys.argv[1] == "thread":  # the thread that started it ends: the emulator must not
        starter = threading.Thread(target=start)
        starter.start()
        starter.join()
    else:
        start()
    [emulator] = started
    sandbox = LocalSandbox.acquire(
        ["git"], base_url=emulator.base_url, api_key="k", progress=False
    )
    sandbox.list_tools("git")  # its MCP server runs from here on
    # Python's own SIGTERM, death at once (the library's handler, installed at the acquire,
    # would run the finalizers: as in an owner that acquired nothing itself)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    print(json.dumps({"pid": emulator.pid, "data": str(emulator.data_dir)}), flush=True)
    threading.Event().wait()
    """
)


def _command(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _ended(process: psutil.Process) -> bool:
    """Gone, or a zombie nobody reaps (an orphan's new parent may not reap it)."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("death", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
@pytest.mark.parametrize("started_from", ["main", "thread"])
def test_the_emulator_dies_with_an_owner_killed_and_removes_its_data(
    death: signal.Signals, started_from: str
) -> None:
    """An owner killed by SIGKILL, or by SIGTERM (Python's default: it ends at once, no
    finalizer runs): the emulator, and the MCP servers of the sandbox it hosted, end within a
    bounded wait, and its temporary data folder is removed. Started from a thread that then
    ended, the emulator lives on until its owner dies (the parent-death signal is tied to
    the starting thread, so only the pipe links them then)."""
    owner = subprocess.Popen(
        [sys.executable, "-c", KILLED_OWNER, started_from],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    family: list[psutil.Process] = []
    data = None
    try:
        line = owner.stdout.readline()
        assert line, owner.communicate(timeout=WAIT)[1]
        started = json.loads(line)
        data = Path(started["data"])
        emulator = psutil.Process(started["pid"])

        family = [emulator, *emulator.children(recursive=True)]
        commands = [" ".join(_command(p)) for p in family[1:]]
        assert any("mcp_server_git" in command for command in commands), commands
        assert data.is_dir()
        owner.send_signal(death)
        assert owner.wait(timeout=WAIT) == -death
        wait_until(lambda: all(map(_ended, family)), "the emulator and its servers ended", WAIT)
        wait_until(lambda: not data.exists(), f"{data} removed", WAIT)
    finally:
        owner.kill()
        owner.communicate()
        for process in family:  # on a failure: leave nothing behind
            with contextlib.suppress(psutil.Error):
                process.kill()
        if data is not None:
            shutil.rmtree(data, ignore_errors=True)
