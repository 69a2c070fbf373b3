"""Acquire's reconciliation, driven step by step through its sans-I/O flow (no HTTP at all)."""

from __future__ import annotations

from collections.abc import Generator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import httpx
import pytest
from klavis_sandbox_client.models import AcquireLocalSandboxResponse, ListLocalSandboxesResponse
from klavis_sandbox_client.types import Response

import workflows
from workflows import (
    AcquireAmbiguousError,
    ApiTimeoutError,
    BadRequestError,
    ServerError,
    _ownership,
)
from workflows._config import ApiKey, Settings
from workflows._flows import Call, acquire_attempt
from workflows._models import check_acquire
from workflows._ownership import AcquireDidNotHappen, is_ambiguous


def _sandbox(sid: str, *names: str) -> dict[str, Any]:
    return {
        "local_sandbox_id": sid,
        "created_at": "2026-01-01T00:00:00Z",
        "status": "occupied",
        "servers": [{"id": f"{sid}-{n}", "server_name": n} for n in names],
    }


def _listing(*sandboxes: dict[str, Any]) -> Response[Any]:
    body = {"local_sandboxes": list(sandboxes), "total_count": len(sandboxes)}
    return Response(HTTPStatus.OK, b"", {}, ListLocalSandboxesResponse.from_dict(body))


def _acquired(sid: str, *names: str) -> Response[Any]:
    body = _sandbox(sid, *names)
    body.pop("created_at")
    return Response(HTTPStatus.CREATED, b"", {}, AcquireLocalSandboxResponse.from_dict(body))


def _drive(flow: Generator[Any, Any, Any], answers: list[Any]) -> Any:
    """Feed scripted answers (a response, or an exception to throw) to a flow."""
    step = next(flow)
    seen = [step]
    for answer in answers:
        try:
            step = flow.throw(answer) if isinstance(answer, Exception) else flow.send(answer)
        except StopIteration as stop:
            return stop.value, seen
        seen.append(step)
    raise AssertionError(f"flow wants more steps: {seen[-1]}")


def _settings(base_url: str) -> Settings:
    return Settings(api_key=ApiKey("test-key"), base_url=base_url)


def _timeout() -> ApiTimeoutError:
    return ApiTimeoutError("timed out", method="POST", path="/local-sandbox")


def test_ambiguous_failure_adopts_the_new_sandbox() -> None:
    request = check_acquire(["git"])
    flow = acquire_attempt(request, _settings("http://adopt.test"))
    (info, _), steps = _drive(
        flow,
        [
            _listing(_sandbox("old", "git")),
            _timeout(),
            _listing(_sandbox("old", "git"), _sandbox("new", "git"), _sandbox("x", "filesystem")),
        ],
    )
    assert info.id == "new"
    assert [s.name for s in steps if isinstance(s, Call)] == [
        "list_local_sandboxes",
        "acquire_local_sandbox",
        "list_local_sandboxes",
    ]
    assert steps[1].retry is False


def test_ambiguous_failure_with_nothing_new_is_safe_to_retry() -> None:
    flow = acquire_attempt(check_acquire(["git"]), _settings("http://retry.test"))
    with pytest.raises(AcquireDidNotHappen) as caught:
        _drive(flow, [_listing(), ServerError("boom", status_code=502), _listing()])
    assert isinstance(caught.value.cause, ServerError)


def test_two_acquires_never_share_one_sandbox() -> None:
    base = "http://share.test"
    first = acquire_attempt(check_acquire(["git"]), _settings(base))
    (adopted, _), _ = _drive(first, [_listing(), _timeout(), _listing(_sandbox("s1", "git"))])
    assert adopted.id == "s1"
    # a concurrent acquire whose answer names s1 must not take it: it reconciles instead
    second = acquire_attempt(check_acquire(["git"]), _settings(base))
    (got, _), _ = _drive(
        second,
        [
            _listing(),
            _acquired("s1", "git"),
            _listing(_sandbox("s1", "git"), _sandbox("s2", "git")),
        ],
    )
    assert got.id == "s2"


def test_reconcile_listing_failure_is_reported_as_ambiguous() -> None:
    flow = acquire_attempt(check_acquire(["git"]), _settings("http://amb.test"))
    # without a ledger, reap cannot find it: the advice is to look at the listing
    with pytest.raises(AcquireAmbiguousError, match="klavis-sandbox list"):
        _drive(flow, [_listing(), _timeout(), ServerError("down", status_code=503)])


