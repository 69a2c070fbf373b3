"""Safe tar.gz extraction into a workspace, and tar.gz creation for dumps.

Extraction never uses ``TarFile.extractall``: every member is checked first (absolute
paths, ``..`` components, links leading out of the tree, device files, caps on the number
of members and on the unpacked size), then written by hand into a staging folder with
real-path checks on every parent directory. The caller swaps the staging folder in only
when everything succeeded, so a refused archive leaves the workspace as it was.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import posixpath
import shutil
import stat
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ArchiveLimits",
    "ArchiveRejected",
    "ArchiveTooLarge",
    "copy_tree",
    "extract_archive",
    "make_archive",
]

GZIP_MAGIC = b"\x1f\x8b"
_COPY_CHUNK = 1024 * 1024


class ArchiveRejected(Exception):
    """The archive is not a safe, well-formed tar.gz; the message says why."""


class ArchiveTooLarge(ArchiveRejected):
    """The archive holds more members or more unpacked bytes than the emulator allows."""


@dataclass(frozen=True)
class ArchiveLimits:
    """Caps applied to an archive before anything is extracted."""

    max_members: int = 100_000
    max_bytes: int = 8 * 1024**3


@dataclass(frozen=True)
class _Planned:
    member: tarfile.TarInfo
    parts: tuple[str, ...]
    kind: str  # "dir" | "file" | "symlink" | "hardlink"
    link_parts: tuple[str, ...] = ()


def _display(name: str) -> str:
    shown = name if len(name) <= 200 else name[:200] + "..."
    return repr(shown)


def _split_member_path(name: str) -> tuple[str, ...]:
    """Split an archive path into components, refusing absolute paths and ``..``."""
    if "\x00" in name:
        raise ArchiveRejected(f"Archive member {_display(name)} has a NUL byte in its name.")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":" and name[0].isalpha()):
        raise ArchiveRejected(
            f"Archive member {_display(name)} has an absolute path; "
            "members must be relative to the workspace."
        )
    parts = tuple(part for part in name.split("/") if part not in ("", "."))
    if ".." in parts:
        raise ArchiveRejected(
            f"Archive member {_display(name)} contains a '..' component; "
            "members must stay inside the workspace."
        )
    return parts


def _plan(tar: tarfile.TarFile, limits: ArchiveLimits) -> list[_Planned]:
    """Check every member of ``tar`` and return what to create, in archive order."""
    planned: list[_Planned] = []
    regular_files: set[tuple[str, ...]] = set()
    total_bytes = 0
    count = 0
    for member in tar:
        count += 1
        if count > limits.max_members:
            raise ArchiveTooLarge(
                f"The archive has more than {limits.max_members} members, the emulator's limit."
            )
        parts = _split_member_path(member.name)
        if member.isdir():
            if parts:
                planned.append(_Planned(member, parts, "dir"))
            continue
        if not parts:
            raise ArchiveRejected(
                f"Archive member {_display(member.name)} names the workspace root "
                "but is not a directory."
            )
        if member.isreg():
            total_bytes += member.size
            if total_bytes > limits.max_bytes:
                raise ArchiveTooLarge(
                    f"The archive unpacks to more than {limits.max_bytes} bytes, "
                    "the emulator's limit."
                )
            planned.append(_Planned(member, parts, "file"))
            regular_files.add(parts)
        elif member.issym():
            target = member.linkname
            if not target or target.startswith("/"):
                raise ArchiveRejected(
                    f"Archive member {_display(member.name)} is a symbolic link to an absolute "
                    f"path ({_display(target)}); links must stay inside the workspace."
                )
            resolved = posixpath.normpath(posixpath.join(*parts[:-1], target))
            if resolved == ".." or resolved.startswith("../") or resolved.startswith("/"):
                raise ArchiveRejected(
                    f"Archive member {_display(member.name)} is a symbolic link leading outside "
                    f"the workspace ({_display(target)})."
                )
            planned.append(_Planned(member, parts, "symlink"))
        elif member.islnk():
            try:
                link_parts = _split_member_path(member.linkname)
            except ArchiveRejected as exc:
                raise ArchiveRejected(
                    f"Archive member {_display(member.name)} is a hard link leading outside the "
                    f"workspace ({_display(member.linkname)})."
                ) from exc
            if link_parts not in regular_files:
                raise ArchiveRejected(
                    f"Archive member {_display(member.name)} is a hard link to "
                    f"{_display(member.linkname)}, which is not an earlier regular file of "
                    "the archive."
                )
            planned.append(_Planned(member, parts, "hardlink", link_parts))
        elif member.ischr() or member.isblk():
            raise ArchiveRejected(
                f"Archive member {_display(member.name)} is a device file; "
                "only regular files, directories and links are allowed."
            )
        elif member.isfifo():
            raise ArchiveRejected(
                f"Archive member {_display(member.name)} is a FIFO; "
                "only regular files, directories and links are allowed."
            )
        else:
            raise ArchiveRejected(
                f"Archive member {_display(member.name)} has an unsupported type "
                f"({member.type!r}); only regular files, directories and links are allowed."
            )
    return planned


def _inside(root_real: str, path: str) -> bool:
    return path == root_real or path.startswith(root_real + os.sep)


def _prepare_parent(root: Path, root_real: str, parts: tuple[str, ...], name: str) -> Path:
    """Create the parent folders of ``parts`` under ``root``, never through an outside link."""
    current = root
    for index, part in enumerate(parts[:-1]):
        current = current / part
        if current.is_symlink():
            if current.is_dir() and _inside(root_real, os.path.realpath(current)):
                continue
        elif current.is_dir():
            continue
        elif not current.exists():
            current.mkdir(mode=0o755)
            continue
        shown = "/".join(parts[: index + 1])
        raise ArchiveRejected(
            f"Archive member {_display(name)} would be written through {_display(shown)}, "
            "which is not a directory inside the workspace."
        )
    if not _inside(root_real, os.path.realpath(current)):
        raise ArchiveRejected(
            f"Archive member {_display(name)} would be written outside the workspace."
        )
    return current


def _remove_existing(path: Path, name: str, *, allow_dir: bool) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        if not allow_dir:
            raise ArchiveRejected(
                f"Archive member {_display(name)} would replace a directory with a file."
            )
    elif path.exists():
        path.unlink()


def _write_file(tar: tarfile.TarFile, item: _Planned, target: Path) -> None:
    source = tar.extractfile(item.member)
    if source is None:  # pragma: no cover - isreg() members always have data
        raise ArchiveRejected(f"Archive member {_display(item.member.name)} has no data.")
    mode = (item.member.mode & 0o777) | 0o600
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(target, flags, mode)
    with os.fdopen(fd, "wb") as out, source:
        shutil.copyfileobj(source, out, _COPY_CHUNK)
    os.chmod(target, mode)
    with contextlib.suppress(OverflowError, ValueError, OSError):
        os.utime(target, (item.member.mtime, item.member.mtime))


def _open_archive(archive: Path) -> tarfile.TarFile:
    with archive.open("rb") as probe:
        magic = probe.read(2)
    if magic != GZIP_MAGIC:
        raise ArchiveRejected(
            "The uploaded archive is not gzip-compressed: expected a .tar.gz file "
            "(it must start with the gzip magic bytes 1f 8b)."
        )
    try:
        return tarfile.open(archive, mode="r:gz")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise ArchiveRejected(
            f"The uploaded archive is not a readable tar.gz file ({type(exc).__name__})."
        ) from exc


def extract_archive(archive: Path, root: Path, limits: ArchiveLimits | None = None) -> int:
    """Check ``archive`` fully, then extract it into the existing folder ``root``.

    Returns the number of members written. Raises :class:`ArchiveRejected` (or
    :class:`ArchiveTooLarge`) when the archive is unsafe or unreadable; ``root`` may then
    hold partial output, so extract into a staging copy and discard it on error.
    """
    limits = limits or ArchiveLimits()
    root_real = os.path.realpath(root)
    try:
        with _open_archive(archive) as tar:
            plan = _plan(tar, limits)
            for item in plan:
                name = item.member.name
                parent = _prepare_parent(root, root_real, item.parts, name)
                target = parent / item.parts[-1]
                if item.kind == "dir":
                    if target.is_symlink() or (target.exists() and not target.is_dir()):
                        target.unlink()
                    target.mkdir(mode=0o755, exist_ok=True)
                    os.chmod(target, (item.member.mode & 0o777) | 0o700)
                elif item.kind == "file":
                    _remove_existing(target, name, allow_dir=False)
                    _write_file(tar, item, target)
                elif item.kind == "symlink":
                    _remove_existing(target, name, allow_dir=False)
                    resolved = os.path.realpath(os.path.join(parent, item.member.linkname))
                    if not _inside(root_real, resolved):
                        raise ArchiveRejected(
                            f"Archive member {_display(name)} is a symbolic link leading "
                            f"outside the workspace ({_display(item.member.linkname)})."
                        )
                    os.symlink(item.member.linkname, target)
                else:
                    source = root.joinpath(*item.link_parts)
                    if source.is_symlink() or not source.is_file():
                        raise ArchiveRejected(
                            f"Archive member {_display(name)} is a hard link to "
                            f"{_display(item.member.linkname)}, which is not a regular file."
                        )
                    _remove_existing(target, name, allow_dir=False)
                    os.link(source, target)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ArchiveRejected(
            f"The uploaded tar.gz archive is truncated or corrupt ({type(exc).__name__})."
        ) from exc
    _check_links_inside(root, root_real)
    return len(plan)


def _check_links_inside(root: Path, root_real: str) -> None:
    """Refuse the result if any symbolic link in ``root`` resolves outside it."""
    for dirpath, dirnames, filenames in os.walk(root):
        for entry in (*dirnames, *filenames):
            path = os.path.join(dirpath, entry)
            if os.path.islink(path) and not _inside(root_real, os.path.realpath(path)):
                shown = os.path.relpath(path, root)
                raise ArchiveRejected(
                    f"The archive leaves a symbolic link leading outside the workspace "
                    f"({_display(shown)})."
                )


def copy_tree(source: Path, destination: Path) -> None:
    """Copy the folder ``source`` to the new folder ``destination``, keeping links as links."""
    shutil.copytree(source, destination, symlinks=True)


def _walk_sorted(folder: Path, arc: str) -> Iterator[tuple[Path, str]]:
    """Yield ``(path, arcname)`` depth first, the entries of each folder sorted by name."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return
    for name in names:
        path = folder / name
        child_arc = f"{arc}/{name}"
        yield path, child_arc
        if path.is_dir() and not path.is_symlink():
            yield from _walk_sorted(path, child_arc)


def make_archive(root: Path, destination: Path) -> int:
    """Write ``root`` as a tar.gz to ``destination`` with members ``.`` and ``./name``.

    Members are sorted by name within each folder; regular files, folders and symbolic
    links are kept, other file types are skipped. Returns the number of members.
    """
    count = 0
    with tarfile.open(destination, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:

        def add(path: Path, arcname: str) -> None:
            nonlocal count
            info = tar.gettarinfo(str(path), arcname=arcname)
            if not (info.isreg() or info.isdir() or info.issym() or info.islnk()):
                return
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if info.isreg():
                with path.open("rb") as data:
                    tar.addfile(info, data)
            else:
                tar.addfile(info)
            count += 1

        add(root, ".")
        for path, arcname in _walk_sorted(root, "."):
            try:
                mode = path.lstat().st_mode
            except OSError:
                continue
            if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
                add(path, arcname)
    return count
