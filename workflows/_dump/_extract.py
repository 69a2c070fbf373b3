"""Extract the workspace archives (tar.gz) to disk, safely.

:func:`extract_archive` and :meth:`Destination.extract` write what
:func:`~workflows._dump._archive.iter_archive_files` yields, so every check of reading applies,
into a temporary folder beside the destination, and move it into place only once all of the
archive passed: a refused archive leaves the disk as it was. :func:`prepare_destination` checks (by
making it) where ``dump_to`` will write before anything is downloaded. The temporary entries are
those of :mod:`workflows._dump._staging`: named for this process, and removed by a later dump
into the same folder once that process is gone.

A write that fails for want of room (a full disk or quota, a file size limit, a failing disk:
:data:`~workflows._errors.NO_ROOM`) raises :class:`~workflows.LocalWriteError`; one the path
itself forbids (a name too long, a read-only file system) raises
:class:`~workflows.InvalidInputError` (:func:`~workflows._errors.write_error` decides).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tarfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, BinaryIO

from workflows._dump._archive import (
    CHUNK_SIZE,
    ArchiveLimits,
    file_mode,
    iter_archive_files,
    warn_skipped,
)
from workflows._dump._staging import Staging, make_staging
from workflows._errors import InvalidInputError, KlavisError, write_error
from workflows._paths import link_target_in_tree, shown_path
from workflows._tar_common import ARCHIVE_MTIME, ProgressCallback

__all__ = [
    "Destination",
    "Extracted",
    "extract_archive",
    "prepare_destination",
]

_O_BINARY: int = getattr(os, "O_BINARY", 0)
_O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
_UTIME_FD = os.utime in os.supports_fd
# Files up to this size are read whole and written by a few threads, so that creating and writing
# them (system calls that let go of the GIL) overlaps with decompressing the next members; bigger
# ones are streamed by the calling thread in CHUNK_SIZE pieces.
_POOLED_FILE_MAX = 4 * 1024 * 1024
_WRITE_THREADS = 4
# Bytes read but not yet written, at most; an empty file counts as _WRITE_MIN_COST.
_WRITE_BUDGET = 8 * 1024 * 1024
_WRITE_MIN_COST = 4096
_WRITE_BATCH = 512 * 1024


def _remove_non_dir(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _member_mtime(info: tarfile.TarInfo) -> int:
    return int(info.mtime) if info.mtime and info.mtime > 0 else ARCHIVE_MTIME


def _create_file(path: str, mode: int) -> int:
    """Open a new file at ``path`` for writing; an entry already there (an earlier member of
    the same name, or a symlink, never followed) is replaced."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_BINARY
    try:
        return os.open(path, flags, mode)
    except FileExistsError:
        os.unlink(path)
        return os.open(path, flags, mode)


def _set_mtime(fd: int, path: str, mtime: int) -> None:
    if _UTIME_FD:
        os.utime(fd, (mtime, mtime))
    else:  # pragma: no cover - platforms without futimens
        os.utime(path, (mtime, mtime))


