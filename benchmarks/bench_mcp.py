"""How soon a sandbox's MCP servers answer: the service has them up when acquire returns.

Figure:

* ``mcp_first_call_s``: acquire a sandbox with filesystem, git and terminal (through the
  library, against ``python -m klavis_emulator``), wait 2 s as a client would between acquiring
  and its agent's first step, then time the first ``list_tools`` on each server; the figure is
  the slowest of the three, median of the repeats. The emulator starts a sandbox's servers in
  the background at acquire (``EmulatorConfig.mcp_at_acquire``); before it did, this first call
  waited for the server's start (11.7 s for filesystem once, on a loaded machine). The detail
  gives each server's first call and the median of a second, warm, call on the same servers,
  the floor for this machine.
* ``mcp_session_speedup``: ``CALLS`` calls of a filesystem tool one by one
  (``sandbox.call_tool``, a session each) against the same calls in one ``sandbox.mcp_session``
  (the baseline is the one-by-one time, measured in the same run, same sandbox, warm server);
  each one-by-one call pays a connection and the MCP initialisation. Median of the repeats.
"""

from __future__ import annotations

import time

from benchmarks._common import BenchContext, EmulatorProcess, Figure, median, new_token
from workflows import LocalSandbox, ServerName

__all__ = ["run"]

SERVERS: tuple[ServerName, ...] = ("filesystem", "git", "terminal")
REPEATS = 3
PAUSE_S = 2.0  # between acquire and the agent's first call, as the scenario has it
CALLS = 20


def run(ctx: BenchContext) -> list[Figure]:
    """Measure ``mcp_first_call_s`` and ``mcp_session_speedup``."""
    slowest: list[float] = []
    first: dict[str, list[float]] = {server: [] for server in SERVERS}
    warm: list[float] = []
    speedups: list[float] = []
    one_by_one: list[float] = []
    in_session: list[float] = []
    with EmulatorProcess(ctx.emulator_root) as emulator:
        token = new_token()
        for _ in range(REPEATS):
            with LocalSandbox.acquire(
                list(SERVERS),
                api_key=token,
                base_url=emulator.base_url,
                ttl_seconds=600,
                progress=False,
                ledger=False,
            ) as sandbox:
                time.sleep(PAUSE_S)
                times = []
                for server in SERVERS:
                    started = time.perf_counter()
                    sandbox.list_tools(server)
                    seconds = time.perf_counter() - started
                    first[server].append(seconds)
                    times.append(seconds)
                slowest.append(max(times))
                for server in SERVERS:
                    started = time.perf_counter()
                    sandbox.list_tools(server)
                    warm.append(time.perf_counter() - started)
                started = time.perf_counter()
                for _ in range(CALLS):
                    sandbox.call_tool("filesystem", "list_allowed_directories")
                one_by_one.append(time.perf_counter() - started)
                started = time.perf_counter()
                with sandbox.mcp_session("filesystem") as session:
                    for _ in range(CALLS):
                        session.call_tool("list_allowed_directories")
                in_session.append(time.perf_counter() - started)
                speedups.append(one_by_one[-1] / in_session[-1])
    return [
        Figure(
            "mcp_first_call_s",
            median(slowest),
            "s",
            "<=",
            1.0,
            {
                **{f"{server}_first_call_s": median(first[server]) for server in SERVERS},
                "warm_call_median_s": median(warm),
                "pause_after_acquire_s": PAUSE_S,
                "repeats": REPEATS,
            },
        ),
        Figure(
            "mcp_session_speedup",
            median(speedups),
            "x",
            ">=",
            3.0,
            {
                "calls": CALLS,
                "one_by_one_s": median(one_by_one),
                "one_session_s": median(in_session),
                "repeats": REPEATS,
            },
        ),
    ]
