"""Safe tar.gz extraction into a workspace (dumps are made by :mod:`._workspace`).

Extraction never uses ``TarFile.extractall``. The archive is read in one streaming pass
(ISA-L decompression) and every member is checked as it arrives, before anything is written
for it: absolute paths, ``..`` components, names too long for the file system, links leading
out of the tree, device files and sparse files, caps on extended headers, on the number of
members, on the unpacked size and on the ratio of unpacked to compressed bytes. Files are
written by hand under folders whose every component was resolved by :class:`_Tree` itself (a
folder resolved once is remembered until a symbolic link of the tree changes), and every
symbolic link is checked again at the end. A refused archive may leave partial output in
``root``: the caller extracts into a staging copy and swaps it in only when everything
succeeded, so a refused archive leaves the workspace as it was.

Symbolic links are resolved by :meth:`_Tree.resolve`, never by the host's ``realpath``: a link
to an absolute path inside :data:`WORKSPACE_MOUNT` (``/data``, where the sandbox sees its
workspace) is workspace content and resolves as the workspace root plus the rest of the target,
while on the host ``/data/...`` is another place. Such links are stored verbatim, and no member
is ever written through one (the host kernel would follow it to the host's ``/data``).

What the emulator shares with the client library, the limits, the bounded reader, the path and
link rules and the fast headers, is the archive core's (:mod:`klavis_archive`): its refusals,
:class:`~klavis_archive.ArchiveRejected` and :class:`~klavis_archive.ArchiveTooLarge`, are the
emulator's 400 and 413 answers. Here: the emulator's caps, and the writing of members.
"""

from __future__ import annotations

import contextlib
import errno
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

from klavis_archive import (
    CHUNK_SIZE,
    CORRUPT,
    MAX_DEPTH,
    MAX_HEADER_BYTES,
    MAX_NAME_BYTES,
    MAX_PATH_BYTES,
    MAX_TRAILING_BYTES,
    WORKSPACE_MOUNT,
    ArchiveRejected,
    ArchiveTooLarge,
    DecompressAhead,
    NegativeSize,
    SparseMember,
    check_symlink_target,
    checked_parts,
    display,
    forget_members,
    hard_link_parts,
    igzip_file,
    open_tar,
)

from ._archive_tree import _Tree

__all__ = [
    "MAX_HEADER_BYTES",
    "MAX_DEPTH",
    "MAX_NAME_BYTES",
    "MAX_PATH_BYTES",
    "WORKSPACE_MOUNT",
    "ArchiveLimits",
    "ArchiveRejected",
    "ArchiveTooLarge",
    "extract_archive",
]

GZIP_MAGIC = b"\x1f\x8b"


# What writing a member can raise because of the member itself (its name, its link, what came
# before it): a 400 naming the member. Other OSErrors (EIO, EROFS, EMFILE, ...) are the
# emulator's trouble and stay 500s.
_INPUT_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        "ENAMETOOLONG",
        "ELOOP",
        "ENOTDIR",
        "EISDIR",
        "EEXIST",
        "ENOTEMPTY",
        "ENOENT",
        "EINVAL",
        "EILSEQ",
        "EMLINK",
        "EFBIG",
        "EPERM",
    )
    if hasattr(errno, name)
)
_NO_SPACE_ERRNOS = frozenset(
    getattr(errno, name) for name in ("ENOSPC", "EDQUOT") if hasattr(errno, name)
)
# What opening a file that is not a tar.gz raises (gzip.BadGzipFile is an OSError).
_UNREADABLE: tuple[type[BaseException], ...] = (*CORRUPT, OSError)


@dataclass(frozen=True)
class ArchiveLimits:
    """Caps applied to an archive while it is read, before each member is written.

    ``max_ratio`` bounds the bytes written per compressed byte read, checked once more than
    ``ratio_grace_bytes`` were written. Deflate cannot expand more than about 1032:1 (a
    258-byte match coded in 2 bits), so a member written from the bytes the stream holds never
    reaches 2000:1, and neither does a real workspace (source trees pack 3-10:1; 1 GiB of zeros
    packs 1030:1). Only a member whose contents are not in the stream can: a sparse file (85
    bytes of upload declared 1 GiB of holes), or whatever other such format tarfile learns.
    Sparse members are refused by name; this is the cap behind that refusal. The grace keeps
    the ratio of tiny archives (a 40-byte gzip of a 20 KiB file) out of the question.
    """

    max_members: int = 100_000
    max_bytes: int = 8 * 1024**3
    max_ratio: float = 2000.0
    ratio_grace_bytes: int = 8 * 1024 * 1024


