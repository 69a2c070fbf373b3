"""Pack and unpack the workspace archives (tar.gz), streaming, reproducible and safe.

Packing (:func:`write_archive`, :func:`pack_to_tempfile`) turns planned
:class:`~workflows._collect.SourceFile` entries into a reproducible tar.gz compressed with ISA-L
(``isal``), reading file contents in 1 MiB chunks so memory stays flat.

Unpacking (:func:`iter_archive_files`, :func:`extract_archive`, :func:`read_snapshot`) streams
the archive once (never seeking, never holding a big member in memory) and refuses, with
:class:`~workflows.UnsafeArchiveError`, anything that could write outside the destination or
exhaust the disk: absolute names, ``..``, links leading outside, members reached through a
symlink, devices and fifos, sparse members, and archives over the :class:`ArchiveLimits`
(members, bytes, and the ratio of bytes written to compressed bytes read).

A dump is the sandbox's workspace, mounted there at ``/data``: read with ``workspace_links=True``,
a link to ``/data/...`` is workspace content (see :mod:`workflows._paths`), and a link leading
outside the workspace is left out with a warning instead of failing the whole dump.
:func:`prepare_destination` checks (by making it) where ``dump_to`` will write before anything
is downloaded.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import itertools
import logging
import os
import shutil
import stat
import tarfile
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, Any, BinaryIO, NoReturn, cast

from isal import igzip, igzip_threaded, isal_zlib

from workflows._collect import SourceFile
from workflows._errors import InvalidInputError, UnsafeArchiveError
from workflows._paths import link_escapes, link_target_in_tree, normalize_member_name, shown_path
from workflows._snapshot import Snapshot, _SnapshotWriter

__all__ = [
    "ARCHIVE_MTIME",
    "ArchiveLimits",
    "Destination",
    "Extracted",
    "extract_archive",
    "iter_archive_files",
    "pack_to_tempfile",
    "prepare_destination",
    "read_snapshot",
    "write_archive",
]

log = logging.getLogger("workflows")

#: The modification time written for every member: 2000-01-01T00:00:00Z. Fixed so that packing
#: the same content twice gives the same bytes; not 0 (1970), which some tools refuse (zip
#: cannot store dates before 1980) or warn about.
ARCHIVE_MTIME = 946_684_800

CHUNK_SIZE = 1024 * 1024
# Blocks handed to the compression thread: 256 KiB keeps the writer's queues and buffers near
# 3 MiB (1 MiB blocks cost ~9 MiB) with the same speed and a size within 0.2 %.
_COMPRESS_BLOCK = 256 * 1024
_GIB = 1024**3
# tarfile's stream reader slices its buffer for every 512-byte header: a 1 MiB buffer made
# reading 100 MB in 2,000 files 4x slower than 64 KiB (measured), and cost 3 MiB more memory.
_TAR_READ_BUFFER = 64 * 1024
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
_igzip_file: Callable[..., Any] = igzip.IGzipFile
_threaded_open: Callable[..., Any] = igzip_threaded.open


def _forget_members(tar: tarfile.TarFile) -> None:
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


# --- packing -----------------------------------------------------------------------------------


class _Sink:
    """The file object tarfile writes to: forwards to the compressor and counts (for ``tell``)."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self.pos = 0

    def write(self, data: bytes) -> int:
        self._out.write(data)
        n = len(data)
        self.pos += n
        return n

    def tell(self) -> int:
        return self.pos


class _Counter(io.RawIOBase):
    """Wraps the caller's output: counts the compressed bytes written, never closes it."""

    def __init__(self, out: IO[bytes]) -> None:
        super().__init__()
        self._out = out
        self.count = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self._out.write(data)
        self.count += n
        return n

    def flush(self) -> None:
        self._out.flush()


