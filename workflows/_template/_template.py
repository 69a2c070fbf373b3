"""`SeedTemplate`: a seed packed once, kept on disk under its digest, seeded into many sandboxes.

RL runs seed many samples of one task with the same tree: 32 sandboxes, one folder. A plain
``sb.seed_directory(folder)`` plans and packs the folder again for each; a template plans and
packs it once (:meth:`SeedTemplate.from_folder`, ``from_mapping``, ``from_snapshot``), and
``sb.seed(template)`` uploads the packed archive as it is. The archive is the one
``seed_directory`` would pack (the same planner, the same reproducible packer), so the same
tree gives the same bytes and the same digest, whoever packs it.

Pickling (a Ray task's argument, ``ray.put``, ``multiprocessing``) carries the digest, the file
count and the archive's bytes, never a path: the receiving process may be on another node, in
a container, or another user's, with no access to this cache. At pickle protocol 5 (Ray's) the
bytes travel out of band, as one buffer of Ray's object store (``ray.put(template)`` once, then
pass the reference: one copy per node). Unpickling checks the bytes against the digest, keeps
them in that process's cache (once per host: an intact archive of that digest already there is
reused) and never packs.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from klavis_archive import CORRUPT, igzip_file, open_tar
from workflows import _pack
from workflows._errors import InvalidInputError, SeedTemplateError
from workflows._progress import progress_bar
from workflows._seed import (
    FolderOptions,
    FolderRules,
    SeedContent,
    SourceFile,
    plan_mapping,
)
from workflows._snapshot import Snapshot

from . import _cache

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["SeedTemplate"]


def _count_files(archive: BinaryIO) -> int:
    """The files and links of a template's archive (what seeding it returns): its members that
    are not folders."""
    stream = igzip_file(fileobj=archive, mode="rb")
    with open_tar(stream) as tar:
        return sum(1 for member in tar if not member.isdir())


class SeedTemplate:
    """A seed packed once: a reproducible tar.gz kept in the per-user cache, named by its
    SHA-256 (:attr:`digest`), to seed any number of sandboxes with ``sb.seed(template)``.

    Make one with :meth:`from_folder` (the rules and keywords of ``sb.seed_directory``),
    :meth:`from_mapping` (``sb.seed``'s mapping), :meth:`from_snapshot` (a dump, to seed it
    back), or :meth:`load` (one already in the cache, by digest). Every check of the plain
    seed runs when the template is made, before anything is packed.

    >>> from workflows import LocalSandbox, SeedTemplate
    >>> template = SeedTemplate.from_folder("./task", ignore=["*.log"])  # doctest: +SKIP
    >>> for sb in sandboxes:  # doctest: +SKIP
    ...     sb.seed(template)  # uploads the packed archive: no planning, no packing
    >>> template.digest  # doctest: +SKIP
    'sha256:5f1c...'

    Each use reads the cached archive and checks it against the digest before a byte is
    uploaded (:class:`~workflows.SeedTemplateError` when it is damaged or gone). Templates
    are equal when their digests are. Pickled (Ray, ``multiprocessing``), a template carries
    its digest and bytes, never its path; the receiver keeps them in its own cache, never
    packs. The cache (``$KLAVIS_SANDBOX_CACHE_DIR/templates``, else the per-user cache folder)
    keeps at most ``$KLAVIS_SANDBOX_TEMPLATE_CACHE_BYTES`` (2 GiB), least recently used
    removed first.
    """

    __slots__ = ("_digest", "_files", "_folder", "_size")

    _digest: str
    _files: int
    _folder: Path
    _size: int

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError(
            "make a SeedTemplate with SeedTemplate.from_folder(path), .from_mapping(files), "
            ".from_snapshot(snapshot) or .load(digest)"
        )

    @classmethod
    def _made(cls, digest: str, size: int, files: int, folder: Path) -> SeedTemplate:
        template = object.__new__(cls)
        template._digest = digest
        template._size = size
        template._files = files
        template._folder = folder
        return template

    @classmethod
    def _packed(
        cls, entries: Sequence[SourceFile], folder: Path, progress: bool | None
    ) -> SeedTemplate:
        """Pack ``entries`` once into the cache ``folder`` (the only packing of a template)."""
        total = sum(entry.size for entry in entries)
        with progress_bar(total=total, desc="packing", progress=progress) as update:
            digest, size = _cache.store(
                folder, lambda out: _pack.write_archive(entries, out, progress=update)
            )
        files = sum(1 for entry in entries if not entry.is_dir)
        return cls._made(digest, size, files, folder)

    # ----------------------------------------------------------------- making one
    @classmethod
    def from_folder(
        cls,
        path: str | os.PathLike[str],
        *,
        progress: bool | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        **rules: Unpack[FolderOptions],
    ) -> SeedTemplate:
        """Plan and pack the folder ``path`` once, as ``sb.seed_directory(path, ...)`` would
        (``.gitignore`` when ``gitignore``, ``.sandboxignore``, ``ignore=`` patterns; no link
        followed out of it, nor while packing; a file over ``max_file_size`` refused;
        ``preserve_mtime`` keeps the files' times). Every refusal of ``seed_directory`` comes
        here, before anything is packed. ``cache_dir`` keeps the archive in that folder instead
        of the per-user cache.

        >>> template = SeedTemplate.from_folder("./task", ignore=["*.log"])  # doctest: +SKIP
        >>> template.files, template.size  # doctest: +SKIP
        (2000, 1843211)

        Packing a big folder takes a while: async code runs it in a thread,
        ``await asyncio.to_thread(SeedTemplate.from_folder, path)``.
        """
        entries = FolderRules.of("from_folder", rules).plan(path)
        return cls._packed(entries, _cache.cache_folder(cache_dir), progress)

    @classmethod
    def from_mapping(
        cls,
        files: Mapping[str, SeedContent],
        *,
        links: Mapping[str, str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> SeedTemplate:
        """Pack ``{path: text | bytes}`` once, as ``sb.seed(files)`` would (keys checked and
        normalised; ``links`` adds symbolic links, checked as a seed's are; a Snapshot's own
        links are kept).

        >>> SeedTemplate.from_mapping({"task.md": "fix the bug", "data/x.bin": b"\\x00"}).files
        2
        """
        entries = plan_mapping(files, links)
        return cls._packed(entries, _cache.cache_folder(cache_dir), False)

    @classmethod
    def from_snapshot(
        cls, snapshot: Snapshot, *, cache_dir: str | os.PathLike[str] | None = None
    ) -> SeedTemplate:
        """Pack a :class:`~workflows.Snapshot` (a dump, or ``Snapshot.from_directory``) once,
        its links included, as ``sb.seed(snapshot)`` would send it."""
        if not isinstance(snapshot, Snapshot):
            raise InvalidInputError(
                f"from_snapshot takes a Snapshot, not a {type(snapshot).__name__}; for a "
                "mapping use SeedTemplate.from_mapping, for a folder from_folder"
            )
        return cls.from_mapping(snapshot, cache_dir=cache_dir)

    @classmethod
    def load(cls, digest: str, *, cache_dir: str | os.PathLike[str] | None = None) -> SeedTemplate:
        """The template ``digest`` (``"sha256:..."``) from the cache, checked against its
        digest; :class:`~workflows.SeedTemplateError` when the cache does not hold it intact.

        >>> SeedTemplate.load(template.digest) == template  # doctest: +SKIP
        True
        """
        _cache.check_digest(digest)
        folder = _cache.cache_folder(cache_dir)
        with _cache.open_verified(_cache.archive_path(folder, digest), digest) as archive:
            size = os.fstat(archive.fileno()).st_size
            try:
                files = _count_files(archive)
            except CORRUPT as exc:  # pragma: no cover - its digest matched: packed by us
                raise SeedTemplateError(
                    f"template {digest} is not a tar.gz archive: {exc}", digest=digest
                ) from exc
        return cls._made(digest, size, files, folder)

    # ----------------------------------------------------------------- what it is
    @property
    def digest(self) -> str:
        """``"sha256:"`` and the SHA-256 (hex) of the packed archive: the same files, modes,
        links (and times, with ``preserve_mtime``) give the same digest."""
        return self._digest

    @property
    def size(self) -> int:
        """The packed archive's size in bytes (what each seed uploads)."""
        return self._size

    @property
    def files(self) -> int:
        """How many files (and links) it seeds: what ``sb.seed(template)`` returns."""
        return self._files

    @property
    def path(self) -> Path:
        """Where the packed archive is kept (``<cache>/templates/<hex>.tar.gz``)."""
        return _cache.archive_path(self._folder, self._digest)

    def open(self) -> BinaryIO:
        """The packed archive, open for reading, once checked against :attr:`digest`
        (:class:`~workflows.SeedTemplateError` when it is damaged or gone). Close it."""
        return _cache.open_verified(self.path, self._digest, self._size)

    def read_bytes(self) -> bytes:
        """The packed archive's bytes, checked against :attr:`digest`."""
        with self.open() as archive:
            return archive.read()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SeedTemplate):
            return self._digest == other._digest
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._digest)

    def __repr__(self) -> str:
        return f"SeedTemplate({self._digest[:19]}..., {self._files:,} files, {self._size:,} bytes)"

    # ----------------------------------------------------------------- pickling
    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        """Pickled as digest, file count and bytes (out of band at protocol 5): never a path,
        and the receiver never packs (see the module docstring)."""
        data: bytes | pickle.PickleBuffer = self.read_bytes()
        if isinstance(protocol, int) and protocol >= 5:
            data = pickle.PickleBuffer(data)
        return _unpickled, (self._digest, self._files, data)


def _unpickled(digest: str, files: int, data: Any) -> SeedTemplate:
    """A pickled template in this process: its bytes checked against the digest, kept in this
    process's cache (unless there already), never packed."""
    _cache.check_digest(digest)
    view = memoryview(data).cast("B")
    if "sha256:" + hashlib.sha256(view).hexdigest() != digest:
        raise SeedTemplateError(
            f"the bytes of template {digest} were damaged on their way to this process",
            digest=digest,
        )
    folder = _cache.cache_folder()
    _cache.store_bytes(folder, digest, view)
    return SeedTemplate._made(digest, len(view), files, folder)
