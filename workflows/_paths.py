"""Path rules shared by seeding and archive reading (no I/O).

Two families of names meet here:

* **seed keys**, chosen by the user (``{"data/x.txt": ...}``): strict. A key must name a file by a
  relative POSIX path; anything ambiguous or dangerous is refused with
  :class:`~workflows.InvalidSeedPathError` before a byte is packed.
* **archive member names**, written by someone else (a dump, a downloaded archive): tolerant of
  the ``./`` prefixes and trailing slashes that tar tools write, but anything that could escape
  the destination folder is refused with :class:`~workflows.UnsafeArchiveError`.

Both return the canonical form used everywhere else: ``"a/b.txt"``, no ``./``, no ``//``, no
trailing ``/``.
"""

from __future__ import annotations

import os
import re

from workflows._errors import InvalidSeedPathError, UnsafeArchiveError

__all__ = ["normalize_member_name", "normalize_seed_key"]

# "C:", "C:\x", "C:/x": a Windows drive, absolute (or drive-relative) on Windows.
_DRIVE = re.compile(r"^[A-Za-z]:")


def normalize_seed_key(key: object) -> str:
    """Return the canonical form of a seed key, or raise :class:`InvalidSeedPathError`.

    ``"a/b.txt"`` and ``"./a//b.txt"`` both give ``"a/b.txt"``. Refused (the error names the key
    and says why): a non-string, the empty string, an absolute path (``"/x"``, ``"C:\\\\x"``), a
    ``..`` part, a NUL character, a backslash (use ``/``: a backslash is a file-name character on
    Linux, where the sandbox runs, so ``"a\\\\b"`` would not create a folder), a key naming the
    root (``"."``) and a key ending in ``/`` (a folder, not a file).

    >>> normalize_seed_key("./data//x.txt")
    'data/x.txt'
    """
    if not isinstance(key, str):
        raise InvalidSeedPathError(
            f"seed key {key!r} is a {type(key).__name__}; "
            "keys must be str paths like 'dir/file.txt'",
            path=repr(key),
        )
    if not key:
        raise InvalidSeedPathError(
            "seed key '' is empty; name a file like 'dir/file.txt'", path=key
        )
    if "\x00" in key:
        raise InvalidSeedPathError(f"seed key {key!r} contains a NUL character", path=key)
    if "\\" in key:
        raise InvalidSeedPathError(
            f"seed key {key!r} contains a backslash; use '/' to separate folders "
            "(on Linux a backslash is part of the file name)",
            path=key,
        )
    if key.startswith("/") or _DRIVE.match(key):
        raise InvalidSeedPathError(
            f"seed key {key!r} is absolute; use a path relative to the workspace", path=key
        )
    if key.endswith("/"):
        raise InvalidSeedPathError(
            f"seed key {key!r} ends with '/', which names a folder; seed keys name files",
            path=key,
        )
    parts = key.split("/")
    if ".." in parts:
        raise InvalidSeedPathError(
            f"seed key {key!r} has a '..' part; keys must stay inside the workspace", path=key
        )
    kept = [p for p in parts if p not in ("", ".")]
    if not kept or parts[-1] == ".":
        raise InvalidSeedPathError(
            f"seed key {key!r} names a folder, not a file; use a path like 'dir/file.txt'",
            path=key,
        )
    return "/".join(kept)


def normalize_member_name(name: str) -> str | None:
    """Return the canonical form of an archive member name, or None for the archive's root.

    ``"."`` and ``"./"`` give None, ``"./a/b"`` gives ``"a/b"`` and ``"a/b/"`` gives ``"a/b"``.
    Raises :class:`UnsafeArchiveError` (with ``member`` set) for an absolute name, a ``..`` part
    or a NUL character. On Windows a backslash or a drive letter is refused too, since there they
    would act as separators or roots.
    """
    if not name:
        raise UnsafeArchiveError("archive member with an empty name", member=name)
    if "\x00" in name:
        raise UnsafeArchiveError(f"archive member {name!r} contains a NUL character", member=name)
    if name.startswith("/"):
        raise UnsafeArchiveError(
            f"archive member {name!r} has an absolute path; it would be written outside the "
            "destination",
            member=name,
        )
    if os.sep == "\\" and ("\\" in name or _DRIVE.match(name)):  # pragma: no cover - Windows
        raise UnsafeArchiveError(
            f"archive member {name!r} has a backslash or drive letter", member=name
        )
    parts = name.split("/")
    if ".." in parts:
        raise UnsafeArchiveError(
            f"archive member {name!r} has a '..' part; it would be written outside the destination",
            member=name,
        )
    kept = [p for p in parts if p not in ("", ".")]
    if not kept:
        return None
    return "/".join(kept)