class _SourceReader:
    """Reads one planned file for tarfile, reporting progress; refuses a file that shrank."""

    def __init__(
        self, raw: IO[bytes], name: str, size: int, progress: ProgressCallback | None
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
            raise InvalidInputError(
                f"{self._name!r} got shorter while it was being packed; seed it again"
            )
        self._left -= got
        if self._progress is not None and got:
            self._progress(got)
        return data


def _tarinfo(entry: SourceFile) -> tarfile.TarInfo:
    info = tarfile.TarInfo(entry.name)
    info.mtime = ARCHIVE_MTIME
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


def _open_compressor(sink: _Counter, compresslevel: int, threads: int) -> IO[bytes]:
    if threads > 0:
        return cast(
            "IO[bytes]",
            _threaded_open(
                sink,
                "wb",
                compresslevel=compresslevel,
                threads=threads,
                block_size=_COMPRESS_BLOCK,
            ),
        )
    # filename="" and mtime=0: no name and no time in the gzip header
    return cast(
        "IO[bytes]",
        _igzip_file(filename="", mode="wb", compresslevel=compresslevel, fileobj=sink, mtime=0),
    )


def _open_source_file(entry: SourceFile) -> IO[bytes]:
    """Open a planned file for packing; one that vanished or cannot be read is named."""
    assert entry.path is not None
    try:
        return open(entry.path, "rb", buffering=0)
    except FileNotFoundError as exc:
        raise InvalidInputError(
            f"{os.fspath(entry.path)!r} disappeared after it was planned; seed again"
        ) from exc
    except OSError as exc:
        raise InvalidInputError(
            f"cannot read {os.fspath(entry.path)!r}: {exc.strerror or exc}; fix its permissions "
            "or add it to ignore="
        ) from exc


def write_archive(
    entries: Sequence[SourceFile],
    out: IO[bytes],
    *,
    compresslevel: int = 1,
    progress: ProgressCallback | None = None,
    threads: int = 1,
) -> int:
    """Write ``entries`` to ``out`` as a reproducible tar.gz; return the compressed size.

    The archive is PAX format, sorted by name, with every mtime :data:`ARCHIVE_MTIME`, uid/gid 0,
    empty owner names, modes 0o644/0o755 (links 0o777), and a gzip header without a time or a
    file name: the same entries give the same bytes whatever the files' times or owners on disk.
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
    counter = _Counter(out)
    compressor = _open_compressor(counter, compresslevel, threads)
    try:
        sink = _Sink(compressor)
        tar = tarfile.TarFile(
            fileobj=cast("IO[bytes]", sink),
            mode="w",
            format=tarfile.PAX_FORMAT,
            encoding="utf-8",
            copybufsize=CHUNK_SIZE,
        )
        for entry in ordered:
            info = _tarinfo(entry)
            if info.type != tarfile.REGTYPE:
                tar.addfile(info)
            elif entry.data is not None:
                with io.BytesIO(entry.data) as buf:
                    tar.addfile(info, _SourceReader(buf, entry.name, entry.size, progress))
            elif entry.path is not None:
                with _open_source_file(entry) as fh:
                    tar.addfile(info, _SourceReader(fh, entry.name, entry.size, progress))
            else:
                raise InvalidInputError(f"archive entry {entry.name!r} has no content")
            _forget_members(tar)
        tar.close()
    finally:
        compressor.close()
    out.flush()
    return counter.count


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


# --- reading -----------------------------------------------------------------------------------

# What a corrupt, truncated or non-gzip input raises from the decompressor or tarfile.
_CORRUPT: tuple[type[BaseException], ...] = (
    gzip.BadGzipFile,
    EOFError,
    zlib.error,
    cast("type[BaseException]", isal_zlib.error),
    tarfile.TarError,
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


class _BoundedTarInfo(tarfile.TarInfo):
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
    """A member's contents as yielded by :func:`iter_archive_files`; corrupt data raises
    :class:`UnsafeArchiveError`, and so does an expansion over the limits."""

    def __init__(self, raw: IO[bytes], name: str, expansion: _Expansion) -> None:
        super().__init__()
        self._raw = raw
        self._name = name
        self._expansion = expansion

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        try:
            data = self._raw.read(size)
        except _UNREADABLE as exc:
            raise _not_valid(exc) from exc
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
        gz: IO[bytes] = _igzip_file(fileobj=counted, mode="rb")
        stack.callback(gz.close)
        try:
            tar = _BoundedTarFile.open(  # closed by the exit stack
                fileobj=gz,
                mode="r|",
                tarinfo=_BoundedTarInfo,
                bufsize=_TAR_READ_BUFFER,
            )
        except _UNREADABLE as exc:
            raise _not_valid(exc) from exc
        stack.callback(tar.close)
        if counted.count == 0:
            raise UnsafeArchiveError("the data is not a valid tar.gz archive (it is empty)")
        expansion = _Expansion(limits.max_expansion_ratio, counted)
        links = _Links(workspace_links, on_skipped_link)
        yield from _iter_members(tar, limits, expansion, links)
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
    tar: tarfile.TarFile, limits: ArchiveLimits, expansion: _Expansion, links: _Links
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
        _forget_members(tar)
        if info is None:
            break
        if info.sparse is not None:  # pragma: no cover - refused while its header was read
            _refuse_sparse(info.name, "sparse map")
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
            fileobj = tar.extractfile(info)
            assert fileobj is not None  # a regular member always has contents
            yield name, info, cast("BinaryIO", _MemberReader(fileobj, info.name, expansion))
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


# --- extraction --------------------------------------------------------------------------------

_O_BINARY: int = getattr(os, "O_BINARY", 0)
_O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
_UTIME_FD = os.utime in os.supports_fd
# Files up to this size are read whole and written by a few threads, so that creating and writing
# them (system calls that let go of the GIL) overlaps with decompressing the next members; bigger
# ones are streamed by the calling thread in CHUNK_SIZE pieces.
_POOLED_FILE_MAX = 4 * 1024 * 1024
_WRITE_THREADS = 4
# Bytes read but not yet written, at most; an empty file counts as _WRITE_MIN_COST.
_WRITE_BUDGET = 8 * 1024 * 1024
_WRITE_MIN_COST = 4096
_WRITE_BATCH = 512 * 1024


def _file_mode(info: tarfile.TarInfo) -> int:
    return 0o755 if info.mode & 0o100 else 0o644


def _remove_non_dir(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _member_mtime(info: tarfile.TarInfo) -> int:
    return int(info.mtime) if info.mtime and info.mtime > 0 else ARCHIVE_MTIME


def _create_file(path: str, mode: int) -> int:
    """Open a new file at ``path`` for writing; an entry already there (an earlier member of
    the same name, or a symlink, never followed) is replaced."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_BINARY
    try:
        return os.open(path, flags, mode)
    except FileExistsError:
        os.unlink(path)
        return os.open(path, flags, mode)


def _set_mtime(fd: int, path: str, mtime: int) -> None:
    if _UTIME_FD:
        os.utime(fd, (mtime, mtime))
    else:  # pragma: no cover - platforms without futimens
        os.utime(path, (mtime, mtime))


def _write_bytes(path: str, data: bytes, mode: int, mtime: int) -> None:
    fd = _create_file(path, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        _set_mtime(fd, path, mtime)
    finally:
        os.close(fd)


def _write_stream(
    path: str, reader: BinaryIO, info: tarfile.TarInfo, progress: ProgressCallback | None
) -> None:
    fd = _create_file(path, _file_mode(info))
    with open(fd, "wb", buffering=0, closefd=True) as out:
        while True:
            chunk = reader.read(CHUNK_SIZE)
            if not chunk:
                break
            out.write(chunk)
            if progress is not None:
                progress(len(chunk))
        _set_mtime(fd, path, _member_mtime(info))


class _FileWriter:
    """Writes small files on a few threads while the calling thread decompresses the next ones.

    Files are handed over in batches of about :data:`_WRITE_BATCH` bytes (one hand-over per file
    cost more than it saved). At most ``budget`` bytes read but not yet written are held (an empty
    file counts as :data:`_WRITE_MIN_COST`, which also bounds the queue). The first error of a
    write is raised by the next :meth:`submit` or by :meth:`drain`; :meth:`close` waits for the
    threads, so nothing is written after it returns.
    """

    def __init__(self, threads: int, budget: int) -> None:
        self._threads = threads
        self._budget = budget
        self._pool: ThreadPoolExecutor | None = None
        self._cond = threading.Condition()
        self._held = 0
        self._tasks = 0
        self._error: BaseException | None = None
        self._batch: list[tuple[str, bytes, int, int]] = []
        self._batch_cost = 0

    def submit(self, path: str, reader: BinaryIO, info: tarfile.TarInfo) -> int:
        """Read the member's contents now; they are written to ``path`` on a thread."""
        cost = max(info.size, _WRITE_MIN_COST)
        with self._cond:
            if self._held and self._held + cost > self._budget:
                self._flush_locked()
                while self._held and self._held + cost > self._budget and self._error is None:
                    self._cond.wait()
            self._raise_error()
            self._held += cost
        try:
            data = reader.read(info.size)
        except BaseException:
            with self._cond:
                self._held -= cost
            raise
        with self._cond:
            self._batch.append((path, data, _file_mode(info), _member_mtime(info)))
            self._batch_cost += cost
            if self._batch_cost >= _WRITE_BATCH:
                self._flush_locked()
        return len(data)

    def _flush_locked(self) -> None:
        if not self._batch:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, "workflows-extract")
        batch, cost = self._batch, self._batch_cost
        self._pool.submit(self._write, batch, cost)
        self._batch, self._batch_cost = [], 0
        self._tasks += 1

    def _write(self, batch: list[tuple[str, bytes, int, int]], cost: int) -> None:
        error: BaseException | None = None
        try:
            for path, data, mode, mtime in batch:
                if self._error is not None:
                    break
                _write_bytes(path, data, mode, mtime)
        except Exception as exc:  # noqa: BLE001 - raised again on the calling thread
            error = exc
        finally:
            with self._cond:
                self._held -= cost
                self._tasks -= 1
                if error is not None and self._error is None:
                    self._error = error
                self._cond.notify_all()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def drain(self) -> None:
        """Wait until every file handed over is written; raise the first error of a write."""
        with self._cond:
            self._flush_locked()
            while self._tasks:
                self._cond.wait()
            self._raise_error()

    def close(self) -> None:
        """Stop the threads (batches not yet started are dropped) and wait for them."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _add_folders(folders: set[str], name: str) -> None:
    """Record ``name`` and all its parents as folders that exist."""
    while name and name not in folders:
        folders.add(name)
        name = name.rpartition("/")[0]


def _plan_merge(tmp: str, dest: str) -> None:
    """Check that ``tmp`` can be moved over ``dest`` without replacing one of dest's folders."""
    for dirpath, dirnames, filenames in os.walk(tmp):
        rel = os.path.relpath(dirpath, tmp)
        keep: list[str] = []
        for d in dirnames:
            target = os.path.normpath(os.path.join(dest, rel, d))
            try:
                st = os.lstat(target)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                keep.append(d)  # merge inside; a missing or non-folder target is replaced whole
        dirnames[:] = keep
        for f in filenames:
            target = os.path.normpath(os.path.join(dest, rel, f))
            try:
                st = os.lstat(target)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                raise InvalidInputError(
                    f"cannot extract: {target!r} is a folder and the archive has a file there; "
                    "nothing was written"
                )


def _merge(tmp: str, dest: str) -> None:
    """Move the extracted tree ``tmp`` into ``dest``; members replace entries of the same name."""
    for dirpath, dirnames, filenames in os.walk(tmp):
        rel = os.path.relpath(dirpath, tmp)
        keep: list[str] = []
        for d in dirnames:
            src = os.path.join(dirpath, d)
            target = os.path.normpath(os.path.join(dest, rel, d))
            try:
                st = os.lstat(target)
            except FileNotFoundError:
                os.rename(src, target)
                continue
            if stat.S_ISDIR(st.st_mode):
                keep.append(d)
            else:
                os.unlink(target)  # a file or a symlink (never followed) where a folder goes
                os.rename(src, target)
        dirnames[:] = keep
        for f in filenames:
            os.replace(os.path.join(dirpath, f), os.path.normpath(os.path.join(dest, rel, f)))


@dataclass(frozen=True)
class Extracted:
    """What :meth:`Destination.extract` wrote: the regular files (sorted) and the links it left
    out because they lead outside the destination (name -> target as stored)."""

    files: list[str]
    skipped_links: dict[str, str]


def _warn_skipped(what: str, skipped: Mapping[str, str], outside: str = "the workspace") -> None:
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


def _destination_error(shown: str, action: str, exc: OSError) -> InvalidInputError:
    err = InvalidInputError(f"cannot {action} {shown}: {exc.strerror or exc}")
    err.__cause__ = exc
    return err


@dataclass
class Destination:
    """Where a dump goes, checked and made ready before the download (see
    :func:`prepare_destination`).

    ``real`` is the destination's own entry (its parent resolved, its name never followed);
    ``staging`` is a temporary folder (extraction) or file (a kept ``.tar.gz``) beside it;
    ``made`` lists the parent folders made for it, removed again by :meth:`discard` when the
    dump fails, so a refused dump leaves the disk as it was.
    """

    path: str
    real: str
    keep_archive: bool
    staging: str
    made: list[str]

    @property
    def shown(self) -> str:
        return shown_path(self.path)

    def open_archive(self) -> IO[bytes]:
        """The staging file, to download a kept ``.tar.gz`` into (the caller closes it)."""
        try:
            return open(self.staging, "r+b")
        except OSError as exc:
            raise _destination_error(self.shown, "write to", exc) from exc

    def commit_archive(self) -> None:
        """Move the downloaded ``.tar.gz`` into place (atomically)."""
        try:
            os.replace(self.staging, self.real)
        except OSError as exc:
            raise _destination_error(self.shown, "write", exc) from exc
        self.made = []

    def discard(self) -> None:
        """Remove what :func:`prepare_destination` made (idempotent, best effort)."""
        if self.keep_archive:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.staging)
        elif os.path.lexists(self.staging):
            shutil.rmtree(self.staging, ignore_errors=True)
        for folder in reversed(self.made):
            with contextlib.suppress(OSError):  # not empty, or gone: leave it
                os.rmdir(folder)
        self.made = []

    def extract(
        self,
        src: IO[bytes] | str | os.PathLike[str],
        *,
        limits: ArchiveLimits = ArchiveLimits(),
        progress: ProgressCallback | None = None,
        workspace_links: bool = False,
    ) -> Extracted:
        """Extract the tar.gz ``src`` into the destination (see :func:`extract_archive`).

        With ``workspace_links=True`` (a dump) links to ``/data/...`` are written as relative
        links, and links leading outside the destination are left out with a warning (listed
        in the result) instead of failing the extraction. On any error nothing is left behind.
        """
        try:
            result = _extract_into(self, src, limits, progress, workspace_links)
        except BaseException:
            self.discard()
            raise
        self.made = []
        if workspace_links:
            _warn_skipped(f"dump_to {self.shown}", result.skipped_links)
        return result