def _write_bytes(path: str, data: bytes, mode: int, mtime: int) -> None:
    fd = _create_file(path, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        _set_mtime(fd, path, mtime)
    except OSError as exc:  # os.write's errors name no file: this one is raised on another thread
        if exc.filename is None:
            exc.filename = path
        raise
    finally:
        os.close(fd)


def _write_stream(
    path: str, reader: BinaryIO, info: tarfile.TarInfo, progress: ProgressCallback | None
) -> None:
    fd = _create_file(path, file_mode(info))
    with open(fd, "wb", buffering=0, closefd=True) as out:
        while True:
            chunk = reader.read(CHUNK_SIZE)
            if not chunk:
                break
            out.write(chunk)
            if progress is not None:
                progress(len(chunk))
        _set_mtime(fd, path, _member_mtime(info))


class _FileWriter:
    """Writes small files on a few threads while the calling thread decompresses the next ones.

    Files are handed over in batches of about :data:`_WRITE_BATCH` bytes (one hand-over per file
    cost more than it saved). At most ``budget`` bytes read but not yet written are held (an empty
    file counts as :data:`_WRITE_MIN_COST`, which also bounds the queue). The first error of a
    write is raised by the next :meth:`submit` or by :meth:`drain`; :meth:`close` waits for the
    threads, so nothing is written after it returns.
    """

    def __init__(self, threads: int, budget: int) -> None:
        self._threads = threads
        self._budget = budget
        self._pool: ThreadPoolExecutor | None = None
        self._cond = threading.Condition()
        self._held = 0
        self._tasks = 0
        self._error: BaseException | None = None
        self._batch: list[tuple[str, bytes, int, int]] = []
        self._batch_cost = 0

    def submit(self, path: str, reader: BinaryIO, info: tarfile.TarInfo) -> int:
        """Read the member's contents now; they are written to ``path`` on a thread."""
        cost = max(info.size, _WRITE_MIN_COST)
        with self._cond:
            if self._held and self._held + cost > self._budget:
                self._flush_locked()
                while self._held and self._held + cost > self._budget and self._error is None:
                    self._cond.wait()
            self._raise_error()
            self._held += cost
        try:
            data = reader.read(info.size)
        except BaseException:
            with self._cond:
                self._held -= cost
            raise
        with self._cond:
            self._batch.append((path, data, file_mode(info), _member_mtime(info)))
            self._batch_cost += cost
            if self._batch_cost >= _WRITE_BATCH:
                self._flush_locked()
        return len(data)

    def _flush_locked(self) -> None:
        if not self._batch:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, "workflows-extract")
        batch, cost = self._batch, self._batch_cost
        self._pool.submit(self._write, batch, cost)
        self._batch, self._batch_cost = [], 0
        self._tasks += 1

    def _write(self, batch: list[tuple[str, bytes, int, int]], cost: int) -> None:
        error: BaseException | None = None
        try:
            for path, data, mode, mtime in batch:
                if self._error is not None:
                    break
                _write_bytes(path, data, mode, mtime)
        except Exception as exc:  # noqa: BLE001 - raised again on the calling thread
            error = exc
        finally:
            with self._cond:
                self._held -= cost
                self._tasks -= 1
                if error is not None and self._error is None:
                    self._error = error
                self._cond.notify_all()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def drain(self) -> None:
        """Wait until every file handed over is written; raise the first error of a write."""
        with self._cond:
            self._flush_locked()
            while self._tasks:
                self._cond.wait()
            self._raise_error()

    def close(self) -> None:
        """Stop the threads (batches not yet started are dropped) and wait for them."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _add_folders(folders: set[str], name: str) -> None:
    """Record ``name`` and all its parents as folders that exist."""
    while name and name not in folders:
        folders.add(name)
        name = name.rpartition("/")[0]


def _lstat_mode(path: str) -> int | None:
    """The ``lstat`` mode of ``path`` (a link is never followed), None when nothing is there."""
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return None


def _is_folder(mode: int | None) -> bool:
    return mode is not None and stat.S_ISDIR(mode)


def _plan_merge(tmp: str, dest: str) -> None:
    """Check that ``tmp`` can be moved over ``dest`` without replacing one of dest's folders."""
    for dirpath, dirnames, filenames in os.walk(tmp):
        rel = os.path.relpath(dirpath, tmp)
        # merge inside dest's folders; a missing or non-folder target is replaced whole
        dirnames[:] = [d for d in dirnames if _is_folder(_lstat_mode(os.path.join(dest, rel, d)))]
        for f in filenames:
            target = os.path.normpath(os.path.join(dest, rel, f))
            if _is_folder(_lstat_mode(target)):
                raise InvalidInputError(
                    f"cannot extract: {target!r} is a folder and the archive has a file there; "
                    "nothing was written"
                )


def _merge(tmp: str, dest: str) -> None:
    """Move the extracted tree ``tmp`` into ``dest``; members replace entries of the same name."""
    for dirpath, dirnames, filenames in os.walk(tmp):
        rel = os.path.relpath(dirpath, tmp)
        keep: list[str] = []
        for d in dirnames:
            target = os.path.normpath(os.path.join(dest, rel, d))
            mode = _lstat_mode(target)
            if _is_folder(mode):
                keep.append(d)
                continue
            if mode is not None:
                os.unlink(target)  # a file or a symlink (never followed) where a folder goes
            os.rename(os.path.join(dirpath, d), target)
        dirnames[:] = keep
        for f in filenames:
            os.replace(os.path.join(dirpath, f), os.path.normpath(os.path.join(dest, rel, f)))


