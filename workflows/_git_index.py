"""What a git index says, without the stat cache: how a diff tells a refreshed index from a change.

A repository's ``.git/index`` records, for every tracked file, its path, mode, object id and
stage, and beside them a *stat cache* (ctime, mtime, device, inode, uid, gid, size) that only
spares git from hashing unchanged files again. A repository extracted anywhere new (a seeded
sandbox) has other inodes and times, so the first ``git status`` there (the git MCP server's
``git_status`` included) finds every cache line stale, hashes the files, finds them unchanged
and writes the index again: same entries, other bytes. Keeping the archive's times cannot
prevent that (the ctime and the inode always differ; measured with ``tar -m`` and without).
:meth:`workflows.Snapshot.diff` therefore compares two indexes by :func:`index_digest`.

Format: git's ``Documentation/gitformat-index.txt``, versions 2, 3 and 4, SHA-1 and SHA-256
repositories (told apart by the trailing checksum). Why not a library: dulwich reads indexes
but would add a dependency to every install for the ~150 lines below, and expands every v4
path (see below); GitPython needs the git program. The reader is tested against
``git ls-files --stage`` on indexes git itself wrote.

The index is a tenant's file, so the reader is linear in its size, in time and in memory:

* Index v4 stores each path as "drop N bytes of the previous path, append these". Keeping
  every path costs the sum of the path lengths, quadratic in the index: a 1.9 MB index whose
  paths grow by one byte each expanded to about 400 MB per side (measured: ``diff`` of two such
  indexes peaked 808 MB higher, in 5.9 s; 10 MB would need some 12 GB). The digest keeps one
  path, the current one, in a ``bytearray`` cut and extended in place (work: the bytes dropped
  and appended, both bounded by the index's size), and hashes every path in *prefix form*
  (bytes dropped, bytes appended), which names the path sequence exactly. The prefix form is
  made canonical, the longest common prefix with the previous path (what git's v4 writer
  writes, except at the blocks of an ``IEOT`` offset table, where it starts a path afresh), so
  a v2, a v3 and a v4 index of the same entries, with or without offset table, mean the same.
* The prefix length is git's varint (``varint.c``): ``decode_varint`` gives up once the value
  would pass 64 bits, so at most 10 bytes are read, and so here, where such a varint is
  refused (the old reader read a 1 MiB varint into a 7-million-bit integer, for minutes). A prefix
  that drops more than the previous path has is refused too (git dies: "malformed name field").

Whatever this reader does not understand or refuses (a split index, a bad checksum, a varint
over the cap, a truncated entry) is :class:`UnreadableIndex` with the reason; ``Snapshot.diff``
then compares the bytes and logs the reason (WARNING, logger ``workflows``).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from typing import Final, NamedTuple

__all__ = [
    "IndexEntry",
    "UnreadableIndex",
    "index_digest",
    "index_meaning",
    "is_git_index",
]

_HEADER: Final = struct.Struct(">4sLL")
# ctime s+ns, mtime s+ns, dev, ino, mode, uid, gid, size: the stat cache and the mode
_STAT: Final = struct.Struct(">10L")
_FLAGS: Final = struct.Struct(">H")
# Extensions that only cache what the entries already say (the cache tree, the untracked cache,
# the fsmonitor token, the offset tables): a refresh may add, drop or rewrite them.
_CACHE_EXTENSIONS: Final = frozenset({b"TREE", b"UNTR", b"FSMN", b"EOIE", b"IEOT"})
_EXTENDED: Final = 0x4000
_NAME_MASK: Final = 0x0FFF
_VARINT_LIMIT: Final = 1 << 57  # git's MSB(val, 7) test: one more 7-bit shift would pass 64 bits
_MAX_EXPANDED: Final = 64 * 1024 * 1024  # index_meaning only: the paths it may spell out


class UnreadableIndex(ValueError):
    """Bytes this reader does not read as a git index; the message says why."""


class IndexEntry(NamedTuple):
    """One entry as git means it: path, mode, object id (hex), flags without the name length."""

    path: bytes
    mode: int
    oid: str
    flags: int
    extended_flags: int


class _Record(NamedTuple):
    """One entry in prefix form: drop ``strip`` bytes of the previous path, append ``suffix``."""

    strip: int
    suffix: bytes
    mode: int
    oid: bytes
    flags: int
    extended_flags: int


def is_git_index(path: str) -> bool:
    """Whether a snapshot path is a repository's index (``.git/index``, at any depth)."""
    return path == ".git/index" or path.endswith("/.git/index")


