"""``klavis-emulator --help`` names its commands and every default; ``check`` prints its whole
table on stdout (problems included) and reports them by its exit code."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from klavis_emulator.__main__ import _tools_parser, build_parser


def _emulator(*args: str, stderr: int = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "klavis_emulator", *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        timeout=300,
        check=False,
    )


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options a user sets: not help, version or the hidden ones."""
    return [
        action
        for action in parser._actions
        if action.option_strings
        and action.help != argparse.SUPPRESS
        and not isinstance(action, (argparse._HelpAction, argparse._VersionAction))
    ]


@pytest.mark.parametrize("command", ["serve", "setup", "check"])
def test_every_option_shows_its_default(command: str) -> None:
    parser = build_parser() if command == "serve" else _tools_parser(command)
    shown = " ".join(parser.format_help().split())
    for action in _options(parser):
        assert action.help is not None
        assert "default" in action.help, action.option_strings
        assert "%(default)s" not in shown  # every one was filled in


def test_help_shows_the_values_of_the_defaults() -> None:
    shown = " ".join(build_parser().format_help().split())
    for text in (
        "--port PORT port; 0 picks a free one (default: 8000)",
        "--host HOST interface to bind (default: 127.0.0.1)",
        "uvicorn log level (default: info)",
        "validity of signed URLs (default: 30)",
        "(default: at acquire)",
    ):
        assert text in shown, text
    check = " ".join(_tools_parser("check").format_help().split())
    assert "--tools-dir DIR where the npm trees and venvs go" in check
    assert "(default: " in check.split("--tools-dir DIR", 1)[1]


def test_help_lists_the_setup_and_check_commands() -> None:
    done = _emulator("--help")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("usage: klavis-emulator [options] | setup [...] | check [...]")
    assert "klavis-emulator setup       install the MCP servers it hosts" in done.stdout
    assert "klavis-emulator check       print a table of every MCP server" in done.stdout
    for command in ("setup", "check"):
        helped = _emulator(command, "--help")
        assert helped.returncode == 0, helped.stderr
        assert helped.stdout.startswith(f"usage: klavis-emulator {command} "), helped.stdout
    assert "--force" in _emulator("setup", "--help").stdout
    assert "--force" not in _emulator("check", "--help").stdout


def test_check_puts_its_whole_table_on_stdout_and_fails_for_a_missing_server(
    tmp_path: Path,
) -> None:
    """``2>/dev/null`` (stderr to /dev/null, really) still shows the problem row; the exit
    code reports it; stderr has only the one summary line."""
    empty = tmp_path / "tools"  # the venv servers are not installed there
    args = ("check", "--only", "terminal,git", "--tools-dir", str(empty))
    quiet = _emulator(*args, stderr=subprocess.DEVNULL)
    assert quiet.returncode == 1
    rows = {line.split()[0]: line.split() for line in quiet.stdout.splitlines()}
    assert list(rows) == ["server", "terminal", "git", "commands"]
    assert rows["terminal"][1] == "no"
    assert rows["git"][1] == "yes"
    both = _emulator(*args)
    assert (both.returncode, both.stdout) == (1, quiet.stdout)
    assert both.stderr == (
        "klavis-emulator check: 1 of 2 servers not available: terminal (why: the table on stdout)\n"
    )


def test_check_quiet_prints_only_the_problem_rows(tmp_path: Path) -> None:
    args = ("check", "-q", "--only", "terminal,git", "--tools-dir", str(tmp_path / "tools"))
    done = _emulator(*args)
    assert done.returncode == 1
    assert [line.split()[:2] for line in done.stdout.splitlines()] == [
        ["server", "installed"],
        ["terminal", "no"],
    ]
    ok = _emulator("check", "-q", "--only", "git")
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "", "")


def test_check_without_problems_exits_0_with_nothing_on_stderr() -> None:
    done = _emulator("check", "--only", "git")
    assert (done.returncode, done.stderr) == (0, "")
    assert [line.split()[0] for line in done.stdout.splitlines()] == ["server", "git", "commands"]
