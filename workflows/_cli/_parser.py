"""The command line's grammar: every command, its arguments and help, and the command each runs."""

from __future__ import annotations

import argparse
import importlib
import math
import sys
import textwrap
from collections.abc import Callable
from typing import Any

from workflows._config import API_KEY_ENV, BASE_URL_ENV
from workflows._models import BENCHMARKS, MAX_TTL_SECONDS, MIN_TTL_SECONDS, SERVER_NAMES

from ._output import CAPABILITY_NOTE, EXIT_CODES, EXIT_NO_STATUS, Output

#: What a command is: it reads its arguments, writes through the output, returns its status.
Command = Callable[[argparse.Namespace, Output], int]


def command_of(args: argparse.Namespace) -> Command:
    """The function that runs the parsed command: ``args.run`` names it (``"module.function"``
    of this package), and its module is imported now, the chosen command's alone. Importing
    every command module to build the parser took 428 modules and 0.79 s at load 10 before the
    first line of ``--help``; the parser itself needs none of them."""
    module, _, function = str(args.run).rpartition(".")
    found: Command = getattr(importlib.import_module(f"{__package__}.{module}"), function)
    return found


def _seconds(text: str) -> float:
    """argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text!r}")
    return value


NEVER = ("never", "none", "0")
"""What ``--ttl`` reads as "no TTL" (the library's ``ttl_seconds=None``); 0 is the older
spelling, kept so scripts written for it still run."""


def _ttl(text: str) -> int | None:
    """argparse type: a TTL in whole seconds the service accepts, or never (None)."""
    if text.strip().lower() in NEVER:
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a whole number of seconds, nor 'never': {text!r}"
        ) from None
    if not MIN_TTL_SECONDS <= value <= MAX_TTL_SECONDS:
        raise argparse.ArgumentTypeError(
            f"must be {MIN_TTL_SECONDS}..{MAX_TTL_SECONDS} seconds, or 'never': {text!r}"
        )
    return value


class _Help(argparse.RawDescriptionHelpFormatter):
    """Help that keeps the paragraphs of a description and an epilog (filled by
    :func:`_paragraphs`) and shows each option's default where it has one worth showing (not
    None, False or empty), unless its help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        shown = default not in (None, False, argparse.SUPPRESS) and default != []
        if shown and "default" not in text and (action.option_strings or action.nargs == "?"):
            text += " (default: %(default)s)"
        return text


class _Version(argparse.Action):
    """``--version``, as argparse's own ``version`` action prints it, with the version looked
    up when asked for: the distribution's metadata costs ``importlib.metadata`` (19 ms), which
    neither ``--help`` nor a command needs."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "show program's version number and exit")
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from workflows import __version__

        parser._print_message(f"{parser.prog} {__version__}\n", sys.stdout)
        parser.exit()


def _paragraphs(text: str) -> str:
    """``text``'s paragraphs (apart by a blank line) filled to 78 columns each."""
    paragraphs = text.split("\n\n")
    return "\n\n".join(textwrap.fill(p, 78, break_on_hyphens=False) for p in paragraphs)


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
    options = textwrap.fill(
        "--base-url and -q go before or after the command (klavis-sandbox list --base-url URL); "
        "given in both places, the later one wins.",
        78,
        break_on_hyphens=False,
    )
    return f"{prose}\n\n{options}\n\nexit status:\n{codes}"


def _command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    run: str,
    parents: list[argparse.ArgumentParser],
    summary: str,
    description: str | None = None,
    epilog: str | None = None,
) -> argparse.ArgumentParser:
    """Add the command ``name``, which runs ``run`` (``"module.function"`` of this package,
    imported only when the command runs: :func:`command_of`); ``summary`` is its line in
    ``--help``.

    Every command also takes the global options after its name (``klavis-sandbox list
    --base-url URL``, ``klavis-sandbox demo -q``), as gh and kubectl do."""
    command = sub.add_parser(
        name,
        parents=[_globals(), *parents],
        help=summary,
        description=_paragraphs(description or f"{summary[:1].upper()}{summary[1:]}."),
        epilog=epilog,
        formatter_class=_Help,
    )
    command.set_defaults(run=run)
    return command


