"""Pack the workspace archives (tar.gz): streaming and reproducible.

:func:`write_archive` and :func:`pack_to_tempfile` turn planned
:class:`~workflows._seed.SourceFile` entries into a reproducible tar.gz compressed with ISA-L
(``isal``), reading file contents in 1 MiB chunks so memory stays flat. Files from disk are
opened as planned and nothing else (:class:`~workflows._seed.PlannedFiles`: no link followed,
each checked against its planned device, inode and size).
"""

from __future__ import annotations

import io
import itertools
import tarfile
import tempfile
from collections.abc import Sequence
from typing import IO, BinaryIO, cast

from klavis_archive import FastTarInfo, TarPacker
from workflows._errors import InvalidInputError
from workflows._seed import ExactReader, PlannedFiles, SourceFile
from workflows._tar_common import ARCHIVE_MTIME, ProgressCallback

__all__ = ["pack_to_tempfile", "write_archive"]


def _tarinfo(entry: SourceFile) -> tarfile.TarInfo:
    info = FastTarInfo(entry.name)
    info.mtime = ARCHIVE_MTIME if entry.mtime is None else entry.mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if entry.is_dir:
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
    elif entry.link_target is not None:
        info.type = tarfile.SYMTYPE
        info.linkname = entry.link_target
        info.mode = 0o777
    else:
        info.type = tarfile.REGTYPE
        info.size = entry.size
        info.mode = 0o755 if entry.mode & 0o100 else 0o644
    return info


def write_archive(
    entries: Sequence[SourceFile],
    out: IO[bytes],
    *,
    compresslevel: int = 1,
    progress: ProgressCallback | None = None,
    threads: int = 1,
) -> int:
    """Write ``entries`` to ``out`` as a reproducible tar.gz; return the compressed size.

    The archive is PAX format, sorted by name, with every mtime :data:`ARCHIVE_MTIME` (unless an
    entry carries its own, from ``preserve_mtime=True``), uid/gid 0, empty owner names, modes
    0o644/0o755 (links 0o777), and a gzip header without a time or a file name: the same entries
    give the same bytes whatever the files' times or owners on disk.
    Parent folders are implied (not written); empty folders (``is_dir``) are.

    Compression is ISA-L at ``compresslevel`` (0-3; 1 is fast and close to zlib's 6 in size).
    With ``threads >= 1`` it runs on that many background threads, overlapping with the reading
    of files (``threads=0``: all in the calling thread). File contents are read in 1 MiB chunks;
    ``progress(n)`` is called with the number of file bytes consumed since its last call.
    ``out`` is written to and flushed, never closed.
    """
    if not 0 <= compresslevel <= 3:
        raise InvalidInputError(f"compresslevel must be 0..3 (ISA-L levels), not {compresslevel!r}")
    ordered = sorted(entries, key=lambda e: e.name)
    for a, b in itertools.pairwise(ordered):
        if a.name == b.name:
            raise InvalidInputError(f"two archive entries are both named {a.name!r}")
    packer = TarPacker(out, compresslevel=compresslevel, threads=threads)
    try:
        with PlannedFiles() as files:
            for entry in ordered:
                info = _tarinfo(entry)
                if info.type != tarfile.REGTYPE:
                    packer.add(info)
                elif entry.data is not None:
                    with io.BytesIO(entry.data) as buf:
                        packer.add(info, ExactReader(buf, entry.name, entry.size, progress))
                elif entry.disk is not None:
                    with files.open(entry) as fh:
                        packer.add(info, ExactReader(fh, entry.disk.shown, entry.size, progress))
                else:
                    raise InvalidInputError(f"archive entry {entry.name!r} has no content")
        return packer.finish()
    finally:
        packer.abort()


def pack_to_tempfile(
    entries: Sequence[SourceFile],
    *,
    compresslevel: int = 1,
    progress: ProgressCallback | None = None,
    spool_bytes: int = 8 * 1024 * 1024,
    threads: int = 1,
) -> tuple[BinaryIO, int]:
    """Pack ``entries`` (see :func:`write_archive`) into a temporary file; return it and its size.

    The file is a :class:`tempfile.SpooledTemporaryFile`: in memory up to ``spool_bytes``, on disk
    above, deleted when closed. It is rewound to 0, ready to upload. The caller closes it.
    """
    spool = tempfile.SpooledTemporaryFile(max_size=spool_bytes)  # noqa: SIM115 - returned
    try:
        size = write_archive(
            entries, spool, compresslevel=compresslevel, progress=progress, threads=threads
        )
        spool.seek(0)
    except BaseException:
        spool.close()
        raise
    return cast("BinaryIO", spool), size
