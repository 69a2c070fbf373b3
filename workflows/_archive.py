"""Read and validate the workspace archives (tar.gz): streaming, bounded and safe.

Reading (:func:`iter_archive_files`, :func:`read_snapshot`) streams the archive once (never
seeking, never holding a big member in memory) and refuses, with
:class:`~workflows.UnsafeArchiveError`, anything that could write outside the destination or
exhaust the disk: absolute names, ``..``, links leading outside, members reached through a
symlink, devices and fifos, sparse members, and archives over the :class:`ArchiveLimits`
(members, bytes, and the ratio of bytes written to compressed bytes read).

A dump is the sandbox's workspace, mounted there at ``/data``: read with ``workspace_links=True``,
a link to ``/data/...`` is workspace content (see :mod:`workflows._paths`), and a link leading
outside the workspace is left out with a warning instead of failing the whole dump.

Writing archives is :mod:`workflows._pack`; extracting one to disk (on top of
:func:`iter_archive_files`) is :mod:`workflows._extract`. What both of them share with reading
lives here.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import logging
import os
import tarfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, BinaryIO, NoReturn, cast

from isal import igzip, isal_zlib

from workflows._errors import InvalidInputError, UnsafeArchiveError
from workflows._paths import link_escapes, link_target_in_tree, normalize_member_name
from workflows._snapshot import Snapshot, _SnapshotWriter
from workflows._tar_header import FastTarInfo

__all__ = [
    "ARCHIVE_MTIME",
    "ArchiveLimits",
    "iter_archive_files",
    "read_snapshot",
]

log = logging.getLogger("workflows")

#: The modification time written for every member: 2000-01-01T00:00:00Z. Fixed so that packing
#: the same content twice gives the same bytes; not 0 (1970), which some tools refuse (zip
#: cannot store dates before 1980) or warn about.
ARCHIVE_MTIME = 946_684_800

CHUNK_SIZE = 1024 * 1024
_GIB = 1024**3
# Reads of the decompressed archive under this size come from a block read ahead (see
# _ForwardReader): the decompressor's own buffer reads 512 KiB of compressed data at a time,
# so the lead of the compressed count the expansion ratio is judged on barely moves.
_FORWARD_BLOCK = 64 * 1024
# Extended headers (PAX records, GNU long names) are read into memory by tarfile: cap them, one
# by one, a chain of them before one member, and all the global ('g') ones together (tarfile
# keeps their records for the rest of the archive: 20 global headers of 1 MiB with distinct keys
# once grew the client by 278 MiB). The same rules as the emulator's (klavis_emulator._archive).
_MAX_HEADER_BYTES = 1024 * 1024
# At most this many extended headers in a row before one member (PAX 'x', a global 'g', GNU 'L'
# and 'K' make 4 in the worst real case): tarfile handles each by recursion, and 3,000 of them
# (a 24 KB archive) raised a RecursionError.
_MAX_HEADER_CHAIN = 8
_EXTENDED_HEADERS = (
    *tarfile.GNU_TYPES,
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
)
# After the end-of-archive marker, read at most this much more to reach the gzip trailer (and so
# check the CRC); tar pads to 10 KiB records, so a sane archive has far less.
_MAX_TRAILING_BYTES = 1024 * 1024
_MIB = 1024 * 1024
# The expansion ratio is only judged once this many bytes were written: tiny archives (a few
# headers, empty files) have ratios that mean nothing, and 8 MiB is harmless on any disk.
_EXPANSION_FLOOR = 8 * _MIB
# The most a legitimate tar spends per member besides the file's contents: its 512-byte header,
# up to 511 bytes of padding after the contents, and a PAX extended header (a 512-byte header
# and records for a path and a link target of up to PATH_MAX = 4,096 bytes each plus a few
# short ones, padded to blocks: at most 9,216 bytes).
_TAR_MEMBER_OVERHEAD = 512 + 511 + 512 + 9_216
# The end of a tar: two zero blocks, padded to tar's 10,240-byte records.
_TAR_END_OVERHEAD = 2 * 10_240
# gzip's header (with an optional file name or comment: 64 KiB is generous) and trailer.
_GZIP_OVERHEAD = 64 * 1024

ProgressCallback = Callable[[int], None]

# isal's Python modules are untyped
igzip_file: Callable[..., Any] = igzip.IGzipFile


def forget_members(tar: tarfile.TarFile) -> None:
    """tarfile keeps every TarInfo it writes or reads, even when streaming; we need none."""
    tar.members.clear()  # type: ignore[attr-defined]


def _deflate_bound(n: int) -> int:
    """The most deflate can output for ``n`` input bytes, whatever its settings.

    zlib's own conservative bound (``deflateBound`` for non-default window and memory settings,
    where stored blocks cost the most): ``n + n/8 + n/64 + 5``. Streams split into many gzip
    members (bgzip: 26 bytes per 64 KiB) stay far inside it.
    """
    return n + ((n + 7) >> 3) + ((n + 63) >> 6) + 5


@dataclass(frozen=True)
class ArchiveLimits:
    """Caps applied while downloading and reading an archive; exceeding one raises
    :class:`UnsafeArchiveError`.

    ``max_members``: tar members of any kind. ``max_total_bytes``: uncompressed bytes of regular
    files (hard-link copies count again). ``max_member_bytes``: one file's size (None: no cap).

    ``max_expansion_ratio``: bytes written (file contents, hard-link copies included) per
    compressed byte read, judged once more than 8 MiB were written (None: not checked).
    Deflate cannot expand more than about 1032:1 (a 258-byte match costs at least two bits), so
    the default 2000:1 is never met by a real workspace; it stops archives that write far more
    than they hold, such as a file of zeros copied hundreds of times by hard links (a 92-byte
    dump once made the client write 2 GB on its way to 12.5 GiB). A workspace holding many hard
    links to one highly compressible file could meet it: raise it, or pass None.

    ``max_archive_bytes``: compressed bytes downloaded at most, checked while streaming; None
    (the default) derives it from the other caps with :meth:`archive_bytes_cap`.

    The download cap derived that way is loose: the download is not decompressed while it
    streams, so the cap must admit the largest archive the limits allow, and each of
    ``max_members`` may carry 10,751 bytes of tar headers and padding. With the default
    200,000 members that adds about 2.3 GiB (deflate's worst case included), whatever
    ``max_total_bytes`` is:
    ``ArchiveLimits(max_total_bytes=10 * 2**20)`` still downloads up to about 2.3 GiB before
    refusing (the archive is then refused while it is read, and nothing is written). For a
    tight cap on what is downloaded, set ``max_archive_bytes``, or lower ``max_members`` too:

    >>> ArchiveLimits(max_total_bytes=10 * 2**20).archive_bytes_cap()
    2464621096
    >>> ArchiveLimits(max_total_bytes=10 * 2**20, max_members=100).archive_bytes_cap()
    13275508

    Every field is checked when the limits are made: counts and byte sizes are positive ints
    (or None where None is allowed), the ratio a number over 1 (or None); anything else raises
    :class:`~workflows.InvalidInputError` naming the field.
    """

    max_members: int = 200_000
    max_total_bytes: int = 20 * _GIB
    max_member_bytes: int | None = None
    max_expansion_ratio: float | None = 2000.0
    max_archive_bytes: int | None = None

    def __post_init__(self) -> None:
        for name, optional in (
            ("max_members", False),
            ("max_total_bytes", False),
            ("max_member_bytes", True),
            ("max_archive_bytes", True),
        ):
            value = getattr(self, name)
            if value is None and optional:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                wanted = "a positive int" + (" or None" if optional else "")
                raise InvalidInputError(f"ArchiveLimits.{name} must be {wanted}, not {value!r}")
        ratio = self.max_expansion_ratio
        if ratio is not None and (
            isinstance(ratio, bool) or not isinstance(ratio, int | float) or not ratio > 1
        ):
            raise InvalidInputError(
                f"ArchiveLimits.max_expansion_ratio must be a number over 1 or None, not {ratio!r}"
            )

    def archive_bytes_cap(self) -> int:
        """The most compressed bytes an archive within these limits can take.

        ``max_archive_bytes`` when set; otherwise the largest tar the limits allow (every byte
        of ``max_total_bytes``, plus for each of ``max_members`` a header, padding and a PAX
        header for names up to PATH_MAX, plus the end blocks), compressed as badly as deflate
        can (:func:`_deflate_bound`, +14 %), plus 64 KiB of gzip framing. With the defaults that
        is about 25.3 GiB; for a tight cap, lower ``max_members`` with ``max_total_bytes``.
        """
        if self.max_archive_bytes is not None:
            return self.max_archive_bytes
        tar_bytes = (
            self.max_total_bytes + self.max_members * _TAR_MEMBER_OVERHEAD + _TAR_END_OVERHEAD
        )
        return _deflate_bound(tar_bytes) + _GZIP_OVERHEAD


# --- reading -----------------------------------------------------------------------------------

# What a corrupt, truncated or non-gzip input raises from the decompressor or tarfile.
_CORRUPT: tuple[type[BaseException], ...] = (
    gzip.BadGzipFile,
    EOFError,
    zlib.error,
    cast("type[BaseException]", isal_zlib.error),
    tarfile.TarError,
    io.UnsupportedOperation,  # tarfile seeking the forward-only stream backwards
)


# What reading a hostile archive may raise from tarfile's own code besides: it handles extended
# headers by recursion (a chain is capped by _BoundedTarInfo, but any other deep recursion of a
# future tarfile must not escape as a raw RecursionError either).
_UNREADABLE: tuple[type[BaseException], ...] = (*_CORRUPT, RecursionError)


def _not_valid(exc: BaseException) -> UnsafeArchiveError:
    if isinstance(exc, RecursionError):
        err = UnsafeArchiveError(
            "the archive nests its headers too deeply to be read (RecursionError); refused"
        )
    else:
        err = UnsafeArchiveError(f"the data is not a valid tar.gz archive ({exc})")
    err.__cause__ = exc
    return err


class _BoundedTarFile(tarfile.TarFile):
    """A streaming reader that counts the extended headers it meets (see _BoundedTarInfo)."""

    chain = 0  # extended headers in a row before the next member
    chain_bytes = 0  # and their total size
    global_bytes = 0  # total size of the global ('g') headers, which tarfile keeps


class _BoundedTarInfo(FastTarInfo):
    """Refuses extended headers (PAX records, GNU long names) bigger than 1 MiB, more than 8 of
    them in a row or over 1 MiB together before one member, global headers over 1 MiB in all,
    and sparse members of every kind, before tarfile reads them.

    tarfile reads extended headers whole into memory, and a crafted archive could declare
    gigabytes; it handles a chain of them by recursion (3,000 raised a RecursionError), and
    keeps the records of global headers for the rest of the archive. It also expands sparse
    members (GNU type ``'S'`` and PAX ``GNU.sparse.*``
    records): a header of a few bytes declares holes of any size, read back as zeros (an
    85-byte upload put 1 GiB on a disk), and their maps are read into memory. A workspace dump
    holds no sparse member (neither the service nor the emulator writes them), so they are
    refused outright instead of being counted.
    """

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        if self.size < 0:  # tarfile reads "-1" as -1, and a read of -1 bytes reads it all
            _refuse_negative_size(self.name, self.offset)
        if self.type == tarfile.GNUTYPE_SPARSE:
            _refuse_sparse(self.name, "GNU type 'S'")
        reader = cast("_BoundedTarFile", tarfile_)
        if self.type in _EXTENDED_HEADERS:
            if self.size > _MAX_HEADER_BYTES:
                raise UnsafeArchiveError(
                    f"archive has an extended header of {self.size:,} bytes (over "
                    f"{_MAX_HEADER_BYTES:,}) at offset {self.offset:,}; refusing to read it"
                )
            reader.chain += 1
            reader.chain_bytes += self.size
            if reader.chain > _MAX_HEADER_CHAIN:
                raise UnsafeArchiveError(
                    f"archive has more than {_MAX_HEADER_CHAIN} extended headers in a row at "
                    f"offset {self.offset:,}; refusing to read them"
                )
            if reader.chain_bytes > _MAX_HEADER_BYTES:
                raise UnsafeArchiveError(
                    f"archive has {reader.chain_bytes:,} bytes of extended headers in a row "
                    f"(over {_MAX_HEADER_BYTES:,}) at offset {self.offset:,}; refusing to read "
                    "them"
                )
            if self.type == tarfile.XGLTYPE:
                reader.global_bytes += self.size
                if reader.global_bytes > _MAX_HEADER_BYTES:
                    raise UnsafeArchiveError(
                        f"archive has {reader.global_bytes:,} bytes of global headers (over "
                        f"{_MAX_HEADER_BYTES:,}) at offset {self.offset:,}; refusing to read "
                        "them"
                    )
        else:
            reader.chain = reader.chain_bytes = 0
        result: tarfile.TarInfo = super()._proc_member(tarfile_)  # type: ignore[misc]
        return result

    # tarfile calls one of these on the PAX header once it finds GNU.sparse records, with the
    # member's TarInfo (``next``) and, up to Python 3.12, the records as a dict. The signatures
    # differ between versions: take what comes.
    def _proc_gnusparse_00(self, next_: tarfile.TarInfo, *args: Any) -> NoReturn:
        _refuse_sparse(_sparse_name(next_, args), "PAX GNU.sparse 0.0")

    def _proc_gnusparse_01(self, next_: tarfile.TarInfo, *args: Any) -> NoReturn:
        _refuse_sparse(_sparse_name(next_, args), "PAX GNU.sparse 0.1")

    def _proc_gnusparse_10(self, next_: tarfile.TarInfo, *args: Any) -> NoReturn:
        _refuse_sparse(_sparse_name(next_, args), "PAX GNU.sparse 1.0")


def _sparse_name(member: tarfile.TarInfo, args: tuple[Any, ...]) -> str:
    headers = args[0] if args and isinstance(args[0], dict) else {}
    name = headers.get("GNU.sparse.name") or headers.get("path") or member.name
    return str(name)


def _refuse_negative_size(name: str, offset: int) -> NoReturn:
    raise UnsafeArchiveError(
        f"archive member {name!r} at offset {offset:,} declares a negative size; refused",
        member=name,
    )


def _refuse_sparse(name: str, kind: str) -> NoReturn:
    raise UnsafeArchiveError(
        f"archive member {name!r} is a sparse file ({kind}); sparse members are refused: a few "
        "bytes of header would be expanded into holes of any size",
        member=name,
    )


class _CountingReader(io.RawIOBase):
    """Wraps the compressed input to count what was read (an empty input is not a tar.gz)."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__()
        self._raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        data = self._raw.read(len(view))
        n = len(data)
        view[:n] = data
        self.count += n
        return n


class _ForwardReader(io.RawIOBase):
    """The decompressed archive as a TarFile opened in mode "r" needs it: whole reads, ``tell``
    and forward seeks (by reading on). tarfile's stream mode ("r|") copies its buffer for every
    header it takes, and wraps each member's contents in two more objects: reading 5,000 small
    files took 0.18 s through it. Reads under :data:`_FORWARD_BLOCK` are served from a block
    read ahead (a header, a small file's contents and the padding after them cost one slice
    each, not a trip through the decompressor's Python layers); bigger ones go straight
    through."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__()
        self._raw = raw
        self._block = memoryview(b"")
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True  # forwards only

    def tell(self) -> int:
        return self._position

    def read(self, size: int | None = -1) -> bytes:
        """``size`` bytes, fewer only at the end. Reading it all at once (no size, or a
        negative one) is refused: nothing here needs it, and the archive can hold gigabytes."""
        if size is None or size < 0:
            raise tarfile.ReadError(f"a read of {size} bytes: the archive is read in pieces")
        block = self._block
        if size <= len(block):  # the common case
            self._block = block[size:]
            self._position += size
            return bytes(block[:size])
        data = bytes(block)
        self._block = memoryview(b"")
        if size - len(data) >= _FORWARD_BLOCK:
            data += self._raw.read(size - len(data))
        else:
            wanted = size - len(data)
            fresh = memoryview(self._raw.read(_FORWARD_BLOCK))
            data += fresh[:wanted]
            self._block = fresh[wanted:]
        self._position += len(data)
        return data

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Skip forwards to ``offset`` (or to the end, if the archive ends before it)."""
        if whence != io.SEEK_SET or offset < self._position:
            raise io.UnsupportedOperation("the archive is read forwards only")
        while self._position < offset and self.read(min(offset - self._position, CHUNK_SIZE)):
            pass
        return self._position


class _Expansion:
    """Counts the bytes handed out (file contents, hard-link copies) against the compressed
    bytes read, and refuses a ratio over ``limits.max_expansion_ratio``."""

    def __init__(self, ratio: float | None, compressed: _CountingReader) -> None:
        self._ratio = ratio
        self._compressed = compressed
        self.expanded = 0

    def add(self, n: int, member: str) -> None:
        self.expanded += n
        if (
            self._ratio is not None
            and self.expanded > _EXPANSION_FLOOR
            and self.expanded > self._ratio * max(self._compressed.count, 1)
        ):
            raise UnsafeArchiveError(
                f"archive member {member!r} takes the archive to {self.expanded:,} bytes written "
                f"from {self._compressed.count:,} compressed bytes read, over "
                f"{self._ratio:g}:1 (ArchiveLimits.max_expansion_ratio; deflate alone never "
                "exceeds about 1032:1)",
                member=member,
            )


class _MemberReader(io.RawIOBase):
    """A member's contents as yielded by :func:`iter_archive_files`, read straight from the
    archive (where tarfile left it: at the member's data); corrupt or missing data raises
    :class:`UnsafeArchiveError`, and so does an expansion over the limits."""

    def __init__(self, raw: _ForwardReader, info: tarfile.TarInfo, expansion: _Expansion) -> None:
        super().__init__()
        self._raw = raw
        self._name = info.name
        self._left = info.size
        self._at = raw.tell()  # where the rest of the contents starts, while they are current
        self._expansion = expansion

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        wanted = self._left if size is None or size < 0 else min(size, self._left)
        try:
            if self._raw.tell() != self._at:
                raise tarfile.StreamError(
                    f"the contents of {self._name!r} were read after the next member was asked "
                    "for; read each member's contents before asking for the next"
                )
            data = self._raw.read(wanted)
            if len(data) < wanted:
                raise tarfile.ReadError("unexpected end of data")  # as tarfile says it
        except _UNREADABLE as exc:
            raise _not_valid(exc) from exc
        self._at += len(data)
        self._left -= len(data)
        self._expansion.add(len(data), self._name)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(memoryview(buffer)))
        n = len(data)
        memoryview(buffer)[:n] = data
        return n


