"""Many tasks over a few sandboxes: :class:`SandboxPool` and :class:`AsyncSandboxPool`.

A benchmark runs hundreds of tasks, each on a clean sandbox. Acquiring one per task costs a VM
start each time; a pool acquires at most ``size`` sandboxes and resets one between two tasks::

    with SandboxPool(["filesystem", "git"], size=8) as pool:
        results = pool.map(run_task, tasks)          # run_task(sandbox, task) -> anything
    results.to_pandas()                              # one row per task, in order

How it behaves, and why:

* **Lazy, bounded acquire.** A sandbox is acquired when a worker first needs one and none is
  idle, never more than ``size`` at a time (held, idle, or being acquired): a run of 3 tasks
  on a pool of 8 acquires 3. The first ``size`` tasks each acquire concurrently, so the run
  starts after about one acquire's time, as an eager start would, without paying for sandboxes
  a short run never uses. Sandboxes stay acquired between two runs of the same pool.
* **A clean sandbox per task.** A task gets a sandbox no other task holds. When it ends, however
  it ends, the pool calls ``reset()``: the service empties the workspace, restarts the MCP
  servers and loads a benchmark sandbox's data again, so the next task starts as from a fresh
  acquire. A sandbox whose reset fails is released (best effort) and replaced by a new acquire.
* **Health check.** A successful reset proves a sandbox alive, so during a run nothing else is
  checked. A sandbox that sat idle longer than ``health_check_after`` seconds (between two runs,
  its TTL may have run out) is checked before its next task with one cheap request, a GET of
  its details (``refresh()``): healthy when it answers and its status is ``occupied``.
  Otherwise it is replaced. No MCP call: servers restart on reset anyway.
* **Failures stay with their task.** A task that raises is recorded (``ok=False``, the error's
  type and message) and the batch goes on. ``retries=n`` runs a failed task up to ``n`` more
  times, each on a clean sandbox; its result is the last attempt's, with ``attempts``. An
  acquire that fails (after the library's own retries of transient errors) fails the attempt
  that needed the sandbox, with that error.
* **Timeouts.** ``timeout=`` bounds each attempt. The async pool cancels the coroutine. The
  sync pool runs each attempt in a thread of its own when a timeout is given, and a Python
  thread cannot be killed: a timed-out attempt is *abandoned*. Its sandbox is released at once
  (so the thread's later calls fail instead of touching a sandbox another task got) and
  replaced; whatever the thread returns later is ignored; the thread runs until the function
  returns (it is a daemon thread: it never keeps the interpreter from exiting). Either way
  the result says ``timed_out`` with a :class:`~workflows.TaskTimeoutError`.
* **Release.** Every sandbox is acquired with ``LocalSandbox.acquire`` (or its async twin), so
  it is in the ledger and in the process's registry of owned sandboxes, which releases it at
  interpreter exit and on SIGTERM. Leaving the ``with`` block (or ``close()``) releases them
  all, ``size`` at a time with :func:`~workflows.bulk_release`; on an error or Ctrl-C inside
  the block, the workers are told to stop and every sandbox is released at once, even one a
  task is still using (that task's result is dropped).

Where it is written: the retry and reset rules, once for both pools, in
:mod:`~workflows._pool._retry_rules` (a flow, run by the library's drivers); the sync pool in
:mod:`~workflows._pool._sync`, the async one in :mod:`~workflows._pool._async`, what they share
in :mod:`~workflows._pool._base`; the results in :mod:`~workflows._pool._results`.
Progress: a ``tqdm.auto`` bar (tasks done, failures, sandboxes live); logging through the
``workflows`` logger.
"""

from ._async import AsyncSandboxPool
from ._results import PoolResults, TaskResult
from ._sync import SandboxPool

__all__ = ["AsyncSandboxPool", "PoolResults", "SandboxPool", "TaskResult"]
