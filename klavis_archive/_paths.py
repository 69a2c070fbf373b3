"""Path and link rules of archive members (no I/O but what the caller's ``readlink`` does).

A member name is relative: no NUL, no absolute path, no ``..`` (:func:`member_parts`); for
writing, its components and its whole must also fit the file system and its depth stay sane
(:func:`checked_parts`). A symbolic link is inside the workspace when its target, resolved
component by component through the tree's other links (:func:`resolve`), stays under the root.
The sandbox mounts the workspace at :data:`~klavis_archive.WORKSPACE_MOUNT` (``/data``): an
absolute target is inside when it is ``/data`` or starts with ``/data/``, and it resolves as the
root plus the rest (:func:`mount_relative`); any other absolute target leads outside.

Refusals are :class:`~klavis_archive.UnsafeMember` with a ``reason``: ``"nul"``,
``"absolute"``, ``"dotdot"``, ``"length"``, ``"depth"``, ``"link"``.
"""

from __future__ import annotations

import posixpath
import tarfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from . import _limits
from ._errors import UnsafeMember, display
from ._limits import MAX_DEPTH, MAX_NAME_BYTES, MAX_PATH_BYTES, WORKSPACE_MOUNT


def member_parts(name: str, *, drive_letters: bool = True) -> tuple[str, ...]:
    """The components of the member name ``name`` (``""`` and ``.`` left out: ``()`` is the
    root), refusing a NUL, an absolute path (with ``drive_letters``, ``C:...`` too) and ``..``.

    >>> member_parts("./a//b/")
    ('a', 'b')
    """
    if "\x00" in name:
        raise UnsafeMember(
            f"Archive member {display(name)} has a NUL byte in its name.", member=name, reason="nul"
        )
    if name.startswith("/") or (
        drive_letters and len(name) > 1 and name[1] == ":" and name[0].isalpha()
    ):
        raise UnsafeMember(
            f"Archive member {display(name)} has an absolute path; "
            "members must be relative to the workspace.",
            member=name,
            reason="absolute",
        )
    parts = tuple(name.split("/"))
    if "" in parts or "." in parts:
        parts = tuple(part for part in parts if part not in ("", "."))
    if ".." in parts:
        raise UnsafeMember(
            f"Archive member {display(name)} contains a '..' component; "
            "members must stay inside the workspace.",
            member=name,
            reason="dotdot",
        )
    return parts


