"""Builders of hostile (and ordinary) tar.gz archives, for tests and benchmarks.

An archive is a sequence of :class:`Member`; each member knows how to write its own raw tar
blocks (headers, data, padding), so members that :mod:`tarfile` refuses to write (a GNU sparse
file, a PAX header of a gigabyte, a name over PATH_MAX) are as easy to build as a plain file.
Members produce their blocks lazily and :func:`iter_tar_gz` compresses them chunk by chunk, so a
1 GiB PAX header or a 1 GiB file of zeros costs about 1 MiB of compressed output (deflate tops
out near 1032:1), never the expanded size in memory.

Typical use::

    from .crafted import file, symlink, tar_gz

    archive = tar_gz([file("a.txt", b"hi"), symlink("link", "/etc/passwd")])

``httpx`` accepts :func:`iter_tar_gz`'s iterator as a request ``content`` to stream an upload.
"""

from __future__ import annotations

import tarfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "BLOCK",
    "MTIME",
    "Member",
    "device",
    "extended_header",
    "fifo",
    "file",
    "folder",
    "hardlink",
    "iter_tar",
    "iter_tar_gz",
    "long_name",
    "member",
    "header_chain",
    "pax_file",
    "pax_global_header",
    "pax_header_bomb",
    "pax_header_member",
    "pax_sparse_file",
    "sparse_file",
    "symlink",
    "tar_gz",
    "zeros_file",
]

BLOCK = tarfile.BLOCKSIZE
"""The tar block size (512 bytes)."""
MTIME = 1_700_000_000
"""The modification time of every member built here (a fixed value: archives are reproducible)."""
_CHUNK = 1024 * 1024
_ZEROS = bytes(_CHUNK)


@dataclass(frozen=True)
class Member:
    """One archive member as raw tar bytes: ``blocks()`` yields its headers, data and padding.

    ``blocks`` is a factory, so one member can go into several archives; it yields chunks of at
    most about 1 MiB, so huge members never sit in memory whole.
    """

    name: str
    blocks: Callable[[], Iterable[bytes]]


def _padding(size: int) -> bytes:
    return bytes(-size % BLOCK)


