"""The caps on the archives the library downloads and reads (:class:`ArchiveLimits`).

The fixed limits every archive meets (extended headers, name lengths, link hops) are the archive
core's (:mod:`klavis_archive`); these are the ones a user tunes.
"""

from __future__ import annotations

from dataclasses import dataclass

from workflows._errors import InvalidInputError

__all__ = ["ArchiveLimits"]

_GIB = 1024**3
# The most a legitimate tar spends per member besides the file's contents: its 512-byte header,
# up to 511 bytes of padding after the contents, and a PAX extended header (a 512-byte header
# and records for a path and a link target of up to PATH_MAX = 4,096 bytes each plus a few
# short ones, padded to blocks: at most 9,216 bytes).
_TAR_MEMBER_OVERHEAD = 512 + 511 + 512 + 9_216
# The end of a tar: two zero blocks, padded to tar's 10,240-byte records.
_TAR_END_OVERHEAD = 2 * 10_240
# gzip's header (with an optional file name or comment: 64 KiB is generous) and trailer.
_GZIP_OVERHEAD = 64 * 1024


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
    :class:`~workflows.UnsafeArchiveError`.

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