def _globals(*, top: bool = False) -> argparse.ArgumentParser:
    """The global options, for the top-level parser (``top``: with their defaults) or for a
    command. A command's copy defaults to ``SUPPRESS``: argparse copies every attribute of a
    command's namespace over the top-level one, so a default there would undo
    ``--base-url URL list``; given in both places, the later one (the command's) wins."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--base-url",
        metavar="URL",
        default=None if top else argparse.SUPPRESS,
        help=f"API base URL (default: ${BASE_URL_ENV} or https://api.klavis.ai)",
    )
    return options


def _quiet(*, top: bool = False) -> argparse.ArgumentParser:
    """``-q``: global, after the command's name too, as :func:`_globals`."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="no messages on stderr (errors still show)",
    )
    return options


def _add_packing(command: argparse.ArgumentParser) -> None:
    """The options of packing a folder (``seed``, ``template``)."""
    command.add_argument("--ignore", action="append", default=[], help="gitignore pattern")
    command.add_argument("--no-gitignore", action="store_true", help="do not read .gitignore")
    command.add_argument(
        "--preserve-mtime",
        action="store_true",
        help="keep the files' modification times (default: one fixed time, so the same files "
        "give the same archive)",
    )


def _add_progress(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar (default: when stderr is a terminal, and not with -q)",
    )


