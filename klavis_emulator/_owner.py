"""Ending the emulator with the process that started it: ``--exit-with-fd``,
``--exit-with-parent`` and ``--remove-data-dir`` of the command.

A harness that starts the emulator as a child (``workflows.EmulatorProcess``) and is then
SIGKILLed, or SIGTERMed (Python's default for it is to die at once, running no finalizer),
left the emulator under PID 1 for good, with its temporary data folder and its sandboxes'
MCP servers. Two links fix that, both ending the emulator as SIGTERM does (uvicorn's graceful
shutdown, then the app's: every sandbox's MCP servers and executions ended), and then
``--remove-data-dir`` removes the data folder:

* **A pipe, everywhere.** The owner keeps the write end of a pipe and nobody else does; the
  emulator gets the read end (``--exit-with-fd N``) and a thread of it reads until the end of
  the pipe, which comes when every write end is closed: when the owner stops it, or dies of
  anything, SIGKILL included. It works on every POSIX system, and through a wrapper command
  that passes its descriptors on (a shell script does; one that closes them, as ``sudo``
  does, leaves a variable naming no pipe, which is then ignored).
* **A parent-death signal, on Linux** (``--exit-with-parent PID``): ``PR_SET_PDEATHSIG``
  asks the kernel for SIGTERM when the parent goes, set by the emulator itself at its start
  rather than by the owner between ``fork`` and ``exec`` (a ``preexec_fn`` is unsafe in a
  process with threads, and costs ``subprocess`` its ``vfork`` path). The signal is tied to
  the parent *thread* that forked, not its process: the owner asks for it only when it
  starts the emulator from its main thread (whose end is the process's). The parent may be
  gone before the signal is set: then the emulator's parent is no longer ``PID``, and if
  ``PID`` is gone too it stops at once. (When the parent is a wrapper, not ``PID``, only the
  pipe links them.) It is the pipe's backup: it needs no thread of the emulator to run.

Rejected: polling ``getppid()`` (a delay, and a wrapper in between defeats it), a new process
group killed by the owner (nothing runs in an owner killed by SIGKILL), and an environment
variable read by the app (the links belong to the command that runs it, not to its config).
Everything here runs in the emulator's process; the emulator never imports ``workflows``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shutil
import signal
import stat
import sys
import threading
from collections.abc import Callable
from typing import Final

__all__ = [
    "EXIT_WITH_FD_ENV",
    "EXIT_WITH_PARENT_ENV",
    "REMOVE_DATA_DIR_ENV",
    "add_owner_options",
    "check_owner_options",
    "exit_with_parent",
    "run_owned",
    "say",
    "watch_pipe",
]

EXIT_WITH_FD_ENV: Final = "KLAVIS_EMULATOR_EXIT_WITH_FD"
"""The default of ``--exit-with-fd`` (environment variables reach an older emulator harmlessly,
where an option it does not know would stop it)."""
EXIT_WITH_PARENT_ENV: Final = "KLAVIS_EMULATOR_EXIT_WITH_PARENT"
"""The default of ``--exit-with-parent``."""
REMOVE_DATA_DIR_ENV: Final = "KLAVIS_EMULATOR_REMOVE_DATA_DIR"
"""``1``: the default of ``--remove-data-dir``."""

_PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>


def say(line: str) -> None:
    """Print ``line`` on stderr, if anyone still reads it (a dead owner's pipe does not)."""
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def exit_with_parent(pid: int) -> bool:
    """Ask the kernel (Linux) for SIGTERM when the parent ends, the parent being ``pid``;
    False when ``pid`` is already gone, so the caller stops at once."""
    if os.getppid() != pid:  # a wrapper in between, or the parent already gone
        return _alive(pid)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            say(f"klavis-emulator: no parent-death signal ({os.strerror(ctypes.get_errno())})")
    # the parent may have died before the signal was set: it would never come
    return os.getppid() == pid or _alive(pid)


def watch_pipe(fd: int, on_end: Callable[[], None]) -> threading.Thread:
    """Read the pipe ``fd`` in a daemon thread until its end (every write end closed: the
    owner stopped or died), then call ``on_end``. The descriptor is not passed on to the
    processes the emulator starts."""
    os.set_inheritable(fd, False)

    def run() -> None:
        try:
            while os.read(fd, 4096):
                pass  # the owner writes nothing; whatever comes is not a message
        except OSError:
            pass
        finally:
            os.close(fd)
        on_end()

    thread = threading.Thread(target=run, name="klavis-emulator-owner", daemon=True)
    thread.start()
    return thread


def _number(text: str) -> int:
    """A file descriptor or a process id: a whole number >= 0 (an argparse ``type``)."""
    try:
        number = int(text)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"not a number >= 0: {text!r}")
    return number


