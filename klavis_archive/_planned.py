"""Open the files of a plan, and only those: one ``O_NOFOLLOW`` step at a time, checked.

Packing a folder happens in two moves: a plan (which files, their sizes) made from listings and
``lstat``, then the packing, which opens each planned file and copies its bytes. Between the
two, anything may change the folder: a process (an agent, a build, an attacker sharing the
folder) can put a symbolic link where a planned file was, or where one of the folders on its
path was. Opening the planned path again (``open("root/a/b.txt")``) has the kernel follow such
a link, and the archive would carry the bytes of whatever it points to (``~/.ssh/id_rsa``).

:class:`PlannedTree` opens the root folder once, by the path the plan walked, and checks it is
the folder planned (device and inode); then every folder on a file's path is opened relative
to its parent's descriptor with ``O_NOFOLLOW | O_DIRECTORY``, and the file itself with
``O_NOFOLLOW | O_NONBLOCK`` (a FIFO put in its place does not block), and ``fstat`` of the open
file must give the planned :class:`FileIdentity` (device, inode, size). Whatever changed is a
:class:`SourceChanged` naming the entry and how it changed; no byte of the replacement is read.

The folders of the last file opened stay open (plans are sorted by name, so the next file
shares most of its path), at most :data:`OPEN_FOLDERS` of them: a deeper path opens its
deeper folders for that file alone. Written here, not taken from a library: the standard
library has ``os.fwalk`` (a walk, not an open of given paths) and Linux's ``openat2`` with
``RESOLVE_NO_SYMLINKS`` has no binding in Python's ``os`` module.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from typing import Final, NamedTuple

__all__ = ["OPEN_FOLDERS", "FileIdentity", "PlannedTree", "SourceChanged"]

OPEN_FOLDERS: Final = 32
"""Most folder descriptors a :class:`PlannedTree` keeps open between two files, the root's
included (a tree can be hundreds of folders deep; each pack running at once holds its own)."""

_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_FOLDER_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
# what open(2) answers for a symbolic link under O_NOFOLLOW: ELOOP on Linux, EMLINK on FreeBSD
_LINK_ERRNOS: Final = frozenset({errno.ELOOP, errno.EMLINK})


class FileIdentity(NamedTuple):
    """What a planned file was when planned: ``device`` and ``inode`` (which file), ``size``."""

    device: int
    inode: int
    size: int

    @classmethod
    def of(cls, info: os.stat_result) -> FileIdentity:
        """The identity in ``info`` (an ``lstat`` or ``fstat`` result)."""
        return cls(info.st_dev, info.st_ino, info.st_size)


class SourceChanged(Exception):
    """A planned entry is no longer what was planned. ``parts`` are its path components below
    the root (empty: the root itself); ``reason`` says how it changed, as a clause ("it was
    replaced by a symbolic link"). Each package words its own error from them."""

    def __init__(self, parts: Sequence[str], reason: str) -> None:
        super().__init__(f"{'/'.join(parts) or '.'}: {reason}")
        self.parts = tuple(parts)
        self.reason = reason


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISREG(mode):
        return "a file"
    return "a special file (a fifo, socket or device)"


class PlannedTree:
    """The files of a plan below the folder ``root``: :meth:`open_file` opens one of them.

    ``root`` is opened now (following a link the user named, as the plan did) and must be the
    folder of ``identity`` (device, inode; None: not checked), else :class:`SourceChanged`. Use
    it in a ``with`` block, or :meth:`close` it.

    >>> import tempfile, pathlib
    >>> top = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (top / "a.txt").write_text("hi")
    >>> planned = FileIdentity.of(os.lstat(top / "a.txt"))
    >>> with PlannedTree(top) as tree:
    ...     os.read(tree.open_file(["a.txt"], planned), 10)
    b'hi'
    """

    def __init__(
        self, root: str | os.PathLike[str], identity: tuple[int, int] | None = None
    ) -> None:
        self._root = os.open(root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
        if identity is not None:
            info = os.fstat(self._root)
            if (info.st_dev, info.st_ino) != tuple(identity):
                os.close(self._root)
                raise SourceChanged((), "the folder was replaced by another one")
        # the open folders on the last file's path below the root: (name, descriptor)
        self._stack: list[tuple[str, int]] = []

    def __enter__(self) -> PlannedTree:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every descriptor (idempotent)."""
        self._trim(0)
        if self._root >= 0:
            os.close(self._root)
            self._root = -1

    def _trim(self, depth: int) -> None:
        while len(self._stack) > depth:
            os.close(self._stack.pop()[1])

    def _open_folder(self, parts: Sequence[str], depth: int, parent: int) -> int:
        """Open the folder ``parts[depth]`` in ``parent``, one ``O_NOFOLLOW`` step."""
        name = parts[depth]
        try:
            return os.open(name, _FOLDER_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            raise SourceChanged(parts[: depth + 1], "the folder disappeared") from None
        except NotADirectoryError:  # with O_DIRECTORY | O_NOFOLLOW, a link answers ENOTDIR
            try:
                now = _kind(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
            except OSError:
                now = "something else"
            raise SourceChanged(parts[: depth + 1], f"the folder was replaced by {now}") from None
        except OSError as exc:
            if exc.errno in _LINK_ERRNOS:
                reason = "the folder was replaced by a symbolic link"
                raise SourceChanged(parts[: depth + 1], reason) from None
            raise

    def _folder(self, parts: Sequence[str]) -> tuple[int, list[int]]:
        """The descriptor of the folder holding ``parts[-1]``, and those opened for this file
        alone (past :data:`OPEN_FOLDERS`), for the caller to close."""
        folders = parts[:-1]
        shared = 0
        while (
            shared < len(self._stack)
            and shared < len(folders)
            and self._stack[shared][0] == folders[shared]
        ):
            shared += 1
        self._trim(shared)
        parent = self._stack[-1][1] if self._stack else self._root
        transient: list[int] = []
        try:
            for depth in range(shared, len(folders)):
                fd = self._open_folder(parts, depth, parent)
                if len(self._stack) < OPEN_FOLDERS - 1:
                    self._stack.append((folders[depth], fd))
                else:
                    transient.append(fd)
                parent = fd
        except BaseException:
            for fd in transient:
                os.close(fd)
            raise
        return parent, transient

    def open_file(self, parts: Sequence[str], identity: FileIdentity) -> int:
        """Open the planned regular file ``parts`` (its path components below the root) for
        reading; return the descriptor (the caller closes it).

        :class:`SourceChanged` when it, or a folder on its path, is missing, is a symbolic link
        or something else than planned, or is another file or of another size than
        ``identity``. Other errors (``EACCES``, ``EIO``) are the ``OSError`` of the system.
        """
        if not parts:
            raise ValueError("a planned file needs a name below the root")
        parent, transient = self._folder(parts)
        try:
            try:
                fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=parent)
            except FileNotFoundError:
                raise SourceChanged(parts, "it disappeared") from None
            except OSError as exc:
                if exc.errno in _LINK_ERRNOS:
                    raise SourceChanged(parts, "it was replaced by a symbolic link") from None
                raise
        finally:
            for folder in transient:
                os.close(folder)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise SourceChanged(parts, f"it was replaced by {_kind(info.st_mode)}")
            now = FileIdentity.of(info)
            if (now.device, now.inode) != (identity.device, identity.inode):
                raise SourceChanged(parts, "it was replaced by another file")
            if now.size != identity.size:
                raise SourceChanged(
                    parts, f"its size changed from {identity.size:,} to {now.size:,} bytes"
                )
            # O_NONBLOCK stays: it changes nothing for a regular file (its reads never wait)
        except BaseException:
            os.close(fd)
            raise
        return fd