def parser() -> argparse.ArgumentParser:
    """The ``klavis-sandbox`` parser: its namespace's ``run`` is the command to run."""
    top = argparse.ArgumentParser(
        prog="klavis-sandbox",
        description=_paragraphs(
            "Acquire, seed, dump and release Klavis local sandboxes. "
            f"The API key comes from {API_KEY_ENV} or a .env file."
        ),
        epilog=_epilog(),
        formatter_class=_Help,
        parents=[_globals(top=True), _quiet(top=True)],
    )
    top.add_argument("--version", action=_Version, nargs=0, default=argparse.SUPPRESS)
    quiet = _quiet()
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print the data as JSON")
    both = [quiet, as_json]
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = _command(
        sub,
        "acquire",
        "_sandboxes.cmd_acquire",
        both,
        "acquire a sandbox and print its id (it stays held)",
        "Acquire a sandbox, print its id on stdout (--json: the whole record, MCP URLs "
        "included) and leave it held until `release` or its TTL: it is detached from this "
        "command, and `reap` keeps it (reap --include-detached releases it). "
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
        help=f"seconds until the service releases it ({MIN_TTL_SECONDS}..{MAX_TTL_SECONDS}), "
        "or never (also: none, or 0 as before) for no TTL: release it yourself",
    )
    p.add_argument(
        "--benchmark",
        default=None,
        choices=BENCHMARKS,
        help="start the sandbox with this benchmark's initial data (default: none)",
    )

    _command(
        sub,
        "list",
        "_sandboxes.cmd_list",
        both,
        "list this key's active sandboxes",
        f"List this key's active sandboxes (--json: with MCP URLs). {CAPABILITY_NOTE}.",
    )

    p = _command(
        sub,
        "get",
        "_sandboxes.cmd_get",
        both,
        "show one sandbox",
        f"Show one sandbox and its servers' MCP URLs. {CAPABILITY_NOTE}.",
    )
    p.add_argument("id", help="the sandbox's id")

    p = _command(
        sub,
        "seed",
        "_workspace.cmd_seed",
        both,
        "upload a local folder (or a template) into sandboxes' workspaces",
        "Upload a local folder into a sandbox's workspace (files of the same name are "
        "replaced, others stay). .gitignore and .sandboxignore rules apply.\n\n"
        "Several ids: the folder is packed once, as a template kept in the template cache, "
        "and that archive is uploaded to each (klavis-sandbox seed ID1 ID2 ID3 ./task). "
        "SOURCE may also be a template's digest (sha256:..., printed by `klavis-sandbox "
        "template`): its archive is checked against the digest and uploaded as it is. A "
        "sandbox that fails is named on stderr and the others are still seeded (exit 1). "
        "--json prints one record for one id, a list for several.",
    )
    p.add_argument("ids", nargs="+", metavar="ID", help="the ids of the sandboxes to seed")
    p.add_argument(
        "source",
        metavar="SOURCE",
        help="the folder to upload, or a template's digest (sha256:...); a folder named "
        "sha256:... is ./sha256:...",
    )
    _add_packing(p)
    _add_progress(p)

    p = _command(
        sub,
        "template",
        "_workspace.cmd_template",
        both,
        "pack a folder once into the template cache and print its digest",
        "Pack a local folder once, as seed would (.gitignore and .sandboxignore rules "
        "apply), into the per-user template cache ($KLAVIS_SANDBOX_CACHE_DIR/templates, else "
        "the user's cache folder; least recently used removed past "
        "$KLAVIS_SANDBOX_TEMPLATE_CACHE_BYTES, 2 GiB by default), and print its digest on "
        "stdout (--json: digest, files, size, path). Then `klavis-sandbox seed ID... DIGEST` "
        "uploads that archive to each sandbox without packing again; in Python, "
        "SeedTemplate.load(DIGEST). The same files give the same digest.",
    )
    p.add_argument("path", help="the folder to pack")
    _add_packing(p)
    _add_progress(p)

    p = _command(
        sub,
        "dump",
        "_workspace.cmd_dump",
        both,
        "download a sandbox's workspace to a folder, .tar.gz or .tar",
        "Download a sandbox's workspace: into a new (or empty) folder, or as a .tar.gz/.tgz "
        "(as the service sends it) or .tar file. Other archive formats (.zip...) are refused. "
        "An existing path is refused unless --force, which replaces it: a folder's current "
        "contents are deleted, not merged.",
    )
    p.add_argument("id", help="the sandbox's id")
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
        "_exec.cmd_exec",
        [quiet],
        "run a Python script (or a folder's main.py) in a sandbox, streaming its output",
        "Run a Python script in a sandbox. SCRIPT is a .py file or a folder holding main.py "
        "(all of it is sent, .gitignore and .sandboxignore honoured, .git left out; its "
        "requirements.txt is installed).\n\n"
        "stdout carries the script's stdout only; pip's install lines, the service's notes "
        "and the script's stderr go to stderr (-q keeps the script's stderr alone). The "
        "script runs under a small launcher sent as main.py (the script travels as "
        "_klavis_main.py beside it and gets its name back before it runs) that keeps its "
        "two streams apart in the execution's one log and records its exit status, which "
        "the service does not report.\n\n"
        "exec exits with the script's own status (128 + N when signal N killed it); "
        f"{EXIT_NO_STATUS} when the execution failed with no status known (pip failed, a time "
        "limit), with a line saying so; 1 or 2 for exec's own errors, before the script "
        "runs.\n\n"
        "It prints the execution's id (SANDBOX_ID/NAME) on stderr when it starts: "
        "`klavis-sandbox logs ID` reads the output again. SIGTERM, SIGHUP or Ctrl-C stop "
        "the wait, not the script: it keeps running on the sandbox until it ends or the "
        "sandbox is released (exec says so). To stop a shell script and every exec it "
        "started, signal its whole process group (kill -- -PGID).",
    )
    p.add_argument("id", help="the sandbox's id")
    p.add_argument("script", help="the script to run as main.py, or a folder holding main.py")
    p.add_argument(
        "-r",
        "--requirement",
        action="append",
        default=[],
        metavar="FILE",
        help="install from this requirements file first, as pip -r does (nested -r files "
        "are read relative to it); repeatable",
    )
    p.add_argument(
        "--with",
        dest="with_requirements",
        action="append",
        default=[],
        metavar="SPEC",
        help="install this requirement first, e.g. --with 'httpx==0.28.1'; repeatable",
    )
    p.add_argument(
        "--file",
        dest="files",
        action="append",
        default=[],
        metavar="PATH",
        help="also send this file or folder, beside main.py under its own name "
        "(a folder's .gitignore honoured); repeatable",
    )
    p.add_argument("--name", default=None, help="execution name (default: generated)")

    p = _command(
        sub,
        "logs",
        "_exec.cmd_logs",
        [quiet],
        "print an execution's output again, by the id exec printed",
        "Print an execution's output: EXECUTION_ID is SANDBOX_ID/NAME, as exec prints it "
        "when it starts. For a script exec started, its stdout goes to stdout and the rest "
        "to stderr, and the exit status is the script's, as exec's; the log of an execution "
        "started otherwise (sb.execute) goes whole to stdout. It waits for a running "
        "execution to end unless --no-follow.",
    )
    p.add_argument("execution_id", metavar="EXECUTION_ID", help="SANDBOX_ID/NAME")
    p.add_argument(
        "--follow",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="wait for a running execution's output until it ends",
    )

    p = _command(
        sub,
        "release",
        "_release.cmd_release",
        both,
        "release sandboxes by id, or --all",
        "Release sandboxes. An id the service does not know is an error (exit 1) unless "
        "--ignore-not-found; one acquired here whose TTL ran out is not.",
    )
    p.add_argument("ids", nargs="*", metavar="ID", help="the ids of the sandboxes to release")
    p.add_argument("--all", action="store_true", help="every sandbox this key lists")
    p.add_argument("--ignore-not-found", action="store_true", help="an unknown id is not an error")

    p = _command(
        sub,
        "reap",
        "_release.cmd_reap",
        both,
        "release what the local ledger says is still held",
        "Release what the local ledger says this key still holds at the service (--base-url): "
        "sandboxes acquired by processes that have ended and never released, and those that "
        "acquires which ended without an answer left behind.\n\n"
        "Sandboxes acquired to outlive their command (klavis-sandbox acquire; in Python, "
        "acquire(..., detach=True)) are not leftovers: they are listed apart (detached, "
        "expires in ...) and kept until their TTL ends or they are released by id, unless "
        "--include-detached.\n\n"
        "The ledger records each sandbox with the base URL it was acquired from. One recorded "
        "for another URL is released here too when this service lists it (an emulator "
        "restarted on another port over the same data folder). The rest is reported apart, "
        "per base URL, and kept: another service that answers (reap --base-url URL releases "
        "it there), or one that does not. --forget drops the entries of a service proven gone "
        "(connection refused, no such host), never those of a service that answers. The key "
        "is sent to this service only; the others are probed without it.",
        "exit status:\n"
        "  0    nothing failed (what other services hold, kept, does not count)\n"
        "  1    a release failed, or this service did not answer and its entries were kept\n"
        "  and the other statuses of klavis-sandbox --help",
    )
    p.add_argument("--dry-run", action="store_true", help="only print the ids it would release")
    p.add_argument(
        "--forget",
        "--forget-unreachable",
        action="store_true",
        help="drop from the ledger what it records for services that are gone (connection "
        "refused, or no such host); never what a service that answers holds",
    )
    p.add_argument(
        "--include-live",
        action="store_true",
        help="also release sandboxes whose acquiring process is still running",
    )
    p.add_argument(
        "--include-detached",
        action="store_true",
        help="also release sandboxes acquired to outlive their command (klavis-sandbox "
        "acquire, detach=True) whose TTL has not ended",
    )

    p = _command(
        sub,
        "demo",
        "_demo.cmd_demo",
        [quiet],
        "walk the lifecycle (embedded emulator without a key)",
        "Walk a sandbox's lifecycle in a few steps: acquire, seed, one MCP tool call, dump "
        "and diff, bulk acquire and release. Against the service when a key is set "
        f"({API_KEY_ENV}; --base-url or ${BASE_URL_ENV} for its URL), else against an "
        "embedded emulator (the emulator extra), else against a klavis-emulator found on "
        "PATH (a pipx or uv tool install). -q prints nothing unless a step fails.",
    )
    p.add_argument("--count", type=int, default=4, help="how many sandboxes the bulk step acquires")
    return top
