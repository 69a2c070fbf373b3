"""A fourth pool backend, written only against the public seam (``workflows.PoolBackend``):
each attempt runs in a worker process of a ``concurrent.futures.ProcessPoolExecutor``.

The sandboxes are acquired and reset in the pool's process; an attempt crosses to a worker
process as the sandbox's handle (no key: the worker reads ``KLAVIS_API_KEY`` from the
environment it inherited, so the key is never pickled), where ``fn`` gets a ``LocalSandbox``
made from it. The workers are spawned, not forked (a fork of a process running threads may
copy a held lock). Past its timeout an attempt is abandoned: its process runs on until the
function returns (a worker of a ``ProcessPoolExecutor`` cannot be killed alone), and the pool
retires its sandbox, so the abandoned function's later calls fail.

    with BackendPool(ProcessPoolBackend(["filesystem"], api_key=key), size=2) as pool:
        results = pool.map(run_task, tasks)   # run_task: a module-level function (it pickles)
"""

from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
import sys
import threading
from collections.abc import Callable
from typing import Any

from workflows import (
    AcquireAbandoned,
    AcquireOptions,
    Attempt,
    AttemptOutcome,
    LocalSandbox,
    ReleaseResult,
    SandboxHandle,
    ServerNames,
    TaskTimeoutError,
    WorkerDiedError,
    bulk_release,
)

if sys.version_info >= (3, 11):
    from typing import Unpack
else:
    from typing_extensions import Unpack

__all__ = ["ProcessPoolBackend"]

log = logging.getLogger(__name__)


def run_in_worker(fn: Callable[[LocalSandbox, Any], Any], handle: SandboxHandle, task: Any) -> Any:
    """What a worker process runs: ``fn`` on the sandbox of ``handle``."""
    return fn(LocalSandbox.from_handle(handle, progress=False), task)


class ProcessPoolBackend:
    """A :class:`workflows.PoolBackend` whose attempts run in ``workers`` spawned processes;
    ``options`` are :meth:`LocalSandbox.acquire`'s."""

    def __init__(
        self, server_names: ServerNames, *, workers: int = 2, **options: Unpack[AcquireOptions]
    ) -> None:
        self.server_names = server_names
        self.options: AcquireOptions = {**options, "progress": False}
        context = multiprocessing.get_context("spawn")
        self.executor = concurrent.futures.ProcessPoolExecutor(workers, mp_context=context)
        self.lock = threading.Lock()
        self.acquires = 0  # how many sandboxes it acquired (for the tests)

    def acquire(self, give_up: Callable[[], bool]) -> LocalSandbox:
        if give_up():  # an idle sandbox came back (or the pool closed): no new acquire
            raise AcquireAbandoned
        sandbox = LocalSandbox.acquire(self.server_names, **self.options)
        with self.lock:
            self.acquires += 1
        return sandbox

    def attempt(self, sandbox: LocalSandbox, attempt: Attempt) -> AttemptOutcome:
        try:  # the function and the task are pickled here: one that does not pickle fails
            future = self.executor.submit(run_in_worker, attempt.fn, sandbox.handle(), attempt.task)
            return AttemptOutcome(future.result(timeout=attempt.timeout))
        except concurrent.futures.TimeoutError:
            future.cancel()
            error = TaskTimeoutError(f"task {attempt.index} ran past {attempt.timeout} s")
            return AttemptOutcome(error=error, timed_out=True)
        except concurrent.futures.BrokenExecutor as exc:  # a worker process died
            died = WorkerDiedError(f"the worker process of task {attempt.index} died: {exc}")
            return AttemptOutcome(error=died)
        except Exception as exc:  # the task's own exception, as it was raised
            return AttemptOutcome(error=exc)

    def reset(self, sandbox: LocalSandbox) -> None:
        sandbox.reset()

    def healthy(self, sandbox: LocalSandbox) -> bool:
        return sandbox.refresh().status == "occupied"

    def release(self, sandbox: LocalSandbox) -> None:
        try:
            sandbox.release()
        except Exception as exc:  # the ledger keeps it for `reap`
            log.warning("could not release sandbox %s: %s", sandbox.id, exc)

    def close(self, sandboxes: list[LocalSandbox]) -> list[ReleaseResult]:
        self.executor.shutdown(wait=False, cancel_futures=True)
        if not sandboxes:
            return []
        return bulk_release(sandboxes, concurrency=len(sandboxes), progress=False)
