"""The host limits' folder and files, opened without following anyone's links.

The state folder can be one that other users reach (``$KLAVIS_SANDBOX_STATE_DIR`` pointed at
a shared ``/tmp/...`` folder). Opened by path, as the first version did (``mkdir -p``, then
``chmod`` and ``open`` through whatever the names lead to), another user who made
``host-limits/`` first, or who swaps a name for a link, has this user write where they choose:
a root harness truncated and overwrote a 0600 file of root's through a ``rate`` link. So:

* the state folder is the one the user named (links in that path are the user's choice), but
  it must be owned by this user and not writable by every user (``/tmp`` is), or nothing is
  opened in it (writable by its group is let be: a umask of 002 makes folders so, and a
  member of the group can do no more there than make the check below refuse);
* below it, ``host-limits/<digest>/`` and its files are opened relative to the folder above
  (``dir_fd``), with ``O_NOFOLLOW``, each checked with ``fstat`` on the open descriptor: a
  folder owned by this user and writable by no one else (one readable by others is made
  0700, as the first version made it), a regular file of this user's with one link;
* files are opened with ``O_NONBLOCK`` (and ``O_NOCTTY``): a FIFO put in a file's place is
  found by ``fstat`` and refused, where a blocking open waits for the other end for ever (the
  first version hung an acquire past its pool's close on one).

Anything else is a :class:`~workflows.ConfigurationError` naming the path: limits asked for
and not kept would be exceeded silently. POSIX only (``dir_fd``, ``O_NOFOLLOW``, ``flock``),
as the distribution is.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from ._errors import ConfigurationError

__all__ = ["LimitsFolder", "cannot_keep_limits"]

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
_WAY_OUT = "point $KLAVIS_SANDBOX_STATE_DIR at a folder of your own that only you can write"


@contextlib.contextmanager
def cannot_keep_limits(where: Path) -> Iterator[None]:
    """An OSError in the limits' folder as a ConfigurationError naming it: limits asked for
    and not kept would be exceeded silently."""
    try:
        yield
    except OSError as exc:
        raise ConfigurationError(
            f"cannot keep the host limits in {where} ({exc.strerror or exc}); make the state "
            f"folder writable or point $KLAVIS_SANDBOX_STATE_DIR at one that is"
        ) from exc


def _refuse(where: Path, why: str) -> ConfigurationError:
    return ConfigurationError(f"cannot keep the host limits in {where}: {why}; {_WAY_OUT}")


def _check_owner(where: Path, info: os.stat_result) -> None:
    if info.st_uid != os.geteuid():
        raise _refuse(where, f"it is owned by another user (uid {info.st_uid})")


def _open_state_folder(state: Path) -> int:
    """The state folder (made 0700 if missing), checked: this user's, not writable by all."""
    with cannot_keep_limits(state):
        os.makedirs(state, mode=0o700, exist_ok=True)
        fd = os.open(state, _DIRECTORY_FLAGS)
    try:
        info = os.fstat(fd)
        _check_owner(state, info)
        if info.st_mode & stat.S_IWOTH:
            raise _refuse(state, f"others can write in it (mode {stat.S_IMODE(info.st_mode):04o})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_private_folder(parent: int, name: str, where: Path) -> int:
    """``name`` under the folder ``parent`` (made 0700 if missing), never through a link:
    this user's, writable by no one else, made 0700 if others could read it."""
    with cannot_keep_limits(where):
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=parent)
        try:
            fd = os.open(name, _DIRECTORY_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise _refuse(where, "it is not a folder (a link, or a file)") from None
            raise
    try:
        info = os.fstat(fd)
        _check_owner(where, info)
        mode = stat.S_IMODE(info.st_mode)
        if mode & _OTHERS_WRITE:
            raise _refuse(where, f"others can write in it (mode {mode:04o})")
        if mode & 0o077:
            with cannot_keep_limits(where):
                os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


class LimitsFolder:
    """The open ``host-limits/<digest>/`` folder of one base URL and key; a context manager
    that closes it. :meth:`open_file` opens one of its files."""

    def __init__(self, state: Path, digest: str) -> None:
        self.path = state / "host-limits" / digest
        top = _open_state_folder(state)
        try:
            limits = _open_private_folder(top, "host-limits", state / "host-limits")
            try:
                self.fd = _open_private_folder(limits, digest, self.path)
            finally:
                os.close(limits)
        finally:
            os.close(top)

    def __repr__(self) -> str:
        return f"LimitsFolder({str(self.path)!r})"

    def open_file(self, name: str) -> int:
        """Open (make, 0600) the file ``name`` of this folder for reading and writing, never
        through a link, never blocking: ConfigurationError naming it unless it is a regular
        file of this user's with one link, which no one else can write."""
        where = self.path / name
        with cannot_keep_limits(where):
            try:
                fd = os.open(name, _FILE_FLAGS, 0o600, dir_fd=self.fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise _refuse(where, "it is a link") from None
                raise
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise _refuse(where, "it is not a regular file (a FIFO, a device or a folder)")
            _check_owner(where, info)
            if info.st_mode & _OTHERS_WRITE:
                mode = stat.S_IMODE(info.st_mode)
                raise _refuse(where, f"others can write it (mode {mode:04o})")
            if info.st_nlink != 1:
                raise _refuse(where, f"it has {info.st_nlink} links (a hard link to another file)")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def close(self) -> None:
        """Close the folder (idempotent)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> LimitsFolder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