def _kind_of(info: tarfile.TarInfo) -> str:
    if info.ischr():
        return "a character device"
    if info.isblk():
        return "a block device"
    if info.isfifo():
        return "a fifo"
    return f"of unsupported type {info.type!r}"


def _open_source(src: IO[bytes] | str | os.PathLike[str]) -> tuple[IO[bytes], bool]:
    if isinstance(src, str | os.PathLike):
        return open(src, "rb"), True
    return src, False


SkippedLink = Callable[[str, str], None]


def iter_archive_files(
    src: IO[bytes] | str | os.PathLike[str],
    *,
    limits: ArchiveLimits = ArchiveLimits(),
    workspace_links: bool = False,
    on_skipped_link: SkippedLink | None = None,
) -> Iterator[tuple[str, tarfile.TarInfo, BinaryIO | None]]:
    """Stream a tar.gz, checking every member; yield ``(name, info, contents)``.

    ``name`` is the normalised member name (``"./a/b/"`` gives ``"a/b"``); the archive's root
    (``"."``) is skipped. ``contents`` is a file object for regular files, to be read before the
    next item is requested, and None for folders and links. For a hard link, ``info.linkname`` is
    replaced by the normalised name of the earlier file it copies. Symbolic links come last,
    once the whole archive was checked (no member can be written through one anyway), each with
    its target as stored.

    ``workspace_links=True`` reads a workspace dump: a link to ``/data`` or below is inside (it
    resolves as the archive's root plus the rest; see
    :func:`~workflows._paths.link_target_in_tree`). ``on_skipped_link(name, target)``, when
    given, receives every link that leads outside (after the last member, in name order)
    instead of an error, and such links are not yielded.

    Raises :class:`UnsafeArchiveError` (``member`` set where one is to blame) for an absolute
    name or one with ``..``; a symlink whose target resolves outside the root (following the
    archive's other symlinks), unless ``on_skipped_link`` takes it; a hard link to anything but
    an earlier file; a member reached through a symlink; a member whose parent is a file, or a
    folder replaced by a file (or the reverse); devices, fifos, sparse files and unknown types;
    more members, bytes, or expansion than ``limits``; and data that is not a valid tar.gz (not
    gzip, corrupt, truncated, empty). A consumer must not commit anything until the iteration
    ends without error.
    """
    with contextlib.ExitStack() as stack:
        raw, close_raw = _open_source(src)
        if close_raw:
            stack.callback(raw.close)
        counted = _CountingReader(raw)
        gz: IO[bytes] = igzip_file(fileobj=counted, mode="rb")
        stack.callback(gz.close)
        stream = _ForwardReader(gz)
        try:
            tar = _BoundedTarFile(  # closed by the exit stack
                fileobj=cast("IO[bytes]", stream), mode="r", tarinfo=_BoundedTarInfo
            )
        except _UNREADABLE as exc:
            raise _not_valid(exc) from exc
        stack.callback(tar.close)
        if counted.count == 0:
            raise UnsafeArchiveError("the data is not a valid tar.gz archive (it is empty)")
        expansion = _Expansion(limits.max_expansion_ratio, counted)
        links = _Links(workspace_links, on_skipped_link)
        yield from _iter_members(tar, stream, limits, expansion, links)
        # read on to the gzip trailer so that its CRC is checked, but not unboundedly
        try:
            left = _MAX_TRAILING_BYTES
            while left > 0:
                chunk = gz.read(min(left, CHUNK_SIZE))
                if not chunk:
                    break
                left -= len(chunk)
        except _UNREADABLE as exc:
            raise _not_valid(exc) from exc
        yield from links.finish()