def _entry_path(path: str) -> str:
    """The destination's own entry: its parent folder resolved (symlinks on the way followed),
    its last name kept as is, so that a symlink there is replaced or refused, never followed.

    A path whose last part is ``.`` or ``..`` names a folder reached through its parent, so it
    is resolved whole (it cannot be a link of its own).
    """
    trimmed = path.rstrip(os.sep) or path  # "out/" names the entry "out" too; "/" stays
    head, tail = os.path.split(trimmed)
    if tail in ("", os.curdir, os.pardir):
        return os.path.realpath(trimmed)
    return os.path.join(os.path.realpath(head or os.curdir), tail)


def _symlink_destination(shown: str, entry: str) -> str:
    try:
        target = f" (to {os.readlink(entry)!r})"
    except OSError:  # pragma: no cover - removed meanwhile
        target = ""
    return (
        f"cannot extract into {shown}: it is a symlink{target}; extracting would write outside "
        "the path named. Name the folder itself, or remove the link"
    )


def prepare_destination(dest: str | os.PathLike[str], *, keep_archive: bool = False) -> Destination:
    """Check where a dump will go, by making it ready, before anything is downloaded.

    The nearest existing folder on the way must be a folder (not a file), the missing parent
    folders are made, and a temporary folder (or, with ``keep_archive``, a temporary file) is
    made beside the destination: whatever stops these (a file on the way, a read-only or
    virtual file system such as ``/proc``, a name too long) raises :class:`InvalidInputError`
    naming the path, with nothing left behind. An existing destination must be a folder (or,
    with ``keep_archive``, must not be one).

    Symlinks on the way to the destination are followed, as by any tool; the destination's own
    entry never is (see :func:`_entry_path`). A kept ``.tar.gz`` replaces a symlink of that
    name, as it replaces a file: the link's target (a ``~/.bashrc`` planted behind
    ``shared/ws.tar.gz``) is never written, nor a dangling link's target created. A folder
    destination that is a symlink is refused, naming the link and its target: extracting into
    the target would write outside the path named, and replacing the link would drop whatever
    its owner meant by it; name the folder itself instead.
    """
    path = os.fspath(dest)
    shown = shown_path(path)
    real = _entry_path(path)
    try:
        st = os.lstat(real)
    except (FileNotFoundError, NotADirectoryError):  # a file on the way is named below
        st = None
    except OSError as exc:
        raise _destination_error(shown, "write to", exc) from exc
    if st is not None and not keep_archive and stat.S_ISLNK(st.st_mode):
        raise InvalidInputError(_symlink_destination(shown, real))
    if st is not None and stat.S_ISDIR(st.st_mode) == keep_archive:
        raise InvalidInputError(
            f"cannot write to {shown}: it is a folder; name a file to save the archive in"
            if keep_archive
            else f"cannot extract into {shown}: it exists and is not a folder; name a folder, or "
            "a .tar.gz file"
        )
    parent = os.path.dirname(real)
    missing: list[str] = []
    probe = parent
    while not os.path.lexists(probe):
        missing.append(probe)
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise InvalidInputError(f"cannot write to {shown}: {probe!r} is not a folder")
    made: list[str] = []
    try:
        for folder in reversed(missing):
            os.mkdir(folder)
            made.append(folder)
        if keep_archive:
            fd, staging = tempfile.mkstemp(prefix=".klavis-dump-", suffix=".tmp", dir=parent)
            os.close(fd)
        else:
            staging = tempfile.mkdtemp(prefix=".klavis-dump-", dir=parent)
    except OSError as exc:
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise _destination_error(shown, "create" if missing else "write to", exc) from exc
    return Destination(path, real, keep_archive, staging, made)


