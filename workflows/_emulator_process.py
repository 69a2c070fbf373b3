"""Start the emulator from an environment of its own: :class:`EmulatorProcess`.

Why a process in another environment: the emulator hosts its MCP servers with ``mcp`` 2.x and
``fastmcp``, while benchmark harnesses pin ``mcp`` 1.x (MCP-Atlas and MCPMark lock 1.12.1).
``pip install 'klavis-sandbox[emulator,mcp]' mcp==1.12.1`` is therefore a resolver conflict,
and no single venv holds both. The harness's venv gets the library only
(``pip install 'klavis-sandbox[mcp]' mcp==1.12.1 'pydantic<2.12'`` resolves; the pydantic pin
because 1.12.1 imports a private pydantic name that 2.12 removed), and the emulator is installed
as a tool (``pipx install 'klavis-sandbox[emulator]'`` or ``uv tool install
'klavis-sandbox[emulator]'``, then ``klavis-emulator setup``) or lives in any other venv::

    from workflows import EmulatorProcess, LocalSandbox

    with EmulatorProcess() as emulator:          # klavis-emulator --port 0, found on PATH
        with LocalSandbox.acquire(["git"], base_url=emulator.base_url, api_key="any") as sb:
            ...

Which ``klavis-emulator`` runs: the ``command`` argument (``["/path/to/venv/bin/python", "-m",
"klavis_emulator"]`` names an interpreter), else ``$KLAVIS_EMULATOR_COMMAND`` (split like a shell
line), else the first ``klavis-emulator`` on ``PATH`` that can serve. Installing the library
also installs a ``klavis-emulator`` script into the harness's venv, which without the emulator
extra only prints that the extra is missing; an activated venv puts it first on ``PATH``. So
the one in this interpreter's own scripts folder is skipped when the extra's modules are not
importable here, and the search goes on to the tool install.

How it runs: ``klavis-emulator --host 127.0.0.1 --port 0 --data-dir DIR --log-level warning``
(a temporary data folder unless one is given, removed after), in this process group, so a
Ctrl-C at a terminal reaches it too. The command prints its URL once its socket listens
(requests wait in the backlog until it serves); :meth:`EmulatorProcess.start` reads that line
and returns, and a thread keeps draining the output (its last lines are kept for errors).
Leaving the ``with`` block, an exception, a ``KeyboardInterrupt`` while it starts, or the
object being collected or the interpreter exiting all end it: SIGTERM, then SIGKILL if it has
not stopped after ``stop_timeout`` seconds.

It also dies with its owner when nothing of the owner runs any more (SIGKILL, or SIGTERM,
whose default ends Python at once): the emulator gets the read end of a pipe whose only write
end this process keeps (``$KLAVIS_EMULATOR_EXIT_WITH_FD``), and stops when the pipe ends, as on
SIGTERM (every sandbox's MCP servers and executions ended), then removes its temporary data
folder (``$KLAVIS_EMULATOR_REMOVE_DATA_DIR``); started from the main thread, it also asks the
kernel for a parent-death signal (``$KLAVIS_EMULATOR_EXIT_WITH_PARENT``, Linux), which is tied
to the thread that started it: from another thread, whose end is not the owner's, the pipe
alone links them. (A process forked from the owner without ``exec``, as multiprocessing's
``fork`` start method does, holds the write end too: the emulator lives until it ends as well.)
Environment variables, not options, so that an older emulator ignores them rather than
refusing to start; the emulator takes them out of the environment of what it starts. The
rules, on the emulator's side: ``klavis_emulator/_owner.py``.

Rejected: importing the emulator (the library never does: its dependencies are the conflict),
a private venv that the library would make and install the emulator into (pipx and uv tool
already do that, with upgrades and uninstall the user controls, and without the library
reaching an index at run time),
a fixed port (collisions between runs), a port file or polling ``/_emulator/health`` (the
printed URL is the readiness signal the command already gives), and a new session for the
child (a Ctrl-C would then reach only the parent: the child would outlive a parent that hangs).
"""

from __future__ import annotations

import importlib.util
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import threading
import weakref
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Final

from ._errors import EmulatorStartError, InvalidInputError

__all__ = ["COMMAND_ENV", "LISTENING", "OWNER_ENV", "EmulatorProcess", "find_emulator_command"]

COMMAND_ENV: Final = "KLAVIS_EMULATOR_COMMAND"
"""The environment variable naming the command that runs the emulator (a shell-like line)."""

LISTENING: Final = "Klavis emulator listening on "
"""The start of the line ``klavis-emulator`` prints once it listens; the URL follows."""

OWNER_ENV: Final = (
    "KLAVIS_EMULATOR_EXIT_WITH_FD",
    "KLAVIS_EMULATOR_EXIT_WITH_PARENT",
    "KLAVIS_EMULATOR_REMOVE_DATA_DIR",
)
"""The variables that link the emulator to this process (``klavis_emulator._owner``'s
``EXIT_WITH_FD_ENV``, ``EXIT_WITH_PARENT_ENV`` and ``REMOVE_DATA_DIR_ENV``, which the library
cannot import; a test keeps them in step)."""

