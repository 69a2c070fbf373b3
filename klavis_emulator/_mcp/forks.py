"""Fork servers: each Python server's code imported once, shared by every sandbox's process.

A confined Python server used to import its whole stack afresh in every sandbox: git 57 MiB
PSS and 2.0 s of CPU a start, arxiv 46 MiB and 1.0 s, terminal 39 MiB and 0.7 s (measured on
this project's 2-core machine, load 5-8). Confined, a server's command line and environment
are the same in every sandbox (the workspace is ``/data``, ``/tmp`` is private), so all but
the namespaces could be done once. A server whose catalog entry has a
:class:`~.kinds.ForkRecipe` is started, when confined, from a **fork server** of its kind:
one process per kind and emulator, started on the first start of that kind, which runs the
recipe's ``prepare`` (imports, the server built and warmed in memory) and then forks a child
per start (see :mod:`.fork_server_main` for what the child does, step by step).

How a start goes (the stdio transport's command is :mod:`.fork_client_main`): the client
hands its stdin, stdout and stderr to the fork server, then ``exec``\\ s the server's very
bubblewrap command line with a *holder* as its command. The holder says when the sandbox is
ready; the fork server's child joins that sandbox's namespaces and forks the server into its
PID namespace, where it drops every privilege as the init does. So the sandbox is the one
bubblewrap and the init (:mod:`klavis_emulator._exec.host_paths`) make for an exec'd server,
mounts, masks and overlays included, and everything that finds a sandbox's processes from
the emulator's side (resets, spares) finds its bubblewrap as before: killing it ends the
server with its PID namespace. The holder ends when the server does, and the sandbox with it.

What each way weighed costs (for the issue's MCP-Atlas shape; figures in
``benchmarks/bench_sandboxes.py`` and the README):

* **Forking from a fork server, the sandbox made by bubblewrap** (this module): the
  children share the imported stack copy-on-write. Each server process costs what it writes
  after the fork: measured 7.4 to 8.3 MiB private (USS) for git, terminal and arxiv, plus
  the fork servers themselves once per emulator (26 MiB private for the three, 61 MiB PSS
  beside three sandboxes). A start costs a fork and the server's own serving code; about
  30 ms of the client's Python and one more process per server (the holder). Hand-written:
  joining namespaces and dropping privileges (what ``nsenter`` and ``setpriv`` do), 60 lines,
  checked against ``/proc/self/status``.
* **A fork server whose child confines itself** (``unshare``, then every mount bubblewrap
  makes: tmpfs, ``/proc``, ``/dev``, read-only system and installs, masks, overlays,
  ``pivot_root``): the same memory, but bubblewrap's and the init's work written again by
  hand, where a mistake is an escape. Rejected.
* **The child of a fork server inside bubblewrap's command**: a child forked outside stays
  outside the sandbox's namespaces unless it joins them, which is what this module does.
* **Node servers** (four of the seven): Node has no fork; their heaps are trimmed instead
  (``--max-semi-space-size``, one V8 worker, one malloc arena, no module-hook thread, see
  :data:`~.launchers.NODE_FLAGS`), and desktop-commander loads its document libraries at
  their first use (:func:`~.launchers._load_on_first_use`). Serving two sandboxes' Node
  servers from one process was not weighed further: each sandbox must have its own
  processes, confined. Starting a server only at its sandbox's first call to it would spare
  what a sandbox never calls, but every server is started at acquire so that the first call
  does not wait for a start (desktop-commander's is 0.5-0.7 s of CPU), and the bench's
  figure is measured after a call to every server, where it would change nothing.
* **The fork servers' lifetime**: each dies with the thread that started it
  (``PR_SET_PDEATHSIG`` is per thread), so they are started on the host's loop thread only
  (every start is made there); a worker thread's would end them when it idles out.
* **Not forking unconfined**: an unconfined server's command line names its sandbox's host
  folder, so nothing of it could be prepared for every sandbox; and an unconfined sandbox
  has no namespaces to join. Unconfined servers start as their own processes, as before.

If a fork server cannot start or prepare, its starts fall back to the server's own command
line (the client ``exec``\\ s it), and the emulator logs why once. The fork servers die with
the emulator (``PR_SET_PDEATHSIG``) and are stopped with its MCP host.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .._exec import CONFINED_WORKSPACE
from .._exec.host_paths import command_of, init_programs
from .catalog import CATALOG
from .kinds import ForkRecipe
from .launch import LaunchSpec

__all__ = ["FORK_ENV", "ForkServers"]

logger = logging.getLogger("klavis_emulator.mcp")

FORK_ENV: Final = "KLAVIS_EMULATOR_MCP_FORK"
"""``0``: start every server as a process of its own (no fork servers)."""

_HERE = Path(__file__).resolve().parent
_SERVER_PROGRAM: Final = (_HERE / "fork_server_main.py").read_text(encoding="utf-8")
_CLIENT_PROGRAM: Final = (_HERE / "fork_client_main.py").read_text(encoding="utf-8")
_READY_FD: Final = 9  # as in fork_client_main
_LIFE_FD: Final = 8
_SYSTEM_PATH: Final = "/usr/bin:/bin"


@dataclass(frozen=True)
class _Identity:
    """What a fork server was started with; another start needs another one."""

    interpreter: str
    env: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]
    recipe: ForkRecipe


@dataclass
class _ForkServer:
    identity: _Identity
    socket_path: Path
    process: subprocess.Popen[bytes]
    log_file: Path


def sandbox_env(command: list[str]) -> dict[str, str]:
    """The environment a bubblewrap command line gives its command (its ``--setenv``)."""
    env: dict[str, str] = {}
    end = command.index("--") if "--" in command else len(command)
    index = 0
    while index < end:
        if command[index] == "--setenv" and index + 2 < end:
            env[command[index + 1]] = command[index + 2]
            index += 3
        else:
            index += 1
    return env


def _shebang(script: str) -> str | None:
    with contextlib.suppress(OSError), open(script, "rb") as file:
        first = file.readline(4096)
        if first.startswith(b"#!"):
            return first[2:].decode("utf-8", "replace").strip().split()[0]
    return None


def interpreter_and_argv(own: list[str]) -> tuple[str, list[str]] | None:
    """The Python that runs a server's own command line, and the ``sys.argv`` it gives it:
    ``python -c CODE args`` or a console script (its shebang's Python); None otherwise."""
    if len(own) >= 3 and own[1] == "-c":
        return own[0], ["-c", *own[3:]]
    python = _shebang(own[0]) if own else None
    if python is None or not os.path.basename(python).startswith("python"):
        return None
    return python, own


class ForkServers:
    """The fork servers of one emulator, one per server kind, started on first use (see the
    module docs). ``enabled=False``: :meth:`wrap` changes nothing."""

    def __init__(self, logs: Path, enabled: bool) -> None:
        self.enabled = enabled
        self._logs = logs
        self._lock = threading.Lock()
        self._running: dict[str, _ForkServer] = {}
        self._retired: list[_ForkServer] = []
        self._failed: set[_Identity] = set()
        self._folder: Path | None = None
        self._count = 0

    def __repr__(self) -> str:
        return f"ForkServers(enabled={self.enabled}, running={sorted(self._running)})"

    def pids(self) -> dict[str, int]:
        """The process id of each running fork server, by server (tests, benchmarks)."""
        with self._lock:
            running = self._running.items()
            return {name: fork.process.pid for name, fork in running if fork.process.poll() is None}

    def wrap(self, server: str, spec: LaunchSpec) -> LaunchSpec:
        """``spec`` (a confined server's command line), started from the server's fork
        server when it has a recipe; else ``spec`` itself."""
        recipe = CATALOG[server].fork
        if not self.enabled or recipe is None or not spec.confined:
            return spec
        command = [spec.command, *spec.args]
        own = command_of(command)
        found = interpreter_and_argv(own)
        if found is None:
            return spec
        identity = _Identity(found[0], tuple(sandbox_env(command).items()), tuple(found[1]), recipe)
        socket_path = self._ensure(server, identity)
        if socket_path is None:
            return spec
        holder = _holder()
        return LaunchSpec(
            command=sys.executable,
            args=(
                "-I", "-S", "-c", _CLIENT_PROGRAM, str(socket_path), str(len(own)),
                str(len(holder)), *command, *holder,
            ),
            env={},
            cwd=None,
            confined=True,
            workspace_as_seen=spec.workspace_as_seen,
        )  # fmt: skip

    def _ensure(self, server: str, identity: _Identity) -> Path | None:
        with self._lock:
            running = self._running.get(server)
            if running is not None:
                status = running.process.poll()
                if status is None and running.identity == identity:
                    return running.socket_path
                del self._running[server]
                if status is None:
                    self._retired.append(running)  # another install: its servers go on
                else:
                    self._gone(server, running, status)
            if identity in self._failed:
                return None
            try:
                started = self._start(server, identity)
            except OSError as exc:
                logger.warning("the %s fork server could not start: %s", server, exc)
                self._failed.add(identity)
                return None
            self._running[server] = started
            return started.socket_path

    def _gone(self, server: str, fork: _ForkServer, status: int) -> None:
        said = ""
        with contextlib.suppress(OSError):
            said = fork.log_file.read_text(encoding="utf-8", errors="replace").strip()[-600:]
        logger.warning(
            "the %s fork server exited with status %s; %s servers start as processes of "
            "their own from now on%s",
            server, status, server, f"; it said: {said}" if said else "",
        )  # fmt: skip
        self._failed.add(fork.identity)
        with contextlib.suppress(OSError):
            fork.log_file.unlink()

    def _start(self, server: str, identity: _Identity) -> _ForkServer:
        if self._folder is None:  # short: a socket's path has at most 107 bytes
            self._folder = Path(tempfile.mkdtemp(prefix="klavis-forks-"))
        self._count += 1
        socket_path = self._folder / f"{self._count}.sock"
        self._logs.mkdir(parents=True, exist_ok=True)
        log_file = self._logs / f"fork-{server}-{uuid.uuid4().hex[:8]}.log"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(str(socket_path))
            listener.listen(128)
            with open(log_file, "ab") as log:
                process = subprocess.Popen(
                    [
                        identity.interpreter, "-c", _SERVER_PROGRAM, str(listener.fileno()),
                        str(os.getpid()), CONFINED_WORKSPACE, identity.recipe.prepare,
                        identity.recipe.serve, *identity.argv,
                    ],
                    env=dict(identity.env),
                    cwd="/",
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    pass_fds=(listener.fileno(),),
                    start_new_session=True,
                )  # fmt: skip
        logger.info("started the %s fork server (pid %d)", server, process.pid)
        return _ForkServer(identity, socket_path, process, log_file)

    def close(self) -> None:
        """Stop every fork server (their servers' sandboxes end on their own) and remove
        their sockets and logs."""
        with self._lock:
            forks = [*self._running.values(), *self._retired]
            self._running.clear()
            self._retired.clear()
            folder, self._folder = self._folder, None
        for fork in forks:
            with contextlib.suppress(OSError):
                fork.process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                fork.process.wait(timeout=10)
            with contextlib.suppress(OSError):
                fork.log_file.unlink()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _holder() -> list[str]:
    """The command a forked server's bubblewrap runs in the server's place: it says the
    sandbox is ready (the init runs it once the sandbox is made), then reads the life pipe,
    whose only writer is the server, until it ends."""
    programs = init_programs()
    sh = programs[0] if programs is not None else shutil.which("sh", path=_SYSTEM_PATH) or "/bin/sh"
    cat = shutil.which("cat", path=_SYSTEM_PATH) or "/bin/cat"
    script = (
        f"printf . >&{_READY_FD} && exec {cat} <&{_LIFE_FD} >/dev/null {_LIFE_FD}<&- {_READY_FD}>&-"
    )
    return [sh, "-c", script]
