"""Whose fault a failed task is: :func:`failure_kind`, the one place that decides.

A pool's failed :class:`~workflows.TaskResult` says ``failure="task"`` when the task's own code
failed (its result: an agent that got it wrong), ``"infrastructure"`` when the sandbox or the
service failed it (the agent did nothing wrong: running it again may pass). By default a pool
retries only the second kind (``retry_on="infrastructure"``).

Where the failure happened decides first: a sandbox that could not be acquired, an attempt
that ran past its ``timeout``, or one whose process died (:class:`~workflows.WorkerDiedError`,
the Ray pool's), is infrastructure whatever the error. An exception raised out of
the task's function is the task's, unless it is one of the library's errors listed in
:data:`INFRASTRUCTURE` (raised by a sandbox call inside the function and let through), a
:class:`~workflows.NotFoundError` about the very sandbox the task was lent (it disappeared under
the task: its TTL ran out, or something released it), or an exception group made only of such
errors. Not followed: ``__cause__`` (an error the function
wrapped in its own is the function's choice; re-raise the library's error to keep its kind).
"""

from __future__ import annotations

from typing import Literal

from .._errors import (
    AcquireAmbiguousError,
    ApiConnectionError,
    McpError,
    NotFoundError,
    RateLimitError,
    ServerError,
    TaskTimeoutError,
    TransferError,
    WorkerDiedError,
)

__all__ = ["INFRASTRUCTURE", "FailureKind", "RetryOn", "failure_kind", "should_retry"]

FailureKind = Literal["task", "infrastructure"]
"""Why a pool's task failed: ``"task"`` (its function raised) or ``"infrastructure"`` (the
sandbox or the service failed it: acquire, an API or MCP connection, a transfer, a timeout)."""

RetryOn = Literal["infrastructure", "any"]
"""Which failures a pool's ``retries`` apply to: infrastructure ones (the default) or any."""

INFRASTRUCTURE: tuple[type[BaseException], ...] = (
    ApiConnectionError,  # the API could not be reached, or did not answer in time
    ServerError,  # 5xx, after the library's own retries of safe requests
    RateLimitError,  # 429, after the library's own retries
    TransferError,  # a signed-URL upload or download failed (or timed out)
    AcquireAmbiguousError,  # an acquire the library could not reconcile
    TaskTimeoutError,  # the attempt ran past the run's timeout
    WorkerDiedError,  # the process running the task died (a Ray worker, its node)
)
"""The library's errors that are infrastructure failures when a task's function lets one
through. An :class:`~workflows.McpError` is one too when its ``connection_lost`` is true (the
session ended, or its request timed out); one from a tool that reported ``is_error`` or from a
server's JSON-RPC error answer is the task's. So is a :class:`~workflows.NotFoundError` when the
task's sandbox is gone (its API or its MCP servers answer 404). Everything else is the task's,
among them :class:`~workflows.InvalidInputError` (a bad call of the function's), the other 4xx
answers (:class:`~workflows.ConflictError`, a 404 about something else, ...: the request was
refused as made), :class:`~workflows.LocalWriteError` (this machine's disk), and any exception of
the function's own."""


def failure_kind(exc: BaseException, *, sandbox_id: str | None = None) -> FailureKind:
    """Whose fault ``exc``, raised out of a task's function that was lent the sandbox
    ``sandbox_id``, is (see :data:`INFRASTRUCTURE`).

    >>> from workflows import ServerError, McpError
    >>> failure_kind(ValueError("wrong answer")), failure_kind(ServerError("x", status_code=503))
    ('task', 'infrastructure')
    >>> failure_kind(McpError("session ended", connection_lost=True))
    'infrastructure'
    """
    if isinstance(exc, McpError):
        return "infrastructure" if exc.connection_lost else "task"
    if isinstance(exc, INFRASTRUCTURE):
        return "infrastructure"
    if isinstance(exc, NotFoundError) and sandbox_id is not None:
        return "infrastructure" if exc.sandbox_id == sandbox_id else "task"
    inner = getattr(exc, "exceptions", None)  # an exception group (Python 3.11+, or its backport)
    if isinstance(inner, tuple) and inner and all(isinstance(e, BaseException) for e in inner):
        kinds = {failure_kind(e, sandbox_id=sandbox_id) for e in inner}
        return "infrastructure" if kinds == {"infrastructure"} else "task"
    return "task"


def should_retry(kind: FailureKind, retry_on: RetryOn) -> bool:
    """Whether a failure of ``kind`` may be retried under ``retry_on``."""
    return retry_on == "any" or kind == "infrastructure"
