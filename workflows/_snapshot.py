"""Snapshots of a workspace: a read-only ``Mapping[str, bytes]`` with links, manifests and diffs."""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import IO, TYPE_CHECKING, NamedTuple, Protocol

from workflows._digests import DigestQueue
from workflows._errors import InvalidInputError
from workflows._git_index import UnreadableIndex, index_digest, is_git_index
from workflows._paths import link_target_in_tree
from workflows._seed import (
    ExactReader,
    FolderOptions,
    FolderRules,
    LinkedFiles,
    PlannedFiles,
    SeedContent,
    plan_mapping,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["ManifestEntry", "Snapshot", "SnapshotDiff"]

log = logging.getLogger("workflows")

_CHUNK = 1024 * 1024
_O_BINARY: int = getattr(os, "O_BINARY", 0)
_O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)


class _Readable(Protocol):
    """What :meth:`_SnapshotWriter.add` reads from: a file, or a reader of a planned one."""

    def read(self, n: int = -1, /) -> bytes: ...


class ManifestEntry(NamedTuple):
    """One file of a snapshot: its path, size in bytes and SHA-256 (hex)."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class SnapshotDiff:
    """What changed going from one snapshot to another; falsy when nothing did.

    ``added``: paths only in the new one; ``removed``: only in the old one; ``modified``: in both
    with different contents. Each is sorted.
    """

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.modified)

    def summary(self) -> str:
        """``"1 added, 1 removed, 1 modified"``, or ``"no changes"``."""
        if not self:
            return "no changes"
        return (
            f"{len(self.added)} added, {len(self.removed)} removed, {len(self.modified)} modified"
        )

    def __str__(self) -> str:
        """One line per path, sorted: ``+ added``, ``- removed``, ``~ modified``."""
        if not self:
            return "no changes"
        lines = [(p, "+") for p in self.added]
        lines += [(p, "-") for p in self.removed]
        lines += [(p, "~") for p in self.modified]
        lines.sort()
        return "\n".join(f"{mark} {path}" for path, mark in lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


class _Entry(NamedTuple):
    offset: int
    size: int
    sha256: str
    mode: int


class Snapshot(Mapping[str, bytes], LinkedFiles):
    """A read-only mapping of workspace paths (POSIX, relative, no ``./``) to file contents.

    Build one from a mapping (``Snapshot({"a.txt": "hi"})``, contents kept in memory; str
    values are encoded as UTF-8, keys are checked and normalised like seed keys) or get one from
    ``sb.dump()`` / :func:`workflows._dump._archive.read_snapshot`, which keeps the contents in one
    anonymous temporary file and only an index in memory, so a large dump costs little memory;
    reading a file reads it from there.

    Symbolic links are not files, so they are not entries of the mapping: :attr:`links` holds
    them (name -> target, as the sandbox has them, e.g. ``{"link": "/data/a.txt"}``), and
    seeding a snapshot (``sb.seed(snapshot)``) sends them back. A dump keeps the links that stay
    inside the workspace (relative ones that resolve inside, and absolute ones to ``/data`` or
    below, where the sandbox mounts it); the others (a venv's ``bin/python3 -> /usr/bin/python3``)
    are left out with a warning and listed in :attr:`skipped_links`.

    SHA-256 hashes are computed once, while loading: :meth:`manifest`, :meth:`diff` and ``==``
    never re-read contents. Two snapshots are equal when they hold the same paths with the same
    contents and the same links (a snapshot also equals a plain mapping with those paths and
    contents and no links, str values compared as UTF-8). Iteration is in sorted path order.
    :meth:`close` (or leaving a ``with``) frees the temporary file; afterwards paths, links, the
    manifest and diffs still work, but reading contents raises ``ValueError``.
    """

    _index: dict[str, _Entry]
    _links: dict[str, str]
    _skipped: dict[str, str]
    _memory: dict[str, bytes] | None
    _blob: IO[bytes] | None
    _closed: bool
    _lock: threading.Lock

    def __init__(
        self,
        files: Mapping[str, SeedContent] | None = None,
        *,
        links: Mapping[str, str] | None = None,
    ) -> None:
        """Build an in-memory snapshot from ``{path: str | bytes}`` (see the class docs).

        ``links`` adds symbolic links ``{name: target}``, checked like a seed's (a relative
        target resolving inside, or an absolute one to ``/data`` or below); when ``files`` is a
        Snapshot, its links are kept unless ``links`` is given.

        >>> Snapshot({"a.txt": "A"}, links={"link": "/data/a.txt"})
        Snapshot(1 file, 1 bytes, 1 link)
        """
        memory: dict[str, bytes] = {}
        index: dict[str, _Entry] = {}
        found: dict[str, str] = {}
        for entry in plan_mapping(files if files is not None else {}, links):
            if entry.link_target is not None:
                found[entry.name] = entry.link_target
                continue
            data = entry.data if entry.data is not None else b""
            memory[entry.name] = data
            index[entry.name] = _Entry(0, len(data), hashlib.sha256(data).hexdigest(), 0o644)
        self._setup(index, memory, None, found, {})

    @classmethod
    def from_mapping(cls, files: Mapping[str, SeedContent]) -> Snapshot:
        """Same as ``Snapshot(files)``."""
        return cls(files)

    @classmethod
    def from_directory(
        cls,
        path: str | os.PathLike[str],
        **rules: Unpack[FolderOptions],
    ) -> Snapshot:
        """A snapshot of a local folder, read with the rules of ``sb.seed_directory(path, ...)``.

        The same arguments select the same files (``.gitignore``, ``.sandboxignore``,
        ``ignore=``; links kept only inside the folder; a file over ``max_file_size`` refused;
        ``preserve_mtime`` is taken too, so that the keywords of a ``seed_directory`` call can
        be passed here as they are, and changes nothing, since a snapshot holds no times):
        what this snapshot holds is what seeding the folder would send, read as seeding reads
        it (no link followed; a file changed since the folder was listed raises
        :class:`~workflows.SourceChangedError`). So a dump compares
        with the folder it came from, with ``==`` or :meth:`diff`::

            sb.seed_directory("./project", ignore=["*.log"])
            ...  # an agent works in the sandbox
            local = Snapshot.from_directory("./project", ignore=["*.log"])
            print(local.diff(sb.dump()))  # + added, - removed, ~ modified, by the sandbox

        Contents are copied into one anonymous temporary file (as a dump's are), so the
        snapshot stays valid while the folder changes; ``close()`` frees it. Empty folders are
        not files, so they are not entries (as in a dump's snapshot). Reading a big folder
        takes a while: async code runs it in a thread,
        ``await asyncio.to_thread(Snapshot.from_directory, path)``.
        """
        entries = FolderRules.of("from_directory", rules).plan(path)
        writer = _SnapshotWriter()
        try:
            with PlannedFiles() as files:
                for entry in entries:
                    if entry.link_target is not None:
                        writer.link(entry.name, entry.link_target)
                    elif entry.disk is not None:
                        with files.open(entry) as raw:
                            reader = ExactReader(raw, entry.disk.shown, entry.size, None)
                            writer.add(entry.name, reader, mode=entry.mode)
        except BaseException:
            writer.abort()
            raise
        return writer.finish()

    def _setup(
        self,
        index: dict[str, _Entry],
        memory: dict[str, bytes] | None,
        blob: IO[bytes] | None,
        links: dict[str, str],
        skipped: dict[str, str],
    ) -> None:
        self._index = dict(sorted(index.items()))
        self._links = dict(sorted(links.items()))
        self._skipped = dict(sorted(skipped.items()))
        self._memory = memory
        self._blob = blob
        self._closed = False
        self._lock = threading.Lock()

    @classmethod
    def _from_blob(
        cls,
        index: dict[str, _Entry],
        blob: IO[bytes],
        links: dict[str, str],
        skipped: dict[str, str],
    ) -> Snapshot:
        snap = cls.__new__(cls)
        snap._setup(index, None, blob, links, skipped)
        return snap

    # --- Mapping ---

    def __getitem__(self, path: str) -> bytes:
        entry = self._index[path]
        if self._closed:
            raise ValueError("the snapshot is closed; its contents are gone")
        if self._memory is not None:
            return self._memory[path]
        assert self._blob is not None
        with self._lock:
            self._blob.seek(entry.offset)
            data = self._blob.read(entry.size)
        if len(data) != entry.size:  # pragma: no cover - the temporary file was tampered with
            raise OSError(f"snapshot storage is damaged: {path!r} is short")
        return data

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, path: object) -> bool:
        return path in self._index

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Snapshot):
            return self._digest() == other._digest()
        if isinstance(other, Mapping):
            if len(other) != len(self._index):
                return False
            try:
                return self._digest() == Snapshot(other)._digest()
            except InvalidInputError:
                return False
        return NotImplemented

    def _digest(self) -> dict[str, tuple[int | str, str]]:
        """What equality and diffs compare: a file's size and hash, a link's target."""
        digest: dict[str, tuple[int | str, str]] = {
            p: (e.size, e.sha256) for p, e in self._index.items()
        }
        digest.update((p, ("link", target)) for p, target in self._links.items())
        return digest

    def __repr__(self) -> str:
        total = sum(e.size for e in self._index.values())
        n = len(self._index)
        extras = ""
        if self._links:
            extras += f", {_count(len(self._links), 'link')}"
        if self._skipped:
            extras += f", {_count(len(self._skipped), 'skipped link')}"
        return f"Snapshot({n} file{'' if n == 1 else 's'}, {total:,} bytes{extras})"

    # --- extras ---

    @property
    def links(self) -> Mapping[str, str]:
        """The symbolic links, name -> target as stored (read-only, sorted by name).

        >>> dict(Snapshot(links={"sub/up": "../a.txt"}).links)
        {'sub/up': '../a.txt'}
        """
        return MappingProxyType(self._links)

    @property
    def skipped_links(self) -> Mapping[str, str]:
        """Links of the dump left out because they lead outside the workspace, name -> target
        (read-only; empty for a snapshot built from a mapping)."""
        return MappingProxyType(self._skipped)

    @property
    def total_bytes(self) -> int:
        """The sum of the files' sizes."""
        return sum(e.size for e in self._index.values())

    def manifest(self) -> list[ManifestEntry]:
        """Every file's ``(path, size, sha256)``, sorted by path (links are in :attr:`links`)."""
        return [ManifestEntry(p, e.size, e.sha256) for p, e in self._index.items()]

    def sha256(self, path: str) -> str:
        """The SHA-256 (hex) of one file, without reading it."""
        return self._index[path].sha256

    def is_executable(self, path: str) -> bool:
        """Whether the file had its exec bit set in the archive (False for in-memory snapshots)."""
        return bool(self._index[path].mode & 0o100)

    def text(self, path: str, encoding: str = "utf-8") -> str:
        """The contents of ``path`` decoded as text."""
        return self[path].decode(encoding)

    def diff(self, other: Mapping[str, SeedContent], *, exact: bool = False) -> SnapshotDiff:
        """What changed going from this snapshot to ``other`` (a Snapshot or a plain mapping).

        A plain mapping is checked and normalised like seed keys first (``"./a"`` is ``"a"``).
        Links count as paths: one added or removed is listed so, and one whose target changed,
        or that became a file (or the reverse), is modified.

        A repository's ``.git/index`` counts as modified only when what it says changed (its
        entries: paths, modes, object ids, stages; not git's stat cache): the first git command
        in a sandbox (``git_status`` included) rewrites the cache of a seeded repository, whose
        files have new inodes and times there. ``exact=True`` compares every byte. An index that
        cannot be read as one (a split index, a corrupt or crafted one: a prefix length over
        git's 64-bit varint) is compared byte for byte, and the ``workflows`` logger says so
        (WARNING, naming the path and the reason).

        >>> str(Snapshot({"a": "1", "b": "2"}).diff({"b": "3", "c": "4"}))
        '- a\\n~ b\\n+ c'
        """
        theirs = other if isinstance(other, Snapshot) else Snapshot(other)
        mine, their = self._digest(), theirs._digest()
        added = tuple(sorted(p for p in their if p not in mine))
        removed = tuple(sorted(p for p in mine if p not in their))
        modified = tuple(
            sorted(
                p
                for p, d in mine.items()
                if p in their and d != their[p] and (exact or not self._same_index(theirs, p))
            )
        )
        return SnapshotDiff(added, removed, modified)

    def _same_index(self, theirs: Snapshot, path: str) -> bool:
        """Whether ``path`` is a git index in both snapshots that says the same in both."""
        if not is_git_index(path) or path in self._links or path in theirs._links:
            return False
        try:
            return index_digest(self[path]) == index_digest(theirs[path])
        except UnreadableIndex as exc:
            log.warning("Snapshot.diff: %s compared byte for byte: %s", path, exc)
            return False

    def to_directory(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> list[Path]:
        """Write every file and link under the folder ``path`` (created if missing); return the
        paths written (files, then links).

        Nothing is ever written outside ``path``: an existing symlink on the way to a file is
        refused, and an existing symlink at a file's place is replaced, never followed. Existing
        files are refused unless ``overwrite=True``; a folder where a file goes is always
        refused. Every refusal raises :class:`InvalidInputError` naming the first clash in path
        order, before anything is written. Executable files (from a dump) get mode 0o755. Links
        are written relative (``/data/a.txt`` becomes ``a.txt`` from the link's folder), so they
        lead where they led in the sandbox, inside ``path``.
        """
        root = Path(path)
        if root.exists() and not root.is_dir():
            raise InvalidInputError(
                f"cannot write the snapshot to {os.fspath(path)!r}: not a folder"
            )
        self._check_targets(root, overwrite)
        root.mkdir(parents=True, exist_ok=True)
        written: list[Path] = []
        for rel, entry in self._index.items():
            target = root.joinpath(*rel.split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            if os.path.lexists(target):
                os.unlink(target)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_BINARY
            mode = 0o755 if entry.mode & 0o100 else 0o644
            fd = os.open(target, flags, mode)
            with open(fd, "wb", closefd=True) as out:
                for chunk in self._chunks(rel):
                    out.write(chunk)
            written.append(target)
        for rel, link in self._links.items():
            relative = link_target_in_tree(rel, link)
            assert relative is not None  # links were checked when the snapshot was made
            target = root.joinpath(*rel.split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            if os.path.lexists(target):
                os.unlink(target)
            os.symlink(relative, target)
            written.append(target)
        return written

    def _check_targets(self, root: Path, overwrite: bool) -> None:
        checked_dirs: set[str] = set()
        for rel in [*self._index, *self._links]:
            parts = rel.split("/")
            for i in range(1, len(parts)):
                parent = "/".join(parts[:i])
                if parent in checked_dirs:
                    continue
                checked_dirs.add(parent)
                where = root.joinpath(*parts[:i])
                try:
                    st = os.lstat(where)
                except FileNotFoundError:
                    continue
                if not stat.S_ISDIR(st.st_mode):
                    what = "a symlink" if stat.S_ISLNK(st.st_mode) else "a file"
                    raise InvalidInputError(
                        f"cannot write {rel!r}: {os.fspath(where)!r} is {what}, not a folder; "
                        "nothing was written"
                    )
            target = root.joinpath(*parts)
            try:
                st = os.lstat(target)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                raise InvalidInputError(
                    f"cannot write {rel!r}: {os.fspath(target)!r} is a folder; nothing was written"
                )
            if not overwrite:
                raise InvalidInputError(
                    f"cannot write {rel!r}: {os.fspath(target)!r} already exists (pass "
                    "overwrite=True to replace it); nothing was written"
                )

    def _chunks(self, path: str) -> Iterator[bytes]:
        entry = self._index[path]
        if self._closed:
            raise ValueError("the snapshot is closed; its contents are gone")
        if self._memory is not None:
            yield self._memory[path]
            return
        assert self._blob is not None
        offset, left = entry.offset, entry.size
        while left > 0:
            with self._lock:
                self._blob.seek(offset)
                data = self._blob.read(min(left, _CHUNK))
            if not data:  # pragma: no cover - the temporary file was tampered with
                raise OSError(f"snapshot storage is damaged: {path!r} is short")
            offset += len(data)
            left -= len(data)
            yield data

    # --- lifetime ---

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Free the contents (the temporary file); paths, manifest and diffs stay usable."""
        self._closed = True
        self._memory = {} if self._memory is not None else None
        if self._blob is not None:
            self._blob.close()
            self._blob = None

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _SnapshotWriter:
    """Builds a file-backed :class:`Snapshot` from streamed members (used by read_snapshot)."""

    def __init__(self) -> None:
        # A real (anonymous) file from the start: a spooled one would hold, and then copy, up to
        # its threshold in memory; the page cache makes small snapshots just as fast.
        self._blob: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - owned by the snapshot
        self._offset = 0
        self._index: dict[str, _Entry] = {}
        self._links: dict[str, str] = {}
        self._skipped: dict[str, str] = {}
        self._digests = DigestQueue()

    def add(
        self, name: str, reader: _Readable, *, mode: int = 0o644, size: int | None = None
    ) -> None:
        """Append a file's contents, hashing as they stream; a later duplicate replaces it.
        ``size``, when known, lets a small file be read in one call (``reader`` must then
        give exactly that many bytes, or raise)."""
        self._links.pop(name, None)
        start = self._offset
        if size is not None and size <= _CHUNK:
            data = reader.read(size) if size else b""
            self._blob.write(data)
            self._offset += len(data)
            self._index[name] = _Entry(start, len(data), self._digests.later(data), mode)
            return
        digest = self._digests.stream()  # hashed on a thread of its own: see _digests
        while True:
            chunk = reader.read(_CHUNK)
            if not chunk:
                break
            digest.feed(chunk)
            self._blob.write(chunk)
            self._offset += len(chunk)
        self._index[name] = _Entry(start, self._offset - start, digest.hexdigest(), mode)

    def copy(self, name: str, source: str) -> None:
        """Record ``name`` as a copy of the earlier file ``source`` (a hard link)."""
        self._links.pop(name, None)
        self._index[name] = self._index[source]

    def link(self, name: str, target: str) -> None:
        """Record the symbolic link ``name -> target`` (replacing a file of that name)."""
        self._index.pop(name, None)
        self._links[name] = target

    def skip_link(self, name: str, target: str) -> None:
        """Record a link left out because it leads outside the workspace."""
        self._index.pop(name, None)
        self._links.pop(name, None)
        self._skipped[name] = target

    def discard(self, name: str) -> None:
        """Forget ``name`` (replaced by something that is not a file)."""
        self._index.pop(name, None)
        self._links.pop(name, None)

    def finish(self) -> Snapshot:
        """Return the snapshot; it owns the temporary file from now on."""
        self._digests.finish()
        if self._digests.placeholders:
            resolve = self._digests.resolve
            for name, entry in self._index.items():
                if entry.sha256 != (digest := resolve(entry.sha256)):
                    self._index[name] = entry._replace(sha256=digest)
        self._blob.flush()
        return Snapshot._from_blob(self._index, self._blob, self._links, self._skipped)

    def abort(self) -> None:
        """Drop everything written so far."""
        self._digests.close()
        self._blob.close()
