"""The benchmark workspaces: the same bytes in every run, in three shapes.

:data:`SHAPES` names them: ``mixed`` (the main one, below), ``small_files`` (5,000 source-like
files of 4 KiB on average in 50 folders, 20 MiB: file creation dominates) and ``large_binary``
(4 files of 16 MiB from the PRNG: incompressible, so reading, deflate's speed on data it cannot
shrink and moving the bytes dominate) and ``nested_project`` (80 MiB: 6,000 source-like files,
24 MiB, in 600 folders nested up to six deep, four 8 MiB blobs from the PRNG and one 24 MiB
log; the shape of issue 34's point 6, where per-folder costs, a big compressible file and
incompressible ones meet in one archive). A regression that hurts one shape only shows there.

The ``mixed`` workspace: 100 MiB in 2,000 files.

Three kinds of files, drawn from one seeded :class:`random.Random` (Mersenne Twister, whose
output CPython keeps stable across versions):

* 1,200 source-like text files (``src/pkg_NN/mod_NNNN.py``), 45 % of the bytes: lines drawn
  from a pool of synthetic Python lines, so they compress about like real code;
* 400 JSON files (``data/set_NN/records_NNNN.json``), 15 % of the bytes: arrays of small
  records, valid JSON;
* 400 binary files (``assets/blob_NN/chunk_NNNN.bin``), the remaining 40 %: bytes from the
  PRNG, which no compressor can shrink.

Sizes follow a log-normal spread (a few large files, many small ones), scaled so that each
kind gets its share; the binary files absorb the rounding, so the total is exactly
:data:`TOTAL_BYTES`. :func:`generate` writes the tree in about a second and returns its
:class:`WorkspaceInfo`, whose ``sha256`` (over sorted paths and contents) proves the bytes are
the same from run to run.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FILE_COUNT",
    "SEED",
    "SHAPES",
    "TOTAL_BYTES",
    "WorkspaceInfo",
    "generate",
    "small_files",
    "tree_bytes",
]

TOTAL_BYTES = 100 * 1024 * 1024
FILE_COUNT = 2_000
SEED = 20_260_101

_TEXT_FILES, _JSON_FILES, _BINARY_FILES = 1_200, 400, 400
_SMALL_FILES, _SMALL_BYTES, _SMALL_FOLDERS = 5_000, 20 * 1024 * 1024, 50
_LARGE_FILES, _LARGE_FILE_BYTES = 4, 16 * 1024 * 1024
# nested_project: a repository-like tree with a few blobs and one big log (issue 34, point 6)
_NESTED_FILES, _NESTED_TEXT_BYTES, _NESTED_FOLDERS = 6_000, 24 * 1024 * 1024, 600
_NESTED_BLOBS, _NESTED_BLOB_BYTES = 4, 8 * 1024 * 1024
_NESTED_LOG_BYTES = 24 * 1024 * 1024
_TEXT_SHARE, _JSON_SHARE = 0.45, 0.15

_WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "theta",
    "kappa",
    "lambda",
    "sigma",
    "omega",
    "value",
    "index",
    "count",
    "result",
    "buffer",
    "stream",
    "client",
    "server",
    "request",
    "response",
    "payload",
    "record",
    "entry",
    "cache",
    "config",
    "session",
    "token",
    "handler",
    "worker",
    "queue",
    "task",
    "batch",
    "archive",
    "member",
    "folder",
    "sandbox",
    "workspace",
    "snapshot",
    "manifest",
    "digest",
    "offset",
    "length",
    "chunk",
    "reader",
    "writer",
    "parser",
    "encoder",
    "decoder",
]


@dataclass(frozen=True)
class WorkspaceInfo:
    """What :func:`generate` wrote."""

    root: Path
    files: int
    total_bytes: int
    text_bytes: int
    json_bytes: int
    binary_bytes: int
    sha256: str


def _line_pool(rng: random.Random, size: int = 4096) -> list[str]:
    """Synthetic lines of Python source: defs, calls, assignments, comments, imports."""

    def name() -> str:
        return "_".join(rng.choices(_WORDS, k=rng.randint(1, 3)))

    templates = (
        lambda: f"def {name()}({name()}, {name()}={rng.randint(0, 999)}):\n",
        lambda: f"    {name()} = {name()}.{name()}({name()}, {rng.randint(0, 99999)})\n",
        lambda: f"    return {name()} + {name()} * {rng.random():.6f}\n",
        lambda: f"    # {' '.join(rng.choices(_WORDS, k=rng.randint(3, 12)))}\n",
        lambda: f"class {name().title().replace('_', '')}({name().title().replace('_', '')}):\n",
        lambda: f"from {name()}.{name()} import {name()}, {name()}\n",
        lambda: f"        if {name()} is not None and {name()} > {rng.randint(0, 512)}:\n",
        lambda: f'            raise ValueError("{" ".join(rng.choices(_WORDS, k=5))}")\n',
        lambda: "\n",
    )
    return [rng.choice(templates)() for _ in range(size)]


def _record_pool(rng: random.Random, size: int = 2048) -> list[str]:
    """Small JSON records, serialised once."""
    pool = []
    for i in range(size):
        record = {
            "id": f"{rng.getrandbits(64):016x}",
            "name": " ".join(rng.choices(_WORDS, k=2)),
            "index": i,
            "score": round(rng.random() * 1000, 3),
            "active": rng.random() < 0.5,
            "tags": rng.choices(_WORDS, k=rng.randint(0, 4)),
        }
        pool.append(json.dumps(record, sort_keys=True))
    return pool


def _sizes(rng: random.Random, count: int, budget: int) -> list[int]:
    """``count`` log-normally spread sizes summing to ``budget`` exactly (each at least 1)."""
    raw = [rng.lognormvariate(0.0, 1.0) for _ in range(count)]
    scale = budget / sum(raw)
    sizes = [max(1, int(r * scale)) for r in raw]
    sizes[max(range(count), key=sizes.__getitem__)] += budget - sum(sizes)
    return sizes


def _text(rng: random.Random, pool: list[str], size: int) -> bytes:
    lines: list[str] = []
    have = 0
    while have < size:
        batch = rng.choices(pool, k=max(8, (size - have) // 30))
        lines.extend(batch)
        have += sum(len(line) for line in batch)
    return "".join(lines).encode()[:size]


def _json(rng: random.Random, pool: list[str], size: int) -> bytes:
    step = sum(len(r) + 4 for r in pool) // len(pool) + 1
    records: list[str] = []
    have = 4
    while have < size:
        batch = rng.choices(pool, k=max(1, (size - have) // step))
        records.extend(batch)
        have += sum(len(r) + 4 for r in batch)
    return ("[\n  " + ",\n  ".join(records) + "\n]\n").encode()


def _mixed(rng: random.Random) -> tuple[list[tuple[str, bytes]], int, int, int]:
    """The ``mixed`` shape's files, and its text, JSON and binary byte counts."""
    lines = _line_pool(rng)
    records = _record_pool(rng)
    text_budget = int(TOTAL_BYTES * _TEXT_SHARE)
    json_budget = int(TOTAL_BYTES * _JSON_SHARE)
    files: list[tuple[str, bytes]] = []
    for i, size in enumerate(_sizes(rng, _TEXT_FILES, text_budget)):
        files.append((f"src/pkg_{i % 30:02d}/mod_{i:04d}.py", _text(rng, lines, size)))
    json_bytes = 0
    for i, size in enumerate(_sizes(rng, _JSON_FILES, json_budget)):
        data = _json(rng, records, size)
        json_bytes += len(data)
        files.append((f"data/set_{i % 20:02d}/records_{i:04d}.json", data))
    binary_budget = TOTAL_BYTES - text_budget - json_bytes
    for i, size in enumerate(_sizes(rng, _BINARY_FILES, binary_budget)):
        files.append((f"assets/blob_{i % 20:02d}/chunk_{i:04d}.bin", rng.randbytes(size)))
    assert sum(len(d) for _, d in files) == TOTAL_BYTES
    assert len(files) == FILE_COUNT, len(files)
    return files, text_budget, json_bytes, binary_budget


