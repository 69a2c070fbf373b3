"""The bounded tar reader: tarfile's reading, with every header checked before it is read.

:func:`open_tar` opens a :class:`BoundedTarFile` over a decompressed stream (see
:mod:`klavis_archive._streams`). Each header goes through :meth:`BoundedTarInfo.before_member`
before tarfile reads what it declares: negative sizes, sparse members of every kind, and
extended headers (PAX records, GNU long names) over :data:`MAX_HEADER_BYTES`, one by one, in a
chain before one member or the global ones together, or more than :data:`MAX_HEADER_CHAIN` in a
row, are refused with the core's exceptions. Common headers are parsed by
:class:`~klavis_archive.FastTarInfo`.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import zlib
from typing import IO, cast

from isal import isal_zlib

from . import _limits
from ._errors import HeaderChainTooLong, HeaderTooLarge, NegativeSize, SparseMember
from ._tar_header import FastTarInfo
from ._tarfile_shim import ForwardTarFile, HookedTarInfo

# What corrupt or truncated data raises from the decompressor or tarfile while reading.
CORRUPT: tuple[type[BaseException], ...] = (
    tarfile.TarError,
    io.UnsupportedOperation,  # tarfile seeking a forward-only stream backwards
    EOFError,
    zlib.error,
    gzip.BadGzipFile,
    cast("type[BaseException]", isal_zlib.error),
)
_EXTENDED_HEADERS = frozenset(
    (*tarfile.GNU_TYPES, tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
) - {tarfile.GNUTYPE_SPARSE}


class BoundedTarFile(ForwardTarFile):
    """A streaming reader that counts the extended headers it meets (see BoundedTarInfo)."""

    chain = 0  # extended headers in a row before the next member
    chain_bytes = 0  # and their total size
    global_bytes = 0  # total size of the global ('g') headers, which tarfile keeps


class BoundedTarInfo(HookedTarInfo, FastTarInfo):
    """Refuses, before tarfile reads them: a negative size, sparse members (GNU type ``'S'``
    here, whose map tarfile would read first; the PAX formats in the shim's hooks, when their
    records are seen), and extended headers over the caps.

    tarfile reads extended headers whole into memory, handles a chain of them by recursion and
    keeps the records of global headers for the rest of the archive; it expands sparse members
    (a header of a few bytes declares holes of any size). No workspace archive holds either.
    """

    __slots__ = ()

    def before_member(self, tar: tarfile.TarFile) -> None:
        if self.size < 0:  # tarfile reads "-1" as -1, and a read of -1 bytes reads it all
            raise NegativeSize(self.name, self.offset)
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise SparseMember(self.name, "GNU type 'S'")
        reader = cast("BoundedTarFile", tar)
        if self.type not in _EXTENDED_HEADERS:
            reader.chain = reader.chain_bytes = 0
            return
        limit = _limits.MAX_HEADER_BYTES
        if self.size > limit:
            raise HeaderTooLarge("header", self.size, limit, self.offset)
        reader.chain += 1
        reader.chain_bytes += self.size
        if reader.chain > _limits.MAX_HEADER_CHAIN:
            raise HeaderChainTooLong(_limits.MAX_HEADER_CHAIN, self.offset)
        if reader.chain_bytes > limit:
            raise HeaderTooLarge("chain", reader.chain_bytes, limit, self.offset)
        if self.type == tarfile.XGLTYPE:
            reader.global_bytes += self.size
            if reader.global_bytes > limit:
                raise HeaderTooLarge("global", reader.global_bytes, limit, self.offset)


def open_tar(stream: IO[bytes]) -> BoundedTarFile:
    """A :class:`BoundedTarFile` reading ``stream`` (mode ``"r"``: whole reads, ``tell`` and
    forward seeks are all it asks). Raises what tarfile raises on data that is no tar."""
    return BoundedTarFile(fileobj=stream, mode="r", tarinfo=BoundedTarInfo)