SERVING_MODULES: Final = ("fastapi", "uvicorn", "fastmcp")
"""Modules of the ``emulator`` extra: without them here, this venv's ``klavis-emulator`` only
says the extra is missing (a subset of ``klavis_emulator._extra.EXTRA_MODULES``, which the
library cannot import; a test keeps the two in step)."""

INSTALL_HINT: Final = (
    "install the emulator in an environment of its own: pipx install 'klavis-sandbox[emulator]' "
    "(or uv tool install 'klavis-sandbox[emulator]'), then klavis-emulator setup; or pass "
    f"command=[...] or set ${COMMAND_ENV}"
)

_TAIL_LINES: Final = 200


def _serves_here() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in SERVING_MODULES)


def _own_scripts() -> set[str]:
    return {os.path.realpath(sysconfig.get_path("scripts"))}


def find_emulator_command(path: str | None = None) -> list[str] | None:
    """The command that starts the emulator when :class:`EmulatorProcess` is given none:
    ``$KLAVIS_EMULATOR_COMMAND`` split like a shell line, else the first ``klavis-emulator``
    on ``path`` (default ``$PATH``) that can serve, else None.

    This interpreter's own ``klavis-emulator`` is skipped when the emulator extra is not
    installed here (it would only say so).
    """
    given = os.environ.get(COMMAND_ENV, "").strip()
    if given:
        return shlex.split(given)
    skip = set() if _serves_here() else _own_scripts()
    search = os.environ.get("PATH", os.defpath) if path is None else path
    for folder in search.split(os.pathsep):
        if not folder or os.path.realpath(folder) in skip:
            continue
        found = shutil.which("klavis-emulator", path=folder)
        if found is not None:
            return [found]
    return None


def _stop(
    proc: subprocess.Popen[str], reader: threading.Thread, timeout: float, lifeline: BinaryIO
) -> None:
    """End ``proc``: SIGTERM, then SIGKILL after ``timeout`` seconds (a no-op once ended); then
    close the write end of its ``lifeline`` pipe (whatever else still watches it stops too),
    and let ``reader`` take in its last lines (the pipe ends with the process, unless a process
    it started still holds it: then the daemon thread is left to it)."""
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    finally:
        lifeline.close()
    reader.join(timeout=timeout)


def _drain(proc: subprocess.Popen[str], tail: deque[str], found: queue.Queue[str | None]) -> None:
    """Keep the last lines of ``proc``'s output in ``tail``; put the URL in ``found`` once it
    is printed, and None at the end of the output."""
    assert proc.stdout is not None
    waiting = True
    with proc.stdout:
        for line in proc.stdout:
            tail.append(line)
            if waiting and line.startswith(LISTENING):
                found.put(line[len(LISTENING) :].strip())
                waiting = False
    found.put(None)