def add_owner_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--exit-with-fd``, ``--exit-with-parent`` and ``--remove-data-dir`` to the
    command's parser (their variables are read by :func:`check_owner_options`)."""
    parser.add_argument(
        "--exit-with-fd",
        type=_number,
        default=None,
        metavar="N",
        help=(
            "stop (as on SIGTERM) when the pipe at file descriptor N reaches its end: the "
            "process holding its write end closed it or died "
            f"(default: ${EXIT_WITH_FD_ENV} if it names a pipe, else none)"
        ),
    )
    parser.add_argument(
        "--exit-with-parent",
        type=_number,
        default=None,
        metavar="PID",
        help=(
            "on Linux, stop (SIGTERM) when the parent process PID ends; do not start if it "
            f"already has (default: ${EXIT_WITH_PARENT_ENV}, else none)"
        ),
    )
    parser.add_argument(
        "--remove-data-dir",
        action="store_true",
        default=False,
        help=(
            "remove the --data-dir folder when the emulator stops: a temporary one "
            f"(default: keep it; ${REMOVE_DATA_DIR_ENV}=1 sets it)"
        ),
    )


def _is_pipe(fd: int) -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        return False


def check_owner_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Fill the options from their variables, refuse options that cannot work
    (``parser.error``), and take the variables out of the environment, which the processes
    the emulator starts inherit.

    A descriptor given as an option must be a pipe. One given by the variable and not a pipe
    is ignored, saying so: a wrapper command between the owner and the emulator (``sudo``
    closes descriptors) may have closed it, or opened something else under its number, and
    the emulator still starts, linked by the parent-death signal alone, if any."""
    fd_text = os.environ.pop(EXIT_WITH_FD_ENV, "").strip()
    parent_text = os.environ.pop(EXIT_WITH_PARENT_ENV, "").strip()
    remove = os.environ.pop(REMOVE_DATA_DIR_ENV, "").strip() == "1"
    if args.exit_with_fd is not None:
        if not _is_pipe(args.exit_with_fd):
            parser.error(f"--exit-with-fd: {args.exit_with_fd} is not an open pipe")
    elif fd_text:
        if fd_text.isdigit() and _is_pipe(int(fd_text)):
            args.exit_with_fd = int(fd_text)
        else:
            say(f"klavis-emulator: ${EXIT_WITH_FD_ENV}={fd_text} is not an open pipe: ignored")
    if args.exit_with_parent is None and parent_text.isdigit():
        args.exit_with_parent = int(parent_text)
    args.remove_data_dir = args.remove_data_dir or remove
    if args.remove_data_dir and args.data_dir is None:
        parser.error("--remove-data-dir needs --data-dir (it never removes the default one)")


def run_owned(args: argparse.Namespace, serve: Callable[[argparse.Namespace], int]) -> int:
    """Run ``serve(args)`` linked to the parent as ``--exit-with-parent`` asks (not at all
    when it is already gone), then remove the data folder if ``--remove-data-dir`` asks,
    however it ended (SIGTERM, through the handler that raises SystemExit, included)."""
    try:
        if args.exit_with_parent is not None and not exit_with_parent(args.exit_with_parent):
            say(f"klavis-emulator: its parent (pid {args.exit_with_parent}) is gone: not starting")
            return 1
        return serve(args)
    finally:
        if args.remove_data_dir:
            shutil.rmtree(args.data_dir, ignore_errors=True)
