"""Safe tar.gz extraction into a workspace (dumps are made by :mod:`._workspace`).

Extraction never uses ``TarFile.extractall``. The archive is read in one streaming pass
(ISA-L decompression) and every member is checked as it arrives, before anything is written
for it: absolute paths, ``..`` components, names too long for the file system, links leading
out of the tree, device files and sparse files, caps on extended headers, on the number of
members, on the unpacked size and on the ratio of unpacked to compressed bytes. Files are
written by hand under folders whose every component was resolved by :class:`_Tree` itself (a
folder resolved once is remembered until a symbolic link of the tree changes), and every
symbolic link is checked again at the end. A refused archive may leave partial output in
``root``: the caller extracts into a staging copy and swaps it in only when everything
succeeded, so a refused archive leaves the workspace as it was.

Symbolic links are resolved by :meth:`_Tree.resolve`, never by the host's ``realpath``: a link
to an absolute path inside :data:`WORKSPACE_MOUNT` (``/data``, where the sandbox sees its
workspace) is workspace content and resolves as the workspace root plus the rest of the target,
while on the host ``/data/...`` is another place. Such links are stored verbatim, and no member
is ever written through one (the host kernel would follow it to the host's ``/data``).
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import io
import os
import posixpath
import queue
import stat
import tarfile
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final, cast

from isal import igzip, isal_zlib

from ._exec.confinement import CONFINED_WORKSPACE
from ._tar_header import FastTarInfo

__all__ = [
    "MAX_HEADER_BYTES",
    "MAX_DEPTH",
    "MAX_NAME_BYTES",
    "MAX_PATH_BYTES",
    "WORKSPACE_MOUNT",
    "ArchiveLimits",
    "ArchiveRejected",
    "ArchiveTooLarge",
    "extract_archive",
]

GZIP_MAGIC = b"\x1f\x8b"
WORKSPACE_MOUNT: Final = CONFINED_WORKSPACE
"""Where the sandbox sees its workspace: an absolute link target under it stays inside."""
MAX_HEADER_BYTES: Final = 1024 * 1024
"""Cap on one extended header (PAX records, GNU long name or link), and on a member's chain.

