"""What a seed is made of: :class:`SourceFile`, one entry of the archive, and its modes."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from klavis_archive import FileIdentity

FILE_MODE = 0o644
EXEC_MODE = 0o755
DIR_MODE = 0o755
LINK_MODE = 0o777


@dataclass(frozen=True)
class OnDisk:
    """Where a planned file is on disk, and what it was when planned: packing opens it below
    ``root`` one component at a time following no link, and refuses it unless it is still the
    file of ``identity`` (:class:`klavis_archive.PlannedTree`).

    ``root`` is the real path of the folder the plan walked, ``root_identity`` its device and
    inode, ``parts`` the file's path components below it; ``shown`` is the path as the user
    named it (for messages).
    """

    root: str
    root_identity: tuple[int, int]
    parts: tuple[str, ...]
    identity: FileIdentity
    shown: str

    @classmethod
    def planned(
        cls, root: str, root_stat: os.stat_result, rel: str, info: os.stat_result, shown: str
    ) -> OnDisk:
        """The file ``rel`` (POSIX, below ``root``) as ``info`` (its ``lstat``) describes it."""
        return cls(
            root,
            (root_stat.st_dev, root_stat.st_ino),
            tuple(rel.split("/")),
            FileIdentity.of(info),
            shown,
        )


@dataclass(frozen=True)
class SourceFile:
    """One entry of a seed archive.

    Exactly one kind of content is set:

    * a regular file from disk (``disk``: where it is and what it was when planned; read in
      chunks when packing, refused if it changed since; ``size`` is its size when planned, and
      exactly that many bytes are packed), or
    * a regular file in memory (``data``), or
    * a symbolic link (``link_target``: a relative POSIX path that stays inside the tree, or an
      absolute one inside the sandbox's workspace, ``/data`` or below), or
    * an empty folder (``is_dir=True``), kept so that the workspace's shape survives.

    ``name`` is the normalised POSIX relative path inside the archive (``"a/b.txt"``); ``mode`` is
    ``0o644`` or ``0o755`` for files (from the owner's exec bit), ``0o755`` for folders and
    ``0o777`` for links. ``mtime`` is the modification time to pack (seconds since the epoch,
    from disk with ``preserve_mtime=True``); None packs the fixed
    :data:`~workflows._tar_common.ARCHIVE_MTIME`.
    """

    name: str
    size: int
    mode: int
    disk: OnDisk | None = None
    data: bytes | None = None
    link_target: str | None = None
    is_dir: bool = False
    mtime: float | None = None

    @property
    def path(self) -> Path | None:
        """The file's path on disk as the user named it (None: not a file from disk)."""
        return None if self.disk is None else Path(self.disk.shown)
