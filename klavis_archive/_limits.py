"""The fixed limits of the archive core: what no real archive needs and a hostile one abuses.

The caps an operator tunes (members, bytes, expansion ratio) belong to each package's own
``ArchiveLimits``; these are the ones both packages apply the same way.
"""

from __future__ import annotations

from typing import Final

CHUNK_SIZE: Final = 1024 * 1024
"""Contents are read and written in pieces of this size (memory stays flat)."""
MAX_HEADER_BYTES: Final = 1024 * 1024
"""Cap on one extended header (PAX records, GNU long name or link), on a chain of them before
one member, and on all the global ('g') ones together (tarfile keeps their records for the rest
of the archive).

tarfile reads such a header whole into memory (a 1 GiB PAX header, 1 MB compressed, took the
emulator from 313 to 3,784 MiB; 20 global headers of 1 MiB with distinct keys grew the client by
278 MiB). Real ones hold a long path (at most 4 KiB) or a few extended attributes.
"""
MAX_HEADER_CHAIN: Final = 8
"""Most extended headers in a row before one member (PAX 'x', a global 'g', GNU 'L' and 'K'
make 4 in the worst real case): tarfile handles each by recursion, and 3,000 of them (a 24 KB
archive) raised a RecursionError."""
MAX_NAME_BYTES: Final = 255
"""Longest name component, in UTF-8 bytes (NAME_MAX of Linux file systems)."""
MAX_PATH_BYTES: Final = 4095
"""Longest member path or link target, in UTF-8 bytes (PATH_MAX, 4096, less the NUL)."""
MAX_DEPTH: Final = 512
"""Most folders a member path may go through (PATH_MAX alone allows 2,047, ``a/a/...``). Real
trees stay far below (a deep ``node_modules`` is a few dozen levels)."""
MAX_SYMLINK_HOPS: Final = 40
"""Linux's MAXSYMLINKS: more links in one resolution is a loop (ELOOP in the sandbox)."""
MAX_TRAILING_BYTES: Final = 1024 * 1024
"""After the end-of-archive marker, read at most this much more to reach the gzip trailer (and
so check its CRC); tar pads to 10 KiB records, so a sane archive has far less."""
WORKSPACE_MOUNT: Final = "/data"
"""Where the sandbox sees its workspace: an absolute link target is inside it when it is this
folder or below it (``/data/a.txt`` is the workspace's ``a.txt``)."""
