"""The data folder's overlays: tenant folders a confined process cannot trace to the host.

**Why.** A confined process reads ``/proc/self/mountinfo``, whose fourth field is the root
of each mount inside its file system: for a plain bind of the workspace at ``/data`` (and of
an execution's folder at ``/execution``) that is the host path, e.g.
``/root/.local/share/klavis-emulator/workspaces/<id>``, which names the data folder and the
home folder (issue 32, point 9; see :mod:`.host_paths` for the rest of what was hidden).

**What is done.** One *holder* process per data folder (:mod:`.overlay_holder_main`), in a
user and a mount namespace of its own, mounts an overlayfs over ``workspaces/`` and one over
``executions/``, each with its own folder as the upper layer and an empty lower one, with
options that name relative paths only (measured in a sandbox's ``mountinfo``:
``0:39 /<id> /data rw,nosuid,nodev - overlay overlay rw,lowerdir=.overlay/empty,
upperdir=workspaces,workdir=.overlay/work-workspaces,redirect_dir=nofollow,uuid=on,
userxattr``). Then:

* every confined process starts *inside* the holder's namespaces: :func:`bwrap_args
  <.confinement.bwrap_args>` puts ``nsenter --target HOLDER --user --mount
  --preserve-credentials`` before ``bwrap`` when a folder it binds is a view path (below),
  and gives ``bwrap`` the folder's own path, which in the holder's mount namespace is the
  overlay. bubblewrap's user namespace is then nested in the holder's; a fork server's child
  (:mod:`klavis_emulator._mcp.fork_server_main`) still joins it from the host's (the
  emulator's user owns both, so it has every capability in them);
* the emulator writes the tenant folders only through the overlay, at
  ``/proc/HOLDER/root/<data folder>/workspaces/...`` (:meth:`DataOverlay.view`): the state's
  :class:`~klavis_emulator._state.db.Folders` are those paths, so seeding, resets,
  executions, spares and every test that asks the state for a workspace go through it. The
  upper folders are never written directly while the holder lives (overlayfs calls that
  undefined); a workspace's dump reads its upper folder, which holds every file (the lower
  one is empty): 5,000 small files at 163 MB/s, 107 through the overlay (measured, the
  bench's ``small_files`` shape; ``Folders.workspaces_to_read``). Renames between a tenant
  folder and a staging folder must stay on one file system: the staging and trash folders
  of workspaces and executions (and the spares) live in ``workspaces/.tmp`` and
  ``executions/.tmp``, inside the overlays.

The holder dies with the emulator: ``PR_SET_PDEATHSIG`` (SIGKILL) tied to a thread of this
module that lives exactly as long as the holder should (``PR_SET_PDEATHSIG`` is per thread:
started from a request thread, it would die with that thread), and a pipe it reads whose
only writer is the emulator (the write end is close-on-exec: no child inherits it). It holds
an exclusive ``flock`` of ``.overlay/lock`` in the data folder, so a second holder of the
same folder (a restart racing the end of a killed emulator's holder) waits for the first.

**Options weighed.**

* One overlay per confined process on the same upper folder: rejected (undefined
  behaviour; measured, see :mod:`.host_paths`).
* ``unshare -Urm --map-current-user sh -c 'mount -t overlay ...'`` (util-linux) as the
  holder: as root it works, but as any other user util-linux ``mount`` refuses ("must be
  superuser to use mount", measured with uid 65534) although the process has
  ``CAP_SYS_ADMIN`` in its namespace; ``-r`` (the user mapped to root) would make every
  confined process uid 0 in the holder's namespace, unlike an unprivileged emulator's today.
  The holder is 80 lines of Python calling ``unshare(2)`` and ``mount(2)`` itself.
* A staging bind of the data folder so that the upper and work folders share a mount: not
  needed where they are on one file system (measured: mounting the overlay over its own
  upper folder from inside the data folder works, with relative options).
* ``bwrap`` from the host's namespaces given ``/proc/HOLDER/root/...`` as a bind's source:
  it binds the folder of the underlying file system, not the overlay (measured), so the
  root shows the host path again. ``setns`` in a ``preexec_fn``: unsafe in the emulator's
  threaded process. ``nsenter`` (util-linux, beside ``mount``) costs one ``exec``.
* One overlay over a common parent of ``workspaces/`` and ``executions/``: a new layout
  and a migration of existing data folders; two mounts in one holder cost nothing more.

**Fallback.** Where it cannot be made (no ``nsenter``, no unprivileged user namespaces, an
upper file system without user extended attributes, a data folder on an overlayfs as in
Docker, a kernel before 5.11), the emulator logs once at WARNING why, and binds the folders
as before (their ``mountinfo`` root then names the data folder). Unconfined, there is no
holder (nothing is mounted for anyone).

**Cost** (measured on the project's 2-core machine shared with other jobs, one process,
samples interleaved, medians; the same ``bwrap_args`` given a plain workspace folder and one
seen through a holder): the holder's start, once per emulator, 79 ms (5 samples, load 7.9:
a Python start, the overlays, the check through ``nsenter``); an execution's confined
``python -c pass`` 80.4 -> 85.1 ms at load 2.2-2.4 (15 samples), 157 -> 148 ms at load 8.5
(15 samples, within the noise); a server's start to its answer to ``initialize``,
filesystem (node) 486 -> 536 ms and terminal (its venv) 700 -> 734 ms at load 1.7-2.2
(5 samples each): one more ``exec`` (``nsenter``) per start, a few ms, inside the noise.
A holder is one Python process (10 MiB RSS measured) per emulator.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

__all__ = [
    "OVERLAY_DIR",
    "TENANT_FOLDERS",
    "DataOverlay",
    "enter_args",
    "inside_path",
    "start_data_overlay",
]

logger = logging.getLogger("klavis_emulator")

_HERE = Path(__file__).resolve().parent
_HOLDER_PROGRAM: Final = (_HERE / "overlay_holder_main.py").read_text(encoding="utf-8")
OVERLAY_DIR: Final = ".overlay"
"""The data folder's folder for the overlays' empty lower layer, work folders and lock."""
TENANT_FOLDERS: Final[tuple[str, ...]] = ("workspaces", "executions")
"""The data folder's folders that hold tenant data only, each under an overlay."""
_READY_TIMEOUT: Final = 60.0
_SYSTEM_PATH: Final = "/usr/sbin:/usr/bin:/sbin:/bin"
_VIEW = re.compile(r"/proc/(\d+)/root(/.*)")


