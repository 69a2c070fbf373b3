"""Many tasks over a few sandboxes: :class:`SandboxPool` and :class:`AsyncSandboxPool`.

A benchmark runs hundreds of tasks, each on a clean sandbox. Acquiring one per task costs a VM
start each time; a pool acquires at most ``size`` sandboxes and resets one between two tasks::

    with SandboxPool(["filesystem", "git"], size=8) as pool:
        results = pool.map(run_task, tasks)          # run_task(sandbox, task) -> anything
    results.to_pandas()                              # one row per task, in order

How a pool behaves (lazy bounded acquire, a clean sandbox per task, health checks, failures,
timeouts, release) is in :class:`SandboxPool`'s docstring, where an editor shows it.

Where it is written: the retry and reset rules, once for both pools, in
:mod:`~workflows._pool._retry_rules` (a flow, run by the library's drivers); the sync pool in
:mod:`~workflows._pool._sync`, the async one in :mod:`~workflows._pool._async`, what they share
in :mod:`~workflows._pool._base`; the results in :mod:`~workflows._pool._results`; whose fault
a failure is (task or infrastructure) in :mod:`~workflows._pool._failures`.
Progress: a ``tqdm.auto`` bar (tasks done, failures, sandboxes live); logging through the
``workflows`` logger.
"""

from ._async import AsyncSandboxPool
from ._failures import FailureKind, RetryOn, failure_kind
from ._results import PoolResults, TaskResult
from ._sync import SandboxPool

__all__ = [
    "AsyncSandboxPool",
    "FailureKind",
    "PoolResults",
    "RetryOn",
    "SandboxPool",
    "TaskResult",
    "failure_kind",
]
