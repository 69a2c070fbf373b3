"""Seed from a mapping: ``sb.seed({"path": "text" | b"bytes"})`` and the links beside it.

Every key and link is checked before a byte is packed, so a mistake is reported before any
request is sent.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping

from workflows._errors import InvalidInputError, InvalidSeedPathError
from workflows._paths import (
    PATH_MAX,
    SANDBOX_WORKSPACE,
    link_escapes,
    link_target_in_tree,
    normalize_seed_key,
    shown_path,
)

from ._entries import FILE_MODE, LINK_MODE, SourceFile


class LinkedFiles(abc.ABC):
    """A mapping of files that carries its own symbolic links (a :class:`~workflows.Snapshot`,
    which subclasses this): :func:`plan_mapping` seeds them with its files. Declared here, so
    that seeding needs no import of the snapshot (which is built with :func:`plan_mapping`)."""

    @property
    @abc.abstractmethod
    def links(self) -> Mapping[str, str]:
        """The links, ``{name: target}``."""


#: What a seed mapping's values may be: text (written as UTF-8) or bytes-like.
SeedContent = str | bytes | bytearray | memoryview


def _as_bytes(key: str, value: object) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise InvalidInputError(
        f"seed value for {key!r} is a {type(value).__name__}; "
        "values must be str (written as UTF-8) or bytes"
    )


def _claim_name(key: str, taken: dict[str, str], clash: str) -> str:
    """The entry name of ``key`` (:func:`~workflows._paths.normalize_seed_key`), recorded in
    ``taken`` (name -> key); a key naming an entry that another key names already raises
    :class:`InvalidSeedPathError` (``clash`` says how, between the two keys and the name)."""
    name = normalize_seed_key(key)
    if name in taken:
        raise InvalidSeedPathError(
            f"seed keys {taken[name]!r} and {key!r} {clash} {name!r}", path=key
        )
    taken[name] = key
    return name


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
    if links is None and isinstance(files, LinkedFiles):
        links = files.links
    by_name: dict[str, str] = {}
    planned: list[SourceFile] = []
    for key, value in files.items():
        name = _claim_name(key, by_name, "both name the file")
        data = _as_bytes(key, value)
        planned.append(SourceFile(name=name, size=len(data), mode=FILE_MODE, data=data))
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
        name = _claim_name(key, taken, "(a link) both name")
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
        planned.append(SourceFile(name=name, size=0, mode=LINK_MODE, link_target=target))
    for entry in planned:
        if link_escapes(entry.name, in_tree[entry.name], in_tree):
            raise InvalidSeedPathError(
                f"the link {entry.name!r} -> {shown_path(entry.link_target or '')} leads outside "
                "the workspace",
                path=entry.name,
            )
    return planned
