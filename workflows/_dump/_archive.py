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
:func:`iter_archive_files`) is :mod:`workflows._dump._extract`. What both of them share with reading
lives here. The library and the emulator share the contract and the archive core
(:mod:`klavis_archive`): the bounded tar reader, the fixed limits, the link rules and the fast
headers are its, and its refusals become :class:`~workflows.UnsafeArchiveError` here
(:func:`_unsafe`), in the library's words.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tarfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, BinaryIO, cast

from klavis_archive import (
    CHUNK_SIZE,
    CORRUPT,
    MAX_HEADER_BYTES,
    MAX_TRAILING_BYTES,
    ArchiveRejected,
    CountingStream,
    ForwardReader,
    HeaderChainTooLong,
    HeaderTooLarge,
    NegativeSize,
    SparseMember,
    forget_members,
    igzip_file,
    link_escapes,
    link_target_in_tree,
    open_tar,
)
from workflows._dump._limits import ArchiveLimits
from workflows._errors import UnsafeArchiveError
from workflows._paths import normalize_member_name
from workflows._snapshot import Snapshot, _SnapshotWriter

__all__ = [
    "CHUNK_SIZE",
    "ArchiveLimits",
    "iter_archive_files",
    "read_snapshot",
]

log = logging.getLogger("workflows")

_MIB = 1024 * 1024
# The expansion ratio is only judged once this many bytes were written: tiny archives (a few
# headers, empty files) have ratios that mean nothing, and 8 MiB is harmless on any disk.
_EXPANSION_FLOOR = 8 * _MIB


# --- reading -----------------------------------------------------------------------------------

# What reading a hostile archive may raise from tarfile's own code besides: it handles extended
# headers by recursion (a chain is capped by the core's reader, but any other deep recursion of
# a future tarfile must not escape as a raw RecursionError either).
_UNREADABLE: tuple[type[BaseException], ...] = (*CORRUPT, RecursionError)


def _not_valid(exc: BaseException) -> UnsafeArchiveError:
    if isinstance(exc, RecursionError):
        err = UnsafeArchiveError(
            "the archive nests its headers too deeply to be read (RecursionError); refused"
        )
    else:
        err = UnsafeArchiveError(f"the data is not a valid tar.gz archive ({exc})")
    err.__cause__ = exc
    return err


def _unsafe(exc: ArchiveRejected) -> UnsafeArchiveError:
    """The library's error for a refusal of the archive core, in the library's words."""
    limit = f"(over {MAX_HEADER_BYTES:,})"
    if isinstance(exc, HeaderTooLarge):
        where = f"at offset {exc.offset:,}"
        if exc.scope == "header":
            message = f"archive has an extended header of {exc.size:,} bytes {limit} {where}"
            message += "; refusing to read it"
        elif exc.scope == "chain":
            message = f"archive has {exc.size:,} bytes of extended headers in a row {limit} {where}"
            message += "; refusing to read them"
        else:
            message = f"archive has {exc.size:,} bytes of global headers {limit} {where}"
            message += "; refusing to read them"
    elif isinstance(exc, HeaderChainTooLong):
        message = (
            f"archive has more than {exc.limit} extended headers in a row at offset "
            f"{exc.offset:,}; refusing to read them"
        )
    elif isinstance(exc, NegativeSize):
        message = (
            f"archive member {exc.member!r} at offset {exc.offset:,} declares a negative size; "
            "refused"
        )
    elif isinstance(exc, SparseMember):
        message = (
            f"archive member {exc.member!r} is a sparse file ({exc.kind}); sparse members are "
            "refused: a few bytes of header would be expanded into holes of any size"
        )
    else:
        message = str(exc)
    err = UnsafeArchiveError(message, member=exc.member)
    err.__cause__ = exc
    return err


class _Expansion:
    """Counts the bytes handed out (file contents, hard-link copies) against the compressed
    bytes read, and refuses a ratio over ``limits.max_expansion_ratio``."""

    def __init__(self, ratio: float | None, compressed: CountingStream) -> None:
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

    def __init__(self, raw: ForwardReader, info: tarfile.TarInfo, expansion: _Expansion) -> None:
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
    limits: ArchiveLimits = ArchiveLimits(),  # noqa: B008 - frozen: sharing one is safe
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
        counted = CountingStream(raw)
        gz: IO[bytes] = igzip_file(fileobj=counted, mode="rb")
        stack.callback(gz.close)
        stream = ForwardReader(gz)
        try:
            tar = open_tar(cast("IO[bytes]", stream))  # closed by the exit stack
        except _UNREADABLE as exc:
            raise _not_valid(exc) from exc
        except ArchiveRejected as exc:
            raise _unsafe(exc) from exc
        stack.callback(tar.close)
        if counted.count == 0:
            raise UnsafeArchiveError("the data is not a valid tar.gz archive (it is empty)")
        expansion = _Expansion(limits.max_expansion_ratio, counted)
        links = _Links(workspace_links, on_skipped_link)
        yield from _iter_members(tar, stream, limits, expansion, links)
        # read on to the gzip trailer so that its CRC is checked, but not unboundedly
        try:
            left = MAX_TRAILING_BYTES
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
    stream: ForwardReader,
    limits: ArchiveLimits,
    expansion: _Expansion,
    links: _Links,
) -> Iterator[tuple[str, tarfile.TarInfo, BinaryIO | None]]:
    kinds: dict[str, str] = {}  # name -> "f" file, "d" folder, "l" symlink
    # folders whose every ancestor is "d": no member replaces a folder (refused below), so a
    # chain checked once holds for every later member in it
    folders: set[str] = set()
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
        except ArchiveRejected as exc:
            raise _unsafe(exc) from exc
        forget_members(tar)
        if info is None:
            break
        if info.sparse is not None:  # pragma: no cover - refused while its header was read
            raise _unsafe(SparseMember(info.name, "sparse map"))
        if info.size < 0:  # a PAX record can set it after the header was checked
            raise _unsafe(NegativeSize(info.name, info.offset))
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
        folder = name.rpartition("/")[0]
        if folder and folder not in folders:  # a folder once checked stays one (see below)
            parts = name.split("/")
            for i in range(1, len(parts)):
                parent = "/".join(parts[:i])
                kind = kinds.get(parent)
                if kind == "l":
                    raise UnsafeArchiveError(
                        f"archive member {info.name!r} would be written through the symlink "
                        f"{parent!r}",
                        member=info.name,
                    )
                if kind == "f":
                    raise UnsafeArchiveError(
                        f"archive member {info.name!r} needs {parent!r} to be a folder, but it "
                        "is a file in the archive",
                        member=info.name,
                    )
                kinds[parent] = "d"
            folders.add(folder)
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
    limits: ArchiveLimits = ArchiveLimits(),  # noqa: B008 - frozen: sharing one is safe
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
                writer.add(name, reader, mode=file_mode(info), size=info.size)
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
