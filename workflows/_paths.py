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

Symbolic links follow the archive core's rule, the emulator's too (:mod:`klavis_archive`, whose
:func:`~klavis_archive.link_target_in_tree` and :func:`~klavis_archive.link_escapes` this module
passes on): the sandbox mounts the workspace at :data:`SANDBOX_WORKSPACE` (``/data``), so an
absolute link target is *inside* the workspace when it is ``/data`` or starts with ``/data/``,
and it resolves as the workspace root plus the rest (``/data/a.txt`` is the workspace's
``a.txt``). Any other absolute target leads outside.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from klavis_archive import (
    MAX_NAME_BYTES,
    MAX_PATH_BYTES,
    WORKSPACE_MOUNT,
    UnsafeMember,
    link_escapes,
    link_target_in_tree,
    member_parts,
)
from workflows._errors import InvalidInputError, InvalidSeedPathError, UnsafeArchiveError

__all__ = [
    "NAME_MAX",
    "PATH_MAX",
    "SANDBOX_WORKSPACE",
    "check_destination",
    "link_escapes",
    "link_target_in_tree",
    "normalize_member_name",
    "normalize_seed_key",
]

#: Where the sandbox mounts the workspace: an absolute link target is inside it when it is this
#: folder or below it.
SANDBOX_WORKSPACE = WORKSPACE_MOUNT
#: The longest file name (one path part) Linux accepts, in bytes: longer ones fail with
#: ENAMETOOLONG, which the service answered with a 500 (and the client retried for 5 s).
NAME_MAX = MAX_NAME_BYTES
#: The longest path Linux accepts, in bytes (PATH_MAX is 4,096 with the terminating NUL).
PATH_MAX = MAX_PATH_BYTES

# How an archive member name is refused, by the core's reason (member_parts)
_MEMBER_REFUSALS = {
    "nul": "contains a NUL character",
    "absolute": "has an absolute path; it would be written outside the destination",
    "dotdot": "has a '..' part; it would be written outside the destination",
}
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
    name = "/".join(kept)
    check_name_length(name, what=f"seed key {shown_path(key)}", path=key)
    return name


def shown_path(path: str, limit: int = 80) -> str:
    """``repr(path)``, shortened to about ``limit`` characters for an error message.

    >>> shown_path("a" * 100, limit=10)
    "'aaaaaaaaaa…' (100 characters)"
    """
    if len(path) <= limit:
        return repr(path)
    return f"{path[:limit]!r}"[:-1] + f"…' ({len(path):,} characters)"


def check_name_length(name: str, *, what: str, path: str) -> None:
    """Refuse (:class:`InvalidSeedPathError`) a relative POSIX ``name`` that Linux cannot create.

    A part over :data:`NAME_MAX` bytes or a whole over :data:`PATH_MAX` bytes (UTF-8), or a name
    that cannot be encoded as UTF-8 at all (a lone surrogate). ``what`` starts the message;
    ``path`` is the error's ``path``.

    >>> try:
    ...     check_name_length("a/" + "b" * 300, what="seed key 'x'", path="x")
    ... except InvalidSeedPathError as exc:
    ...     print(exc)
    seed key 'x' has a part of 300 bytes (UTF-8), over the 255 a file name may have (NAME_MAX)
    """
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidSeedPathError(
            f"{what} is not valid UTF-8 (it holds a lone surrogate)", path=path
        ) from None
    if len(encoded) > PATH_MAX:
        raise InvalidSeedPathError(
            f"{what} is {len(encoded):,} bytes long (UTF-8), over the {PATH_MAX:,} a path may "
            "have (PATH_MAX)",
            path=path,
        )
    longest = max(encoded.split(b"/"), key=len)
    if len(longest) > NAME_MAX:
        raise InvalidSeedPathError(
            f"{what} has a part of {len(longest):,} bytes (UTF-8), over the {NAME_MAX} a file "
            "name may have (NAME_MAX)",
            path=path,
        )


def normalize_member_name(name: str) -> str | None:
    """Return the canonical form of an archive member name, or None for the archive's root.

    ``"."`` and ``"./"`` give None, ``"./a/b"`` gives ``"a/b"`` and ``"a/b/"`` gives ``"a/b"``.
    Raises :class:`UnsafeArchiveError` (with ``member`` set) for an absolute name, a ``..`` part
    or a NUL character. On Windows a backslash or a drive letter is refused too, since there they
    would act as separators or roots.
    """
    if not name:
        raise UnsafeArchiveError("archive member with an empty name", member=name)
    if os.sep == "\\" and ("\\" in name or _DRIVE.match(name)):  # pragma: no cover - Windows
        raise UnsafeArchiveError(
            f"archive member {name!r} has a backslash or drive letter", member=name
        )
    try:
        kept = member_parts(name, drive_letters=False)
    except UnsafeMember as exc:
        raise UnsafeArchiveError(
            f"archive member {name!r} {_MEMBER_REFUSALS[exc.reason]}", member=name
        ) from None
    return "/".join(kept) or None


# --- destinations ------------------------------------------------------------------------------


def check_destination(path: object, *, what: str = "dump_to") -> Path:
    """Check a destination path given by the user before anything is downloaded; return it.

    Refused with :class:`InvalidInputError` naming the path: something that is not a ``str`` or
    path, the empty string (it once meant "extract into the current folder, replacing files":
    write ``"."`` to mean that), a NUL character, a part over :data:`NAME_MAX` bytes, or a path
    over :data:`PATH_MAX` bytes once made absolute. Whether the folders on the way exist and are
    writable is checked by trying (see :func:`workflows._dump._extract.prepare_destination`).

    >>> check_destination("out/ws.tar.gz")
    PosixPath('out/ws.tar.gz')
    """
    if not isinstance(path, str | os.PathLike):
        raise InvalidInputError(
            f"{what} needs a folder or .tar.gz path, not a {type(path).__name__}"
        )
    text = os.fspath(path)
    if not isinstance(text, str):
        raise InvalidInputError(f"{what} needs a str path, not {type(text).__name__}")
    if not text:
        raise InvalidInputError(
            f"{what} got an empty path; name a folder or a .tar.gz file ('.' for the current "
            "folder)"
        )
    if "\x00" in text:
        raise InvalidInputError(f"{what}: the path {shown_path(text)} contains a NUL character")
    try:
        absolute = os.path.abspath(text).encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # pragma: no cover - surrogateescape encodes any str from fspath
        raise InvalidInputError(f"{what}: the path {shown_path(text)} is not encodable") from None
    longest = max(absolute.split(b"/"), key=len)
    if len(longest) > NAME_MAX:
        raise InvalidInputError(
            f"{what}: the path {shown_path(text)} has a name of {len(longest):,} bytes, over the "
            f"{NAME_MAX} a file name may have (NAME_MAX)"
        )
    if len(absolute) > PATH_MAX:
        raise InvalidInputError(
            f"{what}: the path {shown_path(text)} is {len(absolute):,} bytes long once absolute, "
            f"over the {PATH_MAX:,} a path may have (PATH_MAX)"
        )
    return Path(text)
