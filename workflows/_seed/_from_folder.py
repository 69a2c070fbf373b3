"""Seed from a folder: ``sb.seed_directory("./project")`` planned entry by entry, with git's
ignore rules (:mod:`._gitignore`), links kept inside the tree, and a size limit per file.

Everything is checked before a byte is packed (no network; it reads only directory listings
and file metadata), so a mistake is reported before any request is sent.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from workflows._config import DEFAULT_MAX_FILE_SIZE, check_keywords
from workflows._errors import FileTooLargeError, InvalidInputError
from workflows._paths import check_name_length, shown_path

from ._entries import DIR_MODE, EXEC_MODE, FILE_MODE, LINK_MODE, OnDisk, SourceFile
from ._gitignore import IgnoreRules, is_ignored, parse_patterns, read_rules

#: Ignore files read in every folder of a seeded tree. ``.gitignore`` only with
#: ``gitignore=True``; ``.sandboxignore`` always (it exists only to steer seeding).
IGNORE_FILE_NAMES: tuple[str, ...] = (".gitignore", ".sandboxignore")


def _has_entries(path: str) -> bool:
    with os.scandir(path) as it:
        return any(True for _ in it)


def _special_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (fifo)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    return "not a regular file, folder or symlink"


def plan_directory(
    root: str | os.PathLike[str],
    *,
    ignore: Sequence[str] | str = (),
    gitignore: bool = True,
    max_file_size: int | None = DEFAULT_MAX_FILE_SIZE,
    preserve_mtime: bool = False,
) -> list[SourceFile]:
    """Plan the archive for the folder ``root``, sorted by name.

    What is left out:

    * with ``gitignore=True`` (the default), whatever the ``.gitignore`` files of the tree
      exclude, with git's semantics: a nested ``.gitignore`` applies relative to its folder and
      overrides the ones above, ``!`` re-includes, ``build/`` matches folders only, ``/x`` is
      anchored, ``**`` spans folders (``**/x``, ``x/**``, ``a/**/b``; elsewhere, as in ``a**``,
      it is a plain ``*``, as the gitignore documentation says), and an excluded folder's
      contents stay excluded whatever a ``!`` rule says (git never looks inside it). The root
      repository's ``.git/info/exclude`` counts too. The result matches ``git ls-files
      --others --exclude-standard`` (tested against git itself).
    * whatever ``.sandboxignore`` files exclude (same syntax, read after the ``.gitignore`` of the
      same folder, so they win), **even with** ``gitignore=False``: they exist only to steer
      seeding, so turning off ``.gitignore`` is no reason to ignore them.
    * whatever ``ignore=`` excludes: gitignore patterns relative to ``root`` (a single string is
      one pattern), applied last, so they override the files, applied even with
      ``gitignore=False``, and applied everywhere, ``.git`` included.

    ``.git`` folders are **included** (seeding a repository for the git MCP server needs its
    history); ``.gitignore`` patterns never apply to or inside them, as in git, and neither do
    ``.sandboxignore`` patterns inside them (so a ``logs/`` rule cannot break a repository); to
    leave them out, pass ``ignore=[".git/"]`` or list ``.git/`` in a ``.sandboxignore``. The
    ignore files themselves are packed unless a pattern excludes them.

    Symbolic links are never followed: one whose resolved target lies inside ``root`` is stored as
    a relative link; one leading outside raises :class:`InvalidInputError` naming it (add it to
    ``ignore=``). Each planned file records its device, inode and size: packing opens it below
    ``root`` one folder at a time following no link, and a file that changed in between (put
    in another's place, swapped for a link, or a folder on its path swapped for one) raises
    :class:`~workflows.SourceChangedError` naming it, never packing what replaced it.

    A fifo, socket or device raises :class:`InvalidInputError`; a file larger than
    ``max_file_size`` bytes raises :class:`FileTooLargeError` (``None`` means no limit). A file
    name that is not valid UTF-8 raises :class:`InvalidInputError`. Folders that are empty on
    disk are kept, so the workspace's shape survives; folders that only the ignore rules emptied
    are left out (``*.pyc`` should not leave a trail of empty ``__pycache__`` folders). Missing
    ``root``, or not a folder: :class:`InvalidInputError`.

    With ``preserve_mtime=True`` every entry carries its modification time from disk (to the
    sub-second, in the archive's PAX headers); by default none does and the archive gets one
    fixed time, so the same files always give the same bytes.
    """
    shown_root = os.fspath(root)
    try:
        root_stat = os.stat(root)
    except FileNotFoundError:
        raise InvalidInputError(f"cannot seed {shown_root!r}: no such folder") from None
    except OSError as exc:
        raise InvalidInputError(f"cannot seed {shown_root!r}: {exc.strerror}") from exc
    if not stat.S_ISDIR(root_stat.st_mode):
        raise InvalidInputError(f"cannot seed {shown_root!r}: it is not a folder")
    if max_file_size is not None and max_file_size < 0:
        raise InvalidInputError(f"max_file_size must be >= 0 or None, not {max_file_size!r}")
    if isinstance(ignore, str):
        ignore = [ignore]
    for pattern in ignore:
        if not isinstance(pattern, str):
            raise InvalidInputError(f"ignore patterns must be str, not {type(pattern).__name__}")
    user = parse_patterns(list(ignore))
    real_root = os.path.realpath(root)

    planned: list[SourceFile] = []

    def shown(rel: str) -> str:
        return os.path.join(shown_root, rel)

    def mtime_of(st: os.stat_result) -> float | None:
        return st.st_mtime if preserve_mtime else None

    def add_link(entry_path: str, rel: str) -> None:
        target = os.path.realpath(entry_path)
        if target != real_root and not target.startswith(real_root.rstrip(os.sep) + os.sep):
            raise InvalidInputError(
                f"{shown(rel)!r} is a symlink to {os.readlink(entry_path)!r}, outside the folder "
                "being seeded; symlinks are never followed out of the tree: add it to ignore="
            )
        link_dir = os.path.join(real_root, os.path.dirname(rel))
        rel_target = os.path.relpath(target, link_dir).replace(os.sep, "/")
        planned.append(
            SourceFile(
                name=rel,
                size=0,
                mode=LINK_MODE,
                link_target=rel_target,
                mtime=mtime_of(os.lstat(entry_path)),
            )
        )

    def walk(abs_dir: str, rel_dir: str, rules: list[IgnoreRules], in_git: bool) -> int:
        """Plan one folder; return how many entries it contributed."""
        try:
            with os.scandir(abs_dir) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            raise InvalidInputError(
                f"cannot list {shown(rel_dir) if rel_dir else shown_root!r}: {exc.strerror}"
            ) from exc
        if not in_git:
            rules = list(rules)
            by_name = {e.name: e for e in entries}
            if not rel_dir and gitignore:
                exclude = os.path.join(abs_dir, ".git", "info", "exclude")
                if os.path.isfile(exclude):
                    found = read_rules(exclude, "", True, ".git/info/exclude")
                    if found is not None:
                        rules.append(found)
            for fname in IGNORE_FILE_NAMES:
                is_git = fname == ".gitignore"
                e = by_name.get(fname)
                if (is_git and not gitignore) or e is None or not e.is_file():
                    continue
                rel_file = f"{rel_dir}/{fname}" if rel_dir else fname
                found = read_rules(e.path, rel_dir, is_git, rel_file)
                if found is not None:
                    rules.append(found)
        before = len(planned)
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            if is_dir and entry.name == ".git":
                # git never applies .gitignore to its own folder; .sandboxignore may drop it whole
                applying = [r for r in rules if not r.from_gitignore]
            else:
                applying = rules
            if is_ignored(rel, is_dir, applying, user):
                continue
            try:
                rel.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidInputError(
                    f"{shown(rel)!r} has a name that is not valid UTF-8; rename it or add it "
                    "to ignore="
                ) from None
            check_name_length(rel, what=shown_path(shown(rel)), path=shown(rel))
            try:
                add_entry(entry, rel, is_dir, rules, in_git)
            except OSError as exc:  # it vanished or cannot be read while being planned
                raise InvalidInputError(
                    f"cannot read {shown(rel)!r} while planning the seed: "
                    f"{exc.strerror or exc}; fix it or add it to ignore="
                ) from exc
        return len(planned) - before

    def add_entry(
        entry: os.DirEntry[str], rel: str, is_dir: bool, rules: list[IgnoreRules], in_git: bool
    ) -> None:
        """Plan one entry that the rules keep (a folder is walked)."""
        if entry.is_symlink():
            add_link(entry.path, rel)
        elif is_dir:
            entering_git = in_git or entry.name == ".git"
            if not walk(entry.path, rel, [] if entering_git else rules, entering_git) and (
                not _has_entries(entry.path)
            ):
                planned.append(
                    SourceFile(
                        name=rel,
                        size=0,
                        mode=DIR_MODE,
                        is_dir=True,
                        mtime=mtime_of(entry.stat(follow_symlinks=False)),
                    )
                )
        elif entry.is_file(follow_symlinks=False):
            st = entry.stat(follow_symlinks=False)
            if max_file_size is not None and st.st_size > max_file_size:
                raise FileTooLargeError(shown(rel), size=st.st_size, limit=max_file_size)
            mode = EXEC_MODE if st.st_mode & stat.S_IXUSR else FILE_MODE
            disk = OnDisk.planned(real_root, root_stat, rel, st, entry.path)
            planned.append(
                SourceFile(name=rel, size=st.st_size, mode=mode, disk=disk, mtime=mtime_of(st))
            )
        else:
            kind = _special_kind(entry.stat(follow_symlinks=False).st_mode)
            raise InvalidInputError(
                f"{shown(rel)!r} is {kind}, which cannot be seeded; add it to ignore="
            )

    walk(os.fspath(root), "", [], False)
    planned.sort(key=lambda f: f.name)
    return planned


class FolderOptions(TypedDict, total=False):
    """The keywords that say how a local folder is read, the same for every reader of one
    (``sb.seed_directory``, ``SeedTemplate.from_folder``, ``Snapshot.from_directory``), so the
    keywords of one call can be passed to another (each optional):

    * ``ignore`` (``()``): more gitignore patterns, relative to the folder (a single string
      is one pattern);
    * ``gitignore`` (True): follow the ``.gitignore`` files (``.sandboxignore`` files are
      followed whatever this says);
    * ``max_file_size`` (200 MiB): a larger file raises
      :class:`~workflows.FileTooLargeError` naming it (None: no limit);
    * ``preserve_mtime`` (False): pack each file's modification time from disk instead of
      the fixed one (2000-01-01) that makes the same folder pack to the same bytes.
    """

    ignore: Sequence[str] | str
    gitignore: bool
    max_file_size: int | None
    preserve_mtime: bool


@dataclass(frozen=True)
class FolderRules:
    """The rules a local folder is read with (:class:`FolderOptions`, with their defaults),
    held once for every place that reads a folder the way seeding does: ``seed_directory``
    (both faces), ``SeedTemplate.from_folder``, ``Snapshot.from_directory``.

    >>> FolderRules(ignore=["*.log"]).plan("./project")  # doctest: +SKIP
    [SourceFile(name='README.md', ...)]
    """

    ignore: Sequence[str] | str = ()
    gitignore: bool = True
    max_file_size: int | None = DEFAULT_MAX_FILE_SIZE
    preserve_mtime: bool = False

    @classmethod
    def of(cls, where: str, options: Mapping[str, Any]) -> FolderRules:
        """The rules the keywords ``options`` of ``where`` (e.g. ``"seed_directory"``) give;
        any other keyword is a ``TypeError``, as Python says it of a signature."""
        check_keywords(where, options, FolderOptions)
        return cls(**options)

    def plan(self, root: str | os.PathLike[str]) -> list[SourceFile]:
        """:func:`plan_directory` of ``root`` with these rules."""
        return plan_directory(
            root,
            ignore=self.ignore,
            gitignore=self.gitignore,
            max_file_size=self.max_file_size,
            preserve_mtime=self.preserve_mtime,
        )
