"""Decide what goes into a seed archive (no network; reads only directory listings).

Two planners turn user input into a sorted list of :class:`SourceFile`, which
:func:`workflows._pack.write_archive` packs:

* :func:`plan_mapping` for ``sb.seed({"path": "text" | b"bytes"})``;
* :func:`plan_directory` for ``sb.seed_directory("./project")``.

Both check everything that can be checked before a byte is packed, so a mistake is reported
before any request is sent. The ignore rules :func:`plan_directory` applies (git's own) are in
:mod:`._gitignore`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from workflows._errors import FileTooLargeError, InvalidInputError, InvalidSeedPathError
from workflows._paths import (
    PATH_MAX,
    SANDBOX_WORKSPACE,
    check_name_length,
    link_escapes,
    link_target_in_tree,
    normalize_seed_key,
    shown_path,
)

from ._gitignore import IgnoreRules, is_ignored, parse_patterns, read_rules

#: The largest single file :func:`plan_directory` accepts unless told otherwise: 256 MiB.
#: It is a guard against seeding a data set, a video or model weights by accident (an upload of
#: that size takes minutes); a file over it is an error naming the file, never silently skipped.
#: Pass ``max_file_size=None`` to lift it, or add the file to ``ignore=``.
DEFAULT_MAX_FILE_SIZE: int = 256 * 1024 * 1024

#: Ignore files read in every folder of a seeded tree. ``.gitignore`` only with
#: ``gitignore=True``; ``.sandboxignore`` always (it exists only to steer seeding).
IGNORE_FILE_NAMES: tuple[str, ...] = (".gitignore", ".sandboxignore")

#: What a seed mapping's values may be: text (written as UTF-8) or bytes-like.
SeedContent = str | bytes | bytearray | memoryview

_FILE_MODE = 0o644
_EXEC_MODE = 0o755
_DIR_MODE = 0o755
_LINK_MODE = 0o777


@dataclass(frozen=True)
class SourceFile:
    """One entry of a seed archive.

    Exactly one kind of content is set:

    * a regular file from disk (``path``; read in chunks when packing; ``size`` is its size when
      planned, and exactly that many bytes are packed), or
    * a regular file in memory (``data``), or
    * a symbolic link (``link_target``: a relative POSIX path that stays inside the tree, or an
      absolute one inside the sandbox's workspace, ``/data`` or below), or
    * an empty folder (``is_dir=True``), kept so that the workspace's shape survives.

    ``name`` is the normalised POSIX relative path inside the archive (``"a/b.txt"``); ``mode`` is
    ``0o644`` or ``0o755`` for files (from the owner's exec bit), ``0o755`` for folders and
    ``0o777`` for links. ``mtime`` is the modification time to pack (seconds since the epoch,
    from disk with ``preserve_mtime=True``); None packs the fixed
    :data:`~workflows._archive.ARCHIVE_MTIME`.
    """

    name: str
    size: int
    mode: int
    path: Path | None = None
    data: bytes | None = None
    link_target: str | None = None
    is_dir: bool = False
    mtime: float | None = None


def _as_bytes(key: str, value: object) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise InvalidInputError(
        f"seed value for {key!r} is a {type(value).__name__}; "
        "values must be str (written as UTF-8) or bytes"
    )


def plan_mapping(
    files: Mapping[str, SeedContent], links: Mapping[str, str] | None = None
) -> list[SourceFile]:
    """Plan the archive for a ``{path: content}`` mapping, sorted by name.

    Keys are checked and normalised with :func:`~workflows._paths.normalize_seed_key`; values
    must be ``str`` (encoded as UTF-8) or bytes-like. Raises :class:`InvalidSeedPathError` for a
    bad key, two keys that normalise to the same path, or a key that is also the folder of another
    (``"a"`` and ``"a/b"``), and :class:`InvalidInputError` for a value of another type. Every
    file gets mode ``0o644``.

    ``links`` (name -> target) adds symbolic links, checked by :func:`plan_links`; when
    ``files`` is a :class:`~workflows.Snapshot`, its own ``links`` are used unless ``links`` is
    given, so seeding a dump sends its links back.

    >>> [(f.name, f.data) for f in plan_mapping({"./b.txt": "hi", "a/x.bin": b"\\x00"})]
    [('a/x.bin', b'\\x00'), ('b.txt', b'hi')]
    """
    if not isinstance(files, Mapping):
        raise InvalidInputError(
            f"files must be a mapping of path to content, not a {type(files).__name__}"
        )
    if links is None:
        from workflows._snapshot import Snapshot  # a Snapshot is built with this very function

        if isinstance(files, Snapshot):
            links = files.links
    by_name: dict[str, str] = {}
    planned: list[SourceFile] = []
    for key, value in files.items():
        name = normalize_seed_key(key)
        if name in by_name:
            raise InvalidSeedPathError(
                f"seed keys {by_name[name]!r} and {key!r} both name the file {name!r}", path=key
            )
        by_name[name] = key
        data = _as_bytes(key, value)
        planned.append(SourceFile(name=name, size=len(data), mode=_FILE_MODE, data=data))
    link_names: set[str] = set()
    if links:
        planned_links = plan_links(links, by_name)
        link_names = {entry.name for entry in planned_links}
        planned.extend(planned_links)
    for name, key in by_name.items():
        parent = name
        while "/" in parent:
            parent = parent.rsplit("/", 1)[0]
            if parent in by_name:
                kind = "a link" if parent in link_names else "a file"
                raise InvalidSeedPathError(
                    f"seed key {by_name[parent]!r} is {kind}, but {key!r} needs it to be a folder",
                    path=by_name[parent],
                )
    planned.sort(key=lambda f: f.name)
    return planned


def plan_links(links: Mapping[str, str], taken: dict[str, str]) -> list[SourceFile]:
    """Plan symbolic links ``{name: target}``; ``taken`` (name -> key) holds the files' names
    and receives the links'.

    Names are checked like seed keys. A target must be a non-empty ``str`` without NUL, at most
    :data:`~workflows._paths.PATH_MAX` bytes, and stay inside the workspace: relative and
    resolving inside the tree (following the other links), or absolute inside the sandbox's
    workspace (``/data`` or below, as ``ln -s /data/a.txt link`` makes). Anything else raises
    :class:`InvalidSeedPathError` naming the link. Targets are kept as given.

    >>> [(f.name, f.link_target) for f in plan_links({"l": "/data/a.txt", "m": "l"}, {})]
    [('l', '/data/a.txt'), ('m', 'l')]
    """
    if not isinstance(links, Mapping):
        raise InvalidInputError(f"links must be a mapping of name to target, not {type(links)}")
    planned: list[SourceFile] = []
    in_tree: dict[str, str] = {}
    for key, target in links.items():
        name = normalize_seed_key(key)
        if name in taken:
            raise InvalidSeedPathError(
                f"seed keys {taken[name]!r} and {key!r} (a link) both name {name!r}", path=key
            )
        taken[name] = key
        if not isinstance(target, str):
            raise InvalidSeedPathError(
                f"the link {key!r} has a target of type {type(target).__name__}, not str",
                path=key,
            )
        if not target or "\x00" in target:
            raise InvalidSeedPathError(
                f"the link {key!r} has an empty target or one with a NUL character", path=key
            )
        if len(target.encode("utf-8", "surrogateescape")) > PATH_MAX:
            raise InvalidSeedPathError(
                f"the link {key!r} has a target over {PATH_MAX:,} bytes (PATH_MAX)", path=key
            )
        relative = link_target_in_tree(name, target)
        if relative is None:
            raise InvalidSeedPathError(
                f"the link {key!r} -> {shown_path(target)} leads outside the workspace (absolute "
                f"targets must be {SANDBOX_WORKSPACE} or below it)",
                path=key,
            )
        in_tree[name] = relative
        planned.append(SourceFile(name=name, size=0, mode=_LINK_MODE, link_target=target))
    for entry in planned:
        if link_escapes(entry.name, in_tree[entry.name], in_tree):
            raise InvalidSeedPathError(
                f"the link {entry.name!r} -> {shown_path(entry.link_target or '')} leads outside "
                "the workspace",
                path=entry.name,
            )
    return planned


# --- directories -------------------------------------------------------------------------------


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
    ``ignore=``). A fifo, socket or device raises :class:`InvalidInputError`; a file larger than
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
                mode=_LINK_MODE,
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
                        mode=_DIR_MODE,
                        is_dir=True,
                        mtime=mtime_of(entry.stat(follow_symlinks=False)),
                    )
                )
        elif entry.is_file(follow_symlinks=False):
            st = entry.stat(follow_symlinks=False)
            if max_file_size is not None and st.st_size > max_file_size:
                raise FileTooLargeError(shown(rel), size=st.st_size, limit=max_file_size)
            mode = _EXEC_MODE if st.st_mode & stat.S_IXUSR else _FILE_MODE
            planned.append(
                SourceFile(
                    name=rel, size=st.st_size, mode=mode, path=Path(entry.path), mtime=mtime_of(st)
                )
            )
        else:
            kind = _special_kind(entry.stat(follow_symlinks=False).st_mode)
            raise InvalidInputError(
                f"{shown(rel)!r} is {kind}, which cannot be seeded; add it to ignore="
            )

    walk(os.fspath(root), "", [], False)
    planned.sort(key=lambda f: f.name)
    return planned