def _refuse_type(member: tarfile.TarInfo) -> ArchiveRejected:
    if member.ischr() or member.isblk():
        return ArchiveRejected(
            f"Archive member {display(member.name)} is a device file; "
            "only regular files, directories and links are allowed."
        )
    if member.isfifo():
        return ArchiveRejected(
            f"Archive member {display(member.name)} is a FIFO; "
            "only regular files, directories and links are allowed."
        )
    return ArchiveRejected(
        f"Archive member {display(member.name)} has an unsupported type "
        f"({member.type!r}); only regular files, directories and links are allowed."
    )


def _truncated(exc: BaseException) -> ArchiveRejected:
    return ArchiveRejected(
        f"The uploaded tar.gz archive is truncated or corrupt ({type(exc).__name__})."
    )


def _os_error(exc: OSError, name: str) -> ArchiveRejected:
    """The 400 (or 413) for an OSError that writing the member ``name`` raised because of
    the archive; other OSErrors are raised again (a 500: the emulator's own trouble)."""
    code = errno.errorcode.get(exc.errno or 0, "")
    reason = f"{exc.strerror or type(exc).__name__}{f' ({code})' if code else ''}"
    if exc.errno in _NO_SPACE_ERRNOS:
        return ArchiveTooLarge(
            f"The emulator ran out of disk space writing archive member {display(name)}: {reason}."
        )
    if exc.errno in _INPUT_ERRNOS:
        return ArchiveRejected(f"Archive member {display(name)} cannot be written: {reason}.")
    raise exc


@contextlib.contextmanager
def _open_archive(archive: Path) -> Iterator[tuple[DecompressAhead, tarfile.TarFile]]:
    """The decompressed stream and a streaming tar reader over it (checks the gzip magic)."""
    with archive.open("rb") as raw:
        if raw.read(2) != GZIP_MAGIC:
            raise ArchiveRejected(
                "The uploaded archive is not gzip-compressed: expected a .tar.gz file "
                "(it must start with the gzip magic bytes 1f 8b)."
            )
        raw.seek(0)
        with (
            igzip_file(fileobj=raw, mode="rb") as gz,
            contextlib.closing(DecompressAhead(gz, raw)) as stream,
        ):
            try:
                # mode "r" over the stream, which seeks forwards only (see DecompressAhead)
                tar = open_tar(cast("IO[bytes]", stream))  # closed by the with below
            except EOFError as exc:  # the first read of the stream hit the cut
                raise _truncated(exc) from exc
            except _UNREADABLE as exc:
                raise ArchiveRejected(
                    f"The uploaded archive is not a readable tar.gz file ({type(exc).__name__})."
                ) from exc
            with tar:
                yield stream, tar


