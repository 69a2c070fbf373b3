"""Whose fault a failed task is: :func:`failure_kind`, the one place that decides.

A pool's failed :class:`~workflows.TaskResult` says ``failure="task"`` when the task's own code
failed (its result: an agent that got it wrong), ``"infrastructure"`` when the sandbox or the
service failed it (the agent did nothing wrong: running it again may pass). By default a pool
retries only the second kind (``retry_on="infrastructure"``). The same rule is public as
:func:`workflows.failure_kind`, for frameworks that run episodes outside the pools (a verl
tool, a SkyRL environment leasing from :mod:`workflows.ray`'s broker) and mask
infrastructure failures out of the loss.

Ray's own deaths are infrastructure too, recognised by their class names (``ray`` is never
imported here: ``import workflows`` stays free of it): :data:`RAY_INFRASTRUCTURE` lists them
(an actor or worker that died, a node lost, an object whose owner died, Ray's system errors);
a ``RayTaskError`` (a remote function's exception, wrapped by Ray) is judged by its ``cause``.

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
    BrokerUnavailableError,
    LeaseExpiredError,
    McpError,
    NotFoundError,
    RateLimitError,
    ServerError,
    TaskTimeoutError,
    TransferError,
    WorkerDiedError,
)

__all__ = [
    "INFRASTRUCTURE",
    "RAY_INFRASTRUCTURE",
    "FailureKind",
    "RetryOn",
    "failure_kind",
    "should_retry",
]

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
    LeaseExpiredError,  # the Ray broker ended the lease under its holder (says why)
    BrokerUnavailableError,  # the Ray broker died and none came back in time
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


RAY_INFRASTRUCTURE = frozenset(
    {
        "RayActorError",  # ActorDiedError, ActorUnavailableError: an actor died or restarts
        "WorkerCrashedError",  # the worker process running a task died
        "NodeDiedError",  # its node was lost
        "LocalRayletDiedError",  # this node's raylet died
        "ObjectLostError",  # OwnerDiedError, ObjectReconstructionFailedError, ...
        "ObjectFetchTimedOutError",
        "ObjectStoreFullError",
        "OutOfDiskError",
        "OutOfMemoryError",  # Ray's memory monitor killed the worker
        "RaySystemError",
        "RuntimeEnvSetupError",
        "TaskCancelledError",  # cancelled by someone else (a pool's timeout, a shutdown)
        "TaskPlacementGroupRemoved",
        "ActorPlacementGroupRemoved",
        "PendingCallsLimitExceeded",
        "ActorUnschedulableError",
        "TaskUnschedulableError",
        "RpcError",
    }
)
"""The names of Ray's exception classes (``ray.exceptions``, matched along the class's MRO)
that are infrastructure failures: the task did nothing wrong, its process or node did."""


def _ray_kind(exc: BaseException, sandbox_id: str | None) -> FailureKind | None:
    """The kind of one of Ray's own exceptions; None for anything that is not Ray's."""
    for cls in type(exc).__mro__:
        if cls.__module__.partition(".")[0] != "ray":
            continue
        if cls.__name__ == "RayTaskError":  # a remote function's own exception, wrapped
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException) and cause is not exc:
                return failure_kind(cause, sandbox_id=sandbox_id)
            return "task"
        if cls.__name__ in RAY_INFRASTRUCTURE:
            return "infrastructure"
    return None


def failure_kind(exc: BaseException, *, sandbox_id: str | None = None) -> FailureKind:
    """Whose fault ``exc`` is: ``"task"`` (the episode's own result: its code raised, an agent
    got it wrong) or ``"infrastructure"`` (the sandbox, the service, the broker or Ray failed
    it: the agent did nothing wrong, and running it again may pass). The rule the pools use
    for :attr:`TaskResult.failure <workflows.TaskResult>`, public for frameworks that run
    episodes themselves (a verl tool, a SkyRL environment on :mod:`workflows.ray`'s broker)
    and mask infrastructure failures out of the loss. ``sandbox_id``: the sandbox the episode
    was lent (a :class:`~workflows.NotFoundError` about it is infrastructure: it disappeared
    under the episode). See :data:`INFRASTRUCTURE` and :data:`RAY_INFRASTRUCTURE`.

    >>> from workflows import ServerError, McpError, failure_kind
    >>> failure_kind(ValueError("wrong answer")), failure_kind(ServerError("x", status_code=503))
    ('task', 'infrastructure')
    >>> failure_kind(McpError("session ended", connection_lost=True))
    'infrastructure'
    """
    ray_kind = _ray_kind(exc, sandbox_id)
    if ray_kind is not None:
        return ray_kind
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
