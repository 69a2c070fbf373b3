"""Command line: ``python -m klavis_emulator`` / ``klavis-emulator``."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import uvicorn

from ._app import create_app, default_data_dir
from ._bwrap import ConfinementError
from ._faults import FAULT_MODES
from ._middleware import CONTROL_TOKEN_HEADER
from ._server import bind_socket, url_for_socket

__all__ = ["RedactSignedUrls", "build_parser", "main"]


CONTROL_TOKEN_ENV = "KLAVIS_EMULATOR_CONTROL_TOKEN"  # noqa: S105 - a variable's name


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0.0 and 1.0")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``klavis-emulator`` command."""
    parser = argparse.ArgumentParser(
        prog="klavis-emulator",
        description="Serve a local emulator of the Klavis /local-sandbox API.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (127.0.0.1)")
    parser.add_argument(
        "--port", type=_non_negative_int, default=8000, help="port (0: any free port)"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help=f"folder for the emulator's state (default: {default_data_dir()})",
    )
    parser.add_argument(
        "--latency-ms", type=_non_negative_int, default=0, help="delay added to each request"
    )
    parser.add_argument(
        "--fault-rate",
        type=_fraction,
        default=0.0,
        help="fraction of API/storage requests answering 429/500/502/503",
    )
    parser.add_argument(
        "--fault-mode",
        choices=FAULT_MODES,
        default="mixed",
        help="before: nothing happens; after: the operation happens, the answer is lost",
    )
    parser.add_argument("--fault-seed", type=int, default=None, help="seed of fault injection")
    parser.add_argument(
        "--signed-url-minutes",
        type=_positive_int,
        default=30,
        help="validity of signed URLs (30)",
    )
    parser.add_argument(
        "--max-upload-mb", type=_positive_float, default=1024, help="upload size cap (1024)"
    )
    parser.add_argument(
        "--api-key",
        action="append",
        dest="api_keys",
        default=None,
        metavar="KEY",
        help="accept only this API key (repeatable; default: accept any)",
    )
    parser.add_argument(
        "--public-url", default=None, help="base URL to write into signed and MCP URLs"
    )
    parser.add_argument(
        "--execution-timeout",
        type=_positive_float,
        default=3600.0,
        metavar="SECONDS",
        help="time limit of one execution, requirements install included (3600)",
    )
    parser.add_argument(
        "--allow-network",
        action="store_true",
        help="give confined executions network access (default: none under bubblewrap)",
    )
    parser.add_argument(
        "--no-confine",
        dest="confine_executions",
        action="store_false",
        help=(
            "run executions and MCP servers unconfined, as this user with its network and "
            "files (default: confined with bubblewrap where it is installed; if it is "
            "installed but fails, the emulator does not start)"
        ),
    )
    parser.add_argument(  # the flag's older name
        "--no-bwrap", dest="confine_executions", action="store_false", help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--control-token",
        default=os.environ.get(CONTROL_TOKEN_ENV) or None,
        metavar="TOKEN",
        help=(
            f"require this token (header {CONTROL_TOKEN_HEADER}) on the /_emulator control "
            "routes, from any address; without it they answer loopback clients only "
            f"(default: ${CONTROL_TOKEN_ENV}, which keeps the token out of the process list)"
        ),
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn log level (info)",
    )
    return parser


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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the emulator in the foreground until interrupted.

    ``klavis-emulator setup [--force] [-q]`` installs the MCP servers it hosts instead
    (``npm ci`` for the filesystem server, a venv for the terminal server); ``check`` reports.
    """
    rest = list(sys.argv[1:] if argv is None else argv)
    if rest and rest[0] in ("setup", "check"):
        from ._mcp import main as mcp_main

        return mcp_main(rest)
    args = build_parser().parse_args(rest)
    try:
        app = create_app(
            data_dir=args.data_dir,
            latency_ms=args.latency_ms,
            fault_rate=args.fault_rate,
            fault_mode=args.fault_mode,
            fault_seed=args.fault_seed,
            signed_url_minutes=args.signed_url_minutes,
            max_upload_mb=args.max_upload_mb,
            api_keys=args.api_keys,
            public_url=args.public_url,
            execution_timeout=args.execution_timeout,
            allow_network=args.allow_network,
            confine_executions=args.confine_executions,
            control_token=args.control_token,
        )
    except (ConfinementError, ValueError) as exc:  # one line: the reason and the way out
        print(f"klavis-emulator: error: {exc}", file=sys.stderr, flush=True)
        return 1
    sock = bind_socket(args.host, args.port)
    # SIGTERM before uvicorn takes over the signals (or re-raised by uvicorn after its
    # graceful shutdown) ends the process with status 0.
    signal.signal(signal.SIGTERM, _exit_quietly)
    print(f"Klavis emulator listening on {url_for_socket(sock)}", flush=True)
    print(f"Data folder: {app.state.emulator.data_dir}", flush=True)
    confinement = app.state.emulator.run_settings.confinement
    if confinement.enabled:
        print(f"Executions and MCP servers: {confinement.reason}", flush=True)
    else:
        print(f"Executions and MCP servers: NOT confined ({confinement.reason})", flush=True)
    if args.control_token:
        print("Control routes (/_emulator/...): need the control token", flush=True)
    elif not confinement.enabled or args.allow_network:
        print(
            "Control routes (/_emulator/...): loopback clients only, which includes executions' "
            "main.py (unconfined or --allow-network): set --control-token to close them",
            flush=True,
        )
    else:
        print("Control routes (/_emulator/...): loopback clients only", flush=True)
    config = uvicorn.Config(app, log_level=args.log_level, lifespan="on")
    logging.getLogger("uvicorn.access").addFilter(RedactSignedUrls())
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
