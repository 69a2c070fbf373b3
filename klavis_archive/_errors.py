"""The archive core's refusals: one base class, :class:`ArchiveRejected`, and its kinds.

Each carries the member to blame (``member``, ``None`` when the archive as a whole is) and a
message written for the emulator's answers; the library maps them to its own error tree
(:class:`workflows.UnsafeArchiveError`), the emulator to its status codes (400, and 413 for
:class:`ArchiveTooLarge`)::

    ArchiveRejected (ValueError)
    ├── UnsafeMember            a name, a link or a type that could escape or is not allowed
    │   ├── SparseMember        GNU 'S' or PAX GNU.sparse.* (holes of any size)
    │   └── NegativeSize        a size field of -1 (a read of -1 bytes reads everything)
    ├── HeaderTooLarge          an extended header, a chain of them, or the global ones
    ├── HeaderChainTooLong      more extended headers in a row than any real archive has
    └── ArchiveTooLarge         more members, bytes or expansion than the limits allow
"""

from __future__ import annotations

from typing import Literal


def display(name: str) -> str:
    """``repr(name)``, cut after 200 characters, for a message."""
    shown = name if len(name) <= 200 else name[:200] + "..."
    return repr(shown)


class ArchiveRejected(ValueError):
    """The archive is not a safe, well-formed tar.gz; the message says why.

    ``member`` names the member to blame (``None``: the archive as a whole); ``reason`` is a
    short code of the rule that refused it (``"absolute"``, ``"dotdot"``, ``"nul"``, ...).
    """

    def __init__(self, message: str, *, member: str | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.member = member
        self.reason = reason


class UnsafeMember(ArchiveRejected):
    """A member's name, link target or type is refused (``reason`` says which rule)."""


class SparseMember(UnsafeMember):
    """A sparse member: a header of a few bytes declares holes of any size (85 bytes of upload
    once put 1 GiB on a disk). ``kind`` says which format (``"GNU type 'S'"``, ``"PAX
    GNU.sparse 0.0"``, ...)."""

    def __init__(self, member: str, kind: str) -> None:
        super().__init__(
            f"Archive member {display(member)} is a sparse file ({kind}); sparse members (GNU "
            "'S' or PAX GNU.sparse.*) are not accepted: archive the file without --sparse.",
            member=member,
            reason="sparse",
        )
        self.kind = kind


class NegativeSize(UnsafeMember):
    """A member whose size reads as negative (tarfile takes ``"-1"`` as -1)."""

    def __init__(self, member: str, offset: int) -> None:
        super().__init__(
            f"Archive member {display(member)} at offset {offset:,} declares a negative size.",
            member=member,
            reason="negative-size",
        )
        self.offset = offset


HeaderScope = Literal["header", "chain", "global"]


class HeaderTooLarge(ArchiveRejected):
    """Extended headers over the cap: one (``scope == "header"``), those in a row before one
    member (``"chain"``) or all the global ones (``"global"``); ``size`` is what was counted."""

    def __init__(self, scope: HeaderScope, size: int, limit: int, offset: int) -> None:
        super().__init__(
            f"The archive has an extended header (PAX or GNU long name) of {size:,} bytes at "
            f"offset {offset:,}; the limit is {limit:,} bytes.",
            reason=f"{scope}-too-large",
        )
        self.scope: HeaderScope = scope
        self.size = size
        self.limit = limit
        self.offset = offset


class HeaderChainTooLong(ArchiveRejected):
    """More than ``limit`` extended headers in a row (tarfile reads a chain by recursion)."""

    def __init__(self, limit: int, offset: int) -> None:
        super().__init__(
            f"The archive has more than {limit} extended headers in a row at offset {offset:,}.",
            reason="header-chain",
        )
        self.limit = limit
        self.offset = offset


class ArchiveTooLarge(ArchiveRejected):
    """The archive holds more members, more unpacked bytes or more expansion than allowed."""
