"""OpenTelemetry spans against the emulator, both faces: one span per operation with its
sandbox, servers and bytes; MCP calls; one span per pool task with its index, attempts and
failure; errors as ERROR status; nothing of the key or a signed URL; nothing imported until
tracing is enabled. The spans are collected with the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import workflows
from tests.helpers import Face, LoopThread
from tests.hostile_storage import HostileStorage
from tests.workflows.live.pool_handle import PoolHandle
from workflows import AsyncLocalSandbox, LocalSandbox, NotFoundError, ServerError, TransferError
from workflows._pack import pack_to_tempfile
from workflows._seed import plan_mapping

SERVERS = ("filesystem", "git")


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    """A provider of the test's own (the global one is left alone)."""
    provider = TracerProvider()
    yield provider
    provider.shutdown()


@pytest.fixture
def spans(provider: TracerProvider) -> Iterator[InMemorySpanExporter]:
    """Tracing on, to the test's provider, whose spans land in memory; off after."""
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    workflows.enable_tracing(provider)
    yield exporter
    workflows.disable_tracing()


@pytest.fixture
def tracer(provider: TracerProvider) -> trace.Tracer:
    """The application's own tracer, on the same provider."""
    return provider.get_tracer("a test")


def _ours(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith("klavis.")]


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _everything(exporter: InMemorySpanExporter) -> str:
    """Every name, attribute, event and status of every span, as one text."""
    parts: list[str] = []
    for span in exporter.get_finished_spans():
        parts += [span.name, str(span.status.description), json.dumps(_attrs(span), default=str)]
        for event in span.events:
            parts += [event.name, json.dumps(dict(event.attributes or {}), default=str)]
    return "\n".join(parts)


def _packed_size(files: dict[str, str]) -> int:
    """What seeding ``files`` uploads: packing is reproducible (one fixed mtime)."""
    archive, size = pack_to_tempfile(plan_mapping(files))
    archive.close()
    return size


