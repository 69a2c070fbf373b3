"""What packing a seed (:mod:`workflows._pack`) and reading a dump (:mod:`workflows._dump`) agree
on: the fixed member time and the shape of a progress callback.

A module of its own below both, so that seed code never imports dump code (nor the reverse):
``pyproject.toml``'s import contracts hold that line.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["ARCHIVE_MTIME", "ProgressCallback"]

#: The modification time written for every member: 2000-01-01T00:00:00Z. Fixed so that packing
#: the same content twice gives the same bytes; not 0 (1970), which some tools refuse (zip
#: cannot store dates before 1980) or warn about.
ARCHIVE_MTIME = 946_684_800

ProgressCallback = Callable[[int], None]
"""Called with the number of bytes just handled."""
