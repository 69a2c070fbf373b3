"""The flows and their drivers, step by step, without HTTP: closing, pauses, polling."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Iterator
from http import HTTPStatus
from typing import Any

import pytest
from klavis_sandbox_client.models import ExecutionLogsResponse, ExecutionStatusResponse
from klavis_sandbox_client.types import Response

from workflows import ArchiveLimits, ExecutionTimeoutError, TransferError
from workflows._config import ApiKey, Settings
from workflows._drivers import AsyncDriver, SyncDriver
from workflows._execution import LogFollower, artifacts_flow, start_flow, wait_flow
from workflows._flows import Blocking, Call, Download, Flow, Sleep, Upload, dump_flow
from workflows._seed import plan_mapping


@pytest.fixture
def settings() -> Settings:
    # nothing is sent: every step below is performed without the network
    return Settings(api_key=ApiKey("test-key"), base_url="http://flows.test")


def _interrupt() -> None:
    raise KeyboardInterrupt


def _guarded(
    events: list[str], step: Blocking | Sleep, on_start: Callable[[], None] = lambda: None
) -> Flow[str]:
    events.append("started")
    on_start()
    try:
        yield step
        return "finished"
    except Exception:  # what the flow would see of an ordinary failure
        events.append("saw an exception")
        raise
    finally:
        events.append("closed")


def test_sync_driver_closes_the_flow_when_a_step_is_interrupted(settings: Settings) -> None:
    events: list[str] = []
    driver = SyncDriver(settings)
    try:
        with pytest.raises(KeyboardInterrupt):
            driver.run(_guarded(events, Blocking(_interrupt)))
    finally:
        driver.close()
    # closed at once (not by the garbage collector), and not handed the interruption
    assert events == ["started", "closed"]


def test_sync_driver_closes_a_flow_abandoned_by_an_exception_it_raised(
    settings: Settings,
) -> None:
    events: list[str] = []

    def failing() -> None:
        raise OSError("disk full")

    driver = SyncDriver(settings)
    try:
        with pytest.raises(OSError, match="disk full"):
            driver.run(_guarded(events, Blocking(failing)))
    finally:
        driver.close()
    assert events == ["started", "saw an exception", "closed"]


def test_async_driver_closes_the_flow_when_cancelled(settings: Settings) -> None:
    events: list[str] = []

    async def main() -> None:
        driver = AsyncDriver(settings)
        try:
            reached = asyncio.Event()
            task = asyncio.create_task(driver.run(_guarded(events, Sleep(3600), reached.set)))
            await reached.wait()  # the flow is at its Sleep step
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await driver.aclose()

    asyncio.run(main())
    assert events == ["started", "closed"]


def test_a_cancelled_async_flow_is_closed_only_after_its_thread_ends(settings: Settings) -> None:
    # A worker thread cannot be stopped: closing the flow while it still runs would remove
    # the temporary file (or staging folder) it is reading or writing.
    events: list[str] = []
    go_on = threading.Event()

    def slow(started: Callable[[], None]) -> None:
        started()
        go_on.wait(timeout=60)
        events.append("thread ended")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        reached = asyncio.Event()
        driver = AsyncDriver(settings)
        try:
            started = functools.partial(loop.call_soon_threadsafe, reached.set)
            task = asyncio.create_task(driver.run(_guarded(events, Blocking(slow, (started,)))))
            await reached.wait()  # the thread runs
            task.cancel()
            await asyncio.sleep(0)  # the cancellation reaches the driver, which waits
            go_on.set()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await driver.aclose()

    asyncio.run(main())
    assert events == ["started", "thread ended", "closed"]


def _status(status: str) -> Response[Any]:
    body = ExecutionStatusResponse.from_dict(
        {"execution_name": "e", "sandbox_id": "sb", "status": status}
    )
    return Response(HTTPStatus.OK, b"", {}, body)


def _logs(status: str, text: str, cursor: int) -> Response[Any]:
    body = ExecutionLogsResponse.from_dict(
        {"execution_name": "e", "status": status, "logs": text, "cursor": cursor}
    )
    return Response(HTTPStatus.OK, b"", {}, body)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _steps(flow: Flow[Any], answer: Iterator[Any], clock: _Clock) -> tuple[list[Any], Any]:
    """Run a flow, answering each Call from ``answer`` and moving ``clock`` on each Sleep."""
    seen: list[Any] = []
    value: Any = None
    while True:
        try:
            step = flow.send(value)
        except StopIteration as stop:
            return seen, stop.value
        seen.append(step)
        if isinstance(step, Sleep):
            clock.now += step.seconds
            value = None
        else:
            value = next(answer)


def test_wait_polls_with_growing_pauses_until_the_end() -> None:
    clock = _Clock()
    answers = iter([_status("pending"), _status("running"), _status("completed")])
    seen, result = _steps(wait_flow("sb", "e", None, clock=clock), answers, clock)
    assert result == "completed"
    assert [type(s).__name__ for s in seen] == ["Call", "Sleep", "Call", "Sleep", "Call"]
    calls = [s for s in seen if isinstance(s, Call)]
    assert {c.name for c in calls} == {"get_execution_status"}
    pauses = [s.seconds for s in seen if isinstance(s, Sleep)]
    assert pauses[0] < pauses[1]


def test_wait_never_sleeps_past_its_timeout() -> None:
    clock = _Clock()
    flow = wait_flow("sb", "e", 0.5, clock=clock)
    with pytest.raises(ExecutionTimeoutError, match=r"still running after 0\.5 s"):
        _steps(flow, iter([_status("running")] * 20), clock)
    assert clock.now <= 100.5


def test_log_follower_reads_each_byte_once_and_stops_at_the_end() -> None:
    clock = _Clock()
    follower = LogFollower("sb", "e", follow=True)
    answers = iter(
        [
            _logs("running", "a", 1),
            _logs("running", "", 1),
            _logs("running", "bc", 3),
            _logs("completed", "", 3),
        ]
    )
    texts: list[str | None] = []
    cursors: list[int] = []
    for _ in range(3):
        seen, text = _steps(follower.next_text(), answers, clock)
        cursors += [c.kwargs["cursor"] for c in seen if isinstance(c, Call)]
        texts.append(text)
    assert texts == ["a", "bc", None]
    assert cursors == [0, 1, 1, 3]  # the server's cursor is followed; no byte asked twice


def test_log_follower_without_follow_stops_when_nothing_is_new() -> None:
    clock = _Clock()
    follower = LogFollower("sb", "e", follow=False)
    seen, text = _steps(follower.next_text(), iter([_logs("running", "", 0)]), clock)
    assert text is None
    assert not any(isinstance(s, Sleep) for s in seen)


class _SignedUrlBody:
    """An answer carrying a signed URL (what ``signed_url_from`` reads)."""

    def __init__(self, **urls: str) -> None:
        self.urls = urls

    def to_dict(self) -> dict[str, Any]:
        return dict(self.urls)


def _signed(key: str, n: int) -> Response[Any]:
    body = _SignedUrlBody(**{key: f"http://storage.test/o?sig={n}"})
    return Response(HTTPStatus.OK, b"", {}, body)


def _first_call(flow: Flow[Any]) -> Call:
    """Advance to the flow's first Call, carrying out blocking steps (packing) for real."""
    step = next(flow)
    while isinstance(step, Blocking):
        step = flow.send(step.fn(*step.args, **step.kwargs))
    assert isinstance(step, Call)
    return step


