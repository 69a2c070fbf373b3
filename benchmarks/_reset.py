"""A reset against a fresh acquire, on the emulator: figures of the ``ray`` group, measured
without Ray (a plain ``python -m klavis_emulator`` child process, as the other groups start).

An RL loop resets a sandbox between samples (a Ray pool measured 2.2 s median a reset, 66 s of
a 32-sample run); the figures say what a reset costs against acquiring a fresh sandbox, until
the sandbox is ready: from the request until every server of the sandbox has answered a first
MCP call (``list_tools``, made at once and in parallel, as a harness listing its tools does).
Two shapes: filesystem+git+terminal, and MCP-Atlas's (filesystem, git, terminal,
desktop-commander, arxiv, code-runner, localmemory).

Figures (each the worse of the two shapes, median of the repeats; the rest in the detail):

* ``emulator_acquire_s``: a fresh acquire, until ready (the baseline; each acquired sandbox is
  released before the next).
* ``emulator_reset_s``: a reset of a sandbox that was reset before, until ready. Between two
  resets the bench waits until the emulator has no background work left (``GET /_emulator/mcp``
  says so: the spare server set it starts after a reset), as an RL sample's time would let it
  finish; the detail gives that wait (``refill_s``: the shortest sample for which the figure
  holds), the first reset of the shape (no spare yet: fresh servers started in the
  background), the answers' own times, the same first calls made to the servers already up
  without a reset (``warm_calls_median_s``: the floor of this machine and load, which a reset
  cannot go under), and the PSS of a spare set and of the sandbox's own servers (the stock's
  memory, for the whole emulator).
* ``emulator_reset_vs_acquire``: reset over acquire, per shape, the worse; goal <= 0.25.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from typing import Any

import httpx
import psutil

from benchmarks._common import (
    BenchContext,
    EmulatorProcess,
    Figure,
    api_client,
    load_average,
    median,
    new_token,
)
from workflows import _mcp as mcp

__all__ = ["SHAPES", "run"]

SHAPES: dict[str, tuple[str, ...]] = {
    "fs_git_terminal": ("filesystem", "git", "terminal"),
    "mcp_atlas": (
        "filesystem",
        "git",
        "terminal",
        "desktop-commander",
        "arxiv",
        "code-runner",
        "localmemory",
    ),
}
MIN_RESETS = 5
IDLE_TIMEOUT_S = 300.0


async def _first_calls(urls: Sequence[str]) -> None:
    await asyncio.gather(*(mcp.async_list_tools(url, timeout=300) for url in urls))


def _wait_idle(base_url: str) -> float:
    """Seconds until the emulator's MCP host has no background start left (polled)."""
    started = time.perf_counter()
    with httpx.Client(base_url=base_url, timeout=30) as http:
        while True:
            status = http.get("/_emulator/mcp").json()
            if not status.get("busy"):
                return time.perf_counter() - started
            if time.perf_counter() - started > IDLE_TIMEOUT_S:
                raise RuntimeError(f"the emulator stayed busy for {IDLE_TIMEOUT_S:g} s: {status}")
            time.sleep(0.05)


def _spares(base_url: str) -> dict[str, int]:
    with httpx.Client(base_url=base_url, timeout=30) as http:
        spares: dict[str, int] = http.get("/_emulator/mcp").json().get("spares", {})
        return spares


def _pss_mib(emulator_pid: int) -> dict[str, float]:
    """PSS of the emulator's server processes, spare sets apart from sandboxes' (a process
    belongs to the folder its ``bwrap`` binds at ``/data``: a spare's while that folder is
    still among the spares)."""
    totals = {"spares": 0.0, "sandboxes": 0.0}
    for child in psutil.Process(emulator_pid).children():
        try:
            command = child.cmdline()
            index = command.index("/data") if "/data" in command else -1
            folder = command[index - 1] if index > 0 else ""
            tree = [child, *child.children(recursive=True)]
            pss = sum(p.memory_full_info().pss for p in tree)
        except (psutil.Error, ValueError):
            continue
        kind = "spares" if "/.tmp/spares/" in folder and os.path.isdir(folder) else "sandboxes"
        totals[kind] += pss / 2**20
    return {kind: round(value, 1) for kind, value in totals.items()}