def test_an_ambiguous_end_leaves_an_open_attempt_for_reap(tmp_path: Path) -> None:
    from workflows import Ledger
    from workflows._flows import Blocking

    base = "http://open.test"
    book = Ledger(tmp_path / "ledger.jsonl")
    flow = acquire_attempt(check_acquire(["git", "terminal"]), _settings(base), book)
    next(flow)
    step = flow.send(_listing(_sandbox("old", "git")))
    assert isinstance(step, Blocking)
    step = flow.send(step.fn(*step.args, **step.kwargs))  # recorded before the POST
    assert isinstance(step, Call)
    assert step.name == "acquire_local_sandbox"
    (attempt,) = book.open_attempts(base_url=base)
    assert attempt.servers == ("git", "terminal")
    assert attempt.known == {"old"}
    assert not attempt.ended
    flow.throw(_timeout())
    step = flow.throw(ServerError("down", status_code=503))
    assert isinstance(step, Blocking)  # says the acquire ended, before raising
    with pytest.raises(AcquireAmbiguousError, match="klavis-sandbox reap"):
        flow.send(step.fn(*step.args, **step.kwargs))
    (still_open,) = book.open_attempts(base_url=base)
    assert still_open.attempt == attempt.attempt
    assert still_open.ended  # reap elsewhere need not wait for this process to exit
    assert not _ownership.in_flight(attempt.attempt)


def _at_the_acquire_request(book: Any, base: str) -> Generator[Any, Any, Any]:
    """A ledgered acquire flow, driven up to its POST."""
    from workflows._flows import Blocking

    flow = acquire_attempt(check_acquire(["git"]), _settings(base), book)
    next(flow)
    step = flow.send(_listing())
    assert isinstance(step, Blocking)
    step = flow.send(step.fn(*step.args, **step.kwargs))
    assert isinstance(step, Call)
    assert step.name == "acquire_local_sandbox"
    return flow


def test_an_acquire_closed_mid_request_ends_its_attempt(tmp_path: Path) -> None:
    # Ctrl-C in a notebook, a cancelled task: the driver closes the flow at its step
    from workflows import Ledger

    base = "http://closed.test"
    book = Ledger(tmp_path / "ledger.jsonl")
    flow = _at_the_acquire_request(book, base)
    (attempt,) = book.open_attempts(base_url=base)
    assert _ownership.in_flight(attempt.attempt)
    flow.close()
    assert [(a.attempt, a.ended) for a in book.open_attempts(base_url=base)] == [
        (attempt.attempt, True)
    ]
    assert not _ownership.in_flight(attempt.attempt)


def test_an_answered_acquire_stays_in_flight_until_its_sandbox_is_recorded(
    tmp_path: Path,
) -> None:
    # between the answer and own(), a reap in this process must not take the sandbox
    from workflows import Ledger

    base = "http://answered.test"
    book = Ledger(tmp_path / "ledger.jsonl")
    flow = _at_the_acquire_request(book, base)
    with pytest.raises(StopIteration) as done:
        flow.send(_acquired("new", "git"))
    info, attempt = done.value.value
    assert _ownership.in_flight(attempt)
    assert [a.ended for a in book.open_attempts(base_url=base)] == [False]
    _ownership.own(info.id, _settings(base), book, attempt=attempt)
    assert not _ownership.in_flight(attempt)
    assert book.open_attempts(base_url=base) == []


def test_client_errors_are_final() -> None:
    flow = acquire_attempt(check_acquire(["git"]), _settings("http://final.test"))
    with pytest.raises(BadRequestError):
        _drive(flow, [_listing(), BadRequestError("no", status_code=400)])


def test_refused_connections_are_not_ambiguous() -> None:
    from workflows._transport import connection_error

    request = httpx.Request("POST", "http://x/local-sandbox")
    try:
        raise connection_error(httpx.ConnectError("refused"), request)
    except workflows.ApiConnectionError as exc:  # chained like the real call site
        refused = exc
    refused.__cause__ = httpx.ConnectError("refused")
    assert not is_ambiguous(refused)
    assert is_ambiguous(_timeout())


def test_a_refused_signed_url_is_requested_again() -> None:
    from klavis_sandbox_client.models import InitializeSandboxResponse, UploadUrlResponse

    from workflows import TransferError
    from workflows._flows import Blocking, Upload, seed_flow
    from workflows._seed import plan_mapping

    def url_response(n: int) -> Response[Any]:
        body = UploadUrlResponse(upload_url=f"http://storage.test/o?sig={n}", expires_in_minutes=30)
        return Response(HTTPStatus.OK, b"", {}, body)

    flow = seed_flow("sb-1", plan_mapping({"a.txt": "A"}), False)
    step = next(flow)
    assert isinstance(step, Blocking)
    step = flow.send(step.fn(*step.args, **step.kwargs))  # pack for real
    assert isinstance(step, Call)
    assert step.name == "get_upload_url"
    step = flow.send(url_response(1))
    assert isinstance(step, Upload)
    assert step.url.endswith("sig=1")
    step = flow.throw(TransferError("expired", status_code=403))
    assert isinstance(step, Call)
    assert step.name == "get_upload_url"  # a fresh URL, not a blind retry of the stale one
    step = flow.send(url_response(2))
    assert isinstance(step, Upload)
    assert step.url.endswith("sig=2")
    step = flow.send(None)
    assert isinstance(step, Call)
    assert step.name == "initialize_workspace"
    done = InitializeSandboxResponse.from_dict(
        {"sandbox_id": "sb-1", "status": "occupied", "message": "ok"}
    )
    with pytest.raises(StopIteration):
        flow.send(Response(HTTPStatus.OK, b"", {}, done))