def _hash_size(data: bytes) -> int:
    """20 (SHA-1) or 32 (SHA-256): whichever trailing checksum matches the bytes before it."""
    view = memoryview(data)  # hashed in place: no copy of the index
    for name, size in (("sha1", 20), ("sha256", 32)):
        if (
            len(data) > _HEADER.size + size
            and hashlib.new(name, view[:-size]).digest() == data[-size:]
        ):
            return size
    raise UnreadableIndex("it ends in no SHA-1 or SHA-256 checksum of its bytes")


def _varint(data: bytes, at: int, number: int) -> tuple[int, int]:
    """git's offset varint (index v4's prefix length): the value and the offset after it.

    At most 10 bytes are read, as git's ``decode_varint`` reads them."""
    byte = data[at]
    at += 1
    value = byte & 0x7F
    while byte & 0x80:
        value += 1
        if value >= _VARINT_LIMIT:
            raise UnreadableIndex(
                f"entry {number}: its path's prefix length is a varint over git's 64 bits "
                "(git reads at most 10 bytes)"
            )
        byte = data[at]
        at += 1
        value = (value << 7) | (byte & 0x7F)
    return value, at


def _common_prefix(a: bytes | bytearray, b: bytes | bytearray) -> int:
    """The length of the longest common prefix of ``a`` and ``b`` (linear, in C)."""
    n = min(len(a), len(b))
    differ = int.from_bytes(a[:n], "big") ^ int.from_bytes(b[:n], "big")
    return n - (differ.bit_length() + 7) // 8


def _read(data: bytes) -> tuple[Iterator[_Record], list[tuple[bytes, bytes]]]:
    """The entries of ``data`` in prefix form (read as the iterator is consumed, which raises
    :class:`UnreadableIndex` where they stop making sense) and a list that holds the index's
    non-cache extensions once the iterator is exhausted."""
    size = _hash_size(data)
    try:
        signature, version, count = _HEADER.unpack_from(data)
    except struct.error:
        raise UnreadableIndex("it is shorter than an index header") from None
    if signature != b"DIRC":
        raise UnreadableIndex("it does not start with git's DIRC signature")
    if version not in (2, 3, 4):
        raise UnreadableIndex(f"index version {version} is not 2, 3 or 4")
    extensions: list[tuple[bytes, bytes]] = []
    return _entries(data, size, version, count, extensions), extensions


