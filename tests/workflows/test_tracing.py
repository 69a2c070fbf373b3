"""The tracing switch and a flow's span, without the emulator: off means the flow itself and no
import; the span sees errors thrown into its flow, a close, a scrubbed exception; the extra's
absence and a bad ``KLAVIS_TRACING`` are clear errors. (Live spans: ``live/test_tracing.py``.)"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import types
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import workflows
from workflows import InvalidInputError, _mcp_compat, _tracing
from workflows._ownership import AcquireDidNotHappen
from workflows._steps import Flow, Sleep

SIGNED = "https://bucket.s3.example/ws.tar.gz?X-Amz-Signature=abc123&X-Amz-Credential=k"


def _start(*args: object) -> dict[str, object]:
    return {"klavis.sandbox.id": "sb-1"}


def _plain(fail: BaseException | None = None) -> Flow[int]:
    """Two pauses; a ValueError thrown at the first is recovered from; returns 7."""
    try:
        yield Sleep(1)
    except ValueError:
        yield Sleep(2)
    if fail is not None:
        raise fail
    return 7


_traced = _tracing.traced_flow("klavis.test", _start)(_plain)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    workflows.enable_tracing(provider)
    yield exporter
    workflows.disable_tracing()
    provider.shutdown()


def _run(flow: Flow[int], *, throw: BaseException | None = None) -> int:
    """Drive ``flow`` as a driver does: each step answered with None, ``throw`` at the first."""
    step = next(flow)
    try:
        if throw is not None:
            step = flow.throw(throw)
        while True:
            step = flow.send(None)
    except StopIteration as stop:
        assert isinstance(step, Sleep)
        result: int = stop.value
        return result


def _one(exporter: InMemorySpanExporter) -> ReadableSpan:
    (span,) = exporter.get_finished_spans()
    return span


def test_while_off_the_flow_is_the_functions_own() -> None:
    flow = _traced()
    assert isinstance(flow, types.GeneratorType)
    assert flow.gi_code is _plain.__code__  # no wrapper, no span: nothing to pay but one check
    assert _run(flow) == 7


def test_a_flow_runs_in_its_span_and_errors_thrown_in_reach_it(
    spans: InMemorySpanExporter,
) -> None:
    flow = _traced()
    assert isinstance(flow, types.GeneratorType)
    assert flow.gi_code is not _plain.__code__
    assert _run(flow, throw=ValueError("a 403, asked again")) == 7
    span = _one(spans)
    assert span.name == "klavis.test"
    assert dict(span.attributes or {}) == {"klavis.sandbox.id": "sb-1"}
    assert span.status.status_code is StatusCode.UNSET
    assert span.events == ()


def test_a_flow_closed_at_a_step_is_interrupted(spans: InMemorySpanExporter) -> None:
    flow = _traced()
    next(flow)
    flow.close()  # what the drivers do on Ctrl-C, SIGTERM or a cancelled task
    span = _one(spans)
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "interrupted before it finished"
    assert dict(span.attributes or {})["error.type"] == "interrupted"


def test_an_error_is_recorded_without_a_signed_query(spans: InMemorySpanExporter) -> None:
    try:
        raise ConnectionError(f"GET {SIGNED} refused")
    except ConnectionError as cause:
        error = workflows.TransferError(f"download from {SIGNED} failed")
        error.__cause__ = cause
    with pytest.raises(workflows.TransferError):
        _run(_traced(error))
    span = _one(spans)
    assert span.status.status_code is StatusCode.ERROR
    (event,) = span.events
    recorded = json.dumps(dict(event.attributes or {})) + str(span.status.description)
    assert "ws.tar.gz?<redacted>" in recorded
    assert "X-Amz" not in recorded
    assert "abc123" not in recorded
    assert dict(event.attributes or {})["exception.type"] == "workflows._errors.TransferError"
    assert span.status.description == (
        "TransferError: download from https://bucket.s3.example/ws.tar.gz?<redacted> failed"
    )


SECRET = "hunter2-the-tools-argument"


def _echoing_tool_failure() -> workflows.McpError:
    """What ``raise_for_error`` raises for a tool whose failure echoes its argument."""
    result = workflows.ToolResult("read_file", f"ENOENT: no such file '/data/{SECRET}'", True)
    with pytest.raises(workflows.McpError) as raised:
        result.raise_for_error()
    assert SECRET in str(raised.value)  # the user still gets the tool's explanation
    return raised.value


def _everything(span: ReadableSpan) -> str:
    parts = [str(span.status.description), json.dumps(dict(span.attributes or {}))]
    parts += [json.dumps(dict(e.attributes or {})) for e in span.events]
    return "\n".join(parts)


def test_a_tool_failure_is_recorded_without_the_tools_output(spans: InMemorySpanExporter) -> None:
    with pytest.raises(workflows.McpError):
        _run(_traced(_echoing_tool_failure()))
    span = _one(spans)
    assert SECRET not in _everything(span)
    (event,) = span.events
    assert dict(event.attributes or {})["exception.message"] == "tool 'read_file' failed"
    assert span.status.description == "McpError: tool 'read_file' failed"
    assert dict(span.attributes or {})["error.type"] == "McpError"


def test_a_json_rpc_error_is_recorded_with_its_code_only(spans: InMemorySpanExporter) -> None:
    from workflows._mcp import _HttpErrors, _translate

    url = "http://127.0.0.1:1/mcp/?local_sandbox_id=sb-1"
    answer = f"Invalid arguments: path {SECRET!r}"  # what a server's JSON-RPC error may say
    sdk: Exception
    if _mcp_compat.is_legacy():  # mcp 1.x
        data = importlib.import_module("mcp.types").ErrorData(code=-32602, message=answer)
        sdk = importlib.import_module("mcp.shared.exceptions").McpError(data)
    else:
        sdk = importlib.import_module("mcp").MCPError(-32602, answer)
    error = _translate(sdk, url, _HttpErrors())
    assert isinstance(error, workflows.McpError)
    assert SECRET in str(error)
    error.__cause__ = sdk  # as _one_shot raises it
    with pytest.raises(workflows.McpError):
        _run(_traced(error))
    span = _one(spans)
    assert SECRET not in _everything(span)
    assert span.status.description == (
        "McpError: MCP server at http://127.0.0.1:1/mcp/: JSON-RPC error -32602"
    )
    stack = dict(span.events[0].attributes or {})["exception.stacktrace"]
    assert isinstance(stack, str)
    sdk_name = f"{type(sdk).__module__}.{type(sdk).__qualname__}"
    assert f"{sdk_name}\n\nThe above exception was the direct cause" in stack


def test_a_users_exception_is_recorded_by_its_type_and_frames(
    spans: InMemorySpanExporter,
) -> None:
    def agent() -> None:
        try:
            _echoing_tool_failure().result.raise_for_error()  # type: ignore[union-attr]
        except workflows.McpError as failed:
            raise ValueError(f"the agent gave up on {SECRET}") from failed

    with pytest.raises(ValueError, match=SECRET) as raised:
        agent()
    with pytest.raises(ValueError, match=SECRET):
        _run(_traced(raised.value))
    span = _one(spans)
    assert SECRET not in _everything(span)
    assert span.status.description == "ValueError"
    (event,) = span.events
    attributes = dict(event.attributes or {})
    assert "exception.message" not in attributes
    stack = attributes["exception.stacktrace"]
    assert isinstance(stack, str)
    assert stack.endswith("\nValueError\n")  # the frames, then the type alone
    assert "workflows._errors.McpError: tool 'read_file' failed\n" in stack
    assert "The above exception was the direct cause of the following exception:" in stack
    assert "in agent\n" in stack  # the user's frames are kept


def test_an_acquire_known_not_to_have_happened_records_its_cause(
    spans: InMemorySpanExporter,
) -> None:
    with pytest.raises(AcquireDidNotHappen):
        _run(_traced(AcquireDidNotHappen(workflows.RateLimitError("429", status_code=429))))
    span = _one(spans)
    assert dict(span.attributes or {})["error.type"] == "RateLimitError"


def test_scrub_leaves_what_is_not_a_query() -> None:
    assert _tracing.scrub("a?b https://h/p x://y/z?q=1") == "a?b https://h/p x://y/z?<redacted>"


def test_a_provider_that_is_not_one_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="tracer_provider must be"):
        workflows.enable_tracing(object())  # type: ignore[arg-type]


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != workflows.TRACING_ENV}
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


BLOCKED = "import sys; sys.modules['opentelemetry'] = None\n"


def test_without_the_extra_enable_tracing_names_it() -> None:
    code = BLOCKED + (
        "import workflows\n"
        "try:\n"
        "    workflows.enable_tracing()\n"
        "except workflows.MissingExtraError as exc:\n"
        "    print(exc)\n"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "workflows.enable_tracing() needs the otel extra: pip install 'klavis-sandbox[otel]'"
    )


def test_the_environment_switch_without_the_extra_fails_at_import_naming_both() -> None:
    done = _python(BLOCKED + "import workflows\n", KLAVIS_TRACING="1")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        "workflows._errors.MissingExtraError: KLAVIS_TRACING=1 (tracing) needs the otel extra "
        "(or unset the variable): pip install 'klavis-sandbox[otel]'"
    )


@pytest.mark.parametrize(("value", "imported"), [("0", False), ("", False), ("on", True)])
def test_the_environment_switch(value: str, imported: bool) -> None:
    code = "import sys, workflows; print('opentelemetry' in sys.modules)"
    done = _python(code, KLAVIS_TRACING=value)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(imported)


def test_a_bad_environment_switch_is_a_configuration_error() -> None:
    done = _python("import workflows", KLAVIS_TRACING="maybe")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "workflows._errors.ConfigurationError: KLAVIS_TRACING='maybe': use 1 to enable tracing, "
        "0 to leave it off"
    )
