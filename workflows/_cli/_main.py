"""Running a command: its errors and signals turned into one line and an exit status.

A closed stdout (``klavis-sandbox list | head -1``) ends the command quietly with 141, the status
of any program killed by SIGPIPE (``yes | head -1``), rather than 0: the output was cut short, and
``set -o pipefail`` scripts should see that as they do for other tools. The recipe is the Python
documentation's (signal "SIGPIPE" notes): catch :class:`BrokenPipeError`, point stdout at
``/dev/null`` so the interpreter's final flush stays silent, exit. ``acquire`` whose id cannot be
written releases the sandbox it acquired: nobody could know its id.

SIGTERM (``timeout``, ``docker stop``, a cancelled CI job) ends a command as Ctrl-C does: it
raises in the main thread (:func:`workflows._ownership.unwind_on_sigterm`), so what the command
was writing (``dump``'s temporary folder beside the destination) is removed, then it says
``terminated`` and exits 143 (128 + 15, what a shell reports for a process SIGTERM ended).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TextIO

from workflows._errors import KlavisError
from workflows._ownership import Terminated, unwind_on_sigterm

from ._output import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    Output,
    UsageError,
)
from ._parser import command_of, parser


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run the CLI and return its exit status (see :data:`EXIT_CODES`).

    ``out`` and ``err`` default to ``sys.stdout`` and ``sys.stderr``; a usage error raises
    ``SystemExit(2)`` as argparse does.
    """
    args = parser().parse_args(argv)
    ui = Output(out or sys.stdout, err or sys.stderr, quiet=getattr(args, "quiet", False))
    unwind_on_sigterm()
    with _warnings_quieted(ui.quiet):
        return _run(args, ui)


@contextlib.contextmanager
def _warnings_quieted(quiet: bool) -> Iterator[None]:
    """With ``-q``, the library's and the emulator's log warnings are silenced too (errors
    still show), for the command's run only: ``main`` may run inside a longer process."""
    loggers = [logging.getLogger(name) for name in ("workflows", "klavis_emulator")]
    levels = [logger.level for logger in loggers]
    if quiet:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _run(args: argparse.Namespace, ui: Output) -> int:
    try:
        code: int = command_of(args)(args, ui)
    except BrokenPipeError:
        return EXIT_BROKEN_PIPE
    except UsageError as exc:
        ui.problem(f"{args.command}: {exc}")
        return EXIT_USAGE
    except KlavisError as exc:
        ui.problem(f"error: {exc}")
        return EXIT_ERROR
    except OSError as exc:  # a file the user named: one line too, never a traceback
        ui.problem(f"error: {exc}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        ui.problem("interrupted")
        return EXIT_INTERRUPTED
    except Terminated as exc:  # SIGTERM (143), or SIGHUP during exec's wait (129)
        ui.problem("terminated" if exc.code == EXIT_TERMINATED else "hung up")
        return exc.code if isinstance(exc.code, int) else EXIT_TERMINATED
    return code


def main_entry() -> None:
    """Console-script entry point: :func:`main`, and a quiet end when stdout is closed."""
    code = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = EXIT_BROKEN_PIPE
    if code == EXIT_BROKEN_PIPE:
        # Python flushes stdout again at exit: point it at /dev/null so that stays silent
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    sys.exit(code)
