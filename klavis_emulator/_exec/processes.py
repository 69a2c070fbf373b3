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


def _bound(command: list[str]) -> str | None:
    """The folder a ``bwrap`` command line binds at the confined workspace, or None."""
    for index in range(len(command) - 2):
        if command[index] == "--bind" and command[index + 2] == CONFINED_WORKSPACE:
            return command[index + 1]
    return None


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _children_map() -> dict[int, list[psutil.Process]]:
    """The children of every process, from one read of the process table:
    ``psutil.Process.children(recursive=True)`` reads the whole table at each call, and a
    sandbox's scan called it once more per process it found (9 reads of every process of the
    machine for an MCP-Atlas sandbox, 16 ms of a reset's 83). ``ppid()`` is asked of each
    process here rather than through ``process_iter``'s ``attrs``, whose ``info`` is set on
    instances that psutil shares between threads."""
    children: dict[int, list[psutil.Process]] = {}
    for process in psutil.process_iter():
        try:
            parent = process.ppid()
        except psutil.Error:
            continue
        children.setdefault(parent, []).append(process)
    return children


def _subtree(
    process: psutil.Process, children: dict[int, list[psutil.Process]]
) -> list[psutil.Process]:
    """``process`` and everything below it in ``children``."""
    found, todo = [], [process]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current.pid, ()))
    return found


def sandbox_processes(workspace: Path, *also: Path) -> list[psutil.Process]:
    """The emulator's descendants that belong to the sandbox of ``workspace``: every
    ``bwrap`` binding it (with everything below), and every unconfined process working in it
    (with everything below). ``also``: more folders that count as the sandbox's, as the
    command line of a process started on them says (a confined server started ahead on a
    folder that a reset then made the workspace: its ``bwrap`` names the folder's old path).

    One read of the process table; the tree is walked from the emulator down, and a
    ``bwrap`` that binds another folder is not entered (what runs below it is that
    sandbox's, in its own PID namespace): a scan costs the emulator's own processes and the
    sandboxes' roots, not every process of every sandbox."""
    folders = [os.fspath(folder) for folder in (workspace, *also)]
    binds = {inside_path(folder)[1] for folder in folders}
    found: dict[int, psutil.Process] = {}
    with contextlib.suppress(psutil.Error):
        children = _children_map()
        todo = list(children.get(os.getpid(), ()))
        while todo:
            process = todo.pop()
            try:
                bound = _bound(process.cmdline())
                if bound is not None:  # a sandbox's bwrap: ours, or another's left alone
                    ours = bound in binds
                else:
                    cwd = process.cwd()
                    ours = any(_inside(cwd, folder) for folder in folders)
            except psutil.Error:
                todo.extend(children.get(process.pid, ()))
                continue
            if ours:
                found.update((inner.pid, inner) for inner in _subtree(process, children))
            elif bound is None:
                todo.extend(children.get(process.pid, ()))
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