def _utf8_length(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


def _check_lengths(name: str, parts: tuple[str, ...], what: str) -> None:
    """Refuse a name component over NAME_MAX or a path over PATH_MAX (in UTF-8 bytes)."""
    joined = "/".join(parts)
    if (
        joined.isascii()  # one byte a character: the lengths are the UTF-8 lengths
        and len(joined) <= MAX_PATH_BYTES
        and max(map(len, parts), default=0) <= MAX_NAME_BYTES
    ):
        return
    try:
        over = next((n for n in map(_utf8_length, parts) if n > MAX_NAME_BYTES), None)
        if over is not None:
            problem = f"{what} with a name component of {over} bytes; the limit is {MAX_NAME_BYTES}"
        elif (size := _utf8_length(joined)) > MAX_PATH_BYTES:
            problem = f"{what} of {size} bytes; the limit is {MAX_PATH_BYTES}"
        else:
            return
    except UnicodeEncodeError as exc:
        raise UnsafeMember(
            f"Archive member {display(name)} has {what} that is not valid text.",
            member=name,
            reason="length",
        ) from exc
    raise UnsafeMember(
        f"Archive member {display(name)} has {problem} bytes (UTF-8).", member=name, reason="length"
    )


def checked_parts(name: str) -> tuple[str, ...]:
    """:func:`member_parts`, and the name must be one the file system can hold: components of
    at most NAME_MAX bytes, a whole of at most PATH_MAX, at most :data:`MAX_DEPTH` folders."""
    parts = member_parts(name)
    _check_lengths(name, parts, "a path")
    if len(parts) > MAX_DEPTH + 1:
        raise UnsafeMember(
            f"Archive member {display(name)} is {len(parts) - 1} folders deep; the limit is "
            f"{MAX_DEPTH}.",
            member=name,
            reason="depth",
        )
    return parts


def mount_relative(target: str) -> str | None:
    """The part of an absolute link target after ``/data`` (``""`` for ``/data`` itself), or
    ``None`` when the target is not under it. The rule is textual: ``/data`` or ``/data/...``
    exactly (``/datax`` and ``//data`` lead outside)."""
    if target == WORKSPACE_MOUNT:
        return ""
    if target.startswith(WORKSPACE_MOUNT + "/"):
        return target[len(WORKSPACE_MOUNT) + 1 :]
    return None


def link_target_in_tree(link_name: str, target: str) -> str | None:
    """The target of the link ``link_name -> target`` as a path relative to the link's folder.

    A relative ``target`` is returned as it is. An absolute one under ``/data`` becomes the
    relative path from the link's folder to the root plus the rest; any other absolute target
    gives None (it leads outside). Whether the result stays inside the tree is for
    :func:`link_escapes` to say (``/data/../etc`` does not).

    >>> link_target_in_tree("link", "/data/a.txt"), link_target_in_tree("sub/root", "/data")
    ('a.txt', '..')
    >>> link_target_in_tree("bin/python", "/usr/bin/python3") is None
    True
    """
    if not target.startswith("/"):
        return target
    rest = mount_relative(target)
    if rest is None:
        return None
    parts = [".."] * link_name.count("/") + [p for p in rest.split("/") if p not in ("", ".")]
    return "/".join(parts) or "."


@dataclass(frozen=True)
class Resolution:
    """Where a path of the tree leads, found by :func:`resolve`.

    ``parts`` is the resolved path relative to the root (no link left in it), or ``None`` when
    it leads outside the tree; ``absolute`` tells that a link to ``/data/...`` was followed;
    ``loop`` that the resolution gave up after too many links (the sandbox would get ELOOP).
    """

    parts: tuple[str, ...] | None
    absolute: bool = False
    loop: bool = False


ReadLink = Callable[[tuple[str, ...]], "str | None"]


def resolve(parts: Iterable[str], readlink: ReadLink, *, mount: bool = True) -> Resolution:
    """Resolve ``parts`` (relative to the root) component by component, following links as the
    sandbox would. ``readlink(resolved_parts)`` gives the target of the link there, ``None``
    when it is no link, or raises FileNotFoundError (or NotADirectoryError) when it is missing:
    that ends the lookups (the rest is taken as written, as ``realpath`` does). A ``..`` above
    the root leads outside; so does an absolute target, unless ``mount`` and it is under
    ``/data``: then the resolution restarts from the root."""
    pending = list(parts)
    pending.reverse()
    done: list[str] = []
    absolute = False
    hops = 0
    missing = False
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not done:
                return Resolution(None, absolute)
            done.pop()
            continue
        done.append(part)
        if missing:
            continue
        try:
            target = readlink(tuple(done))
        except (FileNotFoundError, NotADirectoryError):
            missing = True
            continue
        if target is None:
            continue
        hops += 1
        if hops > _limits.MAX_SYMLINK_HOPS:
            return Resolution(tuple(done), absolute, loop=True)
        done.pop()
        if target.startswith("/"):
            absolute = True
            rest = mount_relative(target) if mount else None
            if rest is None:
                return Resolution(None, absolute)
            done.clear()
            target = rest
        pending.extend(reversed(target.split("/")))
    return Resolution(tuple(done), absolute)


def link_escapes(link_name: str, target: str, links: Mapping[str, str]) -> bool:
    """True when the symlink ``link_name -> target`` resolves outside the tree's root.

    Resolves like the OS would in the extracted tree, following the tree's other symlinks
    (``links``, name to relative target; an absolute or empty target there counts as leading
    out), so a chain such as ``a -> sub/l/..`` with ``sub/l -> ..`` is caught. An absolute
    ``target`` escapes (convert workspace targets with :func:`link_target_in_tree` first). A
    loop cannot be resolved by the OS either, so it does not count as an escape.

    >>> link_escapes("a/l", "../b", {}), link_escapes("a/l", "../../b", {})
    (False, True)
    """
    if not target or target.startswith("/"):
        return True

    def readlink(parts: tuple[str, ...]) -> str | None:
        nested = links.get("/".join(parts))
        return None if nested is None else nested or "/"

    start = link_name.split("/")[:-1]
    return resolve([*start, *target.split("/")], readlink, mount=False).parts is None


def check_symlink_target(member: tarfile.TarInfo, parts: tuple[str, ...]) -> None:
    """The textual checks of the link ``member`` at ``parts``: a target that is not empty,
    holds no NUL, fits the file system, and does not lead outside by its text alone (the
    tree's other links are for :func:`resolve`)."""
    target, name = member.linkname, member.name
    if not target:
        raise UnsafeMember(
            f"Archive member {display(name)} is a link to nothing.", member=name, reason="link"
        )
    if "\x00" in target:
        raise UnsafeMember(
            f"Archive member {display(name)} is a link with a NUL byte in its target.",
            member=name,
            reason="link",
        )
    _check_lengths(name, tuple(target.split("/")), "a link target")
    if target.startswith("/"):
        rest = mount_relative(target)
        if rest is None:
            raise UnsafeMember(
                f"Archive member {display(name)} is a symbolic link to an absolute path "
                f"({display(target)}) outside {WORKSPACE_MOUNT}, where the sandbox sees its "
                "workspace; links must stay inside the workspace.",
                member=name,
                reason="link",
            )
        resolved = posixpath.normpath(rest or ".")
    else:
        resolved = posixpath.normpath(posixpath.join(*parts[:-1], target))
    if resolved == ".." or resolved.startswith("../") or resolved.startswith("/"):
        raise UnsafeMember(
            f"Archive member {display(name)} is a symbolic link leading outside the workspace "
            f"({display(target)}).",
            member=name,
            reason="link",
        )


def hard_link_parts(member: tarfile.TarInfo) -> tuple[str, ...]:
    """The checked parts of the hard link ``member``'s target (a member of the archive)."""
    target = member.linkname
    if "\x00" in target or target.startswith("/") or ".." in target.split("/"):
        raise UnsafeMember(
            f"Archive member {display(member.name)} is a hard link leading outside the "
            f"workspace ({display(target)}).",
            member=member.name,
            reason="link",
        )
    return checked_parts(target)
