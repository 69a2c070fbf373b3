"""The safe-archive core shared by ``workflows`` and ``klavis_emulator``.

Workspaces travel as tar.gz archives: the library packs seeds and reads dumps, the emulator
reads seeds and writes dumps. What makes that safe and fast is written once, here: the fixed
limits, the bounded tar reader and the streams it reads, the path and link rules, the fast
header code, the packer, and the opening of a plan's files that follows no link
(:class:`PlannedTree`); and pip's logical lines of the requirements file an execution's
archive carries, which both sides read (:func:`pip_logical_lines`). This package is a leaf:
it imports the standard library and ``isal``, never ``workflows`` nor ``klavis_emulator``
(``tests/archive/test_leaf.py``).

Refusals are :class:`ArchiveRejected` (a ``ValueError``) and its kinds; each package maps them
to its own errors (the library to ``UnsafeArchiveError``, the emulator to 400 and 413 answers).
tarfile's private hooks are reached only through :mod:`klavis_archive._tarfile_shim`.
"""

from __future__ import annotations

from ._errors import (
    ArchiveRejected,
    ArchiveTooLarge,
    HeaderChainTooLong,
    HeaderScope,
    HeaderTooLarge,
    NegativeSize,
    SparseMember,
    UnsafeMember,
    display,
)
from ._limits import (
    CHUNK_SIZE,
    MAX_DEPTH,
    MAX_HEADER_BYTES,
    MAX_HEADER_CHAIN,
    MAX_NAME_BYTES,
    MAX_PATH_BYTES,
    MAX_SYMLINK_HOPS,
    MAX_TRAILING_BYTES,
    WORKSPACE_MOUNT,
)
from ._packer import COMPRESS_BLOCK, TarPacker, TarSink
from ._paths import (
    Resolution,
    check_symlink_target,
    checked_parts,
    hard_link_parts,
    link_escapes,
    link_target_in_tree,
    member_parts,
    mount_relative,
    resolve,
)
from ._pip_lines import pip_logical_lines, without_pip_comment
from ._planned import OPEN_FOLDERS, FileIdentity, PlannedTree, SourceChanged
from ._reader import CORRUPT, BoundedTarFile, BoundedTarInfo, open_tar
from ._streams import CountingStream, DecompressAhead, ForwardReader, igzip_file
from ._tar_header import FastTarInfo, common_header, parse_common
from ._tarfile_shim import forget_members

__all__ = [
    # errors
    "ArchiveRejected",
    "ArchiveTooLarge",
    "HeaderChainTooLong",
    "HeaderScope",
    "HeaderTooLarge",
    "NegativeSize",
    "SparseMember",
    "UnsafeMember",
    "display",
    # limits
    "CHUNK_SIZE",
    "MAX_DEPTH",
    "MAX_HEADER_BYTES",
    "MAX_HEADER_CHAIN",
    "MAX_NAME_BYTES",
    "MAX_PATH_BYTES",
    "MAX_SYMLINK_HOPS",
    "MAX_TRAILING_BYTES",
    "WORKSPACE_MOUNT",
    # reading
    "CORRUPT",
    "BoundedTarFile",
    "BoundedTarInfo",
    "CountingStream",
    "DecompressAhead",
    "ForwardReader",
    "forget_members",
    "igzip_file",
    "open_tar",
    # paths and links
    "Resolution",
    "check_symlink_target",
    "checked_parts",
    "hard_link_parts",
    "link_escapes",
    "link_target_in_tree",
    "member_parts",
    "mount_relative",
    "resolve",
    # headers and packing
    "COMPRESS_BLOCK",
    "FastTarInfo",
    "TarPacker",
    "TarSink",
    "common_header",
    "parse_common",
    # opening what a plan named, following no link
    "OPEN_FOLDERS",
    "FileIdentity",
    "PlannedTree",
    "SourceChanged",
    # what an execution's archive carries, read by both sides: pip's requirements lines
    "pip_logical_lines",
    "without_pip_comment",
]