def _header(info: tarfile.TarInfo) -> bytes:
    """``info``'s header blocks: ustar when it fits, PAX otherwise (long names, big sizes)."""
    try:
        return info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape")
    except ValueError:
        return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _info(name: str, kind: bytes, mode: int, size: int = 0, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.linkname = linkname
    info.mtime = MTIME
    return info


def member(info: tarfile.TarInfo, data: bytes = b"") -> Member:
    """A member from a hand-made ``TarInfo`` (its ``size`` is set to ``len(data)``)."""
    info.size = len(data)
    header = _header(info)

    def blocks() -> Iterator[bytes]:
        yield header
        if data:
            yield data
            yield _padding(len(data))

    return Member(info.name, blocks)


def file(name: str, data: bytes | str = b"", mode: int = 0o644) -> Member:
    """A regular file holding ``data`` (a ``str`` is encoded as UTF-8)."""
    content = data.encode() if isinstance(data, str) else data
    return member(_info(name, tarfile.REGTYPE, mode), content)


def _header_then_zeros(name: str, header: bytes, size: int) -> Member:
    """``header``, then ``size`` zero bytes in 1 MiB chunks and their padding."""

    def blocks() -> Iterator[bytes]:
        yield header
        left = size
        while left > 0:
            step = min(left, _CHUNK)
            yield _ZEROS[:step]
            left -= step
        yield _padding(size)

    return Member(name, blocks)


def zeros_file(name: str, size: int, mode: int = 0o644) -> Member:
    """A regular file of ``size`` zero bytes, written in 1 MiB chunks (a compression bomb)."""
    return _header_then_zeros(name, _header(_info(name, tarfile.REGTYPE, mode, size)), size)


def folder(name: str, mode: int = 0o755) -> Member:
    """A directory."""
    return member(_info(name, tarfile.DIRTYPE, mode))


def symlink(name: str, target: str) -> Member:
    """A symbolic link ``name`` -> ``target`` (any target, absolute or with ``..``)."""
    return member(_info(name, tarfile.SYMTYPE, 0o777, linkname=target))


def hardlink(name: str, target: str) -> Member:
    """A hard link ``name`` to the archive member ``target``."""
    return member(_info(name, tarfile.LNKTYPE, 0o644, linkname=target))


def fifo(name: str) -> Member:
    """A named pipe."""
    return member(_info(name, tarfile.FIFOTYPE, 0o644))


def device(name: str, kind: Literal["char", "block"] = "char") -> Member:
    """A device file (``/dev/null``'s numbers, 1:3)."""
    info = _info(name, tarfile.CHRTYPE if kind == "char" else tarfile.BLKTYPE, 0o644)
    info.devmajor, info.devminor = 1, 3
    return member(info)


def pax_file(name: str, headers: Mapping[str, str], data: bytes = b"") -> Member:
    """A regular file preceded by a PAX extended header holding ``headers`` (any keywords)."""
    records = b"".join(_pax_record(key, value) for key, value in headers.items())
    pax = _info("././@PaxHeader", tarfile.XHDTYPE, 0o644, len(records))
    body = member(_info(name, tarfile.REGTYPE, 0o644), data)

    def blocks() -> Iterator[bytes]:
        yield _header(pax)
        yield records
        yield _padding(len(records))
        yield from body.blocks()

    return Member(name, blocks)


def negative_size(name: str, kind: bytes = tarfile.REGTYPE, follow: int = 4096) -> Member:
    """A member whose header's size field reads ``-1`` (tarfile takes it as -1), then
    ``follow`` zero bytes in 1 MiB chunks: what a reader taking -1 for "read it all" swallows
    (1 GiB of zeros is about 1 MB compressed)."""
    header = bytearray(_header(_info(name, kind, 0o644)))
    header[124:136] = b"-1".ljust(12, b"\0")
    _set_checksum(header)
    return _header_then_zeros(name, bytes(header), follow)


def _pax_record(key: str, value: str) -> bytes:
    """``"%d %s=%s\\n"``, where the length counts its own digits (``\\udcXX``: raw byte XX)."""
    payload = f" {key}={value}\n".encode("utf-8", "surrogateescape")  # raw bytes too
    length = len(payload) + 1
    while len(str(length)) + len(payload) != length:
        length += 1
    return str(length).encode() + payload


def sparse_file(name: str, size: int) -> Member:
    """An old-style GNU sparse member (type ``'S'``) declaring ``size`` bytes and holding none.

    tarfile cannot write these; the header is filled by hand: GNU magic, one sparse entry
    ``(size, 0)`` at offset 386 (as GNU tar writes for a file that is all hole), and the real
    size at offset 483. Python's tarfile reads it as a regular file of ``size`` zero bytes.
    """
    info = _info(name, tarfile.GNUTYPE_SPARSE, 0o644)
    header = bytearray(info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")[-BLOCK:])
    header[386 : 386 + 12] = _octal(size, 12)
    header[398 : 398 + 12] = _octal(0, 12)
    header[482] = 0  # no extension blocks
    header[483 : 483 + 12] = _octal(size, 12)
    _set_checksum(header)
    long_name_blocks = info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")[:-BLOCK]

    def blocks() -> Iterator[bytes]:
        yield long_name_blocks + bytes(header)

    return Member(name, blocks)


def pax_sparse_file(name: str, size: int, version: Literal["0.0", "0.1", "1.0"] = "1.0") -> Member:
    """A PAX-format GNU sparse member (``GNU.sparse.*`` records) of ``size`` bytes, all hole.

    Versions as GNU tar writes them: 0.0 (``GNU.sparse.offset``/``numbytes`` records), 0.1
    (``GNU.sparse.map``), 1.0 (the map at the start of the data, real name in
    ``GNU.sparse.name``). Python's tarfile accepts all three and expands the holes.
    """
    data = b""
    if version == "0.0":
        headers = {
            "GNU.sparse.size": str(size),
            "GNU.sparse.numblocks": "1",
            "GNU.sparse.offset": str(size),
            "GNU.sparse.numbytes": "0",
        }
        stored = name
    elif version == "0.1":
        headers = {
            "GNU.sparse.size": str(size),
            "GNU.sparse.numblocks": "1",
            "GNU.sparse.map": f"{size},0",
        }
        stored = name
    else:
        headers = {
            "GNU.sparse.major": "1",
            "GNU.sparse.minor": "0",
            "GNU.sparse.name": name,
            "GNU.sparse.realsize": str(size),
        }
        data = b"1\n" + str(size).encode() + b"\n0\n"
        data += _padding(len(data))
        stored = f"GNUSparseFile.0/{name}"
    records = b"".join(_pax_record(key, value) for key, value in headers.items())
    pax = _info("././@PaxHeader", tarfile.XHDTYPE, 0o644, len(records))
    body = _info(stored, tarfile.REGTYPE, 0o644, len(data))

    def blocks() -> Iterator[bytes]:
        yield _header(pax)
        yield records
        yield _padding(len(records))
        yield _header(body)
        yield data

    return Member(name, blocks)


def extended_header(size: int, kind: bytes = tarfile.XHDTYPE) -> Member:
    """An extended header alone, of ``size`` bytes, generated in 1 MiB chunks.

    ``kind``: ``tarfile.XHDTYPE`` (``'x'``, PAX, for the next member; one valid ``comment``
    record), ``tarfile.XGLTYPE`` (``'g'``, PAX global: tarfile keeps it for every later
    member), ``tarfile.GNUTYPE_LONGNAME`` (``'L'``) or ``GNUTYPE_LONGLINK`` (``'K'``): a name
    of ``size - 1`` letters and a NUL. Put a member after it: the header describes that one.
    """
    pax = kind in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
    fixed = b" comment=\n"
    if size < (len(fixed) + 2 if pax else 2):
        raise ValueError(f"an extended header of type {kind!r} needs more than {size} bytes")
    name = "././@PaxHeader" if pax else "././@LongLink"
    header = _header(_info(name, kind, 0o644, size))

    def blocks() -> Iterator[bytes]:
        yield header
        if pax:
            head = str(size).encode() + b" comment="
            tail = b"\n"
        else:
            head, tail = b"", b"\0"
        yield head
        chunk = b"a" * _CHUNK
        left = size - len(head) - len(tail)
        while left > 0:
            step = min(left, _CHUNK)
            yield chunk[:step]
            left -= step
        yield tail
        yield _padding(size)

    return Member(name, blocks)


def pax_global_header(size: int, *, first_key: int = 0) -> Member:
    """A PAX global header (``'g'``) of about ``size`` bytes made of short records with
    distinct keys (``k<first_key>``, ``k<first_key + 1>``, ...): tarfile keeps every one of
    them for the rest of the archive, as a dict (about 160 bytes of memory per 12-byte record).
    Give the next one a ``first_key`` past these to keep the keys distinct."""
    records = bytearray()
    key = first_key
    while len(records) < size - 32:
        records += _pax_record(f"k{key}", "")
        key += 1
    info = _info("././@PaxHeader", tarfile.XGLTYPE, 0o644, len(records))
    data = bytes(records)

    def blocks() -> Iterator[bytes]:
        yield _header(info)
        yield data
        yield _padding(len(data))

    return Member(info.name, blocks)


def header_chain(count: int, kind: bytes = tarfile.XHDTYPE, size: int = 100) -> list[Member]:
    """``count`` extended headers of ``kind`` in a row (``size`` bytes each); put a member after
    them. tarfile reads such a chain by recursion, one level per header."""
    return [extended_header(size, kind) for _ in range(count)]


def pax_header_member(header_bytes: int, name: str = "after-the-header.txt") -> Member:
    """A file ``name`` preceded by a PAX extended header of ``header_bytes`` bytes (one valid
    ``comment`` record, generated in 1 MiB chunks)."""
    header = extended_header(header_bytes)
    body = file(name, b"after\n")

    def blocks() -> Iterator[bytes]:
        yield from header.blocks()
        yield from body.blocks()

    return Member(name, blocks)


def pax_header_bomb(header_bytes: int, *, compresslevel: int = 6) -> bytes:
    """A tar.gz whose first member has a PAX extended header of ``header_bytes`` bytes.

    Built in a stream: a 1 GiB header costs about 1 MiB of output and little more memory.
    """
    return tar_gz([pax_header_member(header_bytes)], compresslevel=compresslevel)


def long_name(component_len: int, *, depth: int = 1, char: str = "n") -> str:
    """A relative path of ``depth`` components of ``component_len`` characters each.

    ``long_name(300)`` is one component over NAME_MAX (255 bytes);
    ``long_name(200, depth=25)`` is a path of 5,024 bytes, over PATH_MAX (4,096).
    """
    return "/".join([char * component_len] * depth)


def _octal(value: int, width: int) -> bytes:
    return f"{value:0{width - 1}o}".encode() + b"\0"


def _set_checksum(header: bytearray) -> None:
    header[148:156] = b" " * 8
    header[148:156] = f"{sum(header):06o}".encode() + b"\0 "


def iter_tar(members: Iterable[Member], *, end: bool = True) -> Iterator[bytes]:
    """The uncompressed tar stream of ``members`` in chunks (with the end-of-archive blocks
    unless ``end`` is false)."""
    for item in members:
        yield from item.blocks()
    if end:
        yield bytes(2 * BLOCK)


def iter_tar_gz(
    members: Iterable[Member], *, compresslevel: int = 6, end: bool = True
) -> Iterator[bytes]:
    """The gzip-compressed tar stream of ``members``, chunk by chunk (memory stays small)."""
    compressor = zlib.compressobj(compresslevel, zlib.DEFLATED, 31)  # 31: gzip framing
    for chunk in iter_tar(members, end=end):
        if out := compressor.compress(chunk):
            yield out
    yield compressor.flush()


def tar_gz(members: Iterable[Member], *, compresslevel: int = 6, end: bool = True) -> bytes:
    """A whole tar.gz of ``members``, as bytes."""
    return b"".join(iter_tar_gz(members, compresslevel=compresslevel, end=end))