def test_a_sandbox_lifecycle_gives_one_span_per_operation(
    face: Face, conn: dict[str, str], spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    files = {"a.txt": "alpha " * 200, "b/c.txt": "gamma"}
    with face.acquire(list(SERVERS), **conn) as sb:
        sandbox_id = sb.id
        sb.seed(files)
        sb.dump()
        kept = sb.dump_to(tmp_path / "ws.tar.gz")
        sb.reset()
    names = [s.name for s in _ours(spans)]
    assert names == [
        "klavis.acquire",
        "klavis.seed",
        "klavis.dump",
        "klavis.dump_to",
        "klavis.reset",
        "klavis.release",
    ]
    for span in _ours(spans):
        assert span.status.status_code is StatusCode.UNSET, span.name  # libraries leave it unset
        assert span.events == (), span.name
        attributes = _attrs(span)
        assert attributes["klavis.sandbox.id"] == sandbox_id, span.name
        assert set(attributes["klavis.server_names"]) == set(SERVERS), span.name
    seed, dump, dump_to = (
        _named(spans, n)[0] for n in ("klavis.seed", "klavis.dump", "klavis.dump_to")
    )
    assert _attrs(seed)["klavis.bytes"] == _packed_size(files)
    assert _attrs(dump_to)["klavis.bytes"] == kept.stat().st_size  # the archive as received
    assert _attrs(dump)["klavis.bytes"] == kept.stat().st_size  # the same workspace
    assert "klavis.bytes" not in _attrs(_named(spans, "klavis.reset")[0])


def test_a_sync_callers_span_is_the_parent(
    conn: dict[str, str], spans: InMemorySpanExporter, tracer: trace.Tracer
) -> None:
    with (
        tracer.start_as_current_span("agent") as agent,
        LocalSandbox.acquire(
            ["filesystem"], api_key=conn["api_key"], base_url=conn["base_url"]
        ) as sb,
    ):
        sb.seed({"x": "1"})
    parent = agent.get_span_context().span_id
    ours = _ours(spans)
    assert len(ours) == 3
    assert all(s.parent is not None and s.parent.span_id == parent for s in ours)


def test_concurrent_async_tasks_keep_their_own_parents(
    conn: dict[str, str],
    spans: InMemorySpanExporter,
    tracer: trace.Tracer,
    loop_thread: LoopThread,
) -> None:

    async def agent(n: int) -> tuple[int, str]:
        with tracer.start_as_current_span(f"agent-{n}") as span:
            async with AsyncLocalSandbox.acquire(
                ["filesystem"], api_key=conn["api_key"], base_url=conn["base_url"]
            ) as sb:
                await sb.seed({"n.txt": str(n)})
                await sb.reset()
                return span.get_span_context().span_id, sb.id

    async def both() -> list[tuple[int, str]]:
        return list(await asyncio.gather(agent(1), agent(2)))

    for parent, sandbox_id in loop_thread.run(both()):
        mine = [s for s in _ours(spans) if _attrs(s).get("klavis.sandbox.id") == sandbox_id]
        assert sorted(s.name for s in mine) == sorted(
            ["klavis.acquire", "klavis.seed", "klavis.reset", "klavis.release"]
        )
        assert all(s.parent is not None and s.parent.span_id == parent for s in mine)


def test_mcp_calls_have_spans_and_a_tool_failure_sets_error(
    face: Face, conn: dict[str, str], spans: InMemorySpanExporter
) -> None:
    with face.acquire(["filesystem"], **conn) as sb:
        assert sb.list_tools("filesystem")
        assert not sb.call_tool("filesystem", "list_allowed_directories").is_error
        assert sb.call_tool("filesystem", "no_such_tool").is_error
    listed = _named(spans, "klavis.mcp.list_tools")
    called = _named(spans, "klavis.mcp.call_tool")
    assert len(listed) == 1
    assert len(called) == 2
    assert _attrs(listed[0]) == {"klavis.sandbox.id": sb.id, "klavis.server_names": ("filesystem",)}
    ok, failed = called
    assert _attrs(ok)["klavis.mcp.tool"] == "list_allowed_directories"
    assert ok.status.status_code is StatusCode.UNSET
    assert _attrs(failed)["klavis.mcp.tool"] == "no_such_tool"
    assert failed.status.status_code is StatusCode.ERROR
    assert _attrs(failed)["error.type"] == "tool_error"


def test_the_calls_of_a_blocking_mcp_session_have_spans(
    conn: dict[str, str], spans: InMemorySpanExporter
) -> None:
    with (
        LocalSandbox.acquire(
            ["filesystem"], api_key=conn["api_key"], base_url=conn["base_url"]
        ) as sb,
        sb.mcp_session("filesystem") as fs,
    ):
        assert fs.list_tools()
        assert not fs.call_tool("list_allowed_directories").is_error
    expected = {"klavis.sandbox.id": sb.id, "klavis.server_names": ("filesystem",)}
    (listed,) = _named(spans, "klavis.mcp.list_tools")
    (called,) = _named(spans, "klavis.mcp.call_tool")
    assert _attrs(listed) == expected
    assert _attrs(called) == {**expected, "klavis.mcp.tool": "list_allowed_directories"}


def test_a_bulk_release_by_id_has_a_span_per_sandbox(
    face: Face, conn: dict[str, str], spans: InMemorySpanExporter
) -> None:
    with face.acquire(["filesystem"], **conn) as sb:
        first = face.bulk_release([sb.id], **conn)
        again = face.bulk_release([sb.id], **conn)  # (reap releases by id too)
    assert first[0].ok
    assert again[0].already_released
    by_id, gone, by_sandbox = _named(spans, "klavis.release")
    assert _attrs(by_id) == {"klavis.sandbox.id": sb.id}
    assert _attrs(gone) == {"klavis.sandbox.id": sb.id, "klavis.already_released": True}
    assert gone.status.status_code is StatusCode.UNSET  # a 404 on release is no failure
    assert _attrs(by_sandbox)["klavis.already_released"] is True  # leaving ``with``


def test_a_failing_operation_has_error_status_and_its_exception(
    face: Face, conn: dict[str, str], spans: InMemorySpanExporter
) -> None:
    with face.acquire(["filesystem"], **conn) as sb:
        workflows.bulk_release(
            [sb.id], api_key=conn["api_key"], base_url=conn["base_url"]
        )  # released behind the sandbox's back
        with pytest.raises(NotFoundError):
            sb.reset()
    reset = _named(spans, "klavis.reset")[0]
    assert reset.status.status_code is StatusCode.ERROR
    assert reset.status.description is not None
    assert reset.status.description.startswith("NotFoundError: ")
    assert _attrs(reset)["error.type"] == "NotFoundError"
    (event,) = reset.events
    assert event.name == "exception"
    assert dict(event.attributes or {})["exception.type"] == "workflows._errors.NotFoundError"


def test_a_pool_run_has_one_span_per_task(
    make_pool: Callable[..., PoolHandle],
    conn: dict[str, str],
    spans: InMemorySpanExporter,
    tracer: trace.Tracer,
) -> None:
    failed_once: set[int] = set()

    def task(sb: Any, n: int) -> int:
        with tracer.start_as_current_span(f"agent-{n}"):
            sb.seed({"n.txt": str(n)})
        if n == 1:
            raise ValueError("the agent got it wrong")
        if n == 2 and n not in failed_once:
            failed_once.add(n)
            raise ServerError("the service failed it", status_code=503)
        return n

    with make_pool(["filesystem"], size=2, **conn) as pool:
        results = pool.map(task, [0, 1, 2, 3], retries=1, timeout=120)
    assert [r.ok for r in results] == [True, False, True, True]
    tasks = {_attrs(s)["klavis.task.index"]: s for s in _named(spans, "klavis.pool.task")}
    assert len(_named(spans, "klavis.pool.task")) == 4
    assert sorted(tasks) == [0, 1, 2, 3]
    for index, span in tasks.items():
        attributes = _attrs(span)
        assert attributes["klavis.sandbox.id"] == results[index].sandbox_id
        assert attributes["klavis.server_names"] == ("filesystem",)
        assert attributes["klavis.task.attempts"] == results[index].attempts
    assert _attrs(tasks[2])["klavis.task.attempts"] == 2
    assert tasks[2].status.status_code is StatusCode.UNSET  # it passed on its second attempt
    assert "klavis.failure" not in _attrs(tasks[0])
    assert _attrs(tasks[1])["klavis.failure"] == "task"
    assert tasks[1].status.status_code is StatusCode.ERROR
    assert _attrs(tasks[1])["error.type"] == "ValueError"
    # what a task does is inside its span: the user's spans (in the attempt's thread, or the
    # async pool's coroutine), the seed within them, the pool's resets
    for index, span in tasks.items():
        agents = [s for s in _named(spans, f"agent-{index}") if s.parent is not None]
        assert agents, index
        assert all(s.parent.span_id == span.context.span_id for s in agents if s.parent)
    resets = _named(spans, "klavis.reset")
    task_ids = {s.context.span_id for s in tasks.values()}
    assert resets
    assert all(s.parent is not None and s.parent.span_id in task_ids for s in resets)


def test_no_tools_arguments_or_output_in_any_span(
    make_pool: Callable[..., PoolHandle], conn: dict[str, str], spans: InMemorySpanExporter
) -> None:
    secret = f"hunter2-{uuid.uuid4().hex}"  # the tool's argument, which its error echoes
    missing = f"/nowhere/{secret}.txt"

    def task(sb: Any, n: int) -> None:
        result = sb.call_tool("filesystem", "read_file", {"path": missing})
        assert secret in result.text  # the filesystem server echoes the path it was given
        if n == 0:
            result.raise_for_error()  # McpError: "tool 'read_file' failed: ...<the path>..."
        raise ValueError(f"the agent gave up on {result.text}")  # the user's own message

    with make_pool(["filesystem"], size=1, **conn) as pool:
        results = pool.map(task, [0, 1], timeout=120)
    assert [r.ok for r in results] == [False, False]
    assert all(secret in str(r.exception) for r in results)  # the user gets it all
    with (
        LocalSandbox.acquire(
            ["filesystem"], api_key=conn["api_key"], base_url=conn["base_url"]
        ) as sb,
        sb.mcp_session("filesystem") as fs,
        pytest.raises(workflows.McpError, match=secret),
    ):
        fs.call_tool("read_file", {"path": missing}).raise_for_error()
    assert secret not in _everything(spans)
    tasks = {_attrs(s)["klavis.task.index"]: s for s in _named(spans, "klavis.pool.task")}
    assert tasks[0].status.description == "McpError: tool 'read_file' failed"
    (event,) = tasks[0].events
    assert dict(event.attributes or {})["exception.message"] == "tool 'read_file' failed"
    assert tasks[1].status.description == "ValueError"  # a user's message is not the library's
    (event,) = tasks[1].events
    assert "exception.message" not in dict(event.attributes or {})
    assert dict(event.attributes or {})["exception.type"] == "ValueError"
    calls = _named(spans, "klavis.mcp.call_tool")
    assert len(calls) == 3
    assert all(_attrs(c)["error.type"] == "tool_error" for c in calls)


def test_no_key_or_signed_url_in_any_span(
    face: Face, conn: dict[str, str], token: str, spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    from klavis_emulator import EmulatorConfig, EmulatorServer

    with face.acquire(["filesystem"], **conn) as sb:  # signed URLs that work
        sb.seed({"a.txt": "a"})
        sb.dump_to(tmp_path / "ws")
    with (
        HostileStorage() as storage,
        EmulatorServer(EmulatorConfig(public_url=storage.url, data_dir=tmp_path / "e")) as server,
    ):
        storage.body(b"refused", status=403)  # every signed download is refused: asked twice
        with (
            face.acquire(["filesystem"], api_key=token, base_url=server.base_url) as sb,
            pytest.raises(TransferError),
        ):
            sb.dump()
        storage.reset()
    assert len(_ours(spans)) == 7
    dump = _named(spans, "klavis.dump")[0]
    assert dump.status.status_code is StatusCode.ERROR
    assert dump.events  # the exception, with its message and stack trace
    text = _everything(spans)
    assert token not in text
    assert "signature" not in text.lower()
    assert not re.search(r"://[^\s'\"]*\?(?!<redacted>)", text), "a URL kept its query string"


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != workflows.TRACING_ENV}
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_nothing_of_opentelemetry_is_imported_until_tracing_is_enabled(
    conn: dict[str, str],
) -> None:
    code = f"""
import sys
import workflows
conn = {conn!r}
with workflows.LocalSandbox.acquire(["filesystem"], **conn) as sb:
    sb.seed({{"a.txt": "a"}})
    sb.dump()
    sb.reset()
with workflows.SandboxPool(["filesystem"], size=1, progress=False, **conn) as pool:
    assert pool.map(lambda sb, n: n, [1, 2]).values == [1, 2]
assert "opentelemetry" not in sys.modules, sorted(m for m in sys.modules if "opentelemetry" in m)
workflows.enable_tracing()
assert "opentelemetry" in sys.modules
print("ok")
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_environment_switch_traces_to_the_global_provider(conn: dict[str, str]) -> None:
    code = f"""
import sys
import workflows
assert "opentelemetry" in sys.modules
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
with workflows.LocalSandbox.acquire(["filesystem"], **{conn!r}) as sb:
    sb.reset()
print([s.name for s in exporter.get_finished_spans()])
"""
    done = _python(code, KLAVIS_TRACING="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['klavis.acquire', 'klavis.reset', 'klavis.release']"
