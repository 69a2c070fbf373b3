"""What the emulator costs to set up: a fresh clone's demo, a full ``klavis-emulator setup``,
and the disk the setup fills.

Figures (one run each: every one is minutes of installs):

* ``demo_fresh_s``: ``git clone`` of this repository's HEAD into a scratch folder, then its
  ``scripts/demo`` with a fresh tools folder (``KLAVIS_EMULATOR_TOOLS_DIR``): the venv, the
  three MCP servers the demo acquires, the demo itself. The machine's npm, pip and uv caches
  are used as they are (warm on a developer's machine). Goal 60 s. Before (commit 79a869e,
  when the demo ran the full setup): 190 s on an idle 2-core machine (issue 25), 570 s on the
  same machine under the load of three other jobs.
* ``first_tool_call_s``: in the same run, from the ``git clone`` to the demo's line saying the
  answer of its MCP tool call (step 4: the filesystem server reads a seeded file), the first
  MCP result a newcomer sees. Goal 90 s (issue 35: 3 min 43 s by hand from the README, at
  load 5).
* ``setup_full_s``: ``klavis-emulator setup`` of every server into another fresh tools
  folder, with the clone's venv. Goal: half of the old setup's 278 s (issue 25, an idle
  machine; 890 s measured here under load, one npm ci then one pip venv after another). The
  old way is not run again in each bench run: it takes 5 to 15 minutes.
* ``setup_disk_mb``: the size of that tools folder (``du``: files hard-linked from uv's cache
  count once, in the folder). Goal 800 MB: the old setup filled 1,202 MB (an 894 MB tools folder
  and 308 MB of ``node_modules`` inside the package); desktop-commander's puppeteer and sharp
  are no longer installed (-98 MB), the rest is the servers' own pins. The detail gives each
  server's folder alone (``by_server_mb``: a file two venvs share counts in both there).

Where the fresh tools folders are made matters: uv hard-links a venv's files from its cache
when both are on one filesystem, so the venvs of one tools folder share the packages they have
in common (mcp, pydantic, httpx, ...), and copies them, once per venv, when they are not. The
bench once made them under ``$TMPDIR``: with ``TMPDIR=/dev/shm`` a full setup measured 1,021 MB
(998 MB in the developers' run), against 766 MB for the same setup beside the real tools folder
minutes later (the venvs of terminal, excel, word, powerpoint and pdf-tools each 30 to 70 MB
larger). So both folders are made beside the tools folder a user's setup fills
(``$KLAVIS_EMULATOR_TOOLS_DIR``, else the per-user cache folder), on its filesystem, and removed
after; the detail names that place and the filesystem of uv's cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import REPO_ROOT, BenchContext, Figure
from klavis_emulator._mcp.installs import uv_binary
from klavis_emulator._mcp.setup import default_tools_dir

__all__ = ["run"]

DEMO_GOAL_S = 60.0
TOOL_CALL_GOAL_S = 90.0
OLD_SETUP_S = 278.0  # issue 25, commit 79a869e on an idle 2-core machine
DISK_GOAL_MB = 800.0


def _env(tools: Path) -> dict[str, str]:
    """The environment of a fresh checkout: this run's venv left out, a fresh tools folder."""
    env = dict(os.environ)
    venv_bin = str(Path(sys.prefix) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    for name in ("VIRTUAL_ENV", "KLAVIS_VENV", "EXTRAS", "MCP_SERVERS", "KLAVIS_API_KEY"):
        env.pop(name, None)
    env["PYTHON"] = str(Path(sys.base_prefix) / "bin" / "python3")
    env["KLAVIS_EMULATOR_TOOLS_DIR"] = str(tools)
    return env


def _timed(argv: list[str], *, cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{(done.stderr or done.stdout)[-3000:]}")
    return seconds


def _timed_until(
    argv: list[str], marker: str, *, cwd: Path, env: dict[str, str]
) -> tuple[float, float]:
    """Run ``argv``; its whole time and the time when a line of its stdout first started with
    ``marker`` (read as it is written; stderr goes to a file, which a full pipe nobody reads
    would block)."""
    started = time.perf_counter()
    marked: float | None = None
    with tempfile.TemporaryFile() as errors:
        with subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=errors, text=True
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                if marked is None and line.startswith(marker):
                    marked = time.perf_counter() - started
        errors.seek(0)
        err = errors.read().decode(errors="replace")
    seconds = time.perf_counter() - started
    if proc.returncode != 0 or marked is None:
        raise RuntimeError(f"{' '.join(argv)} failed or never printed {marker!r}:\n{err[-3000:]}")
    return seconds, marked


def _du_mb(folder: Path) -> float:
    done = subprocess.run(["du", "-sk", str(folder)], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[0]) / 1024


def _by_server_mb(tools: Path) -> dict[str, int]:
    """Each server's folder of ``tools`` measured alone (``node/<server>-...``, ``venvs/...``)."""
    return {
        f"{kind.name}/{folder.name}": round(_du_mb(folder))
        for kind in sorted(p for p in tools.iterdir() if p.is_dir() and p.name != "locks")
        for folder in sorted(kind.iterdir())
        if folder.is_dir()
    }


def _tools_parent() -> Path:
    """The folder holding the real tools folder (made if missing): fresh tools folders made
    in it sit on the filesystem a user's setup fills."""
    parent = default_tools_dir().parent
    parent.mkdir(parents=True, exist_ok=True)
    return parent


def _filesystem(path: Path) -> str:
    done = subprocess.run(
        ["df", "--output=target,fstype", str(path)], capture_output=True, text=True, check=False
    )
    lines = done.stdout.splitlines()
    return " ".join(lines[-1].split()) if done.returncode == 0 and len(lines) > 1 else "?"


def _uv_cache() -> Path | None:
    """uv's cache folder, as the setup's uv sees it (None without uv)."""
    uv = uv_binary()
    if uv is None:
        return None
    done = subprocess.run([uv, "cache", "dir"], capture_output=True, text=True, check=False)
    return Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None


def run(ctx: BenchContext) -> list[Figure]:
    """Measure ``demo_fresh_s``, ``first_tool_call_s``, ``setup_full_s`` and ``setup_disk_mb``."""
    scratch = ctx.folder("footprint")
    clone = scratch / "clone"
    tools_parent = _tools_parent()
    tools_home = Path(tempfile.mkdtemp(prefix="klavis-emulator-bench-", dir=tools_parent))
    demo_tools = tools_home / "tools-demo"
    full_tools = tools_home / "tools-full"
    uv_cache = _uv_cache()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True
    ).stdout.strip()
    try:
        started = time.perf_counter()
        subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(clone)], check=True)
        cloned = time.perf_counter() - started
        demo, tool_call = _timed_until(
            ["scripts/demo"], "4. MCP tool call:", cwd=clone, env=_env(demo_tools)
        )
        demo, tool_call = demo + cloned, tool_call + cloned  # the clone included
        setup = _timed(
            [str(clone / ".venv" / "bin" / "klavis-emulator"), "setup", "-q"],
            cwd=clone,
            env=_env(full_tools),
        )
        disk = _du_mb(full_tools)
        by_server = _by_server_mb(full_tools)
        demo_disk = _du_mb(demo_tools)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(tools_home, ignore_errors=True)
    where = {
        "tools_folder_beside": str(default_tools_dir()),
        "tools_filesystem": _filesystem(tools_parent),
        "uv_cache": str(uv_cache),
        "uv_cache_filesystem": _filesystem(uv_cache) if uv_cache is not None else "?",
    }
    return [
        Figure(
            "demo_fresh_s", round(demo, 1), "s", "<=", DEMO_GOAL_S,
            {"commit": commit, "demo_tools_mb": round(demo_disk)},
        ),
        Figure("first_tool_call_s", round(tool_call, 1), "s", "<=", TOOL_CALL_GOAL_S),
        Figure(
            "setup_full_s", round(setup, 1), "s", "<=", OLD_SETUP_S / 2,
            {"old_setup_s": OLD_SETUP_S, "ratio_vs_old": round(setup / OLD_SETUP_S, 2)},
        ),
        Figure(
            "setup_disk_mb", round(disk), "MB", "<=", DISK_GOAL_MB,
            {"old_mb": 1202, "by_server_mb": by_server, **where},
        ),
    ]  # fmt: skip