@dataclass(frozen=True)
class Extracted:
    """What :meth:`Destination.extract` wrote: the regular files (sorted) and the links it left
    out because they lead outside the destination (name -> target as stored)."""

    files: list[str]
    skipped_links: dict[str, str]


def _destination_error(path: str, action: str, exc: OSError) -> KlavisError:
    return write_error(f"cannot {action} {shown_path(path)}", path, exc)


@dataclass
class Destination:
    """Where a dump goes, checked and made ready before the download (see
    :func:`prepare_destination`).

    ``real`` is the destination's own entry (its parent resolved, its name never followed);
    ``staging`` is a temporary folder (extraction) or file (a kept ``.tar.gz``) beside it, locked
    while in use (:mod:`workflows._dump._staging`); ``made`` lists the parent folders made for it,
    removed again by :meth:`discard` when the dump fails, so a refused dump leaves the disk as
    it was.
    """

    path: str
    real: str
    keep_archive: bool
    staging: Staging
    made: list[str]

    @property
    def shown(self) -> str:
        return shown_path(self.path)

    def open_archive(self) -> IO[bytes]:
        """The staging file, to download a kept ``.tar.gz`` into (the caller closes it)."""
        try:
            return open(self.staging.path, "r+b")
        except OSError as exc:
            raise _destination_error(self.path, "write to", exc) from exc

    def commit_archive(self) -> None:
        """Move the downloaded ``.tar.gz`` into place (atomically)."""
        try:
            os.replace(self.staging.path, self.real)
        except OSError as exc:
            raise _destination_error(self.path, "write", exc) from exc
        self.staging.unlock()
        self.made = []

    def discard(self) -> None:
        """Remove what :func:`prepare_destination` made (idempotent, best effort)."""
        self.staging.remove()
        for folder in reversed(self.made):
            with contextlib.suppress(OSError):  # not empty, or gone: leave it
                os.rmdir(folder)
        self.made = []

    def extract(
        self,
        src: IO[bytes] | str | os.PathLike[str],
        *,
        limits: ArchiveLimits = ArchiveLimits(),  # noqa: B008 - frozen: sharing one is safe
        progress: ProgressCallback | None = None,
        workspace_links: bool = False,
    ) -> Extracted:
        """Extract the tar.gz ``src`` into the destination (see :func:`extract_archive`).

        With ``workspace_links=True`` (a dump) links to ``/data/...`` are written as relative
        links, and links leading outside the destination are left out with a warning (listed
        in the result) instead of failing the extraction. On any error nothing is left behind.
        """
        try:
            result = _extract_into(self, src, limits, progress, workspace_links)
        except BaseException:
            self.discard()
            raise
        self.made = []
        if workspace_links:
            warn_skipped(f"dump_to {self.shown}", result.skipped_links)
        return result


def _entry_path(path: str) -> str:
    """The destination's own entry: its parent folder resolved (symlinks on the way followed),
    its last name kept as is, so that a symlink there is replaced or refused, never followed.

    A path whose last part is ``.`` or ``..`` names a folder reached through its parent, so it
    is resolved whole (it cannot be a link of its own).
    """
    trimmed = path.rstrip(os.sep) or path  # "out/" names the entry "out" too; "/" stays
    head, tail = os.path.split(trimmed)
    if tail in ("", os.curdir, os.pardir):
        return os.path.realpath(trimmed)
    return os.path.join(os.path.realpath(head or os.curdir), tail)


def _symlink_destination(shown: str, entry: str) -> str:
    try:
        target = f" (to {os.readlink(entry)!r})"
    except OSError:  # pragma: no cover - removed meanwhile
        target = ""
    return (
        f"cannot extract into {shown}: it is a symlink{target}; extracting would write outside "
        "the path named. Name the folder itself, or remove the link"
    )