@dataclass
class _Links:
    """The archive's symbolic links, judged once all are known."""

    workspace: bool
    on_skipped: SkippedLink | None
    # name -> target relative to the link's folder (workspace targets converted); a target
    # leading out of the workspace is kept absolute, so chains through it lead out too
    resolved: dict[str, str] = field(default_factory=dict)
    stored: dict[str, str] = field(default_factory=dict)  # name -> target as stored
    skipped: set[str] = field(default_factory=set)

    def add(self, name: str, info: tarfile.TarInfo) -> None:
        self.skipped.discard(name)  # an earlier link of that name no longer counts
        target = info.linkname
        in_tree = link_target_in_tree(name, target) if self.workspace else target
        resolved = target if in_tree is None else in_tree
        if link_escapes(name, resolved, self.resolved):
            self._escapes(name, target)
        self.resolved[name] = resolved
        self.stored[name] = target

    def forget(self, name: str) -> None:
        """``name`` is replaced by a member that is not a link."""
        self.resolved.pop(name, None)
        self.stored.pop(name, None)
        self.skipped.discard(name)

    def _escapes(self, name: str, target: str) -> None:
        if self.on_skipped is None:
            raise UnsafeArchiveError(
                f"archive member {name!r} is a symlink to {target!r}, which leads outside the "
                "destination",
                member=name,
            )
        self.skipped.add(name)

    def finish(self) -> Iterator[tuple[str, tarfile.TarInfo, None]]:
        # a chain of symlinks can only be judged once all of them are known
        for name, resolved in self.resolved.items():
            if name not in self.skipped and link_escapes(name, resolved, self.resolved):
                self._escapes(name, self.stored[name])
        if self.on_skipped is not None:
            for name in sorted(self.skipped):
                self.on_skipped(name, self.stored[name])
        for name, target in self.stored.items():
            if name not in self.skipped:
                info = tarfile.TarInfo(name)
                info.type = tarfile.SYMTYPE
                info.linkname = target
                info.mode = 0o777
                yield name, info, None


