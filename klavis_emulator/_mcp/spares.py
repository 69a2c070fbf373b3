"""Server sets started ahead for resets: the emulator's stock of spares.

A reset must end every process of the sandbox's life and give it fresh servers. Killing is
quick; what a fresh server costs is its start: measured confined on this project's 2-core
machine (load 1 to 7), from spawn to the answer to MCP's ``initialize``: filesystem 0.4-0.5 s,
terminal 0.5-0.7 s, arxiv 0.6 s, localmemory 0.4-0.9 s, code-runner 1.1-1.3 s,
desktop-commander 1.4-1.5 s, git 1.6-1.7 s (bubblewrap itself ~0.1 s of it); the seven of the
MCP-Atlas shape about 7 s one after the other. A reset that starts them after killing the old
ones is as slow as a fresh acquire, however the starts are arranged.

So the reset of a confined sandbox swaps in a **spare**: an empty folder, and one started
server process per server of the sandbox's shape (its hosted servers, mail servers aside),
each in its own bubblewrap with that folder at ``/data``, started before anyone asked. Under
the sandbox's lock, after every process of the old life has ended, the state renames the
old workspace away and the spare's folder to the workspace's path (the processes' bind
follows the folder, not its name), then empties it as a reset always does; the host puts the
spare's processes behind the sandbox's proxies (:meth:`~.backend.Backend.renew`) and starts
another spare in the background. Nothing of another sandbox is in a spare: it was made for
no one, and is handed to one sandbox, whose it then is (its own confinement, its own
``/data``, its own private ``/tmp``).

What each way to make a reset cheaper costs, as weighed for this module:

* **Stopping the old processes at once** (SIGKILL to every process of the sandbox, one pass,
  then waiting for them: see :func:`~klavis_emulator._exec.processes.end_processes`) rather
  than closing each server's stdin and waiting for it to exit, up to 2 s before the MCP SDK
  sends SIGTERM: nothing of the old life is kept, so nothing is lost. Measured at load 1-7,
  the graceful close took 20-430 ms a server (up to 810 ms; a Ray pool's load made a reset
  2.2 s); the kill, 45-95 ms for the seven servers of the MCP-Atlas shape together. Taken,
  always.
* **Starting fresh servers in parallel**: 7 starts on 2 cores are CPU-bound, so parallel
  starts save only the waits between them; the sum of CPU stays. Taken where a sandbox
  waits for them (its first requests; after a reset without a spare); a spare, which no
  one waits for, starts its servers one at a time, leaving a core to the sandboxes at work.
* **Answering the reset before the fresh servers are up** (a start in the background; the
  first MCP call waits for its server: a request goes through the sandbox's proxy to the
  transport of its current process, which is connecting, never to an old process): the
  answer comes after the kill and the emptying (0.1-0.5 s at load 6-15), but the first
  call then waits for the rest of the start, so the sandbox is ready no sooner than after a
  fresh acquire (3.5-4.7 s for the MCP-Atlas shape against 4.0-5.3 s, load 6-12). Taken
  when there is no spare (the first reset of a shape, two resets faster than a spare can be
  started, unconfined, ``spares=0``).
* **A stock of spares** (this module): the sandbox is ready when the reset answers (0.7-1.3
  s for the MCP-Atlas shape at load 6-12, of which the first calls themselves, to servers
  already up, 0.46-0.68 s). Memory: one spare set per shape being reset, for the whole emulator (the
  stock holds ``per_shape`` sets, default 1, of each shape that a live sandbox was reset
  with, and drops them when the last such sandbox goes): about 340 MiB PSS for the
  MCP-Atlas shape, 143 MiB for filesystem+git+terminal, not a spare set per sandbox. CPU: a
  spare costs what a fresh start costs, spent in the background after the reset rather than
  before its first call. Only for a sandbox whose servers got a request in the life the
  reset ends (a pool running code without MCP starts no server for it); only confined:
  unconfined, a server's command line names the workspace's host path, which the rename
  would make wrong (those resets start fresh servers in the background).
* **A stock per server kind** rather than per shape: each process would bind a folder of
  its own, and a sandbox's servers must share one workspace; making a folder appear later
  under a process's ``/data`` needs mount propagation from the host (root, a shared mount).
  Rejected.
* **A fork server** (one process per kind that has imported its server's code, forking a
  child per start): the children would need their confinement made by hand in the child
  (bubblewrap starts its program with ``exec``, which throws the imports away), and the
  Node.js servers (four of the seven) have no such mode. Rejected.

The stock is filled on the host's event loop; :meth:`Spares.reserve` is called by the state
from a request thread (under the sandbox's lock), so what they share is behind a lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.to_thread

from .._exec import end_processes, sandbox_processes
from .._workspace import remove_tree
from .backend import ServerProcess, start_process

__all__ = ["Shape", "Spare", "Spares"]

logger = logging.getLogger("klavis_emulator.mcp")

Shape = tuple[str, ...]
"""The servers of a spare (sorted names)."""


@dataclass
class Spare:
    """A folder and one started server process per server of its shape, all on the folder."""

    shape: Shape
    folder: Path
    identity: tuple[int, int]
    """``(st_dev, st_ino)`` of the folder: the workspace is the spare's once it has these."""
    processes: dict[str, ServerProcess] = field(default_factory=dict)

    def owns(self, workspace: Path) -> bool:
        """Whether ``workspace`` is this spare's folder now (the state swapped it in)."""
        try:
            info = os.stat(workspace, follow_symlinks=False)
        except OSError:
            return False
        return (info.st_dev, info.st_ino) == self.identity