def _entries(
    data: bytes, size: int, version: int, count: int, extensions: list[tuple[bytes, bytes]]
) -> Iterator[_Record]:
    end = len(data) - size
    at = _HEADER.size
    current = bytearray()  # the path of the entry read last
    try:
        for number in range(1, count + 1):
            start = at
            mode = _STAT.unpack_from(data, at)[6]
            at += _STAT.size
            oid = data[at : at + size]
            at += size
            (flags,) = _FLAGS.unpack_from(data, at)
            at += 2
            extended = 0
            if flags & _EXTENDED:
                if version < 3:
                    raise UnreadableIndex(f"entry {number}: extended flags in a version 2 index")
                (extended,) = _FLAGS.unpack_from(data, at)
                at += 2
            before = len(current)
            if version == 4:
                strip, at = _varint(data, at, number)
                if number == 1:
                    strip = 0  # git ignores it: there is no previous path
                elif strip > len(current):
                    raise UnreadableIndex(
                        f"entry {number}: drops {strip} bytes of a {len(current)}-byte path"
                    )
                nul = _nul(data, at, end, number)
                kept = len(current) - strip
                appended = data[at:nul]
                at = nul + 1
                # the longest common prefix may go on into what was appended
                common = kept + _common_prefix(current[kept : kept + len(appended)], appended)
                del current[kept:]
                current += appended
            else:
                nul = _nul(data, at, end, number)
                path = data[at:nul]
                at = start + ((nul - start) // 8 + 1) * 8  # 1 to 8 NULs pad the entry
                common = _common_prefix(current, path)
                del current[common:]
                current += path[common:]
            strip, suffix = before - common, bytes(current[common:])
            if at > end:
                raise UnreadableIndex(f"entry {number} runs into the checksum")
            yield _Record(strip, suffix, mode, oid, flags & ~_NAME_MASK, extended)
        while at < end:
            name = data[at : at + 4]
            (length,) = struct.unpack_from(">L", data, at + 4)
            body = data[at + 8 : at + 8 + length]
            at += 8 + length
            if name == b"link":
                raise UnreadableIndex("a split index (its entries are in another file)")
            if at > end:
                raise UnreadableIndex(f"extension {name!r} runs into the checksum")
            if name not in _CACHE_EXTENSIONS:
                extensions.append((name, body))
    except (struct.error, IndexError):
        raise UnreadableIndex("it ends in the middle of an entry or an extension") from None


def _nul(data: bytes, at: int, end: int, number: int) -> int:
    """The offset of the NUL ending the path at ``at``."""
    nul = data.find(b"\0", at, end)
    if nul < 0:
        raise UnreadableIndex(f"entry {number}: its path has no NUL before the checksum")
    return nul


def index_digest(data: bytes) -> bytes:
    """A SHA-256 of what an index says: its entries (path, mode, object id, stage and flags)
    and its extensions that are not caches; not the stat cache, not the index version.

    Linear in ``len(data)``, in time and memory: no path is spelled out. Raises
    :class:`UnreadableIndex` (its message says why) for what is not an index this reader
    understands, a split index included; then compare bytes.

    >>> index_digest(b"not an index")
    Traceback (most recent call last):
    ...
    workflows._git_index.UnreadableIndex: it ends in no SHA-1 or SHA-256 checksum of its bytes
    """
    records, extensions = _read(data)
    digest = hashlib.sha256()
    for record in records:
        digest.update(
            struct.pack(
                ">QQLHH",
                record.strip,
                len(record.suffix),
                record.mode,
                record.flags,
                record.extended_flags,
            )
        )
        digest.update(record.suffix)
        digest.update(record.oid)
    digest.update(b"\0extensions")
    for name, body in extensions:
        digest.update(name + struct.pack(">Q", len(body)))
        digest.update(body)
    return digest.digest()


def index_meaning(
    data: bytes,
) -> tuple[tuple[IndexEntry, ...], tuple[tuple[bytes, bytes], ...]] | None:
    """The entries (paths spelled out) and the non-cache extensions of an index, or None when
    :func:`index_digest` would raise, or when the paths spelled out would pass 64 MiB (a v4
    index's paths can total far more than the index: prefer :func:`index_digest`)."""
    try:
        records, extensions = _read(data)
        entries: list[IndexEntry] = []
        path = b""
        total = 0
        for record in records:
            path = path[: len(path) - record.strip] + record.suffix
            total += len(path)
            if total > _MAX_EXPANDED:
                return None
            stage_flags, extended = record.flags, record.extended_flags
            entries.append(IndexEntry(path, record.mode, record.oid.hex(), stage_flags, extended))
    except UnreadableIndex:
        return None
    return tuple(entries), tuple(extensions)
