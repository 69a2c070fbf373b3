"""Dumping the 100 MiB workspace: against the notebook's way, and peak memory.

Figures:

* ``dump_speedup_vs_notebook``: for one signed download URL, the seed notebook's way
  (``resp.content`` of a GET with a fresh httpx client, ``tarfile`` ``r:gz`` over it, every
  member read into memory) ÷ the library's download-and-extract into a folder. The library side
  is ``dump_to``'s own flow (:func:`workflows._flows.dump_to_flow`: stream to a temporary file,
  then the checked extraction), driven with the library's pooled connection, with the one API
  call of the flow (``GET /dump``) answered by that same URL: so both sides fetch the same bytes
  and the emulator's archive building is outside both timings.
* ``dump_peak_rss_mb``: peak RSS growth of a fresh process during ``sb.dump_to(folder)`` (the
  whole public call; see ``benchmarks/_rss_child.py`` for the method).

The extracted folder is compared with the generated workspace (every path, size and byte), so
a fast but wrong dump cannot pass.
"""

from __future__ import annotations

import filecmp
import io
import os
import shutil
import tarfile
import time
from http import HTTPStatus
from pathlib import Path
from typing import Any

import httpx
from klavis_sandbox_client.types import Response

from benchmarks._common import (
    BenchContext,
    EmulatorProcess,
    Figure,
    acquire_many,
    api_client,
    median,
    new_token,
    run_child,
)
from workflows import LocalSandbox
from workflows._drivers import sync_driver_for
from workflows._flows import Call, dump_to_flow, dump_to_target

__all__ = ["library_dump", "notebook_dump", "run"]


def notebook_dump(download_url: str) -> int:
    """The seed notebook's code (every member also read); returns the bytes read."""
    with httpx.Client(timeout=120.0) as client:
        resp = client.get(download_url)
    resp.raise_for_status()
    total = 0
    with tarfile.open(fileobj=io.BytesIO(resp.content), mode="r:gz") as tar:
        for member in tar.getmembers():
            fileobj = tar.extractfile(member)
            if fileobj is not None:
                total += len(fileobj.read())
    return total


class _DumpBody:
    """Stands in for the parsed body of ``GET /dump``: the URL under test."""

    def __init__(self, url: str) -> None:
        self.url = url

    def to_dict(self) -> dict[str, Any]:
        return {"download_url": self.url, "expires_in_minutes": 30}


def library_dump(sandbox: LocalSandbox, download_url: str, dest: Path) -> dict[str, float]:
    """``sandbox.dump_to(dest)``'s flow, with ``GET /dump`` answered by ``download_url``;
    returns the seconds spent in each kind of step (``Download``, ``Blocking``: extraction)."""
    api = sync_driver_for(sandbox.settings)
    flow = dump_to_flow(sandbox.id, dump_to_target(dest), sandbox.limits, False)
    spent: dict[str, float] = {}
    value: Any = None
    while True:
        try:
            step = flow.send(value)
        except StopIteration:
            return spent
        if isinstance(step, Call) and step.name == "dump_workspace":
            value = Response(
                status_code=HTTPStatus.OK, content=b"", headers={}, parsed=_DumpBody(download_url)
            )
            continue
        started = time.perf_counter()
        value = api.perform(step)
        kind = type(step).__name__
        spent[kind] = spent.get(kind, 0.0) + time.perf_counter() - started


def _same_tree(left: Path, right: Path) -> tuple[int, list[str]]:
    """Number of files compared, and the paths that differ or are on one side only."""
    problems: list[str] = []
    count = 0
    for dirpath, _, filenames in os.walk(left):
        for name in filenames:
            a = Path(dirpath, name)
            rel = a.relative_to(left)
            count += 1
            other = right / rel
            if not other.is_file() or not filecmp.cmp(a, other, shallow=False):
                problems.append(str(rel))
    for dirpath, _, filenames in os.walk(right):
        for name in filenames:
            rel = Path(dirpath, name).relative_to(right)
            if not (left / rel).is_file():
                problems.append(f"extra {rel}")
    return count, problems


def run(ctx: BenchContext) -> list[Figure]:
    """Measure the dump figures."""
    with EmulatorProcess(ctx.emulator_root) as emulator:
        url = emulator.base_url
        token = new_token()
        (sandbox_id,) = acquire_many(url, token, 1)
        sandbox = LocalSandbox.attach(sandbox_id, api_key=token, base_url=url)
        sandbox.seed_directory(ctx.workspace, progress=False)
        with api_client(url, token) as client:
            started = time.perf_counter()
            response = client.get(f"/local-sandbox/{sandbox_id}/dump")
            response.raise_for_status()
            emulator_dump_s = time.perf_counter() - started
            download_url = response.json()["download_url"]
            with httpx.Client(timeout=120.0) as plain:
                archive_bytes = len(plain.get(download_url).content)

        notebook: list[float] = []
        library: list[float] = []
        steps: list[dict[str, float]] = []
        checked: tuple[int, list[str]] | None = None
        done: list[Path] = []  # deleted after the timed loop: mass deletions slow the next
        # file creations on some filesystems, which would bill the library for the cleanup
        for r in range(ctx.repeats):
            for way in ("notebook", "library") if r % 2 == 0 else ("library", "notebook"):
                if way == "notebook":
                    started = time.perf_counter()
                    read = notebook_dump(download_url)
                    notebook.append(time.perf_counter() - started)
                    assert read == ctx.workspace_info["total_bytes"], read
                else:
                    dest = ctx.folder(f"dump-{r}") / "out"
                    started = time.perf_counter()
                    steps.append(library_dump(sandbox, download_url, dest))
                    library.append(time.perf_counter() - started)
                    if checked is None:
                        checked = _same_tree(ctx.workspace, dest)
                    done.append(dest.parent)
        for folder in done:
            shutil.rmtree(folder)
        assert checked is not None
        if checked[1]:
            raise AssertionError(f"the dump differs from the workspace: {checked[1][:10]}")

        rss: list[dict[str, Any]] = []
        for _ in range(ctx.repeats):
            dest = ctx.folder("dump-rss") / "out"
            rss.append(run_child("_rss_child", "dump", url, token, sandbox_id, str(dest)))
            shutil.rmtree(dest.parent)

    notebook_s, library_s = median(notebook), median(library)
    return [
        Figure(
            "dump_speedup_vs_notebook",
            notebook_s / library_s,
            "x",
            ">=",
            1.5,
            {
                "notebook_s": notebook_s,
                "library_s": library_s,
                "notebook_runs_s": notebook,
                "library_runs_s": library,
                "library_download_s": [round(s.get("Download", 0.0), 3) for s in steps],
                "library_extract_s": [round(s.get("Blocking", 0.0), 3) for s in steps],
                "archive_bytes": archive_bytes,
                "files_checked": checked[0],
                "emulator_dump_s": emulator_dump_s,
                "runs": ctx.repeats,
            },
        ),
        Figure(
            "dump_peak_rss_mb",
            median([r["growth_mib"] for r in rss]),
            "MiB",
            "<=",
            64,
            {
                "runs_mib": [round(r["growth_mib"], 2) for r in rss],
                "baseline_mib": median([r["baseline_mib"] for r in rss]),
                "method": rss[0]["method"] + ", a fresh process per run",
                "seconds": median([r["seconds"] for r in rss]),
                "files": rss[0]["files"],
            },
        ),
    ]