def prepare_destination(dest: str | os.PathLike[str], *, keep_archive: bool = False) -> Destination:
    """Check where a dump will go, by making it ready, before anything is downloaded.

    The nearest existing folder on the way must be a folder (not a file), the missing parent
    folders are made, and a temporary folder (or, with ``keep_archive``, a temporary file) is
    made beside the destination: whatever stops these (a file on the way, a read-only or
    virtual file system such as ``/proc``, a name too long) raises :class:`InvalidInputError`
    naming the path, with nothing left behind. An existing destination must be a folder (or,
    with ``keep_archive``, must not be one).

    Symlinks on the way to the destination are followed, as by any tool; the destination's own
    entry never is (see :func:`_entry_path`). A kept ``.tar.gz`` replaces a symlink of that
    name, as it replaces a file: the link's target (a ``~/.bashrc`` planted behind
    ``shared/ws.tar.gz``) is never written, nor a dangling link's target created. A folder
    destination that is a symlink is refused, naming the link and its target: extracting into
    the target would write outside the path named, and replacing the link would drop whatever
    its owner meant by it; name the folder itself instead.
    """
    path = os.fspath(dest)
    shown = shown_path(path)
    real = _entry_path(path)
    try:
        st = os.lstat(real)
    except (FileNotFoundError, NotADirectoryError):  # a file on the way is named below
        st = None
    except OSError as exc:
        raise _destination_error(path, "write to", exc) from exc
    if st is not None and not keep_archive and stat.S_ISLNK(st.st_mode):
        raise InvalidInputError(_symlink_destination(shown, real))
    if st is not None and stat.S_ISDIR(st.st_mode) == keep_archive:
        raise InvalidInputError(
            f"cannot write to {shown}: it is a folder; name a file to save the archive in"
            if keep_archive
            else f"cannot extract into {shown}: it exists and is not a folder; name a folder, or "
            "a .tar.gz file"
        )
    parent = os.path.dirname(real)
    missing: list[str] = []
    probe = parent
    while not os.path.lexists(probe):
        missing.append(probe)
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise InvalidInputError(f"cannot write to {shown}: {probe!r} is not a folder")
    made: list[str] = []
    try:
        for folder in reversed(missing):
            os.mkdir(folder)
            made.append(folder)
        staging = make_staging(parent, folder=not keep_archive)
    except OSError as exc:
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise _destination_error(path, "create" if missing else "write to", exc) from exc
    return Destination(path, real, keep_archive, staging, made)


