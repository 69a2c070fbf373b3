"""The header ``tarfile`` writes for a common member of a PAX archive, in one ``struct`` call.

Why by hand: packing a workspace of many small files spent a third of its time in
``TarInfo.tobuf``, which builds a dictionary, checks every field for a PAX record and formats
fifteen fields one helper call at a time: about 25 us a header on this machine, 0.12 s of the
0.23 s it took to pack 5,000 files of 4 KiB. :func:`common_header` writes the same bytes in a
fraction of that.

Exactness: the bytes are ``tarinfo.tobuf(tarfile.PAX_FORMAT, ...)``'s, for the members that
need no PAX record (an ASCII name up to 100 bytes, an ASCII link target up to 100 bytes,
ASCII owner names up to 32, integer ids, size and time in the ustar fields' range) and are a
regular file, a folder or a symbolic link; for every other member it returns ``None`` and the
caller keeps ``tobuf``. Archives stay byte for byte what tarfile writes, so the same entries
still give the same bytes. ``tobuf`` and the helpers it calls have been the same from Python
3.10 to 3.13; ``tests/workflows/test_tar_header.py`` compares both on generated and fuzzed
members with the running Python's tarfile.
"""

from __future__ import annotations

import struct
import tarfile
from typing import Final

__all__ = ["common_header"]

# name mode uid gid size mtime chksum type linkname magic+version uname gname devmajor
# devminor prefix, then 12 bytes of padding (struct pads each field and the end with NULs)
_USTAR: Final = struct.Struct("100s8s8s8s12s12s8sc100s8s32s32s8s8s155s12x")
_COMMON_TYPES: Final = frozenset((tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE))
_MAX_ID: Final = 8**7  # ustar's 8-byte fields: 7 octal digits and a NUL
_MAX_BIG: Final = 8**11  # the 12-byte fields (size, mtime)


def _ascii(text: object, length: int) -> bytes | None:
    """``text`` as ASCII if it is a str that fits ``length`` bytes, else ``None``."""
    if type(text) is not str or len(text) > length or not text.isascii():
        return None
    return text.encode("ascii")


def _in_range(value: object, limit: int) -> bool:
    return type(value) is int and 0 <= value < limit


def common_header(info: tarfile.TarInfo) -> bytes | None:
    """``info.tobuf(tarfile.PAX_FORMAT)`` for a common member, or ``None`` (then call it).

    >>> import tarfile
    >>> info = tarfile.TarInfo("src/a.py")
    >>> common_header(info) == info.tobuf(tarfile.PAX_FORMAT)
    True
    """
    kind = info.type
    if kind not in _COMMON_TYPES or info.pax_headers:
        return None
    name = info.name
    if kind == tarfile.DIRTYPE and type(name) is str and not name.endswith("/"):
        name += "/"  # as TarInfo.get_info
    fields = (
        _ascii(name, 100),
        _ascii(info.linkname, 100),
        _ascii(info.uname, 32),
        _ascii(info.gname, 32),
    )
    name_b, link_b, uname_b, gname_b = fields
    mode = info.mode
    if (
        name_b is None
        or link_b is None
        or uname_b is None
        or gname_b is None
        or type(mode) is not int
        or not _in_range(info.uid, _MAX_ID)
        or not _in_range(info.gid, _MAX_ID)
        or not _in_range(info.size, _MAX_BIG)
        or not _in_range(info.mtime, _MAX_BIG)
        or info.chksum is None  # tobuf refuses None in any field
        or info.devmajor is None
        or info.devminor is None
    ):
        return None
    header = _USTAR.pack(
        name_b,
        b"%07o\0" % (mode & 0o7777),
        b"%07o\0" % info.uid,
        b"%07o\0" % info.gid,
        b"%011o\0" % info.size,
        b"%011o\0" % int(info.mtime),
        b"        ",  # the checksum counts its own field as spaces
        kind,
        link_b,
        tarfile.POSIX_MAGIC,
        uname_b,
        gname_b,
        b"",  # no device numbers but for devices
        b"",
        b"",  # no prefix: the name fits its field
    )
    # tarfile's unsigned checksum, six octal digits and a NUL, the field's last space kept
    return header[:148] + b"%06o\0" % sum(header) + header[155:]
