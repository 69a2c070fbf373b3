"""The one command line, ``klavis-emulator`` (or ``python -m klavis_emulator``).

``klavis-emulator [options]`` serves the emulator in the foreground (each option sets the
:class:`~klavis_emulator.EmulatorConfig` field of its name); ``klavis-emulator setup
[--only NAMES] [--force] [-q]`` installs the MCP servers it hosts (all, or the named ones)
and ``klavis-emulator check`` prints a table of every server of the contract: installed,
version, confined, or why it is not available; then which of the commands a sandbox's
processes run by name (``python``, ``node``, ``git``...) they would not find. The table goes
to stdout whole, problems included (``check 2>/dev/null`` still shows them); the exit code
says whether a hosted server is unavailable, with one summary line on stderr. ``--help``
lists the three commands and every option's default.

Without the emulator extra it prints one line naming it and exits with code 1 (see ``_extra``).
"""

from __future__ import annotations

from ._extra import exit_if_missing

exit_if_missing()  # before the imports that need the extra

import argparse
import dataclasses
import functools
import importlib.metadata
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Final

import uvicorn

from ._app import create_app
from ._benchmark_data import parse_benchmark_data
from ._config import EmulatorConfig, default_data_dir, field_default, field_problem
from ._exec import SANDBOX_COMMANDS, ConfinementError, decide_confinement, missing_commands
from ._faults import FAULT_MODES
from ._mcp import (
    CATALOG,
    HOSTED_SERVERS,
    McpSetupError,
    McpToolPaths,
    NotHosted,
    default_tools_dir,
    find_tools,
    installed_version,
    missing_python,
    setup_mcp_servers,
)
from ._mcp.setup import TOOLS_DIR_ENV
from ._middleware import CONTROL_TOKEN_HEADER
from ._owner import add_owner_options, check_owner_options, run_owned, say, watch_pipe
from ._server import bind_socket, url_for_socket

__all__ = ["RedactSignedUrls", "build_parser", "config_from_args", "main"]


CONTROL_TOKEN_ENV = "KLAVIS_EMULATOR_CONTROL_TOKEN"  # noqa: S105 - a variable's name


SERVE_PORT: Final = 8000
"""The command's port; :class:`EmulatorServer` (in a thread, for tests) takes any free one."""
SERVE_LOG_LEVEL: Final = "info"
"""The command's uvicorn log level; :class:`EmulatorServer` logs warnings only."""
_LOG_LEVELS: Final = ("critical", "error", "warning", "info", "debug")
DEFAULT: Final = " (default: %(default)s)"
"""Appended to an option's help: argparse puts the option's default in its place."""

COMMANDS_EPILOG: Final = """\
commands:
  klavis-emulator [options]   serve the emulator in the foreground (options above)
  klavis-emulator setup       install the MCP servers it hosts (all, or --only NAMES)
  klavis-emulator check       print a table of every MCP server: installed, version, confined
                              (or why not available); exit code 1 if a hosted one is missing
Run `klavis-emulator setup --help` or `klavis-emulator check --help` for their options."""


