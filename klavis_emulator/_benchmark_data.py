"""Benchmark data packs: the files (and data documents) a sandbox acquired with a benchmark
starts with.

On the service, ``benchmark=MCP_Atlas`` (or ``Toolathlon``, ``MCP_Mark``) gives a sandbox the
benchmark's initial data. The emulator cannot ship other projects' data, but a user can point
it at theirs: ``klavis-emulator --benchmark-data MCP_Atlas=PATH`` (or
``EmulatorConfig(benchmark_data={"MCP_Atlas": PATH})``). A pack is a folder:

    PATH/...                          copied into the workspace of each such sandbox
    PATH/.server-data/<server>.json   the data document of a typed server (google_cloud,
                                      poste_email_toolathlon, canvas), loaded into the
                                      sandboxes that hold that server; not copied

Documents are checked against the contract when the emulator starts (a bad pack fails then,
not at the first acquire), and so is every entry of the pack: only regular files, folders and
symbolic links are copied into workspaces, so a FIFO, socket or device is refused by name (a
FIFO among the documents blocked the emulator's start on reading it), and so is a sparse file
(a 1 GiB file of holes took 1 GiB of disk in every sandbox using the pack, and 1 GiB in every
dump). A reset restores the pack: it is the sandbox's initial state.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from ._server_data import DATA_MODELS, DATA_SERVERS, document_for

__all__ = [
    "BENCHMARKS",
    "SERVER_DATA_FOLDER",
    "BenchmarkPack",
    "load_packs",
    "parse_benchmark_data",
]

BENCHMARKS: Final[tuple[str, ...]] = ("MCP_Atlas", "Toolathlon", "MCP_Mark")
"""The contract's benchmark names (what ``benchmark`` of an acquire may be)."""

SERVER_DATA_FOLDER: Final = ".server-data"
"""The folder of a pack that holds data documents, ``<server>.json`` each."""


@dataclass(frozen=True)
class BenchmarkPack:
    """One benchmark's data: the folder whose files seed the workspace, and the checked data
    documents by server name."""

    benchmark: str
    root: Path
    documents: Mapping[str, dict[str, Any]] = field(default_factory=dict, repr=False)


def _document(benchmark: str, path: Path) -> tuple[str, dict[str, Any]]:
    server = path.stem
    where = f"benchmark data of {benchmark}: {path}"
    if path.suffix != ".json" or server not in DATA_SERVERS:
        raise ValueError(
            f"{where} is not <server>.json for a server with data documents "
            f"({', '.join(DATA_SERVERS)})"
        )
    try:
        body = DATA_MODELS[server].model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError) as exc:  # JSONDecodeError is a ValueError
        raise ValueError(f"{where} is not a valid {server} document: {exc}") from exc
    return server, document_for(server, body, default=False)


def load_pack(benchmark: str, root: str | os.PathLike[str]) -> BenchmarkPack:
    """Check and load one pack (``ValueError`` naming the problem)."""
    if benchmark not in BENCHMARKS:
        raise ValueError(
            f"benchmark data for {benchmark!r}: the benchmarks are {', '.join(BENCHMARKS)}"
        )
    folder = Path(root).expanduser().resolve()
    if not folder.is_dir():
        raise ValueError(f"benchmark data of {benchmark}: {folder} is not a folder")
    _check_entries(benchmark, folder)
    documents: dict[str, dict[str, Any]] = {}
    data = folder / SERVER_DATA_FOLDER
    if data.is_dir():
        for path in sorted(data.iterdir()):
            server, document = _document(benchmark, path)
            documents[server] = document
    return BenchmarkPack(benchmark, folder, documents)


def _check_entries(benchmark: str, folder: Path) -> None:
    """Refuse what a workspace cannot hold as is: FIFOs, sockets, devices, sparse files."""
    for parent, folders, files in os.walk(folder):
        for name in (*folders, *files):
            path = Path(parent, name)
            info = path.lstat()
            if stat.S_ISDIR(info.st_mode) or stat.S_ISLNK(info.st_mode):
                continue
            if not stat.S_ISREG(info.st_mode):
                raise ValueError(
                    f"benchmark data of {benchmark}: {path} is not a regular file, a folder or "
                    "a symbolic link (a FIFO, socket or device): a workspace cannot hold it"
                )
            if _has_holes(path, info):
                raise ValueError(
                    f"benchmark data of {benchmark}: {path} is a sparse file ({info.st_size:,} "
                    "bytes, with holes): every sandbox would get all of it on disk; write it "
                    "out in full (e.g. `cp --sparse=never`) or leave it out"
                )


def _has_holes(path: Path, info: os.stat_result) -> bool:
    """Whether a regular file has a hole (``SEEK_HOLE`` before its end; without it, fewer
    blocks than its size needs)."""
    if info.st_size == 0:
        return False
    seek_hole = getattr(os, "SEEK_HOLE", None)
    if seek_hole is None:  # pragma: no cover - every Linux has it
        return info.st_blocks * 512 < info.st_size
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        return os.lseek(fd, 0, seek_hole) < info.st_size
    finally:
        os.close(fd)


def load_packs(packs: Mapping[str, str | os.PathLike[str]]) -> dict[str, BenchmarkPack]:
    """Every pack of a configuration, checked."""
    return {name: load_pack(name, root) for name, root in packs.items()}


def parse_benchmark_data(text: str) -> tuple[str, Path]:
    """``NAME=PATH`` (the command's ``--benchmark-data``) as (name, path).

    >>> parse_benchmark_data("MCP_Atlas=/srv/atlas")
    ('MCP_Atlas', PosixPath('/srv/atlas'))
    """
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise ValueError(f"expected NAME=PATH (e.g. MCP_Atlas=./atlas-data), got {text!r}")
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}: the benchmarks are {', '.join(BENCHMARKS)}")
    return name, Path(path)
