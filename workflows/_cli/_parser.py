"""The command line's grammar: every command, its arguments and help, and the command each runs."""

from __future__ import annotations

import argparse
import math
import textwrap
from collections.abc import Callable

from workflows._config import API_KEY_ENV, BASE_URL_ENV
from workflows._models import SERVER_NAMES

from ._demo import cmd_demo
from ._output import CAPABILITY_NOTE, EXIT_CODES, Output
from ._release import cmd_reap, cmd_release
from ._sandboxes import cmd_acquire, cmd_exec, cmd_get, cmd_list
from ._workspace import cmd_dump, cmd_seed

#: What a command is: it reads its arguments, writes through the output, returns its status.
Command = Callable[[argparse.Namespace, Output], int]


def _seconds(text: str) -> float:
    """argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text!r}")
    return value


NEVER = ("never", "none")
"""The words ``--ttl`` takes for the library's ``ttl_seconds=None`` (no automatic release)."""


def _ttl(text: str) -> int | None:
    """argparse type of ``--ttl``: whole seconds (0: never, deprecated), or ``never``/``none``."""
    if text.strip().lower() in NEVER:
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds or 'never': {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 60..86400 seconds or 'never': {text!r}")
    return value


def _epilog() -> str:
    codes = "\n".join(
        textwrap.fill(meaning, 78, initial_indent=f"  {code:<4} ", subsequent_indent=" " * 7)
        for code, meaning in EXIT_CODES.items()
    )
    prose = textwrap.fill(
        "Data goes to stdout, messages to stderr (-q silences them); --json prints the data as "
        f"JSON. {CAPABILITY_NOTE}.",
        78,
    )
    return f"{prose}\n\nexit status:\n{codes}"


def _command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    run: Command,
    parents: list[argparse.ArgumentParser],
    summary: str,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """Add the command ``name``, which runs ``run``; ``summary`` is its line in ``--help``."""
    command = sub.add_parser(name, parents=parents, help=summary, description=description)
    command.set_defaults(run=run)
    return command


def _add_progress(command: argparse.ArgumentParser) -> None:
    command.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)


def parser() -> argparse.ArgumentParser:
    """The ``klavis-sandbox`` parser: its namespace's ``run`` is the command to run."""
    from workflows import __version__

    top = argparse.ArgumentParser(
        prog="klavis-sandbox",
        description="Acquire, seed, dump and release Klavis local sandboxes. "
        f"The API key comes from {API_KEY_ENV} or a .env file.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    top.add_argument(
        "--base-url", help=f"API base URL (default: ${BASE_URL_ENV} or https://api.klavis.ai)"
    )
    quiet = argparse.ArgumentParser(add_help=False)
    quiet.add_argument(
        "-q", "--quiet", action="store_true", help="no messages on stderr (errors still show)"
    )
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print the data as JSON")
    both = [quiet, as_json]
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = _command(
        sub,
        "acquire",
        cmd_acquire,
        both,
        "acquire a sandbox and print its id (it stays held)",
        "Acquire a sandbox, print its id on stdout (--json: the whole record, MCP URLs "
        "included) and leave it held until `release` or its TTL. "
        f"{CAPABILITY_NOTE}.",
    )
    p.add_argument(
        "servers", nargs="+", help=f"server names, or ALL; one of: {', '.join(SERVER_NAMES)}"
    )
    p.add_argument(
        "--ttl",
        type=_ttl,
        default=7200,
        metavar="SECONDS|never",
        help="seconds until the service releases it (60..86400), or 'never' as the library's "
        "ttl_seconds=None (0 still means never but is deprecated) (default: %(default)s)",
    )
    p.add_argument("--benchmark", default=None)

    _command(
        sub,
        "list",
        cmd_list,
        both,
        "list this key's active sandboxes",
        f"List this key's active sandboxes (--json: with MCP URLs). {CAPABILITY_NOTE}.",
    )

    p = _command(
        sub,
        "get",
        cmd_get,
        both,
        "show one sandbox",
        f"Show one sandbox and its servers' MCP URLs. {CAPABILITY_NOTE}.",
    )
    p.add_argument("id")

    p = _command(
        sub,
        "seed",
        cmd_seed,
        both,
        "upload a local folder into a sandbox's workspace",
        "Upload a local folder into a sandbox's workspace (files of the same name are "
        "replaced, others stay). .gitignore and .sandboxignore rules apply.",
    )
    p.add_argument("id")
    p.add_argument("path", help="the folder to upload")
    p.add_argument("--ignore", action="append", default=[], help="gitignore pattern")
    p.add_argument("--no-gitignore", action="store_true", help="do not read .gitignore")
    p.add_argument(
        "--preserve-mtime",
        action="store_true",
        help="keep the files' modification times (default: one fixed time, so the same files "
        "give the same archive)",
    )
    _add_progress(p)

    p = _command(
        sub,
        "dump",
        cmd_dump,
        both,
        "download a sandbox's workspace to a folder, .tar.gz or .tar",
        "Download a sandbox's workspace: into a new (or empty) folder, or as a .tar.gz/.tgz "
        "(as the service sends it) or .tar file. Other archive formats (.zip...) are refused. "
        "An existing path is refused unless --force, which replaces it: a folder's current "
        "contents are deleted, not merged.",
    )
    p.add_argument("id")
    p.add_argument("-o", "--output", required=True, help="a folder, or a .tar.gz/.tgz/.tar file")
    p.add_argument(
        "--force", action="store_true", help="replace an existing file or non-empty folder"
    )
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="give up if the whole download takes longer (default: no limit, but a "
        "download that stalls is ended)",
    )
    _add_progress(p)

    p = _command(
        sub,
        "exec",
        cmd_exec,
        [quiet],
        "run a Python script in a sandbox, streaming its output",
        "Run a Python script in a sandbox; its output goes to stdout. Exit status 1 when the "
        "script fails.",
    )
    p.add_argument("id")
    p.add_argument("script", help="the main.py to run")
    p.add_argument("-r", "--requirement", action="append", default=[], help="pip requirement")
    p.add_argument("--name", default=None, help="execution name (default: generated)")

    p = _command(
        sub,
        "release",
        cmd_release,
        both,
        "release sandboxes by id, or --all",
        "Release sandboxes. An id the service does not know is an error (exit 1) unless "
        "--ignore-not-found; one acquired here whose TTL ran out is not.",
    )
    p.add_argument("ids", nargs="*")
    p.add_argument("--all", action="store_true", help="every sandbox this key lists")
    p.add_argument("--ignore-not-found", action="store_true", help="an unknown id is not an error")

    p = _command(sub, "reap", cmd_reap, both, "release what the local ledger says is still held")
    p.add_argument("--dry-run", action="store_true", help="only print the ids it would release")
    p.add_argument(
        "--include-live",
        action="store_true",
        help="also release sandboxes whose acquiring process is still running",
    )

    p = _command(sub, "demo", cmd_demo, [], "walk the lifecycle (embedded emulator without a key)")
    p.add_argument("--count", type=int, default=4, help="sandboxes for the bulk step")
    return top
