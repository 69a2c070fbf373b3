"""Open the files a plan named, and only those: :class:`PlannedFiles`, for every pack of a
planned folder (seeds, executions, snapshots of a folder, templates).

The opening itself is the archive core's :class:`klavis_archive.PlannedTree` (one ``O_NOFOLLOW``
step per folder from the planned root, the file checked against its planned device, inode and
size); here its refusals become the library's errors, naming the entry as the user named it:
:class:`~workflows.SourceChangedError` for a change, :class:`~workflows.InvalidInputError` for a
file the system will not let us read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Protocol

from klavis_archive import PlannedTree, SourceChanged
from workflows._errors import InvalidInputError, SourceChangedError

from ._entries import OnDisk, SourceFile


class _Readable(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


class _Descriptor:
    """A planned file open for reading: ``read`` and ``close`` on the descriptor itself (a
    ``FileIO`` would ``fstat`` it once more: 5,000 small files packed ~5 % slower)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            return b"".join(iter(lambda: os.read(self._fd, 1 << 20), b""))
        return os.read(self._fd, n)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> _Descriptor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class ExactReader:
    """Reads exactly ``size`` bytes of ``raw`` (one planned file) in the pieces asked for,
    calling ``progress(n)`` with each piece's length; a file that got shorter is a
    :class:`~workflows.SourceChangedError` naming ``name``, and reads past ``size`` give ``b""``
    (what grew after planning is not read)."""

    def __init__(
        self, raw: _Readable, name: str, size: int, progress: Callable[[int], object] | None
    ) -> None:
        self._raw = raw
        self._name = name
        self._left = size
        self._progress = progress

    def read(self, n: int = -1) -> bytes:
        want = self._left if n < 0 else min(n, self._left)
        try:
            data = self._raw.read(want)
        except OSError as exc:
            raise InvalidInputError(
                f"cannot read {self._name!r} while packing it: {exc.strerror or exc}"
            ) from exc
        got = len(data)
        if got < want:
            raise SourceChangedError(self._name, "it got shorter while it was being packed")
        self._left -= got
        if self._progress is not None and got:
            self._progress(got)
        return data


def _shown(disk: OnDisk, parts: tuple[str, ...]) -> str:
    """The path, as the user named it, of ``parts`` (below the root) of ``disk``'s tree."""
    root = disk.shown.rsplit("/", len(disk.parts))[0] if disk.parts else disk.shown
    return "/".join([root, *parts]) if parts else root


class PlannedFiles:
    """Opens the planned files of one pack (:meth:`open`), each tree's root once.

    >>> import tempfile, pathlib
    >>> from workflows._seed import plan_directory
    >>> top = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (top / "a.txt").write_text("hi")
    >>> with PlannedFiles() as files, files.open(plan_directory(top)[0]) as f:
    ...     f.read()
    b'hi'
    """

    def __init__(self) -> None:
        self._trees: dict[tuple[str, tuple[int, int]], PlannedTree] = {}

    def __enter__(self) -> PlannedFiles:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every folder still open."""
        while self._trees:
            self._trees.popitem()[1].close()

    def _tree(self, disk: OnDisk) -> PlannedTree:
        key = (disk.root, disk.root_identity)
        tree = self._trees.get(key)
        if tree is None:
            tree = PlannedTree(disk.root, disk.root_identity)
            self._trees[key] = tree
        return tree

    def open(self, entry: SourceFile) -> _Descriptor:
        """The planned file ``entry`` opened for reading (unbuffered; close it, or use it in a
        ``with`` block).

        Raises :class:`~workflows.SourceChangedError` when it (or a folder on its path, or the
        root) changed since it was planned, :class:`~workflows.InvalidInputError` when it
        cannot be read (permissions, I/O errors).
        """
        disk = entry.disk
        if disk is None:
            raise InvalidInputError(f"archive entry {entry.name!r} is not a file from disk")
        try:
            fd = self._tree(disk).open_file(disk.parts, disk.identity)
        except SourceChanged as exc:
            raise SourceChangedError(_shown(disk, exc.parts), exc.reason) from None
        except FileNotFoundError:
            raise SourceChangedError(_shown(disk, ()), "the folder disappeared") from None
        except OSError as exc:
            raise InvalidInputError(
                f"cannot read {disk.shown!r}: {exc.strerror or exc}; fix its permissions or "
                "add it to ignore="
            ) from exc
        return _Descriptor(fd)