class _Extraction:
    """One extraction's counters and caps (members, bytes, expansion ratio)."""

    def __init__(self, root: Path, limits: ArchiveLimits, stream: DecompressAhead) -> None:
        self.tree = _Tree(root)
        self.limits = limits
        self.stream = stream
        self.regular_files: set[tuple[str, ...]] = set()
        self.total_bytes = 0
        self.count = 0
        self.written = 0
        self.name = ""

    def wrote(self, size: int) -> None:
        """Count ``size`` more bytes written for the current member; refuse past the ratio."""
        self.total_bytes += size
        limits = self.limits
        if self.total_bytes > limits.ratio_grace_bytes:
            compressed = max(self.stream.compressed_position, 1)
            if self.total_bytes > limits.max_ratio * compressed:
                raise ArchiveTooLarge(
                    f"The archive expands more than {limits.max_ratio:g} times its compressed "
                    f"size ({self.total_bytes:,} bytes written from {compressed:,} read, at "
                    f"member {display(self.name)}); the emulator's limit."
                )

    def contents(self, size: int) -> Iterator[bytes]:
        """The ``size`` bytes of the current member's data, in chunks, each counted by
        :meth:`wrote` before it is handed on; a stream that ends first is a truncated archive.
        (The stream is where tarfile left it: at the member's data.)"""
        left = size
        while left:
            chunk = self.stream.read(min(left, CHUNK_SIZE))
            if not chunk:
                raise tarfile.ReadError("unexpected end of data")
            left -= len(chunk)
            self.wrote(len(chunk))
            yield chunk

    def member(self, member: tarfile.TarInfo) -> None:
        """Check and write one member."""
        self.name = member.name
        self.count += 1
        if member.size < 0:  # a PAX record can set it after the header was checked
            raise NegativeSize(member.name, member.offset)
        limits = self.limits
        if self.count > limits.max_members:
            raise ArchiveTooLarge(
                f"The archive has more than {limits.max_members} members, the emulator's limit."
            )
        parts = checked_parts(member.name)
        if member.sparse is not None or (
            member.pax_headers and any(k.startswith("GNU.sparse.") for k in member.pax_headers)
        ):
            raise SparseMember(member.name, "PAX GNU.sparse")
        tree = self.tree
        if member.isdir():
            if parts:
                tree.folder(member, parts)
                self.written += 1
            return
        if not parts:
            raise ArchiveRejected(
                f"Archive member {display(member.name)} names the workspace root "
                "but is not a directory."
            )
        if member.isreg():
            if self.total_bytes + member.size > limits.max_bytes:
                raise ArchiveTooLarge(
                    f"The archive unpacks to more than {limits.max_bytes} bytes, "
                    "the emulator's limit."
                )
            size = member.size
            if size <= CHUNK_SIZE:  # in one piece, counted before the file is made
                data = self.stream.read(size)
                if len(data) < size:
                    raise tarfile.ReadError("unexpected end of data")
                self.wrote(size)
                tree.file(member, parts, (data,))
            else:
                tree.file(member, parts, self.contents(size))
            self.regular_files.add(parts)
        elif member.issym():
            check_symlink_target(member, parts)
            tree.symlink(member, parts)
        elif member.islnk():
            link_parts = hard_link_parts(member)
            if link_parts not in self.regular_files:
                raise ArchiveRejected(
                    f"Archive member {display(member.name)} is a hard link to "
                    f"{display(member.linkname)}, which is not an earlier regular "
                    "file of the archive."
                )
            tree.hardlink(member, parts, link_parts)
        else:
            raise _refuse_type(member)
        self.written += 1


def extract_archive(archive: Path, root: Path, limits: ArchiveLimits | None = None) -> int:
    """Extract ``archive`` into the existing folder ``root``, checking each member first.

    Returns the number of members written. Raises :class:`ArchiveRejected` (or
    :class:`ArchiveTooLarge`) when the archive is unsafe or unreadable, or when a member
    cannot be written because of its name (too long, ...); ``root`` may then hold partial
    output (never anything outside it), so extract into a staging copy and discard it on error.
    """
    try:
        with _open_archive(archive) as (stream, tar):
            extraction = _Extraction(root, limits or ArchiveLimits(), stream)
            try:
                before = extraction.tree.links_outside()
                while (member := tar.next()) is not None:
                    forget_members(tar)
                    try:
                        extraction.member(member)
                    except OSError as exc:
                        if isinstance(exc, CORRUPT):
                            raise  # corrupt data met while copying a file's contents
                        raise _os_error(exc, member.name) from exc
            finally:
                extraction.tree.close()
            # read on to the gzip trailer, so that a truncated or corrupt end is refused
            left = MAX_TRAILING_BYTES
            while left > 0 and (chunk := stream.read(min(left, CHUNK_SIZE))):
                left -= len(chunk)
    except CORRUPT as exc:
        raise _truncated(exc) from exc
    try:
        extraction.tree.check_links_inside(before)
    except OSError as exc:
        raise _os_error(exc, "(a symbolic link)") from exc
    return extraction.written
