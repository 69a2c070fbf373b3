"""``python -m klavis_emulator`` / ``klavis-emulator``: starts on port 0 and prints its URL."""

from __future__ import annotations

import re
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
def running(args: list[str]) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Start the command, read its first line, yield the URL; terminate on exit."""
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:  # pragma: no cover - only if shutdown hangs
            process.kill()
            process.wait()


def test_module_starts_on_port_zero_and_serves(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "klavis_emulator", "--port", "0", "--data-dir", str(tmp_path)]
    with running([*args, "--log-level", "warning"]) as (url, process):
        assert httpx.get(f"{url}/_emulator/health").status_code == 200
        response = httpx.post(
            f"{url}/local-sandbox",
            json={"server_names": ["git"]},
            headers={"Authorization": "Bearer cli-test"},
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
        faults = httpx.get(f"{url}/_emulator/faults").json()
        assert faults["rate"] == 1.0
        assert faults["mode"] == "before"
        assert faults["latency_ms"] == 1
        unknown = httpx.get(f"{url}/local-sandbox", headers={"Authorization": "Bearer three"})
        assert unknown.status_code in (429, 500, 502, 503)  # faults come first
        httpx.post(f"{url}/_emulator/faults", json={"rate": 0})
        assert (
            httpx.get(f"{url}/local-sandbox", headers={"Authorization": "Bearer three"}).status_code
            == 401
        )
        known = httpx.get(f"{url}/local-sandbox", headers={"Authorization": "Bearer two"})
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
    with running(args) as (url, process):
        headers = {"Authorization": "Bearer log-test"}
        sandbox = httpx.post(
            f"{url}/local-sandbox", json={"server_names": ["git"]}, headers=headers
        )
        sandbox_id = sandbox.json()["local_sandbox_id"]
        dump = httpx.get(f"{url}/local-sandbox/{sandbox_id}/dump", headers=headers).json()
        assert httpx.get(dump["download_url"]).status_code == 200
        signature = dump["download_url"].split("signature=")[1]
    assert process.stdout is not None
    assert process.stderr is not None
    log = process.stdout.read() + process.stderr.read()  # uvicorn's access log is on stdout
    assert "/_storage/download/" in log
    assert "?<signed>" in log
    assert signature not in log
    assert "log-test" not in log


def test_execution_flags() -> None:
    args = build_parser().parse_args(
        ["--execution-timeout", "2.5", "--allow-network", "--no-bwrap"]
    )
    assert args.execution_timeout == 2.5
    assert args.allow_network is True
    assert args.confine_executions is False
    defaults = build_parser().parse_args([])
    assert defaults.execution_timeout == 3600
    assert defaults.allow_network is False
    assert defaults.confine_executions is True
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--execution-timeout", "0"])


def test_startup_says_whether_executions_are_confined(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "klavis_emulator", "--port=0", f"--data-dir={tmp_path}"]
    with running([*args, "--no-bwrap", "--log-level=warning"]) as (_, process):
        assert process.stdout is not None
        assert process.stdout.readline().startswith("Data folder: ")
        assert process.stdout.readline().rstrip("\n") == (
            "Executions: NOT confined (confinement was turned off (--no-bwrap))"
        )
