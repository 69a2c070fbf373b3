"""What a git index says, without the stat cache: how a diff tells a refreshed index from a change.

A repository's ``.git/index`` records, for every tracked file, its path, mode, object id and
stage, and beside them a *stat cache* (ctime, mtime, device, inode, uid, gid, size) that only
spares git from hashing unchanged files again. A repository extracted anywhere new (a seeded
sandbox) has other inodes and times, so the first ``git status`` there (the git MCP server's
``git_status`` included) finds every cache line stale, hashes the files, finds them unchanged
and writes the index again: same entries, other bytes. Keeping the archive's times cannot
prevent that (the ctime and the inode always differ; measured with ``tar -m`` and without).
:meth:`workflows.Snapshot.diff` therefore compares two indexes by :func:`index_meaning`.

Format: git's ``Documentation/gitformat-index.txt``, versions 2, 3 and 4, SHA-1 and SHA-256
repositories (told apart by the trailing checksum). Why not a library: dulwich reads indexes
but would add a dependency to every install for the ~80 lines below; GitPython needs the git
program. The reader is tested against ``git ls-files --stage`` on indexes git itself wrote.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Final, NamedTuple

__all__ = ["IndexEntry", "index_meaning", "is_git_index"]

_HEADER: Final = struct.Struct(">4sLL")
# ctime s+ns, mtime s+ns, dev, ino, mode, uid, gid, size: the stat cache and the mode
_STAT: Final = struct.Struct(">10L")
# Extensions that only cache what the entries already say (the cache tree, the untracked cache,
# the fsmonitor token, the offset tables): a refresh may add, drop or rewrite them.
_CACHE_EXTENSIONS: Final = frozenset({b"TREE", b"UNTR", b"FSMN", b"EOIE", b"IEOT"})
_EXTENDED: Final = 0x4000
_NAME_MASK: Final = 0x0FFF


class IndexEntry(NamedTuple):
    """One entry as git means it: path, mode, object id (hex), flags without the name length."""

    path: bytes
    mode: int
    oid: str
    flags: int
    extended_flags: int


def is_git_index(path: str) -> bool:
    """Whether a snapshot path is a repository's index (``.git/index``, at any depth)."""
    return path == ".git/index" or path.endswith("/.git/index")


def _hash_size(data: bytes) -> int | None:
    """20 (SHA-1) or 32 (SHA-256): whichever trailing checksum matches the bytes before it."""
    for name, size in (("sha1", 20), ("sha256", 32)):
        if (
            len(data) > _HEADER.size + size
            and hashlib.new(name, data[:-size]).digest() == data[-size:]
        ):
            return size
    return None


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """git's offset varint (index v4's prefix length): the value and the offset after it."""
    byte = data[at]
    at += 1
    value = byte & 0x7F
    while byte & 0x80:
        byte = data[at]
        at += 1
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, at


def index_meaning(
    data: bytes,
) -> tuple[tuple[IndexEntry, ...], tuple[tuple[bytes, bytes], ...]] | None:
    """The entries and the non-cache extensions of an index, or None when ``data`` is not an
    index this reader understands (then a caller compares bytes).

    A split index (a ``link`` extension: the entries live in another file) is None too.
    """
    size = _hash_size(data)
    if size is None:
        return None
    try:
        signature, version, count = _HEADER.unpack_from(data)
        if signature != b"DIRC" or version not in (2, 3, 4):
            return None
        end = len(data) - size
        at = _HEADER.size
        entries: list[IndexEntry] = []
        previous = b""
        for _ in range(count):
            start = at
            mode = _STAT.unpack_from(data, at)[6]
            at += _STAT.size
            oid = data[at : at + size].hex()
            at += size
            (flags,) = struct.unpack_from(">H", data, at)
            at += 2
            extended = 0
            if flags & _EXTENDED:
                if version < 3:
                    return None
                (extended,) = struct.unpack_from(">H", data, at)
                at += 2
            if version == 4:
                strip, at = _varint(data, at)
                nul = data.index(b"\0", at)
                path = previous[: len(previous) - strip] + data[at:nul]
                at = nul + 1
            else:
                nul = data.index(b"\0", at)
                path = data[at:nul]
                at = start + ((nul - start) // 8 + 1) * 8  # 1 to 8 NULs pad the entry
            if at > end:
                return None
            previous = path
            entries.append(IndexEntry(path, mode, oid, flags & ~_NAME_MASK, extended))
        extensions: list[tuple[bytes, bytes]] = []
        while at < end:
            name = data[at : at + 4]
            (length,) = struct.unpack_from(">L", data, at + 4)
            body = data[at + 8 : at + 8 + length]
            at += 8 + length
            if name == b"link" or at > end:
                return None
            if name not in _CACHE_EXTENSIONS:
                extensions.append((name, body))
    except (struct.error, ValueError, IndexError):
        return None
    return tuple(entries), tuple(extensions)