def _extract_into(
    destination: Destination,
    src: IO[bytes] | str | os.PathLike[str],
    limits: ArchiveLimits,
    progress: ProgressCallback | None,
    workspace_links: bool,
) -> Extracted:
    # mkdtemp's folder is private (0o700); the tree is built in a folder made the usual way
    root = os.path.join(destination.staging, "root")
    dest_path = destination.real
    writer = _FileWriter(_WRITE_THREADS, _WRITE_BUDGET)
    files: set[str] = set()
    skipped: dict[str, str] = {}
    current = ""

    def skip(name: str, target: str) -> None:
        # a link left out replaces whatever an earlier member of that name wrote
        writer.drain()
        _remove_non_dir(os.path.join(root, *name.split("/")))
        files.discard(name)
        skipped[name] = target

    try:
        os.mkdir(root)
        # The tree is new and only this loop writes to it, and iter_archive_files refuses members
        # reached through a symlink or a file: so a folder made once stays a folder (no stat).
        folders: set[str] = {""}
        # names written as files or symlinks: a later member of the same name waits for them
        written: set[str] = set()
        try:
            for name, info, reader in iter_archive_files(
                src,
                limits=limits,
                workspace_links=workspace_links,
                on_skipped_link=skip if workspace_links else None,
            ):
                current = name
                path = os.path.join(root, *name.split("/"))
                if info.isdir():
                    if name not in folders:
                        os.makedirs(path, exist_ok=True)
                        _add_folders(folders, name)
                    continue
                folder = name.rpartition("/")[0]
                if folder not in folders:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    _add_folders(folders, folder)
                if name in written:
                    writer.drain()
                written.add(name)
                if reader is not None:
                    if info.size <= _POOLED_FILE_MAX:
                        size = writer.submit(path, reader, info)
                        if progress is not None and size:
                            progress(size)
                    else:
                        _write_stream(path, reader, info, progress)
                    files.add(name)
                elif info.issym():
                    target = info.linkname
                    if workspace_links:
                        target = link_target_in_tree(name, target) or target
                    try:
                        os.symlink(target, path)
                    except FileExistsError:  # an earlier member of that name
                        os.unlink(path)
                        os.symlink(target, path)
                    files.discard(name)
                else:  # a hard link: copy the earlier file
                    writer.drain()
                    source = os.path.join(root, *info.linkname.split("/"))
                    if source != path:
                        _remove_non_dir(path)
                        shutil.copyfile(source, path, follow_symlinks=False)
                        shutil.copymode(source, path, follow_symlinks=False)
                        if progress is not None:
                            progress(os.path.getsize(path))
                    files.add(name)
            current = ""
            writer.drain()
        finally:
            writer.close()
    except OSError as exc:
        # the destination cannot hold the dump (a name too long under it, a full disk, ...)
        where = _member_of(exc, root) or current
        raise InvalidInputError(
            f"cannot write {where!r} under {destination.shown}: {exc.strerror or exc}; "
            "nothing was written"
        ) from exc
    try:
        if not os.path.lexists(dest_path):
            os.rename(root, dest_path)  # a link made meanwhile is not replaced: ENOTDIR
        else:
            if os.path.islink(dest_path):  # made since prepare_destination checked
                raise InvalidInputError(
                    _symlink_destination(destination.shown, dest_path) + "; nothing was written"
                )
            _plan_merge(root, dest_path)
            _merge(root, dest_path)
    except OSError as exc:
        raise _destination_error(destination.shown, "move the dump into", exc) from exc
    shutil.rmtree(destination.staging, ignore_errors=True)
    return Extracted(sorted(files), skipped)


