"""Many tasks over a few sandboxes: :class:`SandboxPool` and :class:`AsyncSandboxPool`, and the
seam any other pool backend is written against (:class:`PoolBackend`, :class:`AsyncPoolBackend`).

A benchmark runs hundreds of tasks, each on a clean sandbox. Acquiring one per task costs a VM
start each time; a pool acquires at most ``size`` sandboxes and resets one between two tasks::

    with SandboxPool(["filesystem", "git"], size=8) as pool:
        results = pool.map(run_task, tasks)          # run_task(sandbox, task) -> anything
    results.to_pandas()                              # one row per task, in order

How a pool behaves (lazy bounded acquire, a clean sandbox per task, health checks, failures,
timeouts, release) is in :class:`SandboxPool`'s docstring, where an editor shows it.

Where it is written, the rules on one side of the seam, the backends on the other:

* the seam: what a backend provides, in :mod:`~workflows._pool._backend`;
* the rules: the task flow (a reset after each task, retirements, retries) in
  :mod:`~workflows._pool._retry_rules`; whose fault a failure is in
  :mod:`~workflows._pool._failures`; the results in :mod:`~workflows._pool._results`; the
  pools' keywords and their defaults in :mod:`~workflows._pool._options`; the engines that run
  the rules over any backend, :class:`BackendPool` (threads) in :mod:`~workflows._pool._sync`
  and :class:`AsyncBackendPool` (asyncio) in :mod:`~workflows._pool._async`, what they share
  in :mod:`~workflows._pool._base`;
* the backends: the local ones of :class:`SandboxPool` and :class:`AsyncSandboxPool` in
  :mod:`~workflows._pool._local`; Ray's in :mod:`workflows.ray._pool`.

Progress: a ``tqdm.auto`` bar (tasks done, failures, sandboxes live); logging through the
``workflows`` logger.
"""

from ._async import AsyncBackendPool
from ._backend import (
    AcquireAbandoned,
    AsyncPoolBackend,
    Attempt,
    AttemptOutcome,
    PoolBackend,
    PooledSandbox,
)
from ._failures import FailureKind, RetryOn, failure_kind
from ._local import AsyncSandboxPool, SandboxPool
from ._options import PoolOptions, RunOptions, SandboxPoolOptions
from ._results import PoolResults, TaskResult
from ._sync import BackendPool

__all__ = [
    "AcquireAbandoned",
    "AsyncBackendPool",
    "AsyncPoolBackend",
    "AsyncSandboxPool",
    "Attempt",
    "AttemptOutcome",
    "BackendPool",
    "FailureKind",
    "PoolBackend",
    "PoolOptions",
    "PoolResults",
    "PooledSandbox",
    "RetryOn",
    "RunOptions",
    "SandboxPool",
    "SandboxPoolOptions",
    "TaskResult",
    "failure_kind",
]
