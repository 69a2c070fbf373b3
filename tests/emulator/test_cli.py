"""``python -m klavis_emulator`` / ``klavis-emulator``: starts on port 0 and prints its URL."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from klavis_emulator.__main__ import build_parser

URL_LINE = re.compile(r"^Klavis emulator listening on (http://127\.0\.0\.1:(\d+))$")


@contextmanager
def running(
    args: list[str], env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Start the command, read its first line, yield the URL; terminate on exit."""
    process = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert process.stdout is not None
        first_line = process.stdout.readline().rstrip("\n")
        match = URL_LINE.match(first_line)
        assert match, f"unexpected first line: {first_line!r}"
        assert int(match[2]) > 0
        yield match[1], process
    finally:
        process.terminate()
        try:
            process.wait(timeout=120)  # a deadline: a loaded machine took 32 s
        except subprocess.TimeoutExpired:  # pragma: no cover - only if shutdown hangs
            process.kill()
            process.wait()


def test_module_starts_on_port_zero_and_serves(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "klavis_emulator", "--port", "0", "--data-dir", str(tmp_path)]
    with running([*args, "--log-level", "warning"]) as (url, process):
        assert httpx.get(f"{url}/_emulator/health", timeout=30).status_code == 200
        response = httpx.post(
            f"{url}/local-sandbox",
            json={"server_names": ["git"]},
            headers={"Authorization": "Bearer cli-test"},
            timeout=30,
        )
        assert response.status_code == 201
        assert response.json()["servers"][0]["mcp_server_url"].startswith(f"{url}/git/mcp/")
    assert process.returncode == 0
    assert (tmp_path / "emulator.sqlite3").is_file()


