"""The ``klavis-sandbox`` CLI against the emulator (in-process ``main`` and one real subprocess)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from workflows._cli import main

Cli = Callable[..., tuple[int, str]]


@pytest.fixture
def cli(conn: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    monkeypatch.setenv("KLAVIS_API_KEY", conn["api_key"])
    monkeypatch.setenv("KLAVIS_BASE_URL", conn["base_url"])

    def run(*argv: str) -> tuple[int, str]:
        out = io.StringIO()
        code = main(list(argv), out=out)
        return code, out.getvalue()

    return run


def test_acquire_list_seed_dump_release(
    cli: Cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = cli("acquire", "filesystem", "git", "--ttl", "600")
    assert code == 0
    sandbox_id = out.splitlines()[0]
    assert "git/mcp/?local_sandbox_id=" in out

    code, out = cli("list")
    assert code == 0
    assert sandbox_id in out
    assert out.startswith("ID")
    code, out = cli("list", "--json")
    assert [s["id"] for s in json.loads(out)] == [sandbox_id]
    code, out = cli("get", sandbox_id)
    assert "status:    occupied" in out

    project = tmp_path / "proj"
    project.mkdir()
    (project / "a.txt").write_text("A")
    (project / "skip.log").write_text("no")
    code, out = cli("seed", sandbox_id, str(project), "--ignore", "*.log", "--no-progress")
    assert (code, out.strip()) == (0, f"seeded 1 files into {sandbox_id}")
    code, out = cli("dump", sandbox_id, "-o", str(tmp_path / "out"), "--no-progress")
    assert code == 0
    assert (tmp_path / "out" / "a.txt").read_text() == "A"
    assert not (tmp_path / "out" / "skip.log").exists()

    code, out = cli("reap")
    assert code == 0
    assert f"released {sandbox_id}" in out
    code, out = cli("release", "--all")
    assert out.strip() == "nothing to release"


def test_release_by_id_and_errors(cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = cli("acquire", "git")
    sandbox_id = out.splitlines()[0]
    code, out = cli("release", sandbox_id)
    assert (code, out.strip()) == (0, f"released {sandbox_id}")
    code, _ = cli("get", sandbox_id)
    assert code == 1
    assert "404" in capsys.readouterr().err
    code, _ = cli("release")
    assert code == 1
    code, _ = cli("acquire", "nope")
    assert code == 1
    err = capsys.readouterr().err
    assert "valid names are" in err
    assert os.environ["KLAVIS_API_KEY"] not in err


def test_demo_runs_on_the_embedded_emulator(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KLAVIS_")}
    env["KLAVIS_SANDBOX_STATE_DIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "workflows", "demo", "--count", "2"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "embedded emulator" in done.stdout
    assert "round-trip dump: ok: 3 files came back" in done.stdout
    assert "dump diff: 1 added, 0 removed, 1 modified" in done.stdout
    assert "sandboxes still listed: 0" in done.stdout


def test_exec_streams_output_and_exit_status(cli: Cli, tmp_path: Path) -> None:
    code, out = cli("acquire", "filesystem")
    sandbox_id = out.splitlines()[0]
    good = tmp_path / "good.py"
    good.write_text("print('from the sandbox')\n")
    code, out = cli("exec", sandbox_id, str(good))
    own_lines = [line for line in out.splitlines() if not line.startswith("[emulator]")]
    assert (code, own_lines) == (0, ["from the sandbox"])  # emulator notes vary by machine
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nprint('failing')\nsys.exit(2)\n")
    code, out = cli("exec", sandbox_id, str(bad), "--name", "bad-run")
    assert code == 1
    assert "failing" in out
    cli("release", sandbox_id)