def _measure_shape(ctx: BenchContext, servers: Sequence[str]) -> dict[str, Any]:
    token = new_token()
    acquire_answer: list[float] = []
    acquire_ready: list[float] = []
    reset_answer: list[float] = []
    reset_ready: list[float] = []
    refill: list[float] = []
    warm: list[float] = []
    with (
        EmulatorProcess(ctx.emulator_root) as emulator,
        api_client(emulator.base_url, token) as api,
    ):
        body = {"server_names": list(servers), "ttl_seconds": 3600}
        for _ in range(ctx.repeats):
            started = time.perf_counter()
            answer = api.post("/local-sandbox", json=body)
            answer.raise_for_status()
            acquire_answer.append(time.perf_counter() - started)
            urls = [item["mcp_server_url"] for item in answer.json()["servers"]]
            asyncio.run(_first_calls(urls))
            acquire_ready.append(time.perf_counter() - started)
            api.delete(f"/local-sandbox/{answer.json()['local_sandbox_id']}").raise_for_status()
            _wait_idle(emulator.base_url)
        answer = api.post("/local-sandbox", json=body)
        answer.raise_for_status()
        sandbox = answer.json()["local_sandbox_id"]
        urls = [item["mcp_server_url"] for item in answer.json()["servers"]]
        asyncio.run(_first_calls(urls))
        first_reset: dict[str, float] = {}
        for attempt in range(max(MIN_RESETS, ctx.repeats) + 1):
            refill.append(_wait_idle(emulator.base_url))
            spares_before = _spares(emulator.base_url)
            started = time.perf_counter()  # the floor: the same calls, servers up, no reset
            asyncio.run(_first_calls(urls))
            warm.append(time.perf_counter() - started)
            started = time.perf_counter()
            api.post(f"/local-sandbox/{sandbox}/reset").raise_for_status()
            answered = time.perf_counter() - started
            asyncio.run(_first_calls(urls))
            ready = time.perf_counter() - started
            if attempt == 0:  # no spare of the shape yet: fresh servers, in the background
                first_reset = {"answer_s": round(answered, 3), "ready_s": round(ready, 3)}
                continue
            if not spares_before:
                raise RuntimeError("no spare was ready for a reset: the stock did not refill")
            reset_answer.append(answered)
            reset_ready.append(ready)
        refill.append(_wait_idle(emulator.base_url))
        memory = _pss_mib(emulator.pid)
    acquire_s, reset_s = median(acquire_ready), median(reset_ready)
    return {
        "acquire_s": acquire_s,
        "reset_s": reset_s,
        "reset_vs_acquire": reset_s / acquire_s,
        "acquire_ready_s": [round(v, 3) for v in acquire_ready],
        "acquire_answer_median_s": round(median(acquire_answer), 3),
        "reset_ready_s": [round(v, 3) for v in reset_ready],
        "reset_answer_median_s": round(median(reset_answer), 3),
        "first_reset_without_spare": first_reset,
        "warm_calls_median_s": round(median(warm), 3),
        "refill_s_median": round(median(refill[2:]), 2),
        "refill_s_max": round(max(refill[2:]), 2),
        "pss_mib": memory,
    }


def run(ctx: BenchContext) -> list[Figure]:
    """Measure ``emulator_acquire_s``, ``emulator_reset_s`` and ``emulator_reset_vs_acquire``."""
    load_before = load_average()
    shapes = {name: _measure_shape(ctx, servers) for name, servers in SHAPES.items()}
    load = {"before": load_before, "after": load_average()}
    worst_acquire = max(shapes, key=lambda name: shapes[name]["acquire_s"])
    worst_reset = max(shapes, key=lambda name: shapes[name]["reset_s"])
    worst_ratio = max(shapes, key=lambda name: shapes[name]["reset_vs_acquire"])

    def rounded(name: str, key: str) -> dict[str, Any]:
        return {shape: round(values[key], 3) for shape, values in shapes.items() if shape != name}

    return [
        Figure(
            "emulator_acquire_s",
            shapes[worst_acquire]["acquire_s"],
            "s",
            "report",
            0,
            {"shape": worst_acquire, "others": rounded(worst_acquire, "acquire_s"), "load": load},
        ),
        Figure(
            "emulator_reset_s",
            shapes[worst_reset]["reset_s"],
            "s",
            "<=",
            1.0,
            {"shape": worst_reset, "load": load, "shapes": shapes},
        ),
        Figure(
            "emulator_reset_vs_acquire",
            shapes[worst_ratio]["reset_vs_acquire"],
            "x",
            "<=",
            0.25,
            {"shape": worst_ratio, "others": rounded(worst_ratio, "reset_vs_acquire")},
        ),
    ]