def _extract_into(
    destination: Destination,
    src: IO[bytes] | str | os.PathLike[str],
    limits: ArchiveLimits,
    progress: ProgressCallback | None,
    workspace_links: bool,
) -> Extracted:
    # mkdtemp's folder is private (0o700); the tree is built in a folder made the usual way
    root = os.path.join(destination.staging.path, "root")
    dest_path = destination.real
    writer = _FileWriter(_WRITE_THREADS, _WRITE_BUDGET)
    files: set[str] = set()
    skipped: dict[str, str] = {}
    current = ""

    def skip(name: str, target: str) -> None:
        # a link left out replaces whatever an earlier member of that name wrote
        writer.drain()
        _remove_non_dir(os.path.join(root, *name.split("/")))
        files.discard(name)
        skipped[name] = target

    try:
        os.mkdir(root)
        # The tree is new and only this loop writes to it, and iter_archive_files refuses members
        # reached through a symlink or a file: so a folder made once stays a folder (no stat).
        folders: set[str] = {""}
        # names written as files or symlinks: a later member of the same name waits for them
        written: set[str] = set()
        try:
            for name, info, reader in iter_archive_files(
                src,
                limits=limits,
                workspace_links=workspace_links,
                on_skipped_link=skip if workspace_links else None,
            ):
                current = name
                path = os.path.join(root, *name.split("/"))
                if info.isdir():
                    if name not in folders:
                        os.makedirs(path, exist_ok=True)
                        _add_folders(folders, name)
                    continue
                folder = name.rpartition("/")[0]
                if folder not in folders:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    _add_folders(folders, folder)
                if name in written:
                    writer.drain()
                written.add(name)
                if reader is not None:
                    if info.size <= _POOLED_FILE_MAX:
                        size = writer.submit(path, reader, info)
                        if progress is not None and size:
                            progress(size)
                    else:
                        _write_stream(path, reader, info, progress)
                    files.add(name)
                elif info.issym():
                    target = info.linkname
                    if workspace_links:
                        target = link_target_in_tree(name, target) or target
                    try:
                        os.symlink(target, path)
                    except FileExistsError:  # an earlier member of that name
                        os.unlink(path)
                        os.symlink(target, path)
                    files.discard(name)
                else:  # a hard link: copy the earlier file
                    writer.drain()
                    source = os.path.join(root, *info.linkname.split("/"))
                    if source != path:
                        _remove_non_dir(path)
                        shutil.copyfile(source, path, follow_symlinks=False)
                        shutil.copymode(source, path, follow_symlinks=False)
                        if progress is not None:
                            progress(os.path.getsize(path))
                    files.add(name)
            current = ""
            writer.drain()
        finally:
            writer.close()
    except OSError as exc:
        # the destination cannot hold the dump (a name too long under it, a full disk, ...)
        where = _member_of(exc, root) or current
        raise write_error(
            f"cannot write {where!r} under {destination.shown}",
            destination.path,
            exc,
            then="; nothing was written",
        ) from exc
    try:
        if not os.path.lexists(dest_path):
            os.rename(root, dest_path)  # a link made meanwhile is not replaced: ENOTDIR
        else:
            if os.path.islink(dest_path):  # made since prepare_destination checked
                raise InvalidInputError(
                    _symlink_destination(destination.shown, dest_path) + "; nothing was written"
                )
            _plan_merge(root, dest_path)
            _merge(root, dest_path)
    except OSError as exc:
        raise _destination_error(destination.path, "move the dump into", exc) from exc
    destination.staging.remove()
    return Extracted(sorted(files), skipped)


def _member_of(exc: OSError, root: str) -> str | None:
    """The archive member an OSError is about, when its file name is inside ``root``."""
    filename = exc.filename
    if not isinstance(filename, str) or not filename.startswith(root + os.sep):
        return None
    return filename[len(root) + 1 :].replace(os.sep, "/")


def extract_archive(
    src: IO[bytes] | str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    limits: ArchiveLimits = ArchiveLimits(),  # noqa: B008 - frozen: sharing one is safe
    progress: ProgressCallback | None = None,
    workspace_links: bool = False,
) -> list[str]:
    """Safely extract the tar.gz ``src`` (a file object or a path) into the folder ``dest``.

    Every check of :func:`~workflows._dump._archive.iter_archive_files` applies. The archive is
    extracted into a temporary folder next to ``dest`` and moved into place only once all of it
    passed, so a refused archive leaves ``dest`` exactly as it was (and the parents made for it are
    removed again), and nothing is ever written outside ``dest``. ``dest`` is created (with its
    parents) if missing (see :func:`prepare_destination`). When ``dest`` already has content,
    members replace the files, symlinks (never followed) and folders-versus-file entries of the same
    name, and everything else is left alone; a member that is a file where ``dest`` has a folder
    raises :class:`InvalidInputError` before anything is moved. So does a member the destination
    cannot hold (a path too long under it), naming it.

    Files get mode 0o644, or 0o755 when the member's owner exec bit is set (less the umask), and
    the member's mtime; symlinks are created as stored (they were checked to stay inside), or,
    with ``workspace_links=True`` (a dump: see :meth:`Destination.extract`), relative; a hard
    link becomes a copy of its target. Files up to 4 MiB are written by a few threads while the
    next members are decompressed (at most 8 MiB waiting). ``progress(n)`` is called, on the
    calling thread, with the number of file bytes extracted since its last call. Returns the
    names of the regular files extracted, sorted.
    """
    destination = prepare_destination(dest)
    result = destination.extract(
        src, limits=limits, progress=progress, workspace_links=workspace_links
    )
    return result.files
