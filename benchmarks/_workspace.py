"""The benchmark workspace: 100 MiB in 2,000 files, the same bytes in every run.

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
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FILE_COUNT",
    "SEED",
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


def generate(root: Path) -> WorkspaceInfo:
    """Write the workspace under ``root`` (created; must not hold files of the same names)."""
    rng = random.Random(SEED)
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

    digest = hashlib.sha256()
    for rel, data in sorted(files):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as out:
            out.write(data)
        digest.update(rel.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    total = sum(len(d) for _, d in files)
    assert total == TOTAL_BYTES, total
    assert len(files) == FILE_COUNT, len(files)
    return WorkspaceInfo(
        root=root,
        files=len(files),
        total_bytes=total,
        text_bytes=text_budget,
        json_bytes=json_bytes,
        binary_bytes=binary_budget,
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
