"""What a seed is made of: :class:`SourceFile`, one entry of the archive, and its modes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FILE_MODE = 0o644
EXEC_MODE = 0o755
DIR_MODE = 0o755
LINK_MODE = 0o777


@dataclass(frozen=True)
class SourceFile:
    """One entry of a seed archive.

    Exactly one kind of content is set:

    * a regular file from disk (``path``; read in chunks when packing; ``size`` is its size when
      planned, and exactly that many bytes are packed), or
    * a regular file in memory (``data``), or
    * a symbolic link (``link_target``: a relative POSIX path that stays inside the tree, or an
      absolute one inside the sandbox's workspace, ``/data`` or below), or
    * an empty folder (``is_dir=True``), kept so that the workspace's shape survives.

    ``name`` is the normalised POSIX relative path inside the archive (``"a/b.txt"``); ``mode`` is
    ``0o644`` or ``0o755`` for files (from the owner's exec bit), ``0o755`` for folders and
    ``0o777`` for links. ``mtime`` is the modification time to pack (seconds since the epoch,
    from disk with ``preserve_mtime=True``); None packs the fixed
    :data:`~workflows._dump._archive.ARCHIVE_MTIME`.
    """

    name: str
    size: int
    mode: int
    path: Path | None = None
    data: bytes | None = None
    link_target: str | None = None
    is_dir: bool = False
    mtime: float | None = None