def _checked(name: str, convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse ``type`` for the config field ``name``: ``convert``, then the config's
    own check of that field (an error names the option, as for any bad value)."""

    def parse(text: str) -> Any:
        value = convert(text)
        problem = field_problem(name, value)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return value

    parse.__name__ = convert.__name__  # argparse's "invalid float value: 'x'"
    return parse


def _field_option(
    parser: argparse.ArgumentParser,
    flag: str,
    convert: Callable[[str], Any],
    help: str,
    **extra: Any,
) -> None:
    """Add ``flag`` for the config field it names (``--max-upload-mb``: ``max_upload_mb``),
    parsed with ``convert`` and checked as the config checks it, with the config's default."""
    name = flag.removeprefix("--").replace("-", "_")
    parser.add_argument(
        flag, type=_checked(name, convert), default=field_default(name), help=help, **extra
    )


def _switch(
    parser: argparse.ArgumentParser,
    flag: str,
    name: str,
    help: str,
) -> None:
    """Add ``flag`` turning the boolean config field ``name`` from its default to the other
    value (``--no-confine``: ``confine_executions=False``)."""
    default = field_default(name)
    action = "store_false" if default else "store_true"
    parser.add_argument(flag, dest=name, action=action, default=default, help=help)


def _benchmark_pack(text: str) -> tuple[str, Path]:
    try:
        return parse_benchmark_data(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _version() -> str:
    try:
        return importlib.metadata.version("klavis-sandbox")
    except importlib.metadata.PackageNotFoundError:  # run from sources, not installed
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``klavis-emulator`` command (its defaults, but the port and
    the log level, are :class:`EmulatorConfig`'s)."""
    default = field_default
    parser = argparse.ArgumentParser(
        prog="klavis-emulator",
        usage="%(prog)s [options] | setup [...] | check [...]",
        description="Serve a local emulator of the Klavis /local-sandbox API in the foreground\n"
        "(the options below), or install (setup) or report (check) the MCP servers it hosts.",
        epilog=COMMANDS_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.add_argument("--host", default=default("host"), help="interface to bind" + DEFAULT)
    parser.add_argument(
        "--port",
        type=_checked("port", int),
        default=SERVE_PORT,
        help="port; 0 picks a free one" + DEFAULT,
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=default("data_dir"),
        help=f"folder for the emulator's state (default: {default_data_dir()})",
    )
    option = functools.partial(_field_option, parser)
    option("--latency-ms", int, "delay added to each request" + DEFAULT)
    option(
        "--fault-rate",
        float,
        "fraction of API/storage requests answering 429/500/502/503" + DEFAULT,
    )
    parser.add_argument(
        "--fault-mode",
        choices=FAULT_MODES,
        default=default("fault_mode"),
        help="before: nothing happens; after: the operation happens, the answer is lost" + DEFAULT,
    )
    parser.add_argument(
        "--fault-seed",
        type=int,
        default=default("fault_seed"),
        help="seed of fault injection (default: none, a different run each time)",
    )
    option(
        "--acquire-delay",
        float,
        "time an acquire takes before it answers, as a VM start does on the service" + DEFAULT,
        metavar="SECONDS",
    )
    switch = functools.partial(_switch, parser)
    switch(
        "--no-mcp-at-acquire",
        "mcp_at_acquire",
        "start a sandbox's MCP servers on their first request (default: at acquire)",
    )
    option(
        "--mcp-spares",
        int,
        "spare MCP server sets per sandbox shape kept started for resets (0: none)" + DEFAULT,
        metavar="N",
    )
    option("--signed-url-minutes", int, "validity of signed URLs" + DEFAULT, metavar="MINUTES")
    option("--max-upload-mb", float, "upload size cap" + DEFAULT, metavar="MB")
    parser.add_argument(
        "--api-key",
        action="append",
        dest="api_keys",
        default=default("api_keys"),
        metavar="KEY",
        help="accept only this API key (repeatable; default: accept any)",
    )
    parser.add_argument(
        "--public-url",
        default=default("public_url"),
        help="base URL to write into signed and MCP URLs (default: the URL it listens on)",
    )
    option(
        "--execution-timeout",
        float,
        "time limit of one execution, requirements install included" + DEFAULT,
        metavar="SECONDS",
    )
    switch(
        "--allow-network",
        "allow_network",
        "give confined executions network access (default: none under bubblewrap)",
    )
    switch(
        "--no-confine",
        "confine_executions",
        "run executions and MCP servers unconfined, as this user with its network and "
        "files (default: confined with bubblewrap where it is installed; if it is "
        "installed but fails, the emulator does not start)",
    )
    parser.add_argument(  # the flag's older name
        "--no-bwrap", dest="confine_executions", action="store_false", help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--control-token",
        default=os.environ.get(CONTROL_TOKEN_ENV) or default("control_token"),
        metavar="TOKEN",
        help=(
            f"require this token (header {CONTROL_TOKEN_HEADER}) on the /_emulator control "
            "routes, from any address; without it they answer loopback clients only "
            f"(default: ${CONTROL_TOKEN_ENV}, which keeps the token out of the process list)"
        ),
    )
    parser.add_argument(
        "--benchmark-data",
        action="append",
        type=_benchmark_pack,
        metavar="NAME=PATH",
        help=(
            "a sandbox acquired with benchmark NAME (MCP_Atlas, Toolathlon, MCP_Mark) starts "
            "with a copy of the folder PATH, and the data documents of PATH/.server-data/ "
            "(repeatable; default: none, every sandbox starts empty)"
        ),
    )
    add_owner_options(parser)
    parser.add_argument(
        "--log-level",
        default=SERVE_LOG_LEVEL,
        choices=_LOG_LEVELS,
        help="uvicorn log level" + DEFAULT,
    )
    return parser


def config_from_args(args: argparse.Namespace) -> EmulatorConfig:
    """The :class:`EmulatorConfig` that parsed arguments describe (options are named after
    its fields; fields without an option keep their defaults)."""
    given = dict(vars(args))
    given["benchmark_data"] = dict(given.get("benchmark_data") or ())
    names = [item.name for item in dataclasses.fields(EmulatorConfig) if item.name in given]
    return EmulatorConfig(**{name: given[name] for name in names})


class RedactSignedUrls(logging.Filter):
    """Hide the query string (expiry and signature) of signed URLs in uvicorn's access log."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the logged path of requests whose query carries a signature."""
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            path, _, query = args[2].partition("?")
            if "signature=" in query:
                record.args = (*args[:2], f"{path}?<signed>", *args[3:])
        return True


def _exit_quietly(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def _check_rows(
    tools: McpToolPaths, confinement: str, servers: Sequence[str]
) -> list[tuple[str, str, str, str]]:
    """``check``'s table: server, installed, version, and how it runs or why it cannot."""
    rows = [("server", "installed", "version", "confined (or why not available)")]
    for name in servers:
        install = CATALOG[name].install
        if isinstance(install, NotHosted):
            rows.append((name, "-", "-", f"not hosted: {install.reason}"))
            continue
        problem = tools.missing(name)
        version = installed_version(name, tools) or "-"
        if problem is not None and missing_python(name) is not None:
            # an optional interpreter this machine lacks (pdf-tools: Python 3.12): said, but
            # neither setup nor check fails for it (CI machines may have only the emulator's)
            rows.append((name, "n/a", version, problem))
        elif problem is not None:
            rows.append((name, "no", version, problem))
        elif CATALOG[name].network and confinement.startswith("yes"):
            rows.append((name, "yes", version, f"{confinement}, sharing the network"))
        else:
            rows.append((name, "yes", version, confinement))
    return rows


_COMMAND_SOURCES: Final = {
    "python": "Python",
    "python3": "Python",
    "pip": "pip (in the Python the emulator's venv was made from)",
    "pip3": "pip (in the Python the emulator's venv was made from)",
    "node": "Node.js",
    "npm": "npm",
    "npx": "npm",
    "git": "git",
    "bash": "bash",
    "sh": "a POSIX shell",
}
"""What provides each command of ``SANDBOX_COMMANDS`` (named when it is missing)."""


def _commands_line(missing: Sequence[str], *, confined: bool) -> tuple[str, bool]:
    """``check``'s line about the commands a sandbox's processes run by name (code-runner's
    ``python``, ``node``...): the line, and whether it reports missing ones."""
    where = "inside the confinement" if confined else "on PATH, unconfined"
    if not missing:
        return f"commands ({where}): {' '.join(SANDBOX_COMMANDS)}", False
    sources = dict.fromkeys(_COMMAND_SOURCES.get(name, name) for name in missing)
    return (
        f"commands missing ({where}): {' '.join(missing)}; install {', '.join(sources)} "
        "(code-runner, terminal and desktop-commander run them by name)",
        True,
    )


_TOOLS_DESCRIPTIONS: Final = {
    "setup": "Install the MCP servers the emulator hosts (their npm trees and venvs, in the "
    "tools folder), then print the table that check prints.",
    "check": "Print a table of every MCP server of the contract on stdout: installed, version, "
    "confined (or why it is not available), then the commands a sandbox's processes would not "
    "find. Exit code 1 if a hosted server is not available (a summary line on stderr names "
    "them); rows marked n/a (an optional interpreter this machine lacks) and missing commands "
    "are reported without failing.",
}


def _tools_parser(command: str) -> argparse.ArgumentParser:
    """The parser of ``klavis-emulator setup`` or ``check`` (``command``)."""
    parser = argparse.ArgumentParser(
        prog=f"klavis-emulator {command}", description=_TOOLS_DESCRIPTIONS[command]
    )
    parser.add_argument(
        "--tools-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where the npm trees and venvs go "
        + (
            f"(default: ${TOOLS_DIR_ENV}, here {default_tools_dir()})"
            if os.environ.get(TOOLS_DIR_ENV)
            else f"(default: {default_tools_dir()}; ${TOOLS_DIR_ENV} changes it)"
        ),
    )
    parser.add_argument(
        "--only",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=None,
        metavar="NAMES",
        help=(
            f"comma-separated servers to {'install' if command == 'setup' else 'check'} "
            f"(default: every {'hosted ' if command == 'setup' else ''}one"
            + (f": {','.join(HOSTED_SERVERS)})" if command == "setup" else ")")
        ),
    )
    if command == "setup":
        parser.add_argument(
            "--force", action="store_true", help="reinstall everything (default: only what lacks)"
        )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print only the table's problem rows (default: the whole table)",
    )
    return parser


def _print_table(
    rows: Sequence[tuple[str, str, str, str]], commands: str, lacking: bool, *, quiet: bool
) -> list[str]:
    """Print ``check``'s table and its commands line on stdout, problems included (``quiet``:
    those only); the servers that are not available (the rows marked "no")."""
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    for index, row in enumerate(rows):
        problem = row[1] in ("no", "n/a")
        if quiet and not problem and index > 0:
            continue
        if quiet and index == 0 and not any(other[1] in ("no", "n/a") for other in rows[1:]):
            continue
        cells = [row[column].ljust(widths[column]) for column in range(3)]
        print("  ".join([*cells, row[3]]), flush=True)
    if lacking or not quiet:
        print(commands, flush=True)
    return [row[0] for row in rows[1:] if row[1] == "no"]


def _tools_command(argv: Sequence[str]) -> int:
    """``klavis-emulator setup|check``: install or report the MCP servers the emulator hosts.

    The table goes to stdout whole, problems included, so ``check 2>/dev/null`` still shows
    them; the exit code says whether a hosted server is unavailable, and stderr has one
    summary line then (and setup's or confinement's errors)."""
    command, rest = argv[0], argv[1:]
    parser = _tools_parser(command)
    args = parser.parse_args(rest)
    for name in args.only or ():
        if name not in CATALOG:
            parser.error(f"--only: {name!r} is not an MCP server ({', '.join(CATALOG)})")

    def say(line: str) -> None:
        if not args.quiet:
            print(line, flush=True)

    if command == "setup":
        started = time.monotonic()
        try:
            tools = setup_mcp_servers(
                tools_dir=args.tools_dir, only=args.only, force=args.force, log=say
            )
        except McpSetupError as exc:
            print(f"setup failed: {exc}", file=sys.stderr)
            return 1
        say(f"MCP servers ready ({time.monotonic() - started:.1f} s).")
        servers = list(args.only or HOSTED_SERVERS)
    else:
        tools = find_tools(args.tools_dir)
        servers = list(args.only or CATALOG)
    try:
        confinement = decide_confinement()
    except ConfinementError as exc:
        print(f"confinement: {exc}", file=sys.stderr)
        return 1
    how = (
        f"yes ({confinement.bwrap}, workspace at /data)"
        if confinement.enabled
        else f"no: {confinement.reason}"
    )
    rows = _check_rows(tools, how, servers)
    try:  # reported, not failed: the servers start without them
        missing = missing_commands(confinement.bwrap if confinement.enabled else None)
    except ConfinementError as exc:
        print(f"commands: {exc}", file=sys.stderr, flush=True)
        return 1
    line, lacking = _commands_line(missing, confined=confinement.enabled)
    unavailable = _print_table(rows, line, lacking, quiet=args.quiet)
    if unavailable:
        print(
            f"klavis-emulator {command}: {len(unavailable)} of {len(rows) - 1} servers not "
            f"available: {', '.join(unavailable)} (why: the table on stdout)",
            file=sys.stderr,
            flush=True,
        )
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the emulator in the foreground until interrupted.

    ``klavis-emulator setup [--only NAMES] [--force] [-q]`` installs the MCP servers it
    hosts instead (``npm ci`` for the npm servers, a venv each for terminal, excel and word);
    ``check [--only NAMES]`` prints a table on stdout: server, installed, version, confined
    (or why it is not available), and the commands a sandbox's processes would not find
    (exit code 1 if a hosted server is not available).
    """
    rest = list(sys.argv[1:] if argv is None else argv)
    if rest and rest[0] in ("setup", "check"):
        return _tools_command(rest)
    parser = build_parser()
    args = parser.parse_args(rest)
    check_owner_options(parser, args)
    # SIGTERM from here on (or re-raised by uvicorn after its graceful shutdown) ends the
    # process with status 0, through the cleanup of run_owned
    signal.signal(signal.SIGTERM, _exit_quietly)
    return run_owned(args, _serve)


def _serve(args: argparse.Namespace) -> int:
    """Serve in the foreground until SIGTERM, Ctrl-C, or the end of ``--exit-with-fd``."""
    app_holder: list[Any] = []

    def owner_gone() -> None:
        say(f"klavis-emulator: the pipe at file descriptor {args.exit_with_fd} ended: stopping")
        mcp = getattr(app_holder[0].state, "mcp", None) if app_holder else None
        if mcp is not None:  # its streams would hold uvicorn's graceful shutdown
            mcp.shutdown(wait=10)
        os.kill(os.getpid(), signal.SIGTERM)

    if args.exit_with_fd is not None:
        watch_pipe(args.exit_with_fd, owner_gone)
    try:
        config = config_from_args(args)
        app = create_app(config)
    except (ConfinementError, ValueError) as exc:  # one line: the reason and the way out
        print(f"klavis-emulator: error: {exc}", file=sys.stderr, flush=True)
        return 1
    app_holder.append(app)
    sock = bind_socket(config.host, config.port)
    print(f"Klavis emulator listening on {url_for_socket(sock)}", flush=True)
    print(f"Data folder: {app.state.emulator.data_dir}", flush=True)
    confinement = app.state.emulator.run_settings.confinement
    if confinement.enabled:
        print(f"Executions and MCP servers: {confinement.reason}", flush=True)
    else:
        print(f"Executions and MCP servers: NOT confined ({confinement.reason})", flush=True)
    if config.control_token:
        print("Control routes (/_emulator/...): need the control token", flush=True)
    elif not confinement.enabled or config.allow_network:
        print(
            "Control routes (/_emulator/...): loopback clients only, which includes executions' "
            "main.py (unconfined or --allow-network): set --control-token to close them",
            flush=True,
        )
    else:
        print("Control routes (/_emulator/...): loopback clients only", flush=True)
    # a connection held open (an MCP stream) cannot keep a stopping emulator, and its
    # sandboxes' processes, alive for longer than this
    serving = uvicorn.Config(
        app, log_level=config.log_level, lifespan="on", timeout_graceful_shutdown=10
    )
    logging.getLogger("uvicorn.access").addFilter(RedactSignedUrls())
    server = uvicorn.Server(serving)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