def inside_path(path: str | os.PathLike[str]) -> tuple[int | None, str]:
    """``(holder pid, the path in the holder's mount namespace)`` of a view path
    (``/proc/PID/root/...``); ``(None, path)`` for any other path.

    >>> inside_path("/proc/42/root/srv/data/workspaces/x")
    (42, '/srv/data/workspaces/x')
    >>> inside_path("/srv/data")
    (None, '/srv/data')
    """
    text = os.fspath(path)
    match = _VIEW.fullmatch(text)
    if match is None:
        return None, text
    return int(match.group(1)), match.group(2)


def _nsenter() -> str | None:
    found = shutil.which("nsenter", path=_SYSTEM_PATH)
    return os.path.abspath(found) if found is not None else None


def enter_args(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    """The ``nsenter`` command line that puts a ``bwrap`` into the holder's namespaces when
    one of ``paths`` is a view path (all must be of one holder), else ``[]``."""
    holders = {pid for pid, _ in map(inside_path, paths) if pid is not None}
    if not holders:
        return []
    if len(holders) > 1:
        raise ValueError(f"folders of several data folders' holders: {sorted(holders)}")
    nsenter = _nsenter()
    if nsenter is None:  # start_data_overlay makes no holder then
        raise RuntimeError("nsenter is missing from the system folders")
    pid = holders.pop()
    return [nsenter, f"--target={pid}", "--user", "--mount", "--preserve-credentials"]


class DataOverlay:
    """The running holder of one data folder's overlays (see the module docs); made by
    :func:`start_data_overlay`. :meth:`close` ends it."""

    def __init__(self, data_dir: Path, names: Sequence[str]) -> None:
        self.data_dir = data_dir
        self.names = tuple(names)
        self.pid = 0
        self.problem: str | None = None
        self._stop = threading.Event()
        self._started = threading.Event()
        self._process: subprocess.Popen[bytes] | None = None
        # the thread is the holder's parent thread: PR_SET_PDEATHSIG fires when it ends
        self._thread = threading.Thread(target=self._own, name="klavis-data-overlay", daemon=True)

    def __repr__(self) -> str:
        return f"DataOverlay(pid={self.pid}, data_dir={str(self.data_dir)!r})"

    def view(self, path: Path) -> Path:
        """``path`` (below the data folder) as the emulator reaches it: through the holder's
        root, so below an overlay's mount point it is the overlay."""
        return Path(f"/proc/{self.pid}/root{os.path.abspath(path)}")

    def alive(self) -> bool:
        """Whether the holder still runs."""
        process = self._process
        return process is not None and process.poll() is None

    def start(self) -> None:
        """Start the holder and wait until its overlays are mounted (or it failed: then
        :attr:`problem` says why)."""
        self._thread.start()
        self._started.wait()

    def _own(self) -> None:
        life_read, life_write = os.pipe()  # the write end: this process's only, close-on-exec
        try:
            process = subprocess.Popen(
                [
                    sys.executable, "-I", "-S", "-c", _HOLDER_PROGRAM,
                    str(os.getpid()), str(self.data_dir), *self.names,
                ],
                stdin=life_read,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd="/",
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            self.problem = f"the holder could not start ({exc.strerror or exc})"
            os.close(life_read)
            os.close(life_write)
            self._started.set()
            return
        os.close(life_read)
        self._process = process
        self.pid = process.pid
        try:
            self.problem = self._await_ready(process)
            if self.problem is None:
                self.problem = self._check_entry()
            self._started.set()
            if self.problem is None:
                self._stop.wait()
        finally:
            os.close(life_write)
            with contextlib.suppress(OSError):
                process.kill()
            process.wait()
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()
            self._started.set()

    def _await_ready(self, process: subprocess.Popen[bytes]) -> str | None:
        assert process.stdout is not None
        assert process.stderr is not None
        deadline = time.monotonic() + _READY_TIMEOUT
        said = b""
        while not said.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([process.stdout], [], [], left)[0]:
                return (
                    f"the holder was not ready within {_READY_TIMEOUT:g} s (another holder "
                    f"of {self.data_dir} still running?)"
                )
            chunk = os.read(process.stdout.fileno(), 64)
            if not chunk:
                break
            said += chunk
        if said == b"ready\n":
            return None
        process.wait()
        error = process.stderr.read().decode("utf-8", "replace").strip()
        return error or f"the holder exited with status {process.returncode}"

    def _check_entry(self) -> str | None:
        """Whether a process entered with :func:`enter_args` finds the overlay at the
        folder's own path: the file system the emulator reaches through the view."""
        folder = self.data_dir / self.names[0]
        code = "import os, sys; print(os.stat(sys.argv[1]).st_dev)"
        try:
            expected = os.stat(self.view(folder)).st_dev
            if expected == os.stat(folder).st_dev:
                return f"{folder} is not an overlay in the holder's namespace"
            done = subprocess.run(
                [*enter_args([self.view(folder)]), sys.executable, "-I", "-S", "-c", code,
                 str(folder)],
                capture_output=True,
                timeout=_READY_TIMEOUT,
                check=False,
            )  # fmt: skip
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
            return f"entering the holder's namespaces failed ({exc})"
        said = done.stdout.decode("ascii", "replace").strip()
        if done.returncode != 0 or said != str(expected):
            error = done.stderr.decode("utf-8", "replace").strip()[-300:]
            return f"an entered process did not see the overlay ({error or said})"
        return None

    def close(self) -> None:
        """End the holder (idempotent). Confined processes still running keep their own
        mounts of the overlays until they end."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(30)


def _prepare(data_dir: Path, names: Sequence[str]) -> None:
    """The holder's folders: the empty lower layer, a work folder per overlay (made before
    any overlay is mounted, directly: nothing is mounted on them)."""
    base = data_dir / OVERLAY_DIR
    (base / "empty").mkdir(parents=True, exist_ok=True)
    for name in names:
        (base / f"work-{name}").mkdir(exist_ok=True)


def start_data_overlay(data_dir: Path, names: Sequence[str] = TENANT_FOLDERS) -> DataOverlay | str:
    """Mount the overlays of ``data_dir`` (see the module docs): the running holder, or,
    after one WARNING saying so, the reason why the data folder's path stays visible to
    confined processes."""
    problem: str | None = None
    if not sys.platform.startswith("linux"):
        problem = "overlays need Linux"
    elif _nsenter() is None:
        problem = "nsenter (util-linux) is not installed in the system folders"
    holder: DataOverlay | None = None
    if problem is None:
        try:
            _prepare(data_dir, names)
        except OSError as exc:
            problem = f"its folders could not be made ({exc})"
    if problem is None:
        holder = DataOverlay(data_dir, names)
        holder.start()
        problem = holder.problem
    if problem is not None:
        if holder is not None:
            holder.close()
        logger.warning(
            "confined processes can read the path of the data folder %s in "
            "/proc/self/mountinfo (their /data and /execution are plain binds): its overlays "
            "could not be made: %s",
            data_dir,
            problem,
        )
        return problem
    assert holder is not None
    logger.info("the tenant folders of %s are overlays (holder pid %d)", data_dir, holder.pid)
    return holder
