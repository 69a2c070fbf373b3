"""Issue 35, point 5: global options go anywhere and ``-q`` quiets every sub-command (only
errors show); a one-file seed in a terminal draws no progress bar. Driven as a user drives
them: the installed ``klavis-sandbox`` in child processes (a pseudo-terminal for the bars),
the session emulator."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_installed_cli
from workflows import list_sandboxes

BIN = Path(sys.executable).parent  # where the install put `klavis-sandbox`


@pytest.fixture
def env(conn: dict[str, Any]) -> dict[str, str]:
    """A user's shell: the CLI on PATH, pointed at the emulator as this test's tenant, and
    progress bars left to their automatic choice."""
    assert (BIN / "klavis-sandbox").exists()
    environ = {k: v for k, v in os.environ.items() if k != "KLAVIS_PROGRESS"}
    return {
        **environ,
        "KLAVIS_API_KEY": conn["api_key"],
        "KLAVIS_BASE_URL": conn["base_url"],
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
    }


def _quiet(env: dict[str, str], cwd: Path, *argv: str, first: bool) -> str:
    """Run ``klavis-sandbox -q ARGV`` (``first``) or ``klavis-sandbox ARGV -q``; its stdout.
    It must succeed and write nothing on stderr."""
    args = ["-q", *argv] if first else [*argv, "-q"]
    done = run_installed_cli(env, *args, cwd=cwd, timeout=300)
    assert (done.returncode, done.stderr) == (0, ""), args
    return done.stdout


@pytest.mark.parametrize("first", [True, False], ids=["before", "after"])
def test_q_before_or_after_quiets_every_command(
    env: dict[str, str], conn: dict[str, Any], tmp_path: Path, first: bool
) -> None:
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "a.txt").write_text("A")
    (tmp_path / "main.py").write_text("print('out')\n")
    sandbox_id = _quiet(env, tmp_path, "acquire", "filesystem", first=first).strip()
    assert sandbox_id in _quiet(env, tmp_path, "list", first=first)
    assert sandbox_id in _quiet(env, tmp_path, "get", sandbox_id, first=first)
    assert _quiet(env, tmp_path, "seed", sandbox_id, "project", first=first) == ""
    digest = _quiet(env, tmp_path, "template", "project", first=first).strip()
    assert _quiet(env, tmp_path, "seed", sandbox_id, sandbox_id, digest, first=first) == ""
    assert _quiet(env, tmp_path, "dump", sandbox_id, "-o", "out", first=first) == ""
    assert (tmp_path / "out" / "a.txt").read_text() == "A"
    argv = ["exec", sandbox_id, "main.py", "--name", "q1"]
    assert _quiet(env, tmp_path, *argv, first=first) == "out\n"
    assert _quiet(env, tmp_path, "logs", f"{sandbox_id}/q1", first=first) == "out\n"
    _quiet(env, tmp_path, "release", sandbox_id, first=first)
    _quiet(env, tmp_path, "reap", first=first)
    _quiet(env, tmp_path, "--base-url", conn["base_url"], "list", first=first)
    assert list_sandboxes(**conn) == []


def test_demo_takes_q_after_its_name_and_prints_nothing(tmp_path: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KLAVIS_")}
    environ["PATH"] = f"{BIN}{os.pathsep}{os.environ['PATH']}"
    environ["KLAVIS_SANDBOX_STATE_DIR"] = str(tmp_path / "state")
    assert _quiet(environ, tmp_path, "demo", "--count", "1", first=False) == ""


def _on_a_terminal(env: dict[str, str], cwd: Path, *argv: str) -> tuple[int, str]:
    """Run the CLI with its stderr on a pseudo-terminal, as in an interactive shell: its
    status and what it drew there."""
    master, slave = pty.openpty()
    # 24 rows of 80 columns: a new pseudo-terminal has 0 columns, where tqdm draws nothing
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    with subprocess.Popen(
        ["klavis-sandbox", *argv], stdout=subprocess.DEVNULL, stderr=slave, env=env, cwd=cwd
    ) as proc:
        os.close(slave)
        drawn = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            drawn += chunk
        code = proc.wait(timeout=120)
    os.close(master)
    return code, drawn.decode(errors="replace")


def test_a_one_file_seed_draws_no_bar_a_large_one_does(
    env: dict[str, str], conn: dict[str, Any], tmp_path: Path
) -> None:
    (tmp_path / "small").mkdir()
    (tmp_path / "small" / "a.txt").write_text("A")
    (tmp_path / "large").mkdir()
    (tmp_path / "large" / "big.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    sandbox_id = subprocess.run(
        ["klavis-sandbox", "acquire", "filesystem", "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    ).stdout.strip()
    code, drawn = _on_a_terminal(env, tmp_path, "seed", sandbox_id, "small")
    assert code == 0, drawn
    assert "uploading" not in drawn
    assert "packing" not in drawn
    assert f"seeded 1 file into {sandbox_id}" in drawn  # singular
    code, drawn = _on_a_terminal(env, tmp_path, "seed", sandbox_id, "large")
    assert code == 0, drawn
    assert "uploading" in drawn
    subprocess.run(["klavis-sandbox", "release", sandbox_id], env=env, timeout=120, check=True)