def test_console_script_with_api_keys_and_faults(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("klavis-emulator")
    if not script.exists():
        pytest.skip("the console script is not installed in this environment")
    args = [
        str(script),
        "--host=127.0.0.1",
        "--port=0",
        f"--data-dir={tmp_path}",
        "--api-key=one",
        "--api-key=two",
        "--fault-rate=1",
        "--fault-mode=before",
        "--latency-ms=1",
        "--signed-url-minutes=7",
        "--max-upload-mb=2",
        "--log-level=warning",
    ]
    with running(args) as (url, _):
        faults = httpx.get(f"{url}/_emulator/faults", timeout=30).json()
        assert faults["rate"] == 1.0
        assert faults["mode"] == "before"
        assert faults["latency_ms"] == 1
        unknown = httpx.get(
            f"{url}/local-sandbox", headers={"Authorization": "Bearer three"}, timeout=30
        )
        assert unknown.status_code in (429, 500, 502, 503)  # faults come first
        httpx.post(f"{url}/_emulator/faults", json={"rate": 0}, timeout=30)
        assert (
            httpx.get(
                f"{url}/local-sandbox", headers={"Authorization": "Bearer three"}, timeout=30
            ).status_code
            == 401
        )
        known = httpx.get(
            f"{url}/local-sandbox", headers={"Authorization": "Bearer two"}, timeout=30
        )
        assert known.status_code == 200


@pytest.mark.parametrize(
    "bad",
    [["--port", "-1"], ["--fault-rate", "1.5"], ["--fault-mode", "sometimes"], ["--bogus"]],
)
def test_bad_arguments_exit_2(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(bad)
    assert exit_info.value.code == 2
    assert "usage: klavis-emulator" in capsys.readouterr().err


def test_access_log_hides_signatures(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "klavis_emulator", "--port=0", f"--data-dir={tmp_path}"]
    # 60 s, not httpx's 5: a loaded machine once took longer to answer the acquire
    with running(args) as (url, process), httpx.Client(timeout=60) as http:
        headers = {"Authorization": "Bearer log-test"}
        sandbox = http.post(f"{url}/local-sandbox", json={"server_names": ["git"]}, headers=headers)
        sandbox_id = sandbox.json()["local_sandbox_id"]
        dump = http.get(f"{url}/local-sandbox/{sandbox_id}/dump", headers=headers).json()
        assert http.get(dump["download_url"]).status_code == 200
        signature = dump["download_url"].split("signature=")[1]
    assert process.stdout is not None
    assert process.stderr is not None
    log = process.stdout.read() + process.stderr.read()  # uvicorn's access log is on stdout
    assert "/_storage/download/" in log
    assert "?<signed>" in log
    assert signature not in log
    assert "log-test" not in log


@pytest.mark.parametrize("opt_out", ["--no-confine", "--no-bwrap"])
def test_execution_flags(opt_out: str) -> None:
    args = build_parser().parse_args(["--execution-timeout", "2.5", "--allow-network", opt_out])
    assert args.execution_timeout == 2.5
    assert args.allow_network is True
    assert args.confine_executions is False
    defaults = build_parser().parse_args([])
    assert defaults.execution_timeout == 3600
    assert defaults.allow_network is False
    assert defaults.confine_executions is True
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--execution-timeout", "0"])


def test_help_names_no_confine_and_hides_its_old_name() -> None:
    shown = build_parser().format_help()
    assert "--no-confine" in shown
    assert "--no-bwrap" not in shown


def _without_confine_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("KLAVIS_EMULATOR_CONFINE", "KLAVIS_EMULATOR_MCP_CONFINE")
    }


@pytest.fixture
def failing_bwrap(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH finds first a ``bwrap`` that always fails, as a bwrap
    without user namespaces does; confinement left to its default."""
    folder = tmp_path / "fake-bin"
    folder.mkdir()
    fake = folder / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    env = _without_confine_env()
    env["PATH"] = f"{folder}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_a_bwrap_that_fails_stops_the_emulator_at_startup(
    tmp_path: Path, failing_bwrap: dict[str, str]
) -> None:
    data = tmp_path / "data"
    done = subprocess.run(
        [sys.executable, "-m", "klavis_emulator", "--port=0", f"--data-dir={data}"],
        env=failing_bwrap,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == ""  # it never said it was listening
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr  # one line: no traceback
    assert lines[0].startswith("klavis-emulator: error: bubblewrap is installed but cannot")
    assert "No permissions to create new namespace" in lines[0]
    assert "--no-confine" in lines[0]
    assert "KLAVIS_EMULATOR_CONFINE=0" in lines[0]
    assert not data.exists()


@pytest.mark.parametrize("opt_out", ["--no-confine", "--no-bwrap"])
def test_no_confine_starts_unconfined_even_with_a_failing_bwrap(
    tmp_path: Path, failing_bwrap: dict[str, str], opt_out: str
) -> None:
    args = [sys.executable, "-m", "klavis_emulator", "--port=0", f"--data-dir={tmp_path}"]
    with running([*args, opt_out, "--log-level=warning"], env=failing_bwrap) as (url, process):
        assert process.stdout is not None
        assert process.stdout.readline().startswith("Data folder: ")
        assert process.stdout.readline().rstrip("\n") == (
            "Executions and MCP servers: NOT confined (confinement was turned off (--no-confine))"
        )
        assert httpx.get(f"{url}/_emulator/health", timeout=30).status_code == 200


def test_startup_says_when_executions_are_confined(tmp_path: Path) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    args = [sys.executable, "-m", "klavis_emulator", "--port=0", f"--data-dir={tmp_path}"]
    with running([*args, "--log-level=warning"], env=_without_confine_env()) as (_, process):
        assert process.stdout is not None
        assert process.stdout.readline().startswith("Data folder: ")
        said = process.stdout.readline().rstrip("\n")
        assert said.startswith("Executions and MCP servers: confined with bubblewrap ("), said


def test_the_control_token_comes_from_the_environment_or_the_flag(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "klavis_emulator", "--port", "0", "--log-level", "warning"]
    advance = "/_emulator/clock/advance"
    env = {**os.environ, "KLAVIS_EMULATOR_CONTROL_TOKEN": "env-token"}
    with running([*args, "--data-dir", str(tmp_path / "a")], env) as (url, _):
        assert httpx.post(url + advance, json={"seconds": 1}, timeout=30).status_code == 401
        wrong = {"X-Emulator-Control-Token": "nope"}
        assert (
            httpx.post(url + advance, json={"seconds": 1}, headers=wrong, timeout=30).status_code
            == 403
        )
        right = {"X-Emulator-Control-Token": "env-token"}
        assert (
            httpx.post(url + advance, json={"seconds": 1}, headers=right, timeout=30).status_code
            == 200
        )
        assert httpx.get(f"{url}/_emulator/health", timeout=30).status_code == 200  # always public
    flagged = [*args, "--data-dir", str(tmp_path / "b"), "--control-token", "flag-token"]
    with running(flagged) as (url, _):
        right = {"X-Emulator-Control-Token": "flag-token"}
        assert httpx.post(url + advance, json={"seconds": 1}, timeout=30).status_code == 401
        assert (
            httpx.post(url + advance, json={"seconds": 1}, headers=right, timeout=30).status_code
            == 200
        )


def test_a_control_token_with_a_space_stops_the_cli_with_one_line(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "klavis_emulator", "--port", "0", "--data-dir", str(tmp_path)]
    done = subprocess.run(
        [*args, "--control-token", "two words"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("klavis-emulator: error:")
    assert "two words" not in line
