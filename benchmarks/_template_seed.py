"""``template_seed_speedup``: 16 seeds of one 2,000-file tree, plain against one template.

RL runs seed many samples of one task with the same tree (issue 31, point 9). The baseline is
16 ``sb.seed_directory(tree)`` calls, each planning and packing the tree again; the measured way
is ``SeedTemplate.from_folder(tree)`` once (counted: it is part of the way) and 16
``sb.seed(template)`` calls, each uploading the packed archive as it is (after checking it
against its digest). Both seed the same 16 sandboxes, one after the other, from one thread;
every sandbox is reset before each round (not counted), so the emulator always extracts into
an empty workspace: its extraction is in both ways and bounds the ratio. The two ways are
interleaved, in a rotating order, ``repeats`` times; the figure is the ratio of medians. Goal
>= 1.4. Measured without Ray, against an emulator in its own process (as every benchmark's),
so the figure is the library's own saving; a Ray worker seeding from a pickled template does
the same work (unpickling never packs).

Run alone: ``python -m benchmarks._template_seed [--repeats N]``.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import (
    EmulatorProcess,
    Figure,
    acquire_many,
    api_client,
    emulator_root,
    load_average,
    median,
    new_token,
)
from workflows import LocalSandbox, SeedTemplate

__all__ = ["FILES", "SANDBOXES", "make_tree", "template_seed_figure"]

FILES = 2_000
SANDBOXES = 16


def make_tree(root: Path, files: int = FILES) -> int:
    """A source tree of ``files`` files (40 folders, two levels, 200 B to 6 KiB of text each,
    seeded random); returns its bytes."""
    rng = random.Random(31)
    words = [f"name_{i}" for i in range(500)]
    total = 0
    for i in range(files):
        folder = root / f"pkg{i % 8}" / f"mod{i % 5}"
        folder.mkdir(parents=True, exist_ok=True)
        lines = [
            f"def {rng.choice(words)}({rng.choice(words)}): return {rng.randint(0, 999)}\n"
            for _ in range(rng.randint(4, 120))
        ]
        data = "".join(lines).encode()
        (folder / f"file_{i:04}.py").write_bytes(data)
        total += len(data)
    return total


def _round(sandboxes: list[LocalSandbox], tree: Path, cache: Path | None) -> float:
    started = time.perf_counter()
    if cache is None:
        for sb in sandboxes:
            sb.seed_directory(tree, progress=False)
    else:
        template = SeedTemplate.from_folder(tree, progress=False, cache_dir=cache)
        for sb in sandboxes:
            sb.seed(template, progress=False)
    return time.perf_counter() - started


def template_seed_figure(root: Path, scratch: Path, repeats: int) -> Figure:
    """Measure ``template_seed_speedup`` on an emulator of its own under ``root``."""
    tree = Path(tempfile.mkdtemp(prefix="template-tree-", dir=scratch))
    tree_bytes = make_tree(tree)
    cache = Path(tempfile.mkdtemp(prefix="template-cache-", dir=scratch))
    load_before = load_average()
    runs: dict[str, list[float]] = {"plain": [], "template": []}
    with EmulatorProcess(root, mcp_at_acquire=False) as emulator:
        url, token = emulator.base_url, new_token()
        ids = acquire_many(url, token, SANDBOXES)
        sandboxes = [LocalSandbox.attach(i, api_key=token, base_url=url) for i in ids]
        with api_client(url, token) as client:

            def reset() -> None:
                for sandbox_id in ids:
                    client.post(f"/local-sandbox/{sandbox_id}/reset").raise_for_status()

            reset()
            _round(sandboxes[:1], tree, None)  # warm-up, not counted: imports, connections
            order = ["plain", "template"]
            for r in range(repeats):
                for way in order[r % 2 :] + order[: r % 2]:
                    reset()
                    runs[way].append(_round(sandboxes, tree, cache if way == "template" else None))
        for sb in sandboxes:
            sb.release()
    plain_s, template_s = median(runs["plain"]), median(runs["template"])
    size = SeedTemplate.from_folder(tree, progress=False, cache_dir=cache).size
    detail: dict[str, Any] = {
        "sandboxes": SANDBOXES,
        "files": FILES,
        "tree_bytes": tree_bytes,
        "archive_bytes": size,
        "plain_s": round(plain_s, 3),
        "template_s": round(template_s, 3),
        "plain_runs_s": [round(v, 3) for v in runs["plain"]],
        "template_runs_s": [round(v, 3) for v in runs["template"]],
        "load_before": load_before,
        "load_after": load_average(),
    }
    return Figure("template_seed_speedup", plain_s / template_s, "x", ">=", 1.4, detail)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds of each way (3)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="klavis-bench-template-"))
    root = emulator_root(scratch)
    try:
        figure = template_seed_figure(root, scratch, max(1, args.repeats))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{figure.name}: {figure.value:.2f}{figure.unit} (goal {figure.goal}, met {figure.met})")
    for key, value in figure.detail.items():
        print(f"  {key}: {value}")


if __name__ == "__main__":
    main()
