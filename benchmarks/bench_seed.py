"""Seeding the 100 MiB workspace: against the notebook's way, against the limit, peak memory.

Figures:

* ``seed_speedup_vs_notebook``: the seed notebook's way (``tarfile`` ``w:gz`` at its default
  level 9 into a ``BytesIO``, a fresh httpx client per step as in the notebook: upload-url,
  PUT of the bytes, initialize) ÷ ``sb.seed_directory(path)``.
* ``seed_time_vs_limit``: ``seed_directory`` ÷ the sum of the unavoidable steps timed one after
  the other: read the files into an uncompressed tar in memory; compress it with ISA-L level 1
  in one thread (``isal.igzip.compress``); PUT those bytes from memory with a reused httpx client
  (the upload-url call that yields the URL is counted here); call initialize.
* ``seed_peak_rss_mb``: peak RSS growth of a fresh process during ``seed_directory`` (see
  ``benchmarks/_rss_child.py`` for the method).

Before every measured seed the sandbox is reset, so the emulator always extracts into an empty
workspace. The three ways are interleaved, in a rotating order, ``repeats`` times; figures are
ratios of medians.
"""

from __future__ import annotations

import io
import logging
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from benchmarks import _limits
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

__all__ = ["run"]


def notebook_seed(base_url: str, token: str, sandbox_id: str, root: Path) -> dict[str, float]:
    """The seed notebook's code, applied to a folder; returns the time of each step."""
    headers = {"Authorization": f"Bearer {token}"}
    started = time.perf_counter()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(str(root), arcname=".")
    buf.seek(0)
    packed = time.perf_counter()
    with httpx.Client() as client:
        resp = client.post(f"{base_url}/local-sandbox/{sandbox_id}/upload-url", headers=headers)
    upload_url = resp.json()["upload_url"]
    with httpx.Client(timeout=120.0) as client:
        resp = client.put(
            upload_url, headers={"Content-Type": "application/gzip"}, content=buf.getvalue()
        )
    resp.raise_for_status()
    uploaded = time.perf_counter()
    with httpx.Client(timeout=120.0) as client:
        resp = client.post(f"{base_url}/local-sandbox/{sandbox_id}/initialize", headers=headers)
    resp.raise_for_status()
    done = time.perf_counter()
    return {
        "total": done - started,
        "pack": packed - started,
        "upload": uploaded - packed,
        "initialize": done - uploaded,
        "archive_bytes": float(len(buf.getbuffer())),
    }


def limit_seed(client: httpx.Client, sandbox_id: str, root: Path) -> dict[str, float]:
    """The unavoidable steps, one after the other; returns each step's time and their sum."""
    t0 = time.perf_counter()
    data, read_tar = _limits.read_tar(root)
    compressed, compress = _limits.compress(data)
    t2 = time.perf_counter()
    url = client.post(f"/local-sandbox/{sandbox_id}/upload-url").json()["upload_url"]
    client.put(
        url, content=compressed, headers={"Content-Type": "application/gzip"}
    ).raise_for_status()
    t3 = time.perf_counter()
    client.post(f"/local-sandbox/{sandbox_id}/initialize").raise_for_status()
    t4 = time.perf_counter()
    del data
    return {
        "total": t4 - t0,
        "read_tar": read_tar,
        "compress": compress,
        "put": t3 - t2,
        "initialize": t4 - t3,
        "archive_bytes": float(len(compressed)),
    }


class _PackedSize(logging.Handler):
    """Catches the library's 'N bytes packed' log line, for the detail."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.size: int | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("seeded sandbox") and isinstance(record.args, tuple):
            self.size = int(str(record.args[-1]))


def run(ctx: BenchContext) -> list[Figure]:
    """Measure the seed figures."""
    with EmulatorProcess(ctx.emulator_root) as emulator:
        url = emulator.base_url
        token = new_token()
        (sandbox_id,) = acquire_many(url, token, 1)
        sandbox = LocalSandbox.attach(sandbox_id, api_key=token, base_url=url)
        packed = _PackedSize()
        logger = logging.getLogger("workflows")
        old_level = logger.level
        logger.setLevel(logging.INFO)
        logger.addHandler(packed)
        runs: dict[str, list[dict[str, float]]] = {"notebook": [], "library": [], "limit": []}
        try:
            with api_client(url, token) as client:

                def library() -> dict[str, float]:
                    started = time.perf_counter()
                    sandbox.seed_directory(ctx.workspace, progress=False)
                    return {"total": time.perf_counter() - started}

                ways: dict[str, Callable[[], dict[str, float]]] = {
                    "notebook": lambda: notebook_seed(url, token, sandbox_id, ctx.workspace),
                    "library": library,
                    "limit": lambda: limit_seed(client, sandbox_id, ctx.workspace),
                }
                names = list(ways)
                for r in range(ctx.repeats):
                    for name in names[r % 3 :] + names[: r % 3]:
                        client.post(f"/local-sandbox/{sandbox_id}/reset").raise_for_status()
                        runs[name].append(ways[name]())
                rss: list[dict[str, Any]] = []
                for _ in range(ctx.repeats):
                    client.post(f"/local-sandbox/{sandbox_id}/reset").raise_for_status()
                    rss.append(
                        run_child("_rss_child", "seed", url, token, sandbox_id, str(ctx.workspace))
                    )
        finally:
            logger.removeHandler(packed)
            logger.setLevel(old_level)

    def med(way: str, key: str = "total") -> float:
        return median([run[key] for run in runs[way]])

    library_s, notebook_s, limit_s = med("library"), med("notebook"), med("limit")
    common = {"runs": ctx.repeats, "workspace": ctx.workspace_info}
    return [
        Figure(
            "seed_speedup_vs_notebook",
            notebook_s / library_s,
            "x",
            ">=",
            5,
            {
                "notebook_s": notebook_s,
                "library_s": library_s,
                "notebook_steps_s": {
                    k: med("notebook", k) for k in ("pack", "upload", "initialize")
                },
                "notebook_archive_bytes": runs["notebook"][0]["archive_bytes"],
                "library_archive_bytes": packed.size,
                "notebook_runs_s": [run["total"] for run in runs["notebook"]],
                "library_runs_s": [run["total"] for run in runs["library"]],
                **common,
            },
        ),
        Figure(
            "seed_time_vs_limit",
            library_s / limit_s,
            "x",
            "<=",
            1.25,
            {
                "library_s": library_s,
                "limit_s": limit_s,
                "limit_steps_s": {
                    k: med("limit", k) for k in ("read_tar", "compress", "put", "initialize")
                },
                "limit_archive_bytes": runs["limit"][0]["archive_bytes"],
                "limit_runs_s": [run["total"] for run in runs["limit"]],
                "runs": ctx.repeats,
            },
        ),
        Figure(
            "seed_peak_rss_mb",
            median([r["growth_mib"] for r in rss]),
            "MiB",
            "<=",
            64,
            {
                "runs_mib": [round(r["growth_mib"], 2) for r in rss],
                "baseline_mib": median([r["baseline_mib"] for r in rss]),
                "method": rss[0]["method"] + ", a fresh process per run",
                "seconds": median([r["seconds"] for r in rss]),
            },
        ),
    ]
