"""Issue 35, point 2: ``klavis-sandbox exec`` is a pipe stage. It exits with the script's own
status, its stdout carries the script's stdout alone (pip's lines, the emulator's notes and the
script's stderr go to stderr), ``klavis-sandbox logs ID`` and ``sb.execution(NAME)`` read an
execution again, and SIGTERM or SIGHUP stop its wait saying what still runs. Driven as a user
drives them: the installed ``klavis-sandbox`` as a child process (from bash where a shell
script is the point), real signals, the session emulator."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_installed_cli, tiny_wheel
from workflows import LocalSandbox

BIN = Path(sys.executable).parent  # where the install put `klavis-sandbox`
SLOW = "import time\nprint('started', flush=True)\ntime.sleep(600)\n"


@pytest.fixture
def env(conn: dict[str, Any]) -> dict[str, str]:
    """A user's shell: the CLI on PATH, pointed at the emulator as this test's tenant."""
    assert (BIN / "klavis-sandbox").exists()
    return {
        **os.environ,
        "KLAVIS_API_KEY": conn["api_key"],
        "KLAVIS_BASE_URL": conn["base_url"],
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
    }


@pytest.fixture
def sandbox(conn: dict[str, Any]) -> Iterator[LocalSandbox]:
    with LocalSandbox.acquire(["filesystem"], progress=False, **conn) as sb:
        yield sb


def test_exec_exits_with_the_scripts_status_and_stdout_is_the_scripts_alone(
    env: dict[str, str], sandbox: LocalSandbox, tmp_path: Path
) -> None:
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "tinypkg-0.1-py3-none-any.whl").write_bytes(tiny_wheel())
    (tmp_path / "reqs.txt").write_text("--no-index\n--find-links ./wheels\ntinypkg==0.1\n")
    (tmp_path / "job.py").write_text(
        "import sys, tinypkg\n"
        "print('value', tinypkg.VALUE)\n"
        "print('a warning', file=sys.stderr)\n"
        "sys.stdout.write('no newline at the end')\n"
        "sys.exit(3)\n"
    )
    argv = ["exec", sandbox.id, "job.py", "-r", "reqs.txt", "--file", "wheels", "--name", "j1"]
    ran = run_installed_cli(env, *argv, cwd=tmp_path)
    assert ran.returncode == 3, ran.stderr
    assert ran.stdout == "value 42\nno newline at the end"
    assert "a warning\n" in ran.stderr
    assert "tinypkg" in ran.stderr  # pip's install lines
    assert "[emulator]" in ran.stderr  # the emulator's notes
    assert "##klavis-exec" not in ran.stdout + ran.stderr
    assert f"execution {sandbox.id}/j1 started" in ran.stderr
    assert "the script exited with status 3" in ran.stderr

    # read again afterwards: by the CLI, split and with the status, and by the library
    again = run_installed_cli(env, "logs", f"{sandbox.id}/j1")
    assert (again.returncode, again.stdout) == (3, ran.stdout), again.stderr
    assert "a warning\n" in again.stderr
    quiet = run_installed_cli(env, "logs", f"{sandbox.id}/j1", "-q")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (3, ran.stdout, "a warning\n")
    run = sandbox.execution("j1")
    text = "".join(run.logs())  # the two streams merged again (in the order they were read)
    # the pieces as they were read: another stream's may come between two pieces of a line
    # (unbuffered, print writes "value", " ", "42" and "\n" apart); each stream whole is
    # checked below
    assert all(part in text for part in ("value", "42", "a warning", "no newline at the end"))
    assert "##klavis-exec" not in text
    assert run.exit_code() == 3
    pieces = list(run.output())
    assert "".join(t for s, t in pieces if s == "stdout") == ran.stdout
    assert "".join(t for s, t in pieces if s == "stderr") == "a warning\n"
    assert "tinypkg" in "".join(t for s, t in pieces if s == "log")


def test_exec_statuses_a_signal_and_none_known(
    env: dict[str, str], sandbox: LocalSandbox, tmp_path: Path
) -> None:
    (tmp_path / "ok.py").write_text("print('fine')\n")
    ran = run_installed_cli(env, "exec", sandbox.id, "ok.py", "-q", cwd=tmp_path)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "fine\n", "")
    (tmp_path / "killed.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    ran = run_installed_cli(env, "exec", sandbox.id, "killed.py", "-q", cwd=tmp_path)
    assert ran.returncode == 128 + 9
    assert "the script was killed by signal 9" in ran.stderr
    # pip fails: main.py never runs, and nothing tells a status; a documented code, a line
    (tmp_path / "missing.txt").write_text("--no-index\nno-such-package-xyz==1\n")
    ran = run_installed_cli(env, "exec", sandbox.id, "ok.py", "-r", "missing.txt", cwd=tmp_path)
    assert ran.returncode == 125, ran.stderr
    assert ran.stdout == ""
    assert "no exit status is known" in ran.stderr
    assert "exit 125" in ran.stderr


def test_logs_of_an_execution_started_by_the_library_go_whole_to_stdout(
    env: dict[str, str], sandbox: LocalSandbox
) -> None:
    run = sandbox.execute("import sys\nprint('plain')\nsys.exit(4)\n", name="plain-1")
    assert run.wait() == "failed"
    ran = run_installed_cli(env, "logs", run.id)
    assert ran.returncode == 4, ran.stderr
    assert ran.stdout.startswith("plain\n")
    bad = run_installed_cli(env, "logs", "no-slash")
    assert (bad.returncode, "is not SANDBOX_ID/NAME" in bad.stderr) == (2, True)


def _started(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    assert proc.stdout.readline() == "started\n"  # the script runs in the sandbox now


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_stops_execs_wait_and_says_what_still_runs(
    env: dict[str, str], sandbox: LocalSandbox, tmp_path: Path, signum: int, code: int
) -> None:
    (tmp_path / "slow.py").write_text(SLOW)
    argv = ["klavis-sandbox", "exec", sandbox.id, "slow.py", "--name", "slow-1"]
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path
    ) as proc:
        _started(proc)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert f"execution {sandbox.id}/slow-1 may still be running" in err
    assert f"klavis-sandbox release {sandbox.id}" in err
    assert sandbox.execution("slow-1").status() == "running"  # the wait stopped, not the run


def test_killing_a_scripts_process_group_stops_the_exec_it_waits_for(
    env: dict[str, str], sandbox: LocalSandbox, tmp_path: Path
) -> None:
    (tmp_path / "slow.py").write_text(SLOW)
    script = f"klavis-sandbox exec {sandbox.id} slow.py --name grouped\necho after\n"
    with subprocess.Popen(
        ["bash", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,  # as `setsid ./job.sh` does: a group of its own
    ) as proc:
        _started(proc)
        os.killpg(proc.pid, signal.SIGTERM)  # kill -TERM -- -PGID, as the README says
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM or proc.returncode == -signal.SIGTERM
    assert "after" not in out
    assert f"execution {sandbox.id}/grouped may still be running" in err
