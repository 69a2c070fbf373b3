"""The one place the archive core reaches into tarfile's private hooks.

tarfile has no public way to look at a header before it reads what the header declares, nor to
refuse a sparse member before it expands it. :class:`HookedTarInfo` overrides the private
methods that do (listed in :data:`HOOKS`) and turns them into two of its own:
:meth:`HookedTarInfo.before_member`, called with every header before tarfile processes it, and a
:class:`~klavis_archive.SparseMember` refusal for every sparse format.

Their signatures are not stable: the CVE-2024-6232 fix (gh-121285; 3.13, 3.12.6+, 3.11.10+ and
the distributions' backports) changed ``_proc_gnusparse_00(next, pax_headers, buf)`` into
``_proc_gnusparse_00(next, raw_headers)``, a list of ``(length, keyword, value)`` bytes tuples.
An override with the old signature raised a TypeError there (the emulator answered 500). Every
override here takes ``*args`` and reads the member's name from a dict or from such a list, so it
works on every interpreter from 3.10 to 3.13, patched or not; ``tests/archive/test_shim.py``
checks that against tarfile itself and GNU tar.
"""

from __future__ import annotations

import tarfile
from typing import Any, Final, NoReturn

from ._errors import SparseMember
from ._streams import DecompressAhead, ForwardReader
from ._tar_header import parse_common

HOOKS: Final = (
    "_proc_member",
    "_proc_gnusparse_00",
    "_proc_gnusparse_01",
    "_proc_gnusparse_10",
)
"""The private ``TarInfo`` methods :class:`HookedTarInfo` overrides."""

