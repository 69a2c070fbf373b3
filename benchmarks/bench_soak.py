"""A soak under injected faults: 100 lifecycles, 8 at a time, 20 % of requests failing.

Each lifecycle: ``with LocalSandbox.acquire(["filesystem"]) as sb``, seed 20 files (100 B to
64 KiB, text and binary, different for each lifecycle), dump, compare with what was seeded,
release (by leaving ``with``). The emulator runs with ``--fault-rate 0.2 --fault-mode mixed``:
a faulty request answers 429/500/502/503 either before the operation (nothing happened) or after
it (it happened, the answer was lost), on the API and on the signed-URL storage alike. The
library runs with its default retry policy (real back-off, not stamina's testing mode).

Figures:

* ``soak_completed_fraction``: lifecycles that ran to the end without an exception ÷ 100.
* ``soak_lost_files``: files seeded but missing or different in the dump, over all lifecycles.
* ``soak_leaked_sandboxes``: sandboxes still listed after the soak (faults switched off for that
  one listing).
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from benchmarks._common import (
    BenchContext,
    EmulatorProcess,
    Figure,
    listed_ids,
    new_token,
)
from benchmarks._workspace import small_files
from workflows import LocalSandbox

__all__ = ["CONCURRENCY", "FAULT_RATE", "LIFECYCLES", "run"]

LIFECYCLES = 100
CONCURRENCY = 8
FAULT_RATE = 0.2
FAULT_SEED = 7


@dataclass(frozen=True)
class _Outcome:
    completed: bool
    lost: int
    error: str | None = None


class _Tally(logging.Handler):
    """Counts the retries the library schedules and the sandboxes it adopts."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "workflows.retry_num" in record.__dict__:  # the library's retries (see _retry_log)
            self.counts["retries_scheduled"] += 1
        elif "adopted it" in message:
            self.counts["adopted_after_failed_acquire"] += 1
        elif record.levelno >= logging.WARNING:
            self.counts["other_warnings"] += 1


@contextlib.contextmanager
def _tally() -> Iterator[_Tally]:
    """Route the ``workflows`` logger to a :class:`_Tally` (and off stderr)."""
    tally = _Tally()
    loggers = [logging.getLogger("workflows")]
    saved = [(lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.addHandler(tally)
        lg.setLevel(logging.INFO)
        lg.propagate = False
    try:
        yield tally
    finally:
        for lg, (level, propagate) in zip(loggers, saved, strict=True):
            lg.removeHandler(tally)
            lg.setLevel(level)
            lg.propagate = propagate


def _lifecycle(index: int, base_url: str, token: str) -> _Outcome:
    files = small_files(index)
    try:
        with LocalSandbox.acquire(
            ["filesystem"], api_key=token, base_url=base_url, ttl_seconds=3600, progress=False
        ) as sandbox:
            sandbox.seed(files)
            with sandbox.dump(progress=False) as snapshot:
                lost = sum(1 for name, data in files.items() if snapshot.get(name) != data)
    except Exception as exc:  # noqa: BLE001 - counted, and its type reported
        return _Outcome(False, 0, f"{type(exc).__name__}: {str(exc)[:200]}")
    return _Outcome(True, lost)


def run(ctx: BenchContext) -> list[Figure]:
    """Measure the soak figures."""
    with EmulatorProcess(
        ctx.emulator_root, fault_rate=FAULT_RATE, fault_mode="mixed", fault_seed=FAULT_SEED
    ) as emulator:
        url = emulator.base_url
        token = new_token()
        with _tally() as tally, ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
            outcomes = list(pool.map(lambda i: _lifecycle(i, url, token), range(LIFECYCLES)))
        injected = emulator.set_faults(rate=0.0).get("injected")
        leaked = listed_ids(url, token)

    completed = sum(o.completed for o in outcomes)
    lost = sum(o.lost for o in outcomes)
    errors = Counter(o.error.split(":")[0] for o in outcomes if o.error)
    first_errors = [o.error for o in outcomes if o.error][:5]
    common = {
        "lifecycles": LIFECYCLES,
        "concurrency": CONCURRENCY,
        "fault_rate": FAULT_RATE,
        "fault_mode": "mixed",
        "fault_seed": FAULT_SEED,
        "faults_injected": injected,
        **dict(tally.counts),
    }
    return [
        Figure(
            "soak_completed_fraction",
            completed / LIFECYCLES,
            "fraction",
            "==",
            1.0,
            {
                "completed": completed,
                "errors": dict(errors),
                "first_errors": first_errors,
                **common,
            },
        ),
        Figure(
            "soak_lost_files",
            lost,
            "files",
            "==",
            0,
            {"files_seeded": 20 * completed, "over_completed_lifecycles": completed},
        ),
        Figure("soak_leaked_sandboxes", len(leaked), "sandboxes", "==", 0, {"leaked": leaked}),
    ]