def _member_of(exc: OSError, root: str) -> str | None:
    """The archive member an OSError is about, when its file name is inside ``root``."""
    filename = exc.filename
    if not isinstance(filename, str) or not filename.startswith(root + os.sep):
        return None
    return filename[len(root) + 1 :].replace(os.sep, "/")


def extract_archive(
    src: IO[bytes] | str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    limits: ArchiveLimits = ArchiveLimits(),
    progress: ProgressCallback | None = None,
    workspace_links: bool = False,
) -> list[str]:
    """Safely extract the tar.gz ``src`` (a file object or a path) into the folder ``dest``.

    Every check of :func:`iter_archive_files` applies. The archive is extracted into a temporary
    folder next to ``dest`` and moved into place only once all of it passed, so a refused
    archive leaves ``dest`` exactly as it was (and the parents made for it are removed again),
    and nothing is ever written outside ``dest``. ``dest`` is created (with its parents) if
    missing (see :func:`prepare_destination`). When ``dest`` already has content, members
    replace the files, symlinks (never followed) and folders-versus-file entries of the same
    name, and everything else is left alone; a member that is a file where ``dest`` has a folder
    raises :class:`InvalidInputError` before anything is moved. So does a member the destination
    cannot hold (a path too long under it), naming it.

    Files get mode 0o644, or 0o755 when the member's owner exec bit is set (less the umask), and
    the member's mtime; symlinks are created as stored (they were checked to stay inside), or,
    with ``workspace_links=True`` (a dump: see :meth:`Destination.extract`), relative; a hard
    link becomes a copy of its target. Files up to 4 MiB are written by a few threads while the
    next members are decompressed (at most 8 MiB waiting). ``progress(n)`` is called, on the
    calling thread, with the number of file bytes extracted since its last call. Returns the
    names of the regular files extracted, sorted.
    """
    destination = prepare_destination(dest)
    result = destination.extract(
        src, limits=limits, progress=progress, workspace_links=workspace_links
    )
    return result.files


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
                writer.add(name, reader, mode=_file_mode(info))
            elif info.islnk():
                writer.copy(name, info.linkname)
            elif info.issym():
                writer.link(name, info.linkname)
        snapshot = writer.finish()
    except BaseException:
        writer.abort()
        raise
    if skip:
        _warn_skipped(
            what, snapshot.skipped_links, "the workspace" if workspace_links else "the archive"
        )
    return snapshot
