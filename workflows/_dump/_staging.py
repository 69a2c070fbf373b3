"""Temporary entries beside a destination, and the removal of those a killed process left.

A dump is written into a temporary folder (or file) beside its destination, on the same file
system, and moved into place once whole (see :mod:`workflows._dump._extract` and the CLI's
``dump --force``). An error, Ctrl-C and SIGTERM (which the library turns into ``SystemExit``,
see :func:`workflows._ownership.unwind_on_sigterm`) remove it on the way out; SIGKILL, the OOM
killer or a power cut cannot, and one such kill left 144 MB behind. So every entry is named for
the process that made it, ``.klavis-dump-<pid>-<random>``, and locked (``flock``) while in use,
and :func:`make_staging` first removes the entries of the same folder that are provably stale.
An entry is removed only when all of these hold:

* its name has that form, so another program's files, and the names older versions used
  (``.klavis-dump-<random>`` without a pid), are never touched;
* it is this user's, and a folder or a regular file (a link is never followed nor removed);
* no process with its pid runs on this machine, nor is it this process;
* nobody holds its lock: a process of another pid namespace (a container sharing the folder),
  whose pid means nothing here, still does while it writes.

A process that has just made its entry and not yet locked it is covered by the pid rule. On a
platform without ``fcntl`` (Windows) nothing is ever removed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass, field

from .._state_files import process_running

__all__ = ["STAGING_PREFIX", "Staging", "make_staging", "remove_stale"]

log = logging.getLogger("workflows")

STAGING_PREFIX = ".klavis-dump-"
_STAGING_NAME = re.compile(rf"{re.escape(STAGING_PREFIX)}(\d{{1,10}})-[a-z0-9_]+(\.tmp)?")
_O_DIRECTORY: int = getattr(os, "O_DIRECTORY", 0)
_O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


def _try_lock(fd: int) -> bool:
    """Take the entry's lock without waiting; False when another open file holds it (or the
    file system cannot lock, in which case nothing can be proven stale)."""
    if fcntl is None:  # pragma: no cover - Windows
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


@dataclass
class Staging:
    """A temporary folder or file beside a destination, locked while this process uses it."""

    path: str
    is_folder: bool
    _fd: int | None = field(default=None, repr=False)

    def unlock(self) -> None:
        """Let go of the lock (idempotent): the entry is gone or moved into place."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def remove(self) -> None:
        """Remove the entry, if it is still there, and let go of its lock (best effort)."""
        try:
            if self.is_folder:
                shutil.rmtree(self.path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
        finally:
            self.unlock()


def make_staging(parent: str, *, folder: bool) -> Staging:
    """Make a locked temporary folder (or empty file) in ``parent``, named for this process,
    after removing the stale ones (:func:`remove_stale`). Raises :class:`OSError` when
    ``parent`` cannot hold it."""
    remove_stale(parent)
    prefix = f"{STAGING_PREFIX}{os.getpid()}-"
    if folder:
        path = tempfile.mkdtemp(prefix=prefix, dir=parent)
        try:
            fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW)
        except OSError:
            shutil.rmtree(path, ignore_errors=True)
            raise
    else:
        fd, path = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=parent)
    _try_lock(fd)  # a file system that cannot lock: the pid in the name still protects it
    return Staging(path, folder, fd)


def remove_stale(parent: str) -> list[str]:
    """Remove the entries in ``parent`` that a process of this user made and that no process
    uses any more (see the module docstring); returns their names. Never raises."""
    removed: list[str] = []
    try:
        with os.scandir(parent) as entries:
            names = [e.name for e in entries if e.name.startswith(STAGING_PREFIX)]
    except OSError:
        return removed
    for name in names:
        match = _STAGING_NAME.fullmatch(name)
        if match is None:
            continue
        pid = int(match.group(1))
        if pid == os.getpid() or process_running(pid):
            continue
        path = os.path.join(parent, name)
        with contextlib.suppress(OSError):
            if _remove_if_unused(path, is_file=match.group(2) is not None):
                removed.append(name)
                log.info("removed %s, left by process %d, which no longer runs", path, pid)
    return removed


def _remove_if_unused(path: str, *, is_file: bool) -> bool:
    """Remove one candidate when it is this user's, of the expected kind, and unlocked."""
    st = os.lstat(path)
    getuid = getattr(os, "geteuid", None)
    if getuid is not None and st.st_uid != getuid():
        return False
    if not (stat.S_ISREG(st.st_mode) if is_file else stat.S_ISDIR(st.st_mode)):
        return False
    flags = os.O_RDONLY | _O_NOFOLLOW | (0 if is_file else _O_DIRECTORY)
    fd = os.open(path, flags)
    try:
        if not _try_lock(fd):
            return False
        opened = os.fstat(fd)
        now = os.lstat(path)
        if (opened.st_dev, opened.st_ino) != (now.st_dev, now.st_ino):
            return False  # replaced since it was looked at
        if is_file:
            os.unlink(path)
        else:
            shutil.rmtree(path)
        return True
    finally:
        os.close(fd)