def _small_files(rng: random.Random) -> tuple[list[tuple[str, bytes]], int, int, int]:
    """The ``small_files`` shape: source-like text only."""
    lines = _line_pool(rng)
    files = [
        (f"src/pkg_{i % _SMALL_FOLDERS:02d}/mod_{i:04d}.py", _text(rng, lines, size))
        for i, size in enumerate(_sizes(rng, _SMALL_FILES, _SMALL_BYTES))
    ]
    return files, _SMALL_BYTES, 0, 0


def _large_binary(rng: random.Random) -> tuple[list[tuple[str, bytes]], int, int, int]:
    """The ``large_binary`` shape: a few big files no compressor can shrink."""
    files = [(f"blobs/blob_{i}.bin", rng.randbytes(_LARGE_FILE_BYTES)) for i in range(_LARGE_FILES)]
    return files, 0, 0, _LARGE_FILES * _LARGE_FILE_BYTES


def _nested_folders(rng: random.Random, count: int) -> list[str]:
    """``count`` folders in a tree 1 to 6 deep: each new folder goes under one already made."""
    folders = ["src"]
    while len(folders) < count:
        parent = rng.choice(folders)
        if parent.count("/") < 5:
            folders.append(f"{parent}/{rng.choice(_WORDS)}_{len(folders):03d}")
    return folders


