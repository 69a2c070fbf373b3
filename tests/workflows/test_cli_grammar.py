"""The CLI explains itself (issue 25, point 6): every command has a description and every option
a help string (walked, so a new command cannot regress), the global options work after the
command as gh and kubectl take them, and ``--ttl`` says "never" as the library's None does.
No service is needed: nothing here gets past parsing."""

from __future__ import annotations

import argparse
import io
import subprocess
import sys

import pytest

from workflows._cli import EXIT_CODES, main
from workflows._cli._parser import parser
from workflows._models import BENCHMARKS


def _commands() -> dict[str, argparse.ArgumentParser]:
    [sub] = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_command_and_option_explains_itself() -> None:
    commands = _commands()
    assert {"acquire", "list", "get", "seed", "dump", "exec", "release", "reap", "demo"} <= set(
        commands
    )
    for name, command in [("klavis-sandbox", parser()), *commands.items()]:
        assert command.description, f"{name} --help has no description"
        for action in command._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            where = f"{name} {'/'.join(action.option_strings) or action.dest}"
            assert action.help, f"{where} has no help"
            assert action.help != argparse.SUPPRESS, f"{where} is hidden"
        command.format_help()  # every %(default)s and the like expands


def test_help_shows_defaults_descriptions_and_exit_statuses() -> None:
    commands = _commands()
    acquire = commands["acquire"].format_help()
    assert "(default: 7200)" in " ".join(acquire.split())
    assert "never" in acquire
    for benchmark in BENCHMARKS:
        assert benchmark in acquire
    reap = " ".join(commands["reap"].format_help().split())
    top = parser().format_help()
    assert "--forget" in reap
    assert "exit status: 0 nothing failed" in reap
    assert "--base-url and -q go before or after the command" in " ".join(top.split())
    assert "--dry-run" in reap
    for code in EXIT_CODES:
        assert f"  {code} " in top


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["list"], None),
        (["--base-url", "http://a", "list"], "http://a"),
        (["list", "--base-url", "http://a"], "http://a"),
        (["--base-url", "http://a", "list", "--base-url", "http://b"], "http://b"),
        (["reap", "--dry-run", "--base-url", "http://a"], "http://a"),
        (["acquire", "git", "--base-url", "http://a"], "http://a"),
        (["demo", "--base-url", "http://a"], "http://a"),
        (["logs", "ID/NAME", "--base-url", "http://a"], "http://a"),
    ],
)
def test_base_url_before_or_after_the_command_and_the_later_wins(
    argv: list[str], expected: str | None
) -> None:
    assert parser().parse_args(argv).base_url == expected


@pytest.mark.parametrize(
    ("argv", "quiet"),
    [
        (["list"], False),
        (["-q", "list"], True),
        (["list", "-q"], True),
        (["demo"], False),
        (["-q", "demo"], True),
        (["demo", "-q"], True),  # refused before: "unrecognized arguments: -q"
        (["exec", "ID", "main.py", "-q"], True),
        (["-q", "logs", "ID/NAME"], True),
    ],
)
def test_quiet_before_or_after_the_command(argv: list[str], quiet: bool) -> None:
    assert parser().parse_args(argv).quiet is quiet


@pytest.mark.parametrize(
    ("given", "ttl"),
    [("never", None), ("NONE", None), ("0", None), ("600", 600), ("86400", 86400)],
)
def test_ttl_never_is_the_librarys_none(given: str, ttl: int | None) -> None:
    assert parser().parse_args(["acquire", "git", "--ttl", given]).ttl == ttl
    assert parser().parse_args(["acquire", "git"]).ttl == 7200


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["acquire", "git", "--ttl", "59"], "must be 60..86400 seconds, or 'never'"),
        (["acquire", "git", "--ttl", "forever"], "nor 'never'"),
        (["acquire", "git", "--benchmark", "nope"], "invalid choice: 'nope'"),
        (["list", "--base-url"], "expected one argument"),
    ],
)
def test_bad_options_are_usage_errors_before_anything_is_sent(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv, out=io.StringIO(), err=io.StringIO())
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def test_every_command_help_exits_0_in_a_shell() -> None:
    for name in _commands():
        done = subprocess.run(
            [sys.executable, "-m", "workflows", name, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (done.returncode, done.stderr) == (0, ""), name
        assert done.stdout.startswith(f"usage: klavis-sandbox {name}"), name


def test_help_and_parsing_import_no_command_module() -> None:
    """``--help`` (the top one and a command's) builds the parser alone: the command modules,
    the HTTP layer and the flows are imported by the command that runs, not before."""
    probe = (
        "import sys\n"
        "from workflows._cli import main\n"
        "for argv in (['--help'], ['list', '--help'], ['exec', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = ('workflows._cli._', 'workflows._flows', 'workflows._execution', 'httpx')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = done.stderr.strip().splitlines()[-1]
    assert loaded == str(
        sorted(["workflows._cli._main", "workflows._cli._output", "workflows._cli._parser"])
    )