@pytest.mark.parametrize(
    ("make", "operation", "key", "transfer"),
    [
        (
            lambda: dump_flow("sb", ArchiveLimits(), False),
            "dump_workspace",
            "download_url",
            Download,
        ),
        (
            lambda: artifacts_flow("sb", "e", ArchiveLimits(), False),
            "export_artifacts",
            "download_url",
            Download,
        ),
        (
            lambda: start_flow("sb", "e", plan_mapping({"main.py": "print(1)"}), False),
            "get_execution_upload_url",
            "upload_url",
            Upload,
        ),
    ],
    ids=["dump", "export_artifacts", "execute"],
)
def test_a_refused_signed_url_is_asked_for_again_once(
    make: Callable[[], Flow[Any]], operation: str, key: str, transfer: type[Any]
) -> None:
    flow = make()
    try:
        ask = _first_call(flow)
        assert ask.name == operation
        step = flow.send(_signed(key, 1))
        assert isinstance(step, transfer)
        assert step.url.endswith("sig=1")
        again = flow.throw(TransferError("expired", status_code=403))
        assert isinstance(again, Call)
        assert again == ask  # a fresh URL, not a blind retry of the stale one
        step = flow.send(_signed(key, 2))
        assert isinstance(step, transfer)
        assert step.url.endswith("sig=2")
        with pytest.raises(TransferError, match="expired"):  # a second refusal is final
            flow.throw(TransferError("expired", status_code=403))
    finally:
        flow.close()