class Spares:
    """The stock: up to ``per_shape`` ready spares of each shape that is wanted.

    A shape is wanted while a live sandbox of that shape has been reset with spares on
    (:meth:`reserve` says so, :meth:`forget` ends it). ``make(server, folder)`` makes the
    (unstarted) process of ``server`` on ``folder``; a start that takes over ``timeout``
    seconds, or fails, gives up the spare (logged; the next reset tries again).
    """

    def __init__(
        self,
        root: Path,
        per_shape: int,
        make: Callable[[str, Path], ServerProcess],
        timeout: float,
    ) -> None:
        if per_shape < 0:
            raise ValueError("spares per shape must not be negative")
        self.root = root
        self.per_shape = per_shape
        self._make = make
        self._timeout = timeout
        self._lock = threading.Lock()
        self._ready: dict[Shape, list[Spare]] = {}
        self._reserved: dict[str, Spare] = {}  # sandbox id -> the spare reserve() gave it
        self._wanted: dict[str, Shape] = {}  # sandbox id -> its shape
        self._filling: set[Shape] = set()  # the loop's only
        self._closed = False

    def __repr__(self) -> str:
        with self._lock:
            ready = sum(len(spares) for spares in self._ready.values())
        return f"Spares(per_shape={self.per_shape}, ready={ready})"

    def ready(self) -> dict[Shape, int]:
        """How many spares of each shape are ready (for tests and benchmarks)."""
        with self._lock:
            return {shape: len(spares) for shape, spares in self._ready.items() if spares}

    def filling(self) -> bool:
        """Whether a spare is being started."""
        return bool(self._filling)

    # ------------------------------------------------------------------ any thread

    def reserve(self, sandbox_id: str, shape: Shape) -> Path | None:
        """Note that ``sandbox_id`` (of ``shape``) is being reset, and take a ready spare of
        its shape for it: the spare's folder (the state makes it the workspace), or None."""
        if self.per_shape == 0 or not shape:
            return None
        with self._lock:
            if self._closed:
                return None
            self._wanted[sandbox_id] = shape
            stock = self._ready.get(shape)
            if not stock or sandbox_id in self._reserved:
                return None
            spare = stock.pop(0)
            self._reserved[sandbox_id] = spare
            return spare.folder

    def wanted(self, sandbox_id: str) -> Shape | None:
        """The shape a spare is kept for on behalf of ``sandbox_id``, if any."""
        with self._lock:
            return self._wanted.get(sandbox_id)

    # ------------------------------------------------------------------ the host's loop

    async def claim(self, sandbox_id: str, workspace: Path) -> Spare | None:
        """The spare reserved for ``sandbox_id``, if the state made its folder the sandbox's
        ``workspace``; a reserved spare it did not use is closed."""
        with self._lock:
            spare = self._reserved.pop(sandbox_id, None)
        if spare is None:
            return None
        if spare.owns(workspace):
            return spare
        logger.info("a spare for sandbox %s was not used; closing it", sandbox_id)
        await self._close([spare])
        return None

    async def fill(self, shape: Shape) -> None:
        """Start spares of ``shape`` one after the other until ``per_shape`` are ready (at
        once if they are, if one is being started, or if the shape is no longer wanted)."""
        if shape in self._filling:
            return
        self._filling.add(shape)
        try:
            while self._missing(shape):
                spare = await self._start(shape)
                if spare is None:
                    return
                with self._lock:
                    keep = not self._closed and shape in self._wanted.values()
                    if keep:
                        self._ready.setdefault(shape, []).append(spare)
                if not keep:
                    await self._close([spare])
        finally:
            self._filling.discard(shape)

    def _missing(self, shape: Shape) -> bool:
        with self._lock:
            if self._closed or shape not in self._wanted.values():
                return False
            return len(self._ready.get(shape, [])) < self.per_shape

    async def _start(self, shape: Shape) -> Spare | None:
        folder = self.root / f"spare-{uuid.uuid4().hex}"
        folder.mkdir(parents=True)
        info = folder.stat()
        spare = Spare(shape, folder, (info.st_dev, info.st_ino))
        try:
            spare.processes = {server: self._make(server, folder) for server in shape}
            for process in spare.processes.values():  # one by one: see the module docs
                with anyio.fail_after(self._timeout):
                    await start_process(process)
        except BaseException as exc:  # cancelled too (the host stops): nothing is left
            await self._close([spare])
            if not isinstance(exc, Exception):
                raise
            logger.exception("starting a spare of %s failed", ", ".join(shape))
            return None
        return spare

    async def forget(self, sandbox_id: str) -> None:
        """``sandbox_id`` is gone: close what was reserved for it, and the spares of its
        shape if no other live sandbox wants them."""
        with self._lock:
            shape = self._wanted.pop(sandbox_id, None)
            spares = [spare for spare in [self._reserved.pop(sandbox_id, None)] if spare]
            if shape is not None and shape not in self._wanted.values():
                spares += self._ready.pop(shape, [])
        await self._close(spares)

    async def close_all(self) -> None:
        """Close every spare; none is made from now on."""
        with self._lock:
            self._closed = True
            spares = [spare for stock in self._ready.values() for spare in stock]
            spares += self._reserved.values()
            self._ready.clear()
            self._reserved.clear()
            self._wanted.clear()
        await self._close(spares)

    async def _close(self, spares: Iterable[Spare]) -> None:
        """End the spares' processes at once (they served no one), then drop their folders."""
        spares = list(spares)
        if not spares:
            return
        with anyio.CancelScope(shield=True):
            folders = [spare.folder for spare in spares]
            await anyio.to_thread.run_sync(lambda: end_processes(sandbox_processes(*folders)))
            for spare in spares:
                for process in spare.processes.values():
                    await process.close()
                with contextlib.suppress(OSError):
                    await anyio.to_thread.run_sync(remove_tree, spare.folder)
