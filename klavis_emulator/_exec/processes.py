"""Every process a sandbox runs, found from the emulator's side, and ended for good (reset).

A sandbox's servers and executions are the emulator's children. Confined, each runs in a
``bwrap`` that binds the sandbox's workspace at ``/data`` (its command line says so) in a PID
namespace of its own: whatever a tenant starts there, however it forks, detaches or calls
``setsid``, stays below that ``bwrap`` (orphans are reparented to the namespace's init, a
``bwrap`` process too), and dies with it. Unconfined, a server runs in the workspace folder as
its working directory; what it starts is found while it is still a descendant, but a process
that detached itself (a double fork) leaves the emulator's tree and cannot be told apart from
any other process of the user: an unconfined reset cannot promise to end it.

Why by hand: psutil (a well-kept library, in the emulator extra) reads the process table;
which processes belong to a sandbox is this emulator's own rule. Only the emulator's own
descendants are looked at (never another user's process, never one it did not start).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import psutil

from .confinement import CONFINED_WORKSPACE
from .data_overlay import inside_path

__all__ = ["end_processes", "kill_group", "sandbox_processes"]

_POLL: Final = 0.005


def _binds(command: list[str], workspace: str) -> bool:
    """Whether a ``bwrap`` command line binds ``workspace`` at the confined workspace."""
    return any(
        command[index : index + 3] == ["--bind", workspace, CONFINED_WORKSPACE]
        for index in range(len(command) - 2)
        if command[index] == "--bind"
    )


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def sandbox_processes(workspace: Path, *also: Path) -> list[psutil.Process]:
    """The emulator's descendants that belong to the sandbox of ``workspace``: every
    ``bwrap`` binding it (with everything below), and every unconfined process working in it
    (with everything below). ``also``: more folders that count as the sandbox's, as the
    command line of a process started on them says (a confined server started ahead on a
    folder that a reset then made the workspace: its ``bwrap`` names the folder's old path)."""
    folders = [os.fspath(folder) for folder in (workspace, *also)]
    found: dict[int, psutil.Process] = {}
    with contextlib.suppress(psutil.Error):
        descendants = psutil.Process(os.getpid()).children(recursive=True)
        for process in descendants:
            if process.pid in found:
                continue
            try:
                command = process.cmdline()
                ours = any(_binds(command, inside_path(folder)[1]) for folder in folders)
                if not ours:
                    cwd = process.cwd()
                    ours = any(_inside(cwd, folder) for folder in folders)
            except psutil.Error:
                continue
            if ours:
                found[process.pid] = process
                with contextlib.suppress(psutil.Error):
                    found.update((inner.pid, inner) for inner in process.children(recursive=True))
    return list(found.values())


def _gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE  # ended; its parent has yet to reap it
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def end_processes(processes: Iterable[psutil.Process], timeout: float = 10.0) -> list[int]:
    """SIGKILL ``processes`` and wait until each has ended (or ``timeout`` passed); the pids
    of those still running then. Killing a confined sandbox's ``bwrap`` ends its whole PID
    namespace, whose init ends last: waiting for it waits for all."""
    left = list(processes)
    for process in left:
        with contextlib.suppress(psutil.Error, OSError):
            process.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while True:
        left = [process for process in left if not _gone(process)]
        if not left or time.monotonic() >= deadline:
            return [process.pid for process in left]
        time.sleep(_POLL)  # the kernel tears a namespace down on its own: poll its end


def kill_group(process: subprocess.Popen[bytes], wait: float = 10.0) -> None:
    """SIGKILL a process started in a new session and its process group, and reap it
    (waiting up to ``wait`` seconds); the group's other processes are reaped by init."""
    killpg = getattr(os, "killpg", None)  # POSIX only
    if killpg is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=wait)
