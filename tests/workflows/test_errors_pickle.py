"""Every error of the library crosses a process (a Ray or process-pool worker raising it, a
pickled result) with its class, message and attributes, so its failure kind survives: errors
with keyword-only arguments used to fail to unpickle (``Exception`` pickles as ``cls(*args)``)."""

from __future__ import annotations

import inspect
import pickle

import pytest

import workflows
from workflows import (
    ApiConnectionError,
    ApiError,
    FileTooLargeError,
    InvalidSeedPathError,
    KlavisError,
    LeaseExpiredError,
    LocalWriteError,
    McpError,
    MissingExtraError,
    RateLimitError,
    RequestValidationError,
    SeedTemplateError,
    ServerError,
    ToolResult,
    TransferError,
    TransferTimeoutError,
    UnsafeArchiveError,
    failure_kind,
)

SAMPLES: list[KlavisError] = [
    ApiConnectionError("refused", method="POST", path="/local-sandbox"),
    InvalidSeedPathError("bad key", path="../x"),
    SeedTemplateError("damaged", digest="ab12"),
    UnsafeArchiveError("link out", member="a/b"),
    MissingExtraError("the Ray pool", extra="ray"),
    TransferError("cut", status_code=502),
    ServerError("upstream down", status_code=503, sandbox_id="sb-1", method="GET", path="/x"),
    RateLimitError("slow down", status_code=429, retry_after=2.5),
    RequestValidationError("bad", status_code=422, errors=[("body.ttl", "too large")]),
    FileTooLargeError("big.bin", size=10, limit=5),
    TransferTimeoutError("stalled", timeout=3.0),
    LeaseExpiredError("lease ended", lease_id="l-1", sandbox_id="sb-2", reason="expired"),
    McpError(
        "tool failed",
        code=-32000,
        tool="grep",
        result=ToolResult("grep", "no such file", is_error=True),
    ),
    LocalWriteError("cannot write", path="/tmp/x", cause=PermissionError(13, "denied")),
]


@pytest.mark.parametrize("error", SAMPLES, ids=lambda e: type(e).__name__)
def test_an_error_comes_back_from_a_pickle_whole(error: KlavisError) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert str(again) == str(error)
    assert again.args == error.args
    assert vars(again) == vars(error)
    assert failure_kind(again) == failure_kind(error)


def test_a_server_error_stays_an_infrastructure_failure_across_a_pickle() -> None:
    again = pickle.loads(pickle.dumps(ServerError("x", status_code=503)))
    assert (again.status_code, failure_kind(again)) == (503, "infrastructure")


def test_an_os_error_keeps_its_errno_across_a_pickle() -> None:
    error = LocalWriteError("cannot write", path="/tmp/x", cause=PermissionError(13, "denied"))
    again = pickle.loads(pickle.dumps(error))
    assert (again.errno, again.strerror, again.filename) == (13, "denied", "/tmp/x")


def test_every_error_with_keyword_only_arguments_has_a_sample() -> None:
    """A new error class taking keyword-only arguments is added to SAMPLES (or its parent's
    sample covers its ``__init__``)."""
    sampled = {type(error).__init__ for error in SAMPLES} | {ApiError.__init__}
    for name in workflows.__all__:
        cls = getattr(workflows, name)
        if not (inspect.isclass(cls) and issubclass(cls, KlavisError)):
            continue
        params = inspect.signature(cls.__init__).parameters.values()
        if any(p.kind is p.KEYWORD_ONLY for p in params):
            assert cls.__init__ in sampled, f"{name}: add a sample to SAMPLES"