def _iter_members(
    tar: tarfile.TarFile,
    stream: _ForwardReader,
    limits: ArchiveLimits,
    expansion: _Expansion,
    links: _Links,
) -> Iterator[tuple[str, tarfile.TarInfo, BinaryIO | None]]:
    kinds: dict[str, str] = {}  # name -> "f" file, "d" folder, "l" symlink
    sizes: dict[str, int] = {}  # regular files (and hard-link copies) -> size
    members = 0
    total = 0

    def add_bytes(name: str, size: int) -> None:
        nonlocal total
        if limits.max_member_bytes is not None and size > limits.max_member_bytes:
            raise UnsafeArchiveError(
                f"archive member {name!r} is {size:,} bytes, over the limit of "
                f"{limits.max_member_bytes:,}",
                member=name,
            )
        total += size
        if total > limits.max_total_bytes:
            raise UnsafeArchiveError(
                f"archive holds more than {limits.max_total_bytes:,} bytes of files "
                f"(reached at member {name!r})",
                member=name,
            )

    while True:
        try:
            info = tar.next()
        except _UNREADABLE as exc:
            raise _not_valid(exc) from exc
        forget_members(tar)
        if info is None:
            break
        if info.sparse is not None:  # pragma: no cover - refused while its header was read
            _refuse_sparse(info.name, "sparse map")
        if info.size < 0:  # a PAX record can set it after the header was checked
            _refuse_negative_size(info.name, info.offset)
        members += 1
        if members > limits.max_members:
            raise UnsafeArchiveError(
                f"archive has more than {limits.max_members:,} members (reached at member "
                f"{info.name!r})",
                member=info.name,
            )
        name = normalize_member_name(info.name)
        if name is None:
            if info.isdir():
                continue
            raise UnsafeArchiveError(
                f"archive member {info.name!r} names the root but is not a folder",
                member=info.name,
            )
        parts = name.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            kind = kinds.get(parent)
            if kind == "l":
                raise UnsafeArchiveError(
                    f"archive member {info.name!r} would be written through the symlink {parent!r}",
                    member=info.name,
                )
            if kind == "f":
                raise UnsafeArchiveError(
                    f"archive member {info.name!r} needs {parent!r} to be a folder, but it is "
                    "a file in the archive",
                    member=info.name,
                )
            kinds[parent] = "d"
        existing = kinds.get(name)
        if info.isdir():
            if existing not in (None, "d"):
                raise UnsafeArchiveError(
                    f"archive member {info.name!r} is a folder, but an earlier member of that "
                    "name is not",
                    member=info.name,
                )
            kinds[name] = "d"
            yield name, info, None
            continue
        if existing == "d":
            raise UnsafeArchiveError(
                f"archive member {info.name!r} would replace a folder of the archive",
                member=info.name,
            )
        if info.isreg():
            add_bytes(info.name, info.size)
            kinds[name] = "f"
            sizes[name] = info.size
            links.forget(name)
            yield name, info, cast("BinaryIO", _MemberReader(stream, info, expansion))
        elif info.issym():
            if not info.linkname or "\x00" in info.linkname:
                raise UnsafeArchiveError(
                    f"archive member {info.name!r} is a symlink with an empty or invalid target",
                    member=info.name,
                )
            links.add(name, info)
            kinds[name] = "l"
            sizes.pop(name, None)
        elif info.islnk():
            try:
                target = normalize_member_name(info.linkname)
            except UnsafeArchiveError:
                target = None
            if target is None or kinds.get(target) != "f":
                raise UnsafeArchiveError(
                    f"archive member {info.name!r} is a hard link to {info.linkname!r}, which is "
                    "not an earlier file of the archive",
                    member=info.name,
                )
            add_bytes(info.name, sizes[target])
            # a copy costs no compressed byte: it counts fully against the expansion ratio
            expansion.add(sizes[target], info.name)
            kinds[name] = "f"
            sizes[name] = sizes[target]
            links.forget(name)
            info.linkname = target
            yield name, info, None
        else:
            raise UnsafeArchiveError(
                f"archive member {info.name!r} is {_kind_of(info)}; only files, folders and "
                "links are accepted",
                member=info.name,
            )