def _log(rng: random.Random, size: int) -> bytes:
    """A service's log: timestamped lines drawn from a pool of messages, with a request id and
    a duration each, so it compresses about like a real one (ISA-L level 1: about 3:1)."""
    levels = ("INFO", "INFO", "INFO", "DEBUG", "WARNING", "ERROR")
    messages = [
        f"{rng.choice(levels)} {rng.choice(_WORDS)}.{rng.choice(_WORDS)} "
        + " ".join(rng.choices(_WORDS, k=rng.randint(3, 14)))
        for _ in range(4096)
    ]
    lines: list[str] = []
    have = 0
    second = 0
    for message in iter(lambda: rng.choice(messages), None):
        if have >= size:
            break
        second += rng.randint(0, 2)
        line = (
            f"2026-01-{1 + second // 86_400 % 28:02d}T{second // 3600 % 24:02d}:"
            f"{second // 60 % 60:02d}:{second % 60:02d}Z [{rng.getrandbits(32):08x}] {message} "
            f"took={rng.getrandbits(12)}ms\n"
        )
        lines.append(line)
        have += len(line)
    return "".join(lines).encode()[:size]


def _nested_project(rng: random.Random) -> tuple[list[tuple[str, bytes]], int, int, int]:
    """The ``nested_project`` shape: small text files in a nested tree, blobs and a log."""
    lines = _line_pool(rng)
    folders = _nested_folders(rng, _NESTED_FOLDERS)
    files = [
        (f"{rng.choice(folders)}/mod_{i:04d}.py", _text(rng, lines, size))
        for i, size in enumerate(_sizes(rng, _NESTED_FILES, _NESTED_TEXT_BYTES))
    ]
    files += [
        (f"assets/blob_{i}.bin", rng.randbytes(_NESTED_BLOB_BYTES)) for i in range(_NESTED_BLOBS)
    ]
    files.append(("logs/service.log", _log(rng, _NESTED_LOG_BYTES)))
    binary = _NESTED_BLOBS * _NESTED_BLOB_BYTES
    return files, _NESTED_TEXT_BYTES + _NESTED_LOG_BYTES, 0, binary


SHAPES: dict[str, Callable[[random.Random], tuple[list[tuple[str, bytes]], int, int, int]]] = {
    "mixed": _mixed,
    "small_files": _small_files,
    "large_binary": _large_binary,
    "nested_project": _nested_project,
}
"""The workspace shapes :func:`generate` can write, by name."""


def generate(root: Path, shape: str = "mixed") -> WorkspaceInfo:
    """Write the workspace of ``shape`` (see :data:`SHAPES`) under ``root`` (created; must not
    hold files of the same names)."""
    files, text_bytes, json_bytes, binary_bytes = SHAPES[shape](random.Random(SEED))
    digest = hashlib.sha256()
    for rel, data in sorted(files):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as out:
            out.write(data)
        digest.update(rel.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    return WorkspaceInfo(
        root=root,
        files=len(files),
        total_bytes=sum(len(d) for _, d in files),
        text_bytes=text_bytes,
        json_bytes=json_bytes,
        binary_bytes=binary_bytes,
        sha256=digest.hexdigest(),
    )


def small_files(index: int, count: int = 20) -> dict[str, bytes]:
    """``count`` small files (100 B to 64 KiB, text and binary), different for each ``index``."""
    rng = random.Random(SEED + 1 + index)
    out: dict[str, bytes] = {}
    for i in range(count):
        size = rng.randint(100, 64 * 1024)
        if i % 3 == 2:
            out[f"bin/file_{i:02d}.bin"] = rng.randbytes(size)
        else:
            words = " ".join(rng.choices(_WORDS, k=size // 6 + 1))
            out[f"text/{i % 4}/file_{i:02d}.txt"] = words.encode()[:size]
    return out


def tree_bytes(root: Path) -> int:
    """Total size of the regular files under ``root``."""
    total = 0
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            total += os.path.getsize(os.path.join(dirpath, name))
    return total