def test_a_second_refusal_is_final() -> None:
    from klavis_sandbox_client.models import UploadUrlResponse

    from workflows import TransferError
    from workflows._flows import Blocking, seed_flow
    from workflows._seed import plan_mapping

    body = UploadUrlResponse(upload_url="http://storage.test/o?sig=x", expires_in_minutes=30)
    flow = seed_flow("sb-1", plan_mapping({"a.txt": "A"}), False)
    step = next(flow)
    assert isinstance(step, Blocking)
    flow.send(step.fn(*step.args, **step.kwargs))
    flow.send(Response(HTTPStatus.OK, b"", {}, body))
    flow.throw(TransferError("expired", status_code=403))
    flow.send(Response(HTTPStatus.OK, b"", {}, body))
    with pytest.raises(TransferError):
        flow.throw(TransferError("expired again", status_code=403))


def test_sandboxes_other_processes_hold_are_never_adopted(tmp_path: Path) -> None:
    from workflows import Ledger
    from workflows._flows import Blocking

    base = "http://ledger.test"
    book = Ledger(tmp_path / "ledger.jsonl")
    book.record("acquired", "theirs", base_url=base, key="k")  # another process's fresh sandbox
    flow = acquire_attempt(check_acquire(["git"]), _settings(base), book)
    step = next(flow)
    step = flow.send(_listing())
    assert isinstance(step, Blocking)  # records the attempt before sending
    step = flow.send(step.fn(*step.args, **step.kwargs))
    step = flow.throw(_timeout())
    step = flow.send(_listing(_sandbox("theirs", "git")))
    assert isinstance(step, Blocking)  # reads the ledger
    step = flow.send(step.fn(*step.args, **step.kwargs))
    assert isinstance(step, Blocking)  # nothing was created: the attempt is settled
    assert len(book.open_attempts(base_url=base)) == 1
    with pytest.raises(AcquireDidNotHappen):
        flow.send(step.fn(*step.args, **step.kwargs))
    assert book.open_attempts(base_url=base) == []


# ---------------------------------------------------------------- orphans of open attempts


def _attempt(name: str, time: str, *servers: str, known: frozenset[str] = frozenset()) -> Any:
    from workflows._ownership import AcquireAttempt

    return AcquireAttempt(name, "u", "k", servers, None, known, 1, time)


def _info(sid: str, created: str | None, *names: str) -> Any:
    from workflows._models import SandboxInfo, ServerInfo

    servers = tuple(ServerInfo(n, f"{sid}-{n}") for n in names)
    return SandboxInfo(sid, "occupied", created_at=created, servers=servers)


def test_an_orphan_is_created_after_its_attempt_give_or_take_the_clocks() -> None:
    from workflows._ownership import orphans

    attempt = _attempt("a", "2026-01-01T00:10:00+00:00", "git")
    listed = [
        _info("long-before", "2026-01-01T00:05:00+00:00", "git"),  # 5 min before: not it
        _info("much-later", "2026-01-01T00:20:00+00:00", "git"),  # 10 min after: not it
        _info("no-time", None, "git"),  # cannot tell: never taken
        _info("other-servers", "2026-01-01T00:10:01+00:00", "git", "terminal"),
        _info("skewed", "2026-01-01T00:09:00+00:00", "git"),  # 1 min early: clocks differ
    ]
    assert [(a.attempt, s.id if s else None) for a, s in orphans([attempt], listed, set())] == [
        ("a", "skewed")
    ]
    assert orphans([attempt], listed[:4], set()) == [(attempt, None)]


def test_a_running_acquire_keeps_the_sandbox_it_may_be_about_to_record() -> None:
    from workflows._ownership import orphans

    dead = _attempt("dead", "2026-01-01T00:00:00+00:00", "git")
    running = _attempt("running", "2026-01-01T00:02:00+00:00", "git")
    listed = [_info("new", "2026-01-01T00:02:30+00:00", "git")]
    assert orphans([dead], listed, set()) == [(dead, listed[0])]  # alone, it would be taken
    assert orphans([dead], listed, set(), reserve=[running]) == [(dead, None)]
    assert orphans([dead], listed, {"new"}) == [(dead, None)]  # recorded by someone: never