def file_mode(info: tarfile.TarInfo) -> int:
    """The mode a member's file gets: 0o755 when its owner exec bit is set, else 0o644."""
    return 0o755 if info.mode & 0o100 else 0o644


def warn_skipped(what: str, skipped: Mapping[str, str], outside: str = "the workspace") -> None:
    """One warning line on the ``workflows`` logger listing the links left out (20 at most)."""
    if not skipped:
        return
    shown = ", ".join(f"{name!r} -> {target!r}" for name, target in list(skipped.items())[:20])
    more = f" and {len(skipped) - 20} more" if len(skipped) > 20 else ""
    log.warning(
        "%s: left out %d symlink%s leading outside %s: %s%s",
        what,
        len(skipped),
        "" if len(skipped) == 1 else "s",
        outside,
        shown,
        more,
    )


def read_snapshot(
    src: IO[bytes] | str | os.PathLike[str],
    *,
    limits: ArchiveLimits = ArchiveLimits(),
    workspace_links: bool = False,
    skip_links_outside: bool | None = None,
    what: str = "dump",
) -> Snapshot:
    """Read the tar.gz ``src`` (a file object or a path) into a :class:`Snapshot`.

    Every check of :func:`iter_archive_files` applies. Regular files (and hard-link copies)
    become entries, symlinks go to :attr:`Snapshot.links` with their targets as stored; the
    root and folders are not kept. With ``workspace_links=True`` (a dump), links to ``/data``
    or below are inside. With ``skip_links_outside`` (default: ``workspace_links``), links
    leading outside are left out with one warning (naming ``what``) and listed in
    :attr:`Snapshot.skipped_links` instead of failing the read. Contents go to one anonymous
    temporary file, so memory stays flat; close the snapshot (or use it in a ``with``) to free
    it.
    """
    skip = workspace_links if skip_links_outside is None else skip_links_outside
    writer = _SnapshotWriter()
    try:
        for name, info, reader in iter_archive_files(
            src,
            limits=limits,
            workspace_links=workspace_links,
            on_skipped_link=writer.skip_link if skip else None,
        ):
            if reader is not None:
                writer.add(name, reader, mode=file_mode(info))
            elif info.islnk():
                writer.copy(name, info.linkname)
            elif info.issym():
                writer.link(name, info.linkname)
        snapshot = writer.finish()
    except BaseException:
        writer.abort()
        raise
    if skip:
        warn_skipped(
            what, snapshot.skipped_links, "the workspace" if workspace_links else "the archive"
        )
    return snapshot