tarfile reads such a header whole into memory (a 1 GiB PAX header, 1 MB compressed, took the
emulator from 313 to 3,784 MiB). Real ones hold a long path (at most 4 KiB) or a few extended
attributes; the client library uses the same 1 MiB cap.
"""
MAX_NAME_BYTES: Final = 255
"""Longest name component, in UTF-8 bytes (NAME_MAX of Linux file systems)."""
MAX_PATH_BYTES: Final = 4095
"""Longest member path or link target, in UTF-8 bytes (PATH_MAX, 4096, less the NUL)."""
MAX_DEPTH: Final = 512
"""Most folders a member path may go through (PATH_MAX alone allows 2,047, ``a/a/...``). Real
trees stay far below (a deep ``node_modules`` is a few dozen levels). The emulator copes with
deeper trees a sandbox's own processes make (``_workspace`` walks and deletes any depth); an
upload has no reason to bring one."""
# At most this many extended headers in a row before one member (PAX 'x', a global 'g', GNU
# 'L' and 'K' make 4 in the worst real case); tarfile handles each by recursion.
_MAX_HEADER_CHAIN = 8
_COPY_CHUNK = 1024 * 1024
_AHEAD_BLOCKS = 2  # decompressed blocks of _COPY_CHUNK waiting for the tar reader
# After the end-of-archive marker, read at most this much more to reach the gzip trailer (and so
# check the CRC); tar pads to 10 KiB records, so a sane archive has far less.
_MAX_TRAILING_BYTES = 1024 * 1024
# Same as Linux's MAXSYMLINKS: more links in one resolution is a loop (ELOOP in the sandbox).
_MAX_SYMLINK_HOPS = 40
_O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | getattr(os, "O_BINARY", 0)
_UTIME_FD = os.utime in os.supports_fd
_FCHMOD = hasattr(os, "fchmod")
_EXTENDED_HEADERS = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)
# What writing a member can raise because of the member itself (its name, its link, what came
# before it): a 400 naming the member. Other OSErrors (EIO, EROFS, EMFILE, ...) are the
# emulator's trouble and stay 500s.
_INPUT_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        "ENAMETOOLONG",
        "ELOOP",
        "ENOTDIR",
        "EISDIR",
        "EEXIST",
        "ENOTEMPTY",
        "ENOENT",
        "EINVAL",
        "EILSEQ",
        "EMLINK",
        "EFBIG",
        "EPERM",
    )
    if hasattr(errno, name)
)
_NO_SPACE_ERRNOS = frozenset(
    getattr(errno, name) for name in ("ENOSPC", "EDQUOT") if hasattr(errno, name)
)

# isal's Python modules are untyped
_igzip_file: Callable[..., Any] = igzip.IGzipFile

# What corrupt or truncated data raises from the decompressor or tarfile while reading.
_CORRUPT: tuple[type[BaseException], ...] = (
    tarfile.TarError,
    io.UnsupportedOperation,  # tarfile seeking the forward-only stream backwards
    EOFError,
    zlib.error,
    gzip.BadGzipFile,
    cast("type[BaseException]", isal_zlib.error),
)
# What opening a file that is not a tar.gz raises (gzip.BadGzipFile is an OSError).
_UNREADABLE: tuple[type[BaseException], ...] = (*_CORRUPT, OSError)


class ArchiveRejected(Exception):
    """The archive is not a safe, well-formed tar.gz; the message says why."""


class ArchiveTooLarge(ArchiveRejected):
    """The archive holds more members or more unpacked bytes than the emulator allows."""


@dataclass(frozen=True)
class ArchiveLimits:
    """Caps applied to an archive while it is read, before each member is written.

    ``max_ratio`` bounds the bytes written per compressed byte read, checked once more than
    ``ratio_grace_bytes`` were written. Deflate cannot expand more than about 1032:1 (a
    258-byte match coded in 2 bits), so a member written from the bytes the stream holds never
    reaches 2000:1, and neither does a real workspace (source trees pack 3-10:1; 1 GiB of zeros
    packs 1030:1). Only a member whose contents are not in the stream can: a sparse file (85
    bytes of upload declared 1 GiB of holes), or whatever other such format tarfile learns.
    Sparse members are refused by name; this is the cap behind that refusal. The grace keeps
    the ratio of tiny archives (a 40-byte gzip of a 20 KiB file) out of the question.
    """

    max_members: int = 100_000
    max_bytes: int = 8 * 1024**3
    max_ratio: float = 2000.0
    ratio_grace_bytes: int = 8 * 1024 * 1024


def _display(name: str) -> str:
    shown = name if len(name) <= 200 else name[:200] + "..."
    return repr(shown)


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
        for part in parts:
            if (size := _utf8_length(part)) > MAX_NAME_BYTES:
                raise ArchiveRejected(
                    f"Archive member {_display(name)} has {what} with a name component of "
                    f"{size} bytes; the limit is {MAX_NAME_BYTES} bytes (UTF-8)."
                )
        if (size := _utf8_length("/".join(parts))) > MAX_PATH_BYTES:
            raise ArchiveRejected(
                f"Archive member {_display(name)} has {what} of {size} bytes; the limit is "
                f"{MAX_PATH_BYTES} bytes (UTF-8)."
            )
    except UnicodeEncodeError as exc:
        raise ArchiveRejected(
            f"Archive member {_display(name)} has {what} that is not valid text."
        ) from exc


def _split_member_path(name: str) -> tuple[str, ...]:
    """Split an archive path into components, refusing absolute paths, ``..`` and names
    too long for the file system."""
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
    _check_lengths(name, parts, "a path")
    if len(parts) > MAX_DEPTH + 1:
        raise ArchiveRejected(
            f"Archive member {_display(name)} is {len(parts) - 1} folders deep; the limit is "
            f"{MAX_DEPTH}."
        )
    return parts


def _mount_relative(target: str) -> str | None:
    """The part of an absolute link target after :data:`WORKSPACE_MOUNT` (``""`` for the mount
    itself), or ``None`` when the target is not under it. The rule is textual, as in the
    client library: ``/data`` or ``/data/...`` exactly."""
    if target == WORKSPACE_MOUNT:
        return ""
    if target.startswith(WORKSPACE_MOUNT + "/"):
        return target[len(WORKSPACE_MOUNT) + 1 :]
    return None


def _check_symlink_target(member: tarfile.TarInfo, parts: tuple[str, ...]) -> None:
    """The textual checks of a link target (the tree checks its resolution after)."""
    target = member.linkname
    if not target:
        raise ArchiveRejected(f"Archive member {_display(member.name)} is a link to nothing.")
    if "\x00" in target:
        raise ArchiveRejected(
            f"Archive member {_display(member.name)} is a link with a NUL byte in its target."
        )
    _check_lengths(member.name, tuple(target.split("/")), "a link target")
    if target.startswith("/"):
        rest = _mount_relative(target)
        if rest is None:
            raise ArchiveRejected(
                f"Archive member {_display(member.name)} is a symbolic link to an absolute "
                f"path ({_display(target)}) outside {WORKSPACE_MOUNT}, where the sandbox sees "
                "its workspace; links must stay inside the workspace."
            )
        resolved = posixpath.normpath(rest or ".")
    else:
        resolved = posixpath.normpath(posixpath.join(*parts[:-1], target))
    if resolved == ".." or resolved.startswith("../") or resolved.startswith("/"):
        raise ArchiveRejected(
            f"Archive member {_display(member.name)} is a symbolic link leading outside "
            f"the workspace ({_display(target)})."
        )


def _refuse_type(member: tarfile.TarInfo) -> ArchiveRejected:
    if member.ischr() or member.isblk():
        return ArchiveRejected(
            f"Archive member {_display(member.name)} is a device file; "
            "only regular files, directories and links are allowed."
        )
    if member.isfifo():
        return ArchiveRejected(
            f"Archive member {_display(member.name)} is a FIFO; "
            "only regular files, directories and links are allowed."
        )
    return ArchiveRejected(
        f"Archive member {_display(member.name)} has an unsupported type "
        f"({member.type!r}); only regular files, directories and links are allowed."
    )


def _sparse(name: str) -> ArchiveRejected:
    return ArchiveRejected(
        f"Archive member {_display(name)} is a sparse file; sparse members (GNU 'S' or PAX "
        "GNU.sparse.*) are not accepted: archive the file without --sparse."
    )


@dataclass(frozen=True)
class _Resolution:
    """Where a path of the tree leads, found by :meth:`_Tree.resolve`.

    ``parts`` is the resolved path relative to the root (no link left in it), or ``None`` when
    it leads outside the tree; ``absolute`` tells that a link to ``/data/...`` was followed;
    ``loop`` that the resolution gave up after too many links (the sandbox would get ELOOP).
    """

    parts: tuple[str, ...] | None
    absolute: bool = False
    loop: bool = False


class _Tree:
    """Writes members under ``root``, resolving every link itself, never through one leading
    outside the tree or to an absolute path.

    ``_folders`` maps the parts of folders already checked to their resolved parts (a real
    folder, or where a link inside the tree leads). Only this extraction writes to the tree, so
    an entry stays true until a symbolic link is removed or created: then all are forgotten.
    """

    def __init__(self, root: Path) -> None:
        self.root = os.fspath(root)
        self._folders: dict[tuple[str, ...], tuple[str, ...]] = {(): ()}
        self._hosts: dict[tuple[str, ...], str] = {}  # host paths of _folders, as asked

    def host(self, parts: tuple[str, ...]) -> str:
        """The host path of resolved ``parts``."""
        return os.path.join(self.root, *parts)

    def resolve(self, parts: tuple[str, ...] | list[str]) -> _Resolution:
        """Resolve ``parts`` (relative to the root) component by component, following links
        as the sandbox would: an absolute target under ``/data`` restarts from the root, any
        other absolute target or a ``..`` above the root leads outside. A missing component
        ends the lookups (the rest is taken as written, as ``realpath`` does)."""
        pending = list(reversed(parts))
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
                    return _Resolution(None, absolute)
                done.pop()
                continue
            done.append(part)
            if missing:
                continue
            try:
                mode = os.lstat(self.host(tuple(done))).st_mode
            except (FileNotFoundError, NotADirectoryError):
                missing = True
                continue
            if not stat.S_ISLNK(mode):
                continue
            hops += 1
            if hops > _MAX_SYMLINK_HOPS:
                return _Resolution(tuple(done), absolute, loop=True)
            target = os.readlink(self.host(tuple(done)))
            done.pop()
            if target.startswith("/"):
                absolute = True
                rest = _mount_relative(target)
                if rest is None:
                    return _Resolution(None, absolute)
                done.clear()
                target = rest
            pending.extend(reversed(target.split("/")))
        return _Resolution(tuple(done), absolute)

    def _forget_folders(self) -> None:
        """A symbolic link changed: folders must be resolved again."""
        self._folders = {(): ()}
        self._hosts = {}

    def parent(self, parts: tuple[str, ...], name: str) -> str:
        """The host path of the folder that ``parts`` goes in, created (with its parents) if
        missing; it holds no symbolic link, so the kernel follows none when writing in it."""
        key = parts[:-1]
        host = self._hosts.get(key)
        if host is None:
            host = self._hosts[key] = self.host(self.parent_parts(parts, name))
        return host

    def parent_parts(self, parts: tuple[str, ...], name: str) -> tuple[str, ...]:
        """The resolved parts of the folder that ``parts`` goes in (see :meth:`parent`)."""
        key = parts[:-1]
        known = self._folders.get(key)
        if known is not None:
            return known
        current: tuple[str, ...] = ()
        for index in range(len(key)):
            prefix = key[: index + 1]
            known = self._folders.get(prefix)
            if known is not None:
                current = known
                continue
            candidate = (*current, key[index])
            path = self.host(candidate)
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                os.mkdir(path, 0o755)
                mode = stat.S_IFDIR
            if stat.S_ISLNK(mode):
                candidate = self._through_link(candidate, prefix, name)
            elif not stat.S_ISDIR(mode):
                raise ArchiveRejected(
                    f"Archive member {_display(name)} would be written through "
                    f"{_display('/'.join(prefix))}, which is not a directory."
                )
            self._folders[prefix] = current = candidate
        return current

    def _through_link(
        self, link: tuple[str, ...], prefix: tuple[str, ...], name: str
    ) -> tuple[str, ...]:
        """Where the link ``link`` (resolved parts) leads, if a member may be written there."""
        resolution = self.resolve(link)
        shown = _display("/".join(prefix))
        if resolution.parts is None:
            raise ArchiveRejected(
                f"Archive member {_display(name)} would be written outside the workspace "
                f"through the symbolic link {shown}."
            )
        if resolution.absolute:
            # On the host, /data/... is another place: the kernel must never follow such a
            # link for us. Mapping the path by hand would work, but members written through
            # an absolute link are no real archive's need; refusing is the simple safe choice.
            raise ArchiveRejected(
                f"Archive member {_display(name)} would be written through the symbolic link "
                f"{shown}, which leads to an absolute path; the emulator writes no member "
                "through such links."
            )
        with contextlib.suppress(OSError):
            if not resolution.loop and stat.S_ISDIR(os.lstat(self.host(resolution.parts)).st_mode):
                return resolution.parts
        raise ArchiveRejected(
            f"Archive member {_display(name)} would be written through {shown}, "
            "which is not a directory inside the workspace."
        )

    def _unlink(self, path: str, mode: int) -> None:
        os.unlink(path)
        if stat.S_ISLNK(mode):
            self._forget_folders()

    def remove_existing(self, path: str, name: str) -> None:
        """Remove a file or link at ``path``, refusing to replace a folder."""
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return
        if stat.S_ISDIR(mode):
            raise ArchiveRejected(
                f"Archive member {_display(name)} would replace a directory with a file."
            )
        self._unlink(path, mode)

    def folder(self, member: tarfile.TarInfo, parts: tuple[str, ...]) -> None:
        """Create (or keep) the folder ``parts``; a file or link of that name is replaced."""
        parent = self.parent_parts(parts, member.name)
        target = os.path.join(self.host(parent), parts[-1])
        try:
            mode = os.lstat(target).st_mode
        except FileNotFoundError:
            mode = 0
        if mode and not stat.S_ISDIR(mode):
            self._unlink(target, mode)
            mode = 0
        if not mode:
            os.mkdir(target, 0o755)
        os.chmod(target, (member.mode & 0o777) | 0o700)
        self._folders[parts] = (*parent, parts[-1])

    def file(self, member: tarfile.TarInfo, parts: tuple[str, ...], data: Iterable[bytes]) -> None:
        """Write the regular file ``parts`` from the chunks ``data``, replacing a file or link
        there."""
        # Files are written one at a time, by the thread that reads and checks the members. A pool
        # of 4 writer threads for files up to 1 MiB (the main thread reading ahead, settling the
        # pool before any change but a new file) was tried: on tmpfs, 5,000 small files took 1.58 s
        # against 0.86 s on one thread (medians of 7 interleaved runs, load average 7 on 2 cores:
        # the threads fight for the GIL over syscalls that take microseconds), 0.69 against 0.81 s
        # on the 100 MiB benchmark workspace; on a disk the runs spread too widely to tell. It
        # stayed out.
        target = os.path.join(self.parent(parts, member.name), parts[-1])
        mode = (member.mode & 0o777) | 0o600
        try:
            fd = os.open(target, _NEW_FILE, mode)
        except FileExistsError:
            self.remove_existing(target, member.name)
            fd = os.open(target, _NEW_FILE, mode)
        try:
            for chunk in data:
                done = os.write(fd, chunk)
                while done < len(chunk):  # a short write: write the rest
                    done += os.write(fd, chunk[done:])
            if _FCHMOD:
                os.fchmod(fd, mode)  # the umask applied to os.open's mode
            else:  # pragma: no cover - Windows
                os.chmod(target, mode)
            with contextlib.suppress(OverflowError, ValueError, OSError):
                os.utime(fd if _UTIME_FD else target, (member.mtime, member.mtime))
        finally:
            os.close(fd)

    def symlink(self, member: tarfile.TarInfo, parts: tuple[str, ...]) -> None:
        """Create the symbolic link ``parts`` (its target verbatim); it must resolve inside."""
        parent = self.parent_parts(parts, member.name)
        target = os.path.join(self.host(parent), parts[-1])
        self.remove_existing(target, member.name)
        rest = _mount_relative(member.linkname)
        if rest is not None:
            leads = self.resolve(rest.split("/"))
        else:
            leads = self.resolve([*parent, *member.linkname.split("/")])
        if leads.parts is None:
            raise ArchiveRejected(
                f"Archive member {_display(member.name)} is a symbolic link leading "
                f"outside the workspace ({_display(member.linkname)})."
            )
        os.symlink(member.linkname, target)
        self._forget_folders()

    def hardlink(
        self, member: tarfile.TarInfo, parts: tuple[str, ...], link_parts: tuple[str, ...]
    ) -> None:
        """Link ``parts`` to the earlier regular file ``link_parts`` of the tree."""
        source = self.resolve(link_parts[:-1])
        regular = False
        if source.parts is not None and not source.absolute and not source.loop:
            path = self.host((*source.parts, link_parts[-1]))
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                regular = stat.S_ISREG(os.lstat(path).st_mode)
        if not regular:
            raise ArchiveRejected(
                f"Archive member {_display(member.name)} is a hard link to "
                f"{_display(member.linkname)}, which is not a regular file."
            )
        if link_parts == parts:
            return  # a link to itself: the file is already there
        target = os.path.join(self.parent(parts, member.name), parts[-1])
        self.remove_existing(target, member.name)
        os.link(path, target, follow_symlinks=False)

    def links_outside(self) -> set[tuple[tuple[str, ...], str]]:
        """The symbolic links of the tree (parts and target) that lead outside it."""
        found: set[tuple[tuple[str, ...], str]] = set()
        pending: list[tuple[str, ...]] = [()]
        while pending:
            folder = pending.pop()
            with os.scandir(self.host(folder)) as entries:
                for entry in entries:
                    parts = (*folder, entry.name)
                    if entry.is_symlink():
                        if self.resolve(parts).parts is None:
                            found.add((parts, os.readlink(entry.path)))
                    elif entry.is_dir(follow_symlinks=False):
                        pending.append(parts)
        return found

    def check_links_inside(self, before: set[tuple[tuple[str, ...], str]]) -> None:
        """Refuse the result if a symbolic link of the tree now leads outside it (a later
        member may have changed where an earlier link leads), unless that link was there,
        leading outside, before the archive: made inside the sandbox (a venv's ``bin/python
        -> /usr/bin/python3``), it is not the archive's doing, and no member was written
        through it."""
        made = sorted(self.links_outside() - before)
        if made:
            parts, target = made[0]
            raise ArchiveRejected(
                "The archive leaves a symbolic link leading outside the workspace "
                f"({_display('/'.join(parts))} -> {_display(target)})."
            )


class _BoundedTarFile(tarfile.TarFile):
    """A streaming reader that counts the extended headers it meets (see _BoundedTarInfo)."""

    chain = 0  # extended headers in a row before the next member
    chain_bytes = 0  # and their total size
    global_bytes = 0  # total size of the global ('g') headers, which tarfile keeps


class _BoundedTarInfo(FastTarInfo):
    """Refuses sparse members, and extended headers (PAX records, GNU long names) bigger than
    :data:`MAX_HEADER_BYTES` before tarfile reads them whole into memory.

    Old GNU sparse members (type ``S``) are refused before tarfile reads their maps (which can
    run on for the whole stream); the PAX sparse formats when their records are seen (the 1.0
    map sits in the member's data and tarfile would read it all).
    """

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        reader = cast("_BoundedTarFile", tarfile_)
        if self.size < 0:  # tarfile reads "-1" as -1, and a read of -1 bytes reads it all
            raise _negative_size(self.name, self.offset)
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise _sparse(self.name)
        if self.type in _EXTENDED_HEADERS:
            reader.chain += 1
            reader.chain_bytes += self.size
            if self.type == tarfile.XGLTYPE:
                reader.global_bytes += self.size
            worst = max(self.size, reader.chain_bytes, reader.global_bytes)
            if worst > MAX_HEADER_BYTES:
                raise ArchiveRejected(
                    f"The archive has an extended header (PAX or GNU long name) of {worst:,} "
                    f"bytes at offset {self.offset:,}; the emulator's limit is "
                    f"{MAX_HEADER_BYTES:,} bytes."
                )
            if reader.chain > _MAX_HEADER_CHAIN:
                raise ArchiveRejected(
                    f"The archive has more than {_MAX_HEADER_CHAIN} extended headers in a row "
                    f"at offset {self.offset:,}."
                )
        else:
            reader.chain = reader.chain_bytes = 0
        result: tarfile.TarInfo = super()._proc_member(tarfile_)  # type: ignore[misc]
        return result

    # tarfile's private hooks for PAX sparse members. Their parameters after ``next`` differ
    # between interpreters (the CVE-2024-6232 fix, gh-121285, made 0.0's ``(pax_headers, buf)``
    # a ``(raw_headers,)`` list in 3.13, 3.12.6+ and 3.11.10+): taken as ``*args``, so every
    # supported interpreter reaches the refusal instead of a TypeError (a 500).

    def _proc_gnusparse_00(self, next: tarfile.TarInfo, *args: Any) -> None:
        raise _sparse(next.name)

    def _proc_gnusparse_01(self, next: tarfile.TarInfo, *args: Any) -> None:
        raise _sparse(next.name)

    def _proc_gnusparse_10(self, next: tarfile.TarInfo, *args: Any) -> None:
        pax_headers = args[0] if args and isinstance(args[0], dict) else {}
        raise _sparse(pax_headers.get("GNU.sparse.name", next.name))


def _negative_size(name: str, offset: int) -> ArchiveRejected:
    return ArchiveRejected(
        f"Archive member {_display(name)} at offset {offset:,} declares a negative size."
    )


def _truncated(exc: BaseException) -> ArchiveRejected:
    return ArchiveRejected(
        f"The uploaded tar.gz archive is truncated or corrupt ({type(exc).__name__})."
    )


def _os_error(exc: OSError, name: str) -> ArchiveRejected:
    """The 400 (or 413) for an OSError that writing the member ``name`` raised because of
    the archive; other OSErrors are raised again (a 500: the emulator's own trouble)."""
    code = errno.errorcode.get(exc.errno or 0, "")
    reason = f"{exc.strerror or type(exc).__name__}{f' ({code})' if code else ''}"
    if exc.errno in _NO_SPACE_ERRNOS:
        return ArchiveTooLarge(
            f"The emulator ran out of disk space writing archive member {_display(name)}: {reason}."
        )
    if exc.errno in _INPUT_ERRNOS:
        return ArchiveRejected(f"Archive member {_display(name)} cannot be written: {reason}.")
    raise exc


class _DecompressAhead(io.RawIOBase):
    """The decompressed stream of ``gz``, decompressed one block ahead on a thread of its own.

    ISA-L releases the GIL while it inflates, so the next block is decompressed while this
    thread parses tar headers and writes files: an initialize then takes about the longer of
    the two, not their sum (measured on the 100 MiB benchmark workspace in RAM: 0.32-0.37 s ->
    0.23-0.29 s, against 0.17 s to decompress alone). Why by hand: ``isal.igzip_threaded``
    reads the same way, but reads the compressed file 8 blocks ahead and cannot say which
    compressed position a decompressed byte came from, which the expansion-ratio cap needs;
    here each block carries the compressed file's position *before* it was decompressed
    (:attr:`compressed_position`), never more than what producing the bytes read so far took,
    so the cap is at least as strict as with ``raw.tell()`` read in line. (A real deflate
    stream expands at most ~1032:1, so a block's lag cannot push a genuine archive over the
    2000:1 cap once the grace is passed: the ratio measured is at most 8/7 of the real one.)

    At most :data:`_AHEAD_BLOCKS` blocks of :data:`_COPY_CHUNK` wait in memory. Whatever the
    worker meets (the decompressor's error, or any other) is handed to the reader where the
    block would have been, with its own type, and raised again on every later read; a worker
    that dies without a word still ends the reader's wait (it checks the worker is alive).

    It is read as a TarFile opened in mode "r" reads its file: whole reads (never everything
    at once), ``tell`` and seeks forwards (by reading on); tarfile's stream mode ("r|") copied
    its buffer for every header it took, 0.03 s on 5,000 files.
    """

    def __init__(self, gz: IO[bytes], raw: IO[bytes]) -> None:
        super().__init__()
        self._blocks: queue.Queue[tuple[bytes, int, BaseException | None]] = queue.Queue(
            _AHEAD_BLOCKS
        )
        self._stop = threading.Event()
        self._block = memoryview(b"")
        self._at_end = False
        self._error: BaseException | None = None
        self._position = 0
        self.compressed_position = 0
        self._worker = threading.Thread(
            target=self._decompress, args=(gz, raw), name="archive-decompress", daemon=True
        )
        self._worker.start()

    def _decompress(self, gz: IO[bytes], raw: IO[bytes]) -> None:
        while not self._stop.is_set():
            try:
                before = raw.tell()
                item: tuple[bytes, int, BaseException | None] = (gz.read(_COPY_CHUNK), before, None)
            except BaseException as exc:  # noqa: BLE001 - handed to the reader, raised there
                item = (b"", 0, exc)
            while not self._stop.is_set():
                try:
                    self._blocks.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if not item[0]:
                return

    def _next_block(self) -> tuple[bytes, int, BaseException | None]:
        while True:
            try:
                return self._blocks.get(timeout=0.5)
            except queue.Empty:
                if not self._worker.is_alive() and self._blocks.empty():
                    return b"", 0, RuntimeError("the archive's decompressing thread ended")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True  # forwards only: what a TarFile opened in mode "r" asks of its file

    def tell(self) -> int:
        """The position in the decompressed stream."""
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Skip forwards to ``offset`` (or to the end, if the stream ends before it)."""
        if whence != io.SEEK_SET or offset < self._position:
            raise io.UnsupportedOperation("the decompressed archive only seeks forwards")
        while self._position < offset and self._take(offset - self._position):
            pass
        return self._position

    def read(self, size: int | None = -1) -> bytes:
        """``size`` bytes, fewer only at the end of the stream. Reading it all at once (no
        size, or a negative one) is refused: nothing here needs it, and the stream can hold
        gigabytes."""
        if size is None or size < 0:
            raise tarfile.ReadError(f"a read of {size} bytes: the archive is read in pieces")
        block = self._block
        if len(block) >= size and self._error is None:  # the common case, in one block
            self._block = block[size:]
            self._position += size
            return bytes(block[:size])
        pieces: list[memoryview] = []
        left = size
        while left and (piece := self._take(left)):
            pieces.append(piece)
            left -= len(piece)
        return b"".join(pieces)

    def _take(self, size: int) -> memoryview:
        """At most ``size`` bytes from the current block (the next one if it is used up)."""
        if self._error is not None:
            raise self._error
        if self._at_end:
            return memoryview(b"")
        if not self._block:
            data, position, error = self._next_block()
            if error is not None:
                self._error = error
                raise error
            if not data:
                self._at_end = True
                return memoryview(b"")
            self._block = memoryview(data)
            self.compressed_position = position
        taken = self._block[:size]
        self._block = self._block[size:]
        self._position += len(taken)
        return taken

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(queue.Empty):
            while True:  # free a worker blocked on a full queue
                self._blocks.get_nowait()
        self._worker.join()
        super().close()


@contextlib.contextmanager
def _open_archive(archive: Path) -> Iterator[tuple[_DecompressAhead, tarfile.TarFile]]:
    """The decompressed stream and a streaming tar reader over it (checks the gzip magic)."""
    with archive.open("rb") as raw:
        if raw.read(2) != GZIP_MAGIC:
            raise ArchiveRejected(
                "The uploaded archive is not gzip-compressed: expected a .tar.gz file "
                "(it must start with the gzip magic bytes 1f 8b)."
            )
        raw.seek(0)
        with (
            _igzip_file(fileobj=raw, mode="rb") as gz,
            contextlib.closing(_DecompressAhead(gz, raw)) as stream,
        ):
            try:
                # mode "r" over the stream, which seeks forwards only (see _DecompressAhead)
                tar = _BoundedTarFile(  # closed by the with below
                    fileobj=cast("IO[bytes]", stream), mode="r", tarinfo=_BoundedTarInfo
                )
            except EOFError as exc:  # the first read of the stream hit the cut
                raise _truncated(exc) from exc
            except _UNREADABLE as exc:
                raise ArchiveRejected(
                    f"The uploaded archive is not a readable tar.gz file ({type(exc).__name__})."
                ) from exc
            with tar:
                yield stream, tar


def _forget_members(tar: tarfile.TarFile) -> None:
    """tarfile keeps every TarInfo it reads, even when streaming; we need none."""
    tar.members.clear()  # type: ignore[attr-defined]


class _Extraction:
    """One extraction's counters and caps (members, bytes, expansion ratio)."""

    def __init__(self, root: Path, limits: ArchiveLimits, stream: _DecompressAhead) -> None:
        self.tree = _Tree(root)
        self.limits = limits
        self.stream = stream
        self.regular_files: set[tuple[str, ...]] = set()
        self.total_bytes = 0
        self.count = 0
        self.written = 0
        self.name = ""

    def wrote(self, size: int) -> None:
        """Count ``size`` more bytes written for the current member; refuse past the ratio."""
        self.total_bytes += size
        limits = self.limits
        if self.total_bytes > limits.ratio_grace_bytes:
            compressed = max(self.stream.compressed_position, 1)
            if self.total_bytes > limits.max_ratio * compressed:
                raise ArchiveTooLarge(
                    f"The archive expands more than {limits.max_ratio:g} times its compressed "
                    f"size ({self.total_bytes:,} bytes written from {compressed:,} read, at "
                    f"member {_display(self.name)}); the emulator's limit."
                )

    def contents(self, size: int) -> Iterator[bytes]:
        """The ``size`` bytes of the current member's data, in chunks, each counted by
        :meth:`wrote` before it is handed on; a stream that ends first is a truncated archive.
        (The stream is where tarfile left it: at the member's data.)"""
        left = size
        while left:
            chunk = self.stream.read(min(left, _COPY_CHUNK))
            if not chunk:
                raise tarfile.ReadError("unexpected end of data")
            left -= len(chunk)
            self.wrote(len(chunk))
            yield chunk

    def member(self, member: tarfile.TarInfo) -> None:
        """Check and write one member."""
        self.name = member.name
        self.count += 1
        if member.size < 0:  # a PAX record can set it after the header was checked
            raise _negative_size(member.name, member.offset)
        limits = self.limits
        if self.count > limits.max_members:
            raise ArchiveTooLarge(
                f"The archive has more than {limits.max_members} members, the emulator's limit."
            )
        parts = _split_member_path(member.name)
        if member.sparse is not None or any(
            k.startswith("GNU.sparse.") for k in member.pax_headers
        ):
            raise _sparse(member.name)
        tree = self.tree
        if member.isdir():
            if parts:
                tree.folder(member, parts)
                self.written += 1
            return
        if not parts:
            raise ArchiveRejected(
                f"Archive member {_display(member.name)} names the workspace root "
                "but is not a directory."
            )
        if member.isreg():
            if self.total_bytes + member.size > limits.max_bytes:
                raise ArchiveTooLarge(
                    f"The archive unpacks to more than {limits.max_bytes} bytes, "
                    "the emulator's limit."
                )
            tree.file(member, parts, self.contents(member.size))
            self.regular_files.add(parts)
        elif member.issym():
            _check_symlink_target(member, parts)
            tree.symlink(member, parts)
        elif member.islnk():
            link_parts = _hard_link_parts(member)
            if link_parts not in self.regular_files:
                raise ArchiveRejected(
                    f"Archive member {_display(member.name)} is a hard link to "
                    f"{_display(member.linkname)}, which is not an earlier regular "
                    "file of the archive."
                )
            tree.hardlink(member, parts, link_parts)
        else:
            raise _refuse_type(member)
        self.written += 1


def _hard_link_parts(member: tarfile.TarInfo) -> tuple[str, ...]:
    target = member.linkname
    if "\x00" in target or target.startswith("/") or ".." in target.split("/"):
        raise ArchiveRejected(
            f"Archive member {_display(member.name)} is a hard link leading "
            f"outside the workspace ({_display(target)})."
        )
    return _split_member_path(target)


def extract_archive(archive: Path, root: Path, limits: ArchiveLimits | None = None) -> int:
    """Extract ``archive`` into the existing folder ``root``, checking each member first.

    Returns the number of members written. Raises :class:`ArchiveRejected` (or
    :class:`ArchiveTooLarge`) when the archive is unsafe or unreadable, or when a member
    cannot be written because of its name (too long, ...); ``root`` may then hold partial
    output (never anything outside it), so extract into a staging copy and discard it on error.
    """
    try:
        with _open_archive(archive) as (stream, tar):
            extraction = _Extraction(root, limits or ArchiveLimits(), stream)
            before = extraction.tree.links_outside()
            while (member := tar.next()) is not None:
                _forget_members(tar)
                try:
                    extraction.member(member)
                except OSError as exc:
                    if isinstance(exc, _CORRUPT):
                        raise  # corrupt data met while copying a file's contents
                    raise _os_error(exc, member.name) from exc
            # read on to the gzip trailer, so that a truncated or corrupt end is refused
            left = _MAX_TRAILING_BYTES
            while left > 0 and (chunk := stream.read(min(left, _COPY_CHUNK))):
                left -= len(chunk)
    except _CORRUPT as exc:
        raise _truncated(exc) from exc
    try:
        extraction.tree.check_links_inside(before)
    except OSError as exc:
        raise _os_error(exc, "(a symbolic link)") from exc
    return extraction.written