# headers tarfile reads together with what follows them (sparse ones: parse_common declines)
_EXTENDED: Final = frozenset(
    (*tarfile.GNU_TYPES, tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
)


def missing_hooks() -> list[str]:
    """The hooks this interpreter's tarfile lacks (none, from 3.10 to 3.13): an override of a
    method tarfile no longer calls would be silently skipped."""
    return [name for name in HOOKS if not callable(getattr(tarfile.TarInfo, name, None))]


def forget_members(tar: tarfile.TarFile) -> None:
    """tarfile keeps every TarInfo it reads or writes, even when streaming; we need none."""
    tar.members.clear()  # type: ignore[attr-defined]


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value if isinstance(value, str) else None


def sparse_member_name(member: tarfile.TarInfo, args: tuple[Any, ...]) -> str:
    """The name a sparse member will have, from what tarfile passes a sparse hook after the
    member: the PAX records as a dict (every hook before the fix; 0.1 and 1.0 after it) or the
    raw records as ``(length, keyword, value)`` tuples (0.0 after it). ``GNU.sparse.name``
    (format 1.0), else ``path``, else the header's own name."""
    records: dict[str, str] = {}
    first = args[0] if args else None
    if isinstance(first, dict):
        records = {str(key): str(value) for key, value in first.items()}
    elif isinstance(first, list):
        for record in first:
            if isinstance(record, tuple) and len(record) >= 2:
                key, value = _text(record[-2]), _text(record[-1])
                if key is not None and value is not None:
                    records[key] = value
    return records.get("GNU.sparse.name") or records.get("path") or member.name


class ForwardTarFile(tarfile.TarFile):
    """A ``TarFile`` reading a stream that seeks forwards only, on every interpreter.

    After an archive with no member (only its end blocks), Python 3.10's ``next`` seeks back
    one byte before reading on (3.11 returns None there first): on a forward-only stream that
    raised ``io.UnsupportedOperation``, and the library refused the empty archives it packs.

    Over the core's own streams (:class:`~klavis_archive.ForwardReader`,
    :class:`~klavis_archive.DecompressAhead`), ``next`` reads a common header itself: it looks
    at the next block without taking it (``peek``), and when
    :func:`~klavis_archive.parse_common` reads it and it is a member of its own (not an
    extended header, which tarfile reads with what follows it), takes it and hands it to
    tarfile's ``_proc_member`` (the checks of ``before_member``, the member's offsets, the
    global PAX records): the steps tarfile's ``next`` and ``fromtarfile`` take, without their
    calls and checks for what cannot happen here (about 2 us of the 14 a member cost, on
    5,000 small files); where no global PAX record is to be applied, it takes
    ``_proc_builtin``'s steps itself. Anything else, or a header not yet decompressed, goes
    to tarfile's ``next`` as before: it finds the stream where it would have.
    """

    def next(self) -> tarfile.TarInfo | None:
        first = self.firstmember  # type: ignore[attr-defined]
        stream = self.fileobj
        offset = self.offset
        if offset == 0 and first is None and stream is not None and stream.tell() != 0:
            return None  # what 3.11+ return here
        if (
            offset == 0
            or first is not None
            or self.closed  # type: ignore[attr-defined]
            or not isinstance(stream, (ForwardReader, DecompressAhead))
        ):
            return super().next()
        gap = offset - stream.tell()
        if 0 < gap <= tarfile.BLOCKSIZE:  # the padding after a member's data, at once
            if stream.skip(gap) < gap:
                raise tarfile.ReadError("unexpected end of data")
        elif gap:  # as tarfile's next: skip to the header, the data must be there
            stream.seek(offset - 1)
            if not stream.read(1):
                raise tarfile.ReadError("unexpected end of data")
        info = parse_common(
            self.tarinfo, stream.peek(tarfile.BLOCKSIZE), self.encoding, self.errors
        )
        if info is None or info.type in _EXTENDED:
            return super().next()  # nothing was taken: tarfile reads the header itself
        stream.skip(tarfile.BLOCKSIZE)  # what peek showed: there
        info.offset = offset
        if self.pax_headers or not isinstance(info, HookedTarInfo):
            member: tarfile.TarInfo = info._proc_member(self)  # type: ignore[attr-defined]
            return member
        # what _proc_member does for such a member (_proc_builtin, the same from 3.10 to
        # 3.13), with no global PAX record to apply
        info.before_member(self)
        data = offset + tarfile.BLOCKSIZE
        info.offset_data = data
        if info.isreg() or info.type not in tarfile.SUPPORTED_TYPES:
            data += -(-info.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
        self.offset = data
        if info.isdir():
            info.name = info.name.rstrip("/")
        return info


class HookedTarInfo(tarfile.TarInfo):
    """A ``TarInfo`` that shows every header to :meth:`before_member` before tarfile reads what
    it declares, and refuses sparse members of every PAX format (raise :class:`SparseMember`
    from :meth:`before_member` for GNU type ``'S'``, whose map tarfile reads first)."""

    __slots__ = ()

    def before_member(self, tar: tarfile.TarFile) -> None:
        """Called with every header (extended ones included) before tarfile processes it;
        raise to refuse it. Does nothing here."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        self.before_member(tarfile_)
        result: tarfile.TarInfo = super()._proc_member(tarfile_)  # type: ignore[misc]
        return result

    # tarfile calls one of these on the PAX header once it finds GNU.sparse records, with the
    # member's TarInfo (``next``) and arguments that changed with the CVE fix: take what comes.
    def _proc_gnusparse_00(self, next_: tarfile.TarInfo, *args: Any) -> NoReturn:
        raise SparseMember(sparse_member_name(next_, args), "PAX GNU.sparse 0.0")

    def _proc_gnusparse_01(self, next_: tarfile.TarInfo, *args: Any) -> NoReturn:
        raise SparseMember(sparse_member_name(next_, args), "PAX GNU.sparse 0.1")

    def _proc_gnusparse_10(self, next_: tarfile.TarInfo, *args: Any) -> NoReturn:
        raise SparseMember(sparse_member_name(next_, args), "PAX GNU.sparse 1.0")
