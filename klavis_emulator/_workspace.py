"""Walks of folders that a sandbox's processes can change while the emulator reads them.

A workspace (and an execution's working folder) belongs to the tenant's processes: while the
emulator dumps it, copies it into a staging folder or exports it, a process inside can rename
any folder and put a symbolic link in its place. A walk that joins paths (``root/a/b``) and
opens them has the kernel resolve every component again, so a swap between the listing and the
open leads the emulator wherever the link points: its own data folder (``signing.key``, the
database) or other tenants' workspaces. Here every folder is opened relative to its parent's
descriptor with ``O_NOFOLLOW | O_DIRECTORY``, and everything in it is listed (with the type
the listing gives) and opened relative to that descriptor. A swap after a folder was opened
changes nothing the walk reads (the descriptor keeps naming the folder it opened); a swap
before makes the open fail (``ELOOP``, ``ENOTDIR``) or open something else than the listing
said, and the entry is left out, like an entry that vanishes while walked.
Files are opened with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO put in a file's place does not block
the emulator) and described by ``fstat`` of the open file, so a member's header and its bytes
come from the same file.

What a walk leaves out: FIFOs, sockets and devices (dumps never held them), and entries whose
path passes :data:`~klavis_emulator._archive.MAX_PATH_BYTES` (no archive may hold them: the
emulator and the client library refuse such members).

Why by hand: ``os.fwalk`` is just as safe against swaps, but it yields all of a folder's files
before its sub-folders (dumps are sorted by name within a folder, files and folders mixed, and
stay byte for byte what they were), it recurses once a level before Python 3.13 (a sandbox can
make a tree deeper than the recursion limit), and it keeps one descriptor open per level. This
walk keeps at most :data:`FOLDER_DESCRIPTORS` open: deeper, it closes the shallowest ones and
opens them again on the way back up, one ``O_NOFOLLOW`` step at a time from the nearest open
ancestor, checking each folder's device and inode against what it first saw (a folder moved or
swapped meanwhile ends that folder's walk).
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from klavis_archive import MAX_PATH_BYTES, FastTarInfo, TarPacker

__all__ = ["FOLDER_DESCRIPTORS", "WalkEntry", "copy_tree", "make_archive", "remove_tree", "walk"]

FOLDER_DESCRIPTORS: Final = 64
"""Most folder descriptors one walk keeps open (a tree can be thousands of folders deep)."""

_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_FOLDER_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
_NEW_FILE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
_COPY_CHUNK: Final = 1024 * 1024
# ISA-L level of the dumps. On the 100 MiB benchmark workspace, one after the other on a busy
# machine, zlib's 6 (what ``tar czf`` writes) took 23.4 s for 56.3 MB; ISA-L 1 2.5 s for
# 59.9 MB (+6 %), ISA-L 2 2.8 s for 59.6 MB, ISA-L 0 2.0 s for 71.8 MB. The client library
# packs at 1 too. With the rest of make_archive, interleaved: 3.62 s before, 0.36 s after.
_DUMP_COMPRESSLEVEL: Final = 1

Kind = Literal["folder", "file", "link", "end"]
_Hint = Literal["folder", "file", "link", "other"]


@dataclass(frozen=True)
class WalkEntry:
    """One step of :func:`walk`.

    ``kind`` is ``"folder"`` (entering it; ``parts == ()`` for the root), ``"file"``,
    ``"link"`` (a symbolic link: ``target``) or ``"end"`` (a folder's entries are all done;
    ``stat`` is the folder's, as when it was entered). ``fd`` is an open descriptor of the
    folder or file, valid until the walk goes on (``-1`` for links and ends); ``stat``
    describes what ``fd`` names (``lstat`` for links).
    """

    kind: Kind
    parts: tuple[str, ...]
    stat: os.stat_result
    fd: int = -1
    target: str = ""

    @property
    def arcname(self) -> str:
        """The member name of a dump: ``.`` for the root, ``./a/b`` below it."""
        return "./" + "/".join(self.parts) if self.parts else "."


class _Folder:
    """A folder of the walk's current path: its descriptor (or -1 while closed to stay under
    :data:`FOLDER_DESCRIPTORS`), its identity, and the names still to visit."""

    __slots__ = ("fd", "identity", "names", "parts", "stat")

    def __init__(self, parts: tuple[str, ...], fd: int, info: os.stat_result) -> None:
        self.parts = parts
        self.fd = fd
        self.stat = info
        self.identity = (info.st_dev, info.st_ino)
        self.names: list[tuple[str, _Hint]] = []


class _Lost(Exception):
    """A folder could not be opened again as the one first seen (moved or swapped)."""


def _within_limits(parts: tuple[str, ...]) -> bool:
    return len("/".join(parts).encode("utf-8", "surrogateescape")) <= MAX_PATH_BYTES


def walk(root: str | os.PathLike[str]) -> Iterator[WalkEntry]:
    """Walk ``root`` depth first, the entries of each folder sorted by name, relative to open
    descriptors only (see the module docs): the root (``"folder"``, ``parts == ()``), then
    for each entry its ``"folder"`` ... ``"end"``, ``"file"`` or ``"link"`` step.

    Descriptors handed out are closed when the walk goes on (and when it is closed).
    """
    stack: list[_Folder] = []
    try:
        fd = os.open(root, _FOLDER_FLAGS)
        top = _Folder((), fd, os.fstat(fd))
        top.names = _sorted_names(fd)
        stack.append(top)
        yield WalkEntry("folder", (), top.stat, fd)
        while stack:
            folder = stack[-1]
            if not folder.names:
                stack.pop()
                _close(folder)
                yield WalkEntry("end", folder.parts, folder.stat)
                continue
            name, hint = folder.names.pop()
            try:
                parent = _descriptor(stack)
            except _Lost:
                folder.names.clear()
                continue
            parts = (*folder.parts, name)
            if not _within_limits(parts):
                continue
            step = _visit(parent, name, hint, parts)
            if step is None:
                continue
            if step.kind == "folder":
                child = _Folder(parts, step.fd, step.stat)
                child.names = _sorted_names(step.fd)
                stack.append(child)
                _keep_under_budget(stack, len(stack))
                yield step
            elif step.kind == "file":
                try:
                    yield step
                finally:
                    os.close(step.fd)
            else:
                yield step
    finally:
        for folder in stack:
            _close(folder)


def _sorted_names(fd: int) -> list[tuple[str, _Hint]]:
    """The folder's names, each with what its listing says it is, sorted backwards (the walk
    pops them from the end)."""
    try:
        with os.scandir(fd) as listing:
            names = [(entry.name, _hint(entry)) for entry in listing]
    except OSError:
        return []
    names.sort(reverse=True)
    return names


def _hint(entry: os.DirEntry[str]) -> _Hint:
    """What the listing says ``entry`` is (its ``d_type``; an ``lstat`` where the file system
    does not say): only a hint, as the entry can be swapped before it is opened."""
    try:
        if entry.is_file(follow_symlinks=False):
            return "file"
        if entry.is_dir(follow_symlinks=False):
            return "folder"
        if entry.is_symlink():
            return "link"
    except OSError:
        pass
    return "other"


def _visit(parent: int, name: str, hint: _Hint, parts: tuple[str, ...]) -> WalkEntry | None:
    """The step for ``name`` in the folder ``parent``, or None to leave it out (gone,
    swapped for something else meanwhile, or a FIFO, socket or device).

    ``hint`` (the listing's type) picks the one call that opens the entry; what is opened is
    checked by ``fstat`` (``lstat`` for a link), so a swap after the listing leaves the entry
    out (an ``O_NOFOLLOW`` open of a link fails with ``ELOOP``) and never follows a link. No
    ``lstat`` before the open: on 5,000 files of 4 KiB it was a fifth of a dump's calls.
    """
    try:
        if hint == "file":
            fd = os.open(name, _FILE_FLAGS, dir_fd=parent)
            opened = os.fstat(fd)
            if not stat.S_ISREG(opened.st_mode):  # replaced meanwhile (O_NONBLOCK: no wait)
                os.close(fd)
                return None
            return WalkEntry("file", parts, opened, fd)
        if hint == "folder":
            fd = os.open(name, _FOLDER_FLAGS, dir_fd=parent)
            return WalkEntry("folder", parts, os.fstat(fd), fd)
        if hint == "link":
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                return WalkEntry("link", parts, info, target=os.readlink(name, dir_fd=parent))
    except OSError:  # ELOOP, ENOTDIR, ENOENT...: swapped or removed since the listing
        return None
    return None


def _close(folder: _Folder) -> None:
    if folder.fd >= 0:
        with contextlib.suppress(OSError):
            os.close(folder.fd)
        folder.fd = -1


def _keep_under_budget(stack: list[_Folder], end: int) -> None:
    """Close the shallowest open folders of ``stack[:end]`` (never the root, never the
    newest) past the budget.

    The open folders are always the root and one run at the top of ``stack[:end]`` (a push
    closes the run's shallowest; the way back up opens the run downwards, see
    :func:`_descriptor`), so only that run is counted: at most
    :data:`FOLDER_DESCRIPTORS` steps, whatever the depth (counting the whole stack at every
    step made a 2,000-level tree's walk quadratic: 6 s of a 7 s copy).
    """
    first = end
    while first > 1 and stack[first - 1].fd >= 0:
        first -= 1
    while end - first + 1 > FOLDER_DESCRIPTORS and first < end - 1:
        _close(stack[first])
        first += 1


def _descriptor(stack: list[_Folder]) -> int:
    """The descriptor of the deepest folder of ``stack``, opened again if it was closed: from
    the nearest open ancestor down, one ``O_NOFOLLOW`` step a folder, each checked to be the
    folder first seen (else :class:`_Lost`)."""
    index = len(stack) - 1
    while stack[index].fd < 0:
        index -= 1  # the root is never closed
    for depth in range(index + 1, len(stack)):
        folder = stack[depth]
        try:
            fd = os.open(folder.parts[-1], _FOLDER_FLAGS, dir_fd=stack[depth - 1].fd)
        except OSError:
            raise _Lost from None
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != folder.identity:
            os.close(fd)
            raise _Lost
        folder.fd = fd
        _keep_under_budget(stack, depth + 1)
    return stack[-1].fd


# ---------------------------------------------------------------------- the staging copy


def copy_tree(source: Path, destination: Path) -> None:
    """Copy the folder ``source`` to the new folder ``destination``, keeping links as links.

    ``source`` is read with :func:`walk` (a sandbox may be changing it); ``destination`` is the
    emulator's own (a staging folder nobody else reaches), written relative to the descriptor
    of the folder being filled, one name at a time: the walk's way down opens each new folder
    from its parent, its way up opens ``..`` (safe here: no one else can move the staging
    folders). Joined paths from the top made the kernel resolve every level again for each
    entry: quadratic in a tree's depth (2,049 levels, the deepest a path may be, cost about
    2 s of ``mkdir`` alone), and longer than PATH_MAX allows. Files get their mode and times,
    folders theirs once their entries are written. FIFOs, sockets and devices made in the
    sandbox are left out (dumps leave them out too).
    """
    os.mkdir(destination, 0o700)
    current = os.open(destination, _FOLDER_FLAGS)
    try:
        for entry in walk(source):
            name = entry.parts[-1] if entry.parts else ""
            if entry.kind == "folder":
                if entry.parts:
                    os.mkdir(name, 0o700, dir_fd=current)
                    inner = os.open(name, _FOLDER_FLAGS, dir_fd=current)
                    os.close(current)
                    current = inner
            elif entry.kind == "file":
                _copy_file(entry, name, current)
            elif entry.kind == "link":
                os.symlink(entry.target, name, dir_fd=current)
                with contextlib.suppress(OSError):
                    os.utime(name, ns=_times(entry.stat), dir_fd=current, follow_symlinks=False)
            else:  # the folder's entries are written: its own mode and times
                # its parent first, while this folder is still the 0700 it was made
                parent = os.open("..", _FOLDER_FLAGS, dir_fd=current) if entry.parts else -1
                os.fchmod(current, stat.S_IMODE(entry.stat.st_mode))
                os.utime(current, ns=_times(entry.stat))
                if parent >= 0:
                    os.close(current)
                    current = parent
    finally:
        os.close(current)


def _times(info: os.stat_result) -> tuple[int, int]:
    return (info.st_atime_ns, info.st_mtime_ns)


def _copy_file(entry: WalkEntry, target: str, top: int) -> None:
    out = os.open(target, _NEW_FILE, 0o600, dir_fd=top)
    try:
        _copy_data(entry.fd, out)
        os.fchmod(out, stat.S_IMODE(entry.stat.st_mode))
        os.utime(out, ns=_times(entry.stat))
    finally:
        os.close(out)


def _copy_data(source: int, target: int) -> None:
    """Copy what ``source`` holds from its start to ``target`` (in the kernel where it can)."""
    offset = 0
    try:
        while sent := os.sendfile(target, source, offset, _COPY_CHUNK):
            offset += sent
        return
    except OSError:
        if offset:
            raise
    os.lseek(source, 0, os.SEEK_SET)  # sendfile cannot do it here: read and write
    while chunk := os.read(source, _COPY_CHUNK):
        view = memoryview(chunk)
        while view:
            view = view[os.write(target, view) :]


# ---------------------------------------------------------------------- dumps


class _Exactly(io.RawIOBase):
    """``size`` bytes of an open file, as tarfile copies them into a member: the file's bytes,
    cut at ``size`` if it grew since its header was made, and zeros after its end if it shrank
    (tarfile would otherwise stop the dump with "unexpected end of data")."""

    def __init__(self, fd: int, size: int) -> None:
        super().__init__()
        self._fd = fd
        self._left = size
        self._at_end = False

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        want = self._left if size < 0 else min(size, self._left)
        pieces: list[bytes] = []
        got = 0
        while got < want and not self._at_end:
            chunk = os.read(self._fd, want - got)
            if not chunk:
                self._at_end = True
                break
            pieces.append(chunk)
            got += len(chunk)
        if got < want:
            pieces.append(bytes(want - got))
        self._left -= want
        return b"".join(pieces)


def _dump_info(entry: WalkEntry, inodes: dict[tuple[int, int], str]) -> FastTarInfo:
    """The header of one dump member (as ``TarFile.gettarinfo`` makes it, without its owner
    lookups: owners are always root). A regular file met again through another hard link
    (``inodes``: those archived so far) is stored as a hard link to its first name."""
    info = FastTarInfo(entry.arcname)
    st = entry.stat
    if entry.kind == "file":
        first = inodes.get((st.st_dev, st.st_ino)) if st.st_nlink > 1 else None
        if first is not None:
            info.type = tarfile.LNKTYPE
            info.linkname = first
        else:
            info.type = tarfile.REGTYPE
            info.size = st.st_size
    elif entry.kind == "folder":
        info.type = tarfile.DIRTYPE
    else:
        info.type = tarfile.SYMTYPE
        info.linkname = entry.target
    info.mode = stat.S_IMODE(st.st_mode)
    # a float time needs a PAX header of its own for every member
    info.mtime = int(st.st_mtime)
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def make_archive(root: Path, destination: Path) -> int:
    """Write ``root`` as a tar.gz to ``destination`` with members ``.`` and ``./name``.

    ``root`` is read with :func:`walk` (a sandbox may be changing it). Members are sorted by
    name within each folder; regular files, folders and symbolic links are kept (a file's
    further hard links as hard links). Returns the number of members.

    Packed by the archive core's :class:`~klavis_archive.TarPacker`, the library's packer:
    ISA-L at level 1 on one background thread, so reading the files overlaps with compressing
    them; each header is built here from the entry's ``fstat`` (``gettarinfo`` looked up the
    owner's name of every file, then we replaced it).
    """
    count = 0
    inodes: dict[tuple[int, int], str] = {}
    with open(destination, "wb") as raw:
        packer = TarPacker(raw, compresslevel=_DUMP_COMPRESSLEVEL, threads=1)
        try:
            for entry in walk(root):
                if entry.kind == "end":
                    continue
                info = _dump_info(entry, inodes)
                if info.type == tarfile.REGTYPE:
                    packer.add(info, _Exactly(entry.fd, info.size))
                    if entry.stat.st_nlink > 1:
                        inodes[(entry.stat.st_dev, entry.stat.st_ino)] = entry.arcname
                else:
                    packer.add(info)
                count += 1
            packer.finish()
        finally:
            packer.abort()
    return count


# ---------------------------------------------------------------------- removal


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Delete ``path`` and everything below it, never following a link, at any depth; what
    cannot be deleted is left (like ``shutil.rmtree(..., ignore_errors=True)``).

    Why not ``shutil.rmtree``: before Python 3.13 it recurses once a level, and a sandbox can
    make a tree deeper than the recursion limit (``mkdir -p`` of 2,000 levels fits in
    PATH_MAX): ``RecursionError`` is no ``OSError``, so even ``ignore_errors=True`` raised it,
    and every release of such a sandbox failed. Here the tree is kept two levels deep while it
    is deleted: a folder found inside a sub-folder is moved up beside it (a rename within the
    tree) before the sub-folder is emptied, so two descriptors suffice. Each pass deletes what
    it finds; it stops when the tree is gone or a pass deleted nothing (something keeps
    refilling it, or cannot be deleted).
    """
    try:
        top = os.open(path, _FOLDER_FLAGS)
    except FileNotFoundError:
        return
    except OSError:  # not a folder (a file, a link): delete the name itself
        with contextlib.suppress(OSError):
            os.unlink(path)
        return
    try:
        hoisted = 0
        prefix = f".removing-{secrets.token_hex(4)}-"
        while True:
            names = _listed(top)
            progress = False
            for name in names:
                removed, hoisted = _remove_entry(top, name, prefix, hoisted)
                progress = progress or removed
            if not names or not progress:
                break
    finally:
        os.close(top)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _listed(fd: int) -> list[str]:
    try:
        return os.listdir(fd)
    except OSError:
        return []


def _remove_entry(top: int, name: str, prefix: str, hoisted: int) -> tuple[bool, int]:
    """Delete ``name`` of the folder ``top`` if it is not a folder; if it is, delete its
    files, move its sub-folders up into ``top`` (to be deleted by a later pass), and delete it
    once empty. Whether something was deleted or moved, and the hoisting counter."""
    try:
        os.unlink(name, dir_fd=top)
        return True, hoisted
    except IsADirectoryError:
        pass
    except OSError:
        return False, hoisted
    try:
        folder = os.open(name, _FOLDER_FLAGS, dir_fd=top)
    except OSError:
        return False, hoisted
    progress = False
    try:
        for inner in _listed(folder):
            try:
                os.unlink(inner, dir_fd=folder)
                progress = True
                continue
            except IsADirectoryError:
                pass
            except OSError:
                continue
            hoisted += 1
            with contextlib.suppress(OSError):
                os.rename(inner, f"{prefix}{hoisted}", src_dir_fd=folder, dst_dir_fd=top)
                progress = True
    finally:
        os.close(folder)
    with contextlib.suppress(OSError):
        os.rmdir(name, dir_fd=top)
        progress = True
    return progress, hoisted
