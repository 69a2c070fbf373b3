"""``workflows.failure_kind``, public: Ray's own deaths and the broker's errors are
infrastructure, a remote function's own exception (wrapped by Ray) is judged by its cause, and
``import workflows`` still needs no Ray for it (issue 31 point 7)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import ray.exceptions

import workflows
from workflows import BrokerUnavailableError, LeaseExpiredError, ServerError, failure_kind


def _wrapped(cause: BaseException) -> BaseException:
    """What ``ray.get`` raises for a remote function that raised ``cause``."""
    try:
        raise cause
    except BaseException as exc:
        wrapped: Any = ray.exceptions.RayTaskError("fn", "traceback", exc)  # type: ignore[no-untyped-call]
        return wrapped.as_instanceof_cause()  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "exc",
    [
        ray.exceptions.ActorDiedError(),
        ray.exceptions.ActorUnavailableError("restarting", None),
        ray.exceptions.WorkerCrashedError(),
        ray.exceptions.NodeDiedError("lost"),  # type: ignore[no-untyped-call]
        ray.exceptions.OwnerDiedError("00" * 28, "", ""),  # type: ignore[arg-type]
        ray.exceptions.ObjectLostError("00" * 28, "", ""),  # type: ignore[arg-type]
        ray.exceptions.LocalRayletDiedError(),
        ray.exceptions.RaySystemError("gcs"),  # type: ignore[no-untyped-call]
        ray.exceptions.OutOfMemoryError("killed"),  # type: ignore[no-untyped-call]
        LeaseExpiredError("ended", lease_id="lease-1", reason="no heartbeat"),
        BrokerUnavailableError("gone"),
        _wrapped(ServerError("x", status_code=503)),
        _wrapped(ray.exceptions.ActorDiedError()),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_ray_deaths_and_the_broker_s_errors_are_infrastructure(exc: BaseException) -> None:
    assert workflows.failure_kind(exc) == "infrastructure"


@pytest.mark.parametrize(
    "exc",
    [ValueError("wrong answer"), _wrapped(ValueError("wrong")), _wrapped(KeyError("k"))],
    ids=lambda exc: type(exc).__name__,
)
def test_a_task_s_own_exception_is_the_task_s_even_wrapped_by_ray(exc: BaseException) -> None:
    assert failure_kind(exc) == "task"


def test_failure_kind_needs_no_ray() -> None:
    program = (
        "import sys\n"
        "sys.modules['ray'] = None\n"
        "from workflows import failure_kind, LeaseExpiredError\n"
        "print(failure_kind(LeaseExpiredError('x', lease_id='l')), 'ray' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["infrastructure", "True"]  # the None placed above, not Ray