class EmulatorProcess:
    """The emulator as a child process started from another environment; a context manager.

    >>> with EmulatorProcess() as emulator:  # doctest: +SKIP
    ...     with LocalSandbox.acquire(["git"], base_url=emulator.base_url, api_key="k") as sb:
    ...         sb.seed({"a.txt": "hi"})

    Args:
        command: the program and its first arguments, e.g. ``["klavis-emulator"]`` or
            ``[python, "-m", "klavis_emulator"]``; default :func:`find_emulator_command`.
        args: more options of ``klavis-emulator`` (``["--no-mcp-at-acquire"]``,
            ``["--api-key", key]``...); host, port, data folder and log level are set here.
        data_dir: the emulator's state folder (default: a temporary one, removed on stop).
        host: the interface to bind (default loopback only).
        env: variables added to this process's environment for the child.
        startup_timeout: seconds to wait for the URL line (a first start imports the web
            stack and can take several seconds on a loaded machine).
        stop_timeout: seconds between SIGTERM and SIGKILL when stopping.

    The URL is :attr:`base_url` once started; :attr:`output` holds the last lines the
    emulator printed. :meth:`start` and :meth:`stop` are the ``with`` block's two halves.
    """

    def __init__(
        self,
        command: Sequence[str] | None = None,
        *,
        args: Sequence[str] = (),
        data_dir: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 120.0,
        stop_timeout: float = 30.0,
    ) -> None:
        if command is not None and (isinstance(command, str) or not command):
            raise InvalidInputError(
                "command must be a non-empty sequence of strings, e.g. [program]"
            )
        if startup_timeout <= 0 or stop_timeout <= 0:
            raise InvalidInputError("startup_timeout and stop_timeout must be positive")
        self._command = None if command is None else [os.fspath(part) for part in command]
        self._args = [str(arg) for arg in args]
        self._data_dir = None if data_dir is None else Path(data_dir)
        self._host = host
        self._env = dict(env or {})
        self._startup_timeout = startup_timeout
        self._stop_timeout = stop_timeout
        self._tail: deque[str] = deque(maxlen=_TAIL_LINES)
        self._proc: subprocess.Popen[str] | None = None
        self._temp: tempfile.TemporaryDirectory[str] | None = None
        self._finalizer: (
            weakref.finalize[
                [subprocess.Popen[str], threading.Thread, float, BinaryIO], EmulatorProcess
            ]
            | None
        ) = None
        self._base_url: str | None = None
        self._started: list[str] = []
        self._data: Path | None = None

    def __repr__(self) -> str:
        state = f"at {self._base_url}" if self.running else "stopped"
        return f"<EmulatorProcess {state}>"

    @property
    def base_url(self) -> str:
        """The emulator's base URL (``http://127.0.0.1:PORT``); RuntimeError before start."""
        if self._base_url is None:
            raise RuntimeError("the emulator is not started: use `with EmulatorProcess() as e:`")
        return self._base_url

    @property
    def command(self) -> list[str] | None:
        """The command that was started (its options excluded), None before :meth:`start`."""
        return None if self._proc is None else list(self._started)

    @property
    def data_dir(self) -> Path | None:
        """The emulator's state folder while it runs (a temporary one unless given), else
        None."""
        return self._data if self.running else None

    @property
    def pid(self) -> int | None:
        """The emulator's process id while it runs, else None."""
        return self._proc.pid if self.running and self._proc is not None else None

    @property
    def running(self) -> bool:
        """Whether the emulator process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def output(self) -> str:
        """The last lines the emulator printed (stdout and stderr), for diagnostics."""
        return "".join(self._tail)

    def start(self) -> str:
        """Start the emulator and wait until it listens; its base URL.

        Raises :class:`EmulatorStartError` if no command is found, or the process stops or
        prints no URL within ``startup_timeout`` (it is stopped then).
        """
        if self._proc is not None:
            raise RuntimeError("this EmulatorProcess was already started")
        command = self._command or find_emulator_command()
        if command is None:
            skipped = "" if _serves_here() else " (this environment's lacks the emulator extra)"
            raise EmulatorStartError(
                f"no klavis-emulator that can serve was found on PATH{skipped}: {INSTALL_HINT}"
            )
        if self._data_dir is None:
            self._temp = tempfile.TemporaryDirectory(
                prefix="klavis-emulator-", ignore_cleanup_errors=True
            )
            data_dir = self._temp.name
        else:
            data_dir = os.fspath(self._data_dir)
        argv = [
            *command,
            *("--host", self._host, "--port", "0", "--data-dir", data_dir),
            *("--log-level", "warning", *self._args),
        ]
        watched, kept = os.pipe()  # neither inherited but as pass_fds says
        lifeline = os.fdopen(kept, "wb", buffering=0)
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
                env={**os.environ, **self._env, **self._owner_env(watched)},
                pass_fds=(watched,),
            )
        except OSError as exc:
            lifeline.close()
            self._cleanup_temp()
            raise EmulatorStartError(f"cannot run {shlex.join(command)}: {exc}") from exc
        finally:
            os.close(watched)
        self._proc = proc
        self._started = list(command)
        self._data = Path(data_dir)
        found: queue.Queue[str | None] = queue.Queue()
        reader = threading.Thread(
            target=_drain,
            args=(proc, self._tail, found),
            name="klavis-emulator-output",
            daemon=True,
        )
        reader.start()
        self._finalizer = weakref.finalize(self, _stop, proc, reader, self._stop_timeout, lifeline)
        try:
            self._base_url = self._wait_for_url(proc, found, shlex.join(command))
        except BaseException:  # KeyboardInterrupt included: never leave it running
            self.stop()
            raise
        return self._base_url

    def _owner_env(self, watched: int) -> dict[str, str]:
        """The variables that link the emulator to this process: the pipe it watches, the
        parent-death signal (from the main thread only: it is tied to the starting thread),
        and removing its data folder when it is a temporary one."""
        fd_env, parent_env, remove_env = OWNER_ENV
        linked = {fd_env: str(watched)}
        if threading.current_thread() is threading.main_thread():
            linked[parent_env] = str(os.getpid())
        if self._temp is not None:
            linked[remove_env] = "1"
        return linked

    def _wait_for_url(
        self, proc: subprocess.Popen[str], found: queue.Queue[str | None], shown: str
    ) -> str:
        try:
            url = found.get(timeout=self._startup_timeout)
        except queue.Empty:
            raise EmulatorStartError(
                f"{shown} printed no URL within {self._startup_timeout:g} s; "
                f"its output:\n{self.output}"
            ) from None
        if url is None:
            code = proc.wait()
            raise EmulatorStartError(
                f"{shown} stopped (exit code {code}) before it listened; its output:\n"
                f"{self.output}"
                + ("" if self._command else f"\n(if it lacks the extra: {INSTALL_HINT})")
            )
        return url

    def stop(self) -> None:
        """Stop the emulator (SIGTERM, then SIGKILL after ``stop_timeout``) and remove its
        temporary data folder. Safe to call more than once."""
        if self._finalizer is not None:
            self._finalizer()  # runs _stop once; at interpreter exit it runs by itself
        self._base_url = None
        self._cleanup_temp()

    def _cleanup_temp(self) -> None:
        if self._temp is not None:
            self._temp.cleanup()
            self._temp = None

    def __enter__(self) -> EmulatorProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
