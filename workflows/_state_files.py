"""The state folder's folders and files, opened without following anyone's links.

The state folder (``$KLAVIS_SANDBOX_STATE_DIR``, or the per-user one) holds the ledger and the
host limits' files, and it can be a folder other users reach (a shared ``/tmp/...``). Opened by
path (``mkdir -p``, then ``open`` through whatever the names lead to), another user who made a
file or folder there first, or who swaps a name for a link, has this user write where they
choose: a root harness truncated and overwrote a 0600 file of root's through a planted link.
So, for every user of the state folder (:mod:`workflows._host_limits_files`,
:mod:`workflows._ownership._ledger`):

* the state folder is the one the user named (links in that path are the user's choice), but
  it must be owned by this user and not writable by every user (``/tmp`` is), or nothing is
  opened in it (writable by its group is let be: a umask of 002 makes folders so, and a member
  of the group can do no more there than make the checks below refuse);
* below it, folders and files are opened relative to the folder above (``dir_fd``), with
  ``O_NOFOLLOW``, each checked with ``fstat`` on the open descriptor: a folder owned by this
  user and writable by no one else (one readable by others is made 0700), a regular file of
  this user's with one link, writable by no one else;
* files are opened with ``O_NONBLOCK`` (and ``O_NOCTTY``): a FIFO put in a file's place is found
  by ``fstat`` and refused, where a blocking open waits for the other end for ever.

A refusal is :class:`UnsafeStateFile`, naming the path and why; each user turns it into its own
answer (the host limits into a ``ConfigurationError``: limits not kept would be exceeded
silently; the ledger into a warning: it must never break the work it records). POSIX only
(``dir_fd``, ``O_NOFOLLOW``), as the distribution is.

Also where the state folder is (:func:`state_folder`) and whether a process that left a file
still runs (:func:`process_running`): the ledger, the host limits, dump staging and the template
cache ask, and this module sits below them all.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

__all__ = [
    "FILE_FLAGS",
    "STATE_DIR_ENV",
    "UnsafeStateFile",
    "open_private_file",
    "open_private_folder",
    "open_state_folder",
    "process_running",
    "state_folder",
]

STATE_DIR_ENV = "KLAVIS_SANDBOX_STATE_DIR"

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
"""The flags every state file is opened with, beside its access mode and ``O_CREAT``."""
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


class UnsafeStateFile(Exception):
    """A folder or file of the state folder that is not safe to use: ``where``, and ``why``."""

    def __init__(self, where: Path, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.where, self.why = where, why


def _check_owner(where: Path, info: os.stat_result) -> None:
    if info.st_uid != os.geteuid():
        raise UnsafeStateFile(where, f"it is owned by another user (uid {info.st_uid})")


def open_state_folder(state: Path) -> int:
    """The state folder (made 0700, with its parents, if missing), checked: this user's, not
    writable by all. An ``OSError`` where it cannot be made or opened."""
    os.makedirs(state, mode=0o700, exist_ok=True)
    fd = os.open(state, _DIRECTORY_FLAGS)
    try:
        info = os.fstat(fd)
        _check_owner(state, info)
        if info.st_mode & stat.S_IWOTH:
            mode = stat.S_IMODE(info.st_mode)
            raise UnsafeStateFile(state, f"others can write in it (mode {mode:04o})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_private_folder(parent: int, name: str, where: Path) -> int:
    """``name`` under the folder ``parent`` (made 0700 if missing), never through a link: this
    user's, writable by no one else, made 0700 if others could read it."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=parent)
    try:
        fd = os.open(name, _DIRECTORY_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeStateFile(where, "it is not a folder (a link, or a file)") from None
        raise
    try:
        info = os.fstat(fd)
        _check_owner(where, info)
        mode = stat.S_IMODE(info.st_mode)
        if mode & _OTHERS_WRITE:
            raise UnsafeStateFile(where, f"others can write in it (mode {mode:04o})")
        if mode & 0o077:
            os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_private_file(folder: int, name: str, where: Path, access: int) -> int:
    """Open the file ``name`` of the folder ``folder`` with ``access`` (``os.O_RDWR |
    os.O_CREAT``, ``os.O_RDONLY``, ...; made 0600), never through a link, never blocking:
    :class:`UnsafeStateFile` unless it is a regular file of this user's with one link, which no
    one else can write. ``FileNotFoundError`` when it is missing and ``access`` does not make
    it."""
    try:
        fd = os.open(name, access | FILE_FLAGS, 0o600, dir_fd=folder)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeStateFile(where, "it is a link") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeStateFile(where, "it is not a regular file (a FIFO, a device or a folder)")
        _check_owner(where, info)
        if info.st_mode & _OTHERS_WRITE:
            mode = stat.S_IMODE(info.st_mode)
            raise UnsafeStateFile(where, f"others can write it (mode {mode:04o})")
        if info.st_nlink != 1:
            raise UnsafeStateFile(
                where, f"it has {info.st_nlink} links (a hard link to another file)"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def state_folder() -> Path:
    """``$KLAVIS_SANDBOX_STATE_DIR``, or the per-user state folder: the ledger's, and the host
    limits' (:mod:`workflows._host_limits`)."""
    folder = os.environ.get(STATE_DIR_ENV)
    if not folder:
        import platformdirs

        folder = platformdirs.user_state_dir("klavis-sandbox", appauthor=False)
    return Path(folder)


def process_running(pid: int) -> bool:
    """Whether another process with this pid runs on this machine (False for this one's)."""
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it runs, as another user
        return True
    return True
