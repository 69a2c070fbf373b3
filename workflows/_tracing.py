"""Optional OpenTelemetry spans, off until the user turns them on.

``workflows.enable_tracing()`` (or ``KLAVIS_TRACING=1`` in the environment, read at import)
makes the library emit one span per operation: ``klavis.acquire`` (one per acquire request:
an acquire retried after a 429 shows as two), ``klavis.seed``, ``klavis.dump``,
``klavis.dump_to``, ``klavis.reset``, ``klavis.release`` (by a sandbox, or by id in a bulk
release or ``reap``), ``klavis.mcp.list_tools`` and ``klavis.mcp.call_tool`` (the sandbox's
one-shot calls and an ``McpSession``'s), and ``klavis.pool.task`` (one per task of any pool,
retries included: the pools' task flow carries it). They carry ``klavis.sandbox.id``,
``klavis.server_names``, ``klavis.bytes`` (seed: bytes uploaded; dump: bytes downloaded),
``klavis.mcp.tool``, ``klavis.already_released`` (a release that found it gone) and, on a pool
task, ``klavis.task.index``, ``klavis.task.attempts`` and ``klavis.failure`` (``task`` or
``infrastructure``). A failure sets the span's status to ERROR, its ``error.type`` (the
exception's class name), and an ``exception`` event (``exception.type``,
``exception.stacktrace``, and for the library's own errors ``exception.message``); success
leaves the status unset, as OpenTelemetry asks of libraries. Never the key, a URL's query
string (where a signed URL keeps its signature: scrubbed from whatever is recorded), a tool's
arguments or its results.

So a span holds only the library's own words. A :class:`~workflows.KlavisError` is recorded
with its message, less what it quotes of a tool or an MCP server (``span_message`` in
``_errors``): ``ToolResult.raise_for_error()`` quotes up to 500 characters of the tool's
output, which often echoes its arguments, and its span says ``tool 'x' failed``; a JSON-RPC
error keeps its code, an HTTP error of the MCP URL its status. Any other exception (the user's
own, raised in a pool task; the MCP SDK's; a dependency's) is recorded by its type and its
frames, with no message, and so is every exception in its chain: its message is data the
library cannot vet (``raise ValueError(f"bad answer: {result.text}")`` is a tool's output), and
spans go wherever the application exports them. Rejected: OpenTelemetry's
``span.record_exception``, which records ``str(exc)`` and a traceback holding every message of
the chain. The semantic conventions allow it (``exception.message`` is only required without
``exception.type``), and the GenAI ones make a tool call's arguments and result opt-in content
(``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``); this library has no opt-in: the
user's own spans, the parents of ours, can record the user's exceptions in full.

Until tracing is enabled, ``opentelemetry`` is never imported and each instrumented point costs
one check of a module global: the decorators below return the undecorated flow, or call the
method (measured: 0.1 to 0.3 us more per operation, which takes a millisecond or more; on,
with the SDK and an in-memory exporter, about 40 us per span). The library only uses the
OpenTelemetry *API* (the ``otel`` extra); the application chooses the SDK, its exporters and
its sampler, as OpenTelemetry's guidance for libraries asks: spans go to the
``tracer_provider`` given, else to the global one (``opentelemetry.trace.set_tracer_provider``,
or ``opentelemetry-instrument``). The instrumentation scope is ``workflows`` with the
distribution's version.

A flow's span lives in a generator wrapped around the flow (:func:`traced_flow`): it starts at
the flow's first step and is made current there, so it is current while the driver performs the
flow's steps (a span of the user's httpx instrumentation becomes its child; the pool's task
span is the parent of the acquire, reset and the task's own spans), and ends when the flow
returns, raises or is closed (Ctrl-C, a cancelled task: status ERROR, "interrupted"). The
drivers start and close a flow within one call of ``run``, in one thread or one asyncio task, so
attaching and detaching the span's context always pair up. Rejected: one span per flow in the
driver (``SyncDriver.run``): the driver knows neither the operation's name nor its sandbox, and
the faces' methods, which know both, are two (sync and async) where their flows are one.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from ._errors import (
    ConfigurationError,
    InvalidInputError,
    KlavisError,
    MissingExtraError,
    span_message,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from ._steps import Flow


__all__ = [
    "TRACING_ENV",
    "acquire_end",
    "acquire_start",
    "disable_tracing",
    "enable_tracing",
    "id_start",
    "mcp_start",
    "release_end",
    "sandbox_start",
    "session_start",
    "scrub",
    "task_end",
    "task_start",
    "traced_call",
    "traced_flow",
]

P = ParamSpec("P")
T = TypeVar("T")
Attributes = dict[str, Any]
"""Span attributes: str, bool, int, float, or sequences of one of them."""

TRACING_ENV = "KLAVIS_TRACING"
"""``1``/``true``/``yes``/``on`` enables tracing at import, to the global tracer provider."""

_tracer: Tracer | None = None
"""The tracer while tracing is on; None while it is off (the one thing the hot path reads)."""


def enable_tracing(tracer_provider: TracerProvider | None = None) -> None:
    """Emit OpenTelemetry spans for acquire, seed, dump, reset, release, MCP calls and pool
    tasks, to ``tracer_provider`` (default: the global one, set by the application).

    Needs the ``otel`` extra (``pip install 'klavis-sandbox[otel]'``): without it, raises
    :class:`~workflows.MissingExtraError`. Until this is called (or ``KLAVIS_TRACING=1`` is set),
    nothing of OpenTelemetry is imported. The spans never hold the API key, a URL, a tool's
    arguments or its results. Calling it again replaces the provider.

    >>> from opentelemetry.sdk.trace import TracerProvider  # doctest: +SKIP
    >>> workflows.enable_tracing(TracerProvider())  # doctest: +SKIP
    """
    global _tracer
    if tracer_provider is not None and not callable(getattr(tracer_provider, "get_tracer", None)):
        raise InvalidInputError(
            "tracer_provider must be an OpenTelemetry TracerProvider (it has get_tracer), "
            f"not {type(tracer_provider).__name__}"
        )
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise MissingExtraError("workflows.enable_tracing()", extra="otel") from exc
    _tracer = trace.get_tracer("workflows", _version(), tracer_provider=tracer_provider)


def _version() -> str:
    """The instrumentation's version: the distribution's (read here, not from ``workflows``,
    which may still be importing when ``KLAVIS_TRACING`` enables tracing)."""
    from importlib import metadata

    try:
        return metadata.version("klavis-sandbox")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "0+unknown"


def disable_tracing() -> None:
    """Stop emitting spans (spans already started still end). Idempotent."""
    global _tracer
    _tracer = None


def _from_environment() -> None:
    """Enable tracing when ``KLAVIS_TRACING`` asks for it (read once, at import)."""
    raw = os.environ.get(TRACING_ENV, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return
    if raw not in ("1", "true", "yes", "on"):
        raise ConfigurationError(
            f"{TRACING_ENV}={os.environ[TRACING_ENV]!r}: use 1 to enable tracing, 0 to leave it off"
        )
    try:
        enable_tracing()
    except MissingExtraError as exc:
        raise MissingExtraError(
            f"{TRACING_ENV}=1 (tracing)", extra="otel", detail=" (or unset the variable)"
        ) from exc.__cause__


# --- what is recorded --------------------------------------------------------------------------

_QUERY = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s?#'\"<>]*)\?[^\s'\"<>]*")


def scrub(text: str) -> str:
    """``text`` without URL query strings, where signed URLs keep their signatures.

    >>> scrub("GET https://s3.example/b/o.tgz?X-Amz-Signature=abc&X-Amz-Date=1 failed")
    'GET https://s3.example/b/o.tgz?<redacted> failed'
    """
    return _QUERY.sub(r"\1?<redacted>", text)


def _failed(span: Span, exc: BaseException) -> None:
    """Record ``exc`` on ``span``: an ``exception`` event, ``error.type``, ERROR status; only
    the library's own words (see the module docs), scrubbed."""
    from opentelemetry.trace import Status, StatusCode

    shown = getattr(exc, "cause", None)  # AcquireDidNotHappen: its cause is the failure
    if type(exc).__name__ == "AcquireDidNotHappen" and isinstance(shown, BaseException):
        exc = shown
    name = type(exc).__qualname__
    message = _message(exc)
    attributes: Attributes = {
        "exception.type": _type_name(exc),
        "exception.stacktrace": _stack(exc),
    }
    if message is not None:
        attributes["exception.message"] = message
    # add_event, not record_exception: the SDK's record_exception reads str(exc) and formats
    # the traceback with every message of the chain before our attributes replace them
    span.add_event("exception", attributes)
    span.set_attribute("error.type", name)
    described = name if message is None else f"{name}: {message}"
    span.set_status(Status(StatusCode.ERROR, described[:500]))


def _message(exc: BaseException) -> str | None:
    """The message a span may hold: a library error's own words (scrubbed), else None."""
    return scrub(span_message(exc)) if isinstance(exc, KlavisError) else None


def _type_name(exc: BaseException) -> str:
    """``module.Qualname`` (just the name for a builtin), as OpenTelemetry's SDK writes it."""
    kind = type(exc)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


def _stack(exc: BaseException) -> str:
    """``exc``'s traceback as Python prints it, its causes and contexts included, where each
    exception's last line is its type and only a library error's :func:`_message`: the frames
    (files, lines, functions, source lines) are code, the messages are data."""
    chain: list[tuple[BaseException, str]] = []  # each exception, and how it leads to the last
    seen: set[int] = set()
    current: BaseException | None = exc
    joint = ""
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append((current, joint))
        if current.__cause__ is not None:
            current, joint = current.__cause__, _CAUSE
        elif current.__context__ is not None and not current.__suppress_context__:
            current, joint = current.__context__, _CONTEXT
        else:
            current = None
    parts: list[str] = []
    for item, joint in reversed(chain):
        frames = traceback.extract_tb(item.__traceback__)
        if frames:
            parts.append("Traceback (most recent call last):\n" + "".join(frames.format()))
        message = _message(item)
        parts.append(_type_name(item) + ("" if message is None else f": {message}") + "\n")
        parts.append(joint)
    return scrub("".join(parts))


def _interrupted(span: Span) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", "interrupted")
    span.set_status(Status(StatusCode.ERROR, "interrupted before it finished"))


def _names(servers: Sequence[Any]) -> tuple[str, ...]:
    return tuple(str(getattr(s, "name", s)) for s in servers)


def sandbox_start(sandbox: Any, *_: Any, **__: Any) -> Attributes:
    """The attributes of an operation on ``sandbox`` (a method's ``self``): id, server names."""
    return {"klavis.sandbox.id": sandbox.id, "klavis.server_names": _names(sandbox.servers)}


def id_start(sandbox_id: str, *_: Any, **__: Any) -> Attributes:
    """The attributes of an operation on a sandbox known by its id only (a bulk release)."""
    return {"klavis.sandbox.id": sandbox_id}


def release_end(span: Span, released: bool) -> None:
    """A release's result: False when the sandbox was gone already (a 404)."""
    if not released:
        span.set_attribute("klavis.already_released", True)


def mcp_start(sandbox: Any, server: str, tool: str | None = None, *_: Any, **__: Any) -> Attributes:
    """An MCP call's attributes: the sandbox, the server, the tool (never its arguments)."""
    attributes = {"klavis.sandbox.id": sandbox.id, "klavis.server_names": (server,)}
    if isinstance(tool, str):
        attributes["klavis.mcp.tool"] = tool
    return attributes


def session_start(session: Any, tool: str | None = None, *_: Any, **__: Any) -> Attributes:
    """A call's attributes in an :class:`~workflows.McpSession` (a method's ``self``): those the
    sandbox gave it (id, server), the tool."""
    attributes: Attributes = dict(session._span_attributes)
    if isinstance(tool, str):
        attributes["klavis.mcp.tool"] = tool
    return attributes


def acquire_start(request: Any, *_: Any, **__: Any) -> Attributes:
    """An acquire's attributes: the server names asked for, the benchmark if any."""
    attributes: Attributes = {"klavis.server_names": tuple(sorted(request.wanted_servers()))}
    if request.benchmark:
        attributes["klavis.benchmark"] = request.benchmark
    return attributes


def acquire_end(span: Span, result: Any) -> None:
    """An acquire's result (its ``SandboxInfo``, the ledger's attempt): the sandbox got."""
    info = result[0]
    span.set_attribute("klavis.sandbox.id", info.id)
    span.set_attribute("klavis.server_names", _names(info.servers))


def task_start(index: int, *_: Any, **__: Any) -> Attributes:
    """A pool task's attributes at its start: its index."""
    return {"klavis.task.index": index}


def task_end(span: Span, result: Any) -> None:
    """A pool task's result (its ``TaskResult``, the sandbox kept): attempts, sandbox, and, when
    it failed, whose fault (``klavis.failure``), its error and an ERROR status."""
    task = result[0]
    span.set_attribute("klavis.task.attempts", task.attempts)
    if task.sandbox_id is not None:
        span.set_attribute("klavis.sandbox.id", task.sandbox_id)
    if task.timed_out:
        span.set_attribute("klavis.task.timed_out", True)
    if not task.ok:
        span.set_attribute("klavis.failure", task.failure or "task")
        if task.exception is not None:
            _failed(span, task.exception)


# --- the decorators ----------------------------------------------------------------------------


def traced_flow(
    name: str,
    start: Callable[..., Attributes],
    end: Callable[[Span, Any], None] | None = None,
) -> Callable[[Callable[P, Flow[T]]], Callable[P, Flow[T]]]:
    """Decorate a function that makes a flow: while tracing is on, its flow runs in a span
    ``name`` with the attributes ``start(*args, **kwargs)``, and ``end(span, result)`` records
    its result; ``klavis.bytes`` counts what its uploads sent and its downloads received.
    While tracing is off, the function's own flow is returned."""

    def decorate(fn: Callable[P, Flow[T]]) -> Callable[P, Flow[T]]:
        @functools.wraps(fn)
        def traced(*args: P.args, **kwargs: P.kwargs) -> Flow[T]:
            flow = fn(*args, **kwargs)
            tracer = _tracer
            if tracer is None:
                return flow
            return _spanning(tracer, name, start(*args, **kwargs), flow, end)

        return traced

    return decorate


def _spanning(
    tracer: Tracer,
    name: str,
    attributes: Mapping[str, Any],
    flow: Flow[T],
    end: Callable[[Span, Any], None] | None,
) -> Flow[T]:
    """``flow`` within a span made current from its first step to its end (``yield from``,
    written out to see each step and its result)."""
    from opentelemetry import context, trace

    from ._steps import Act, Download, Upload  # `import workflows` imports this module, not them

    span = tracer.start_span(name, attributes=attributes)
    token = context.attach(trace.set_span_in_context(span))
    moved = 0
    try:
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = flow.send(value) if error is None else flow.throw(error)
            except StopIteration as stop:
                result = cast("T", stop.value)
                break
            try:
                value, error = (yield step), None
            except GeneratorExit:
                flow.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - thrown into the flow, as yield from does
                value, error = None, exc
                continue
            if isinstance(step, Upload):
                moved += step.size
            elif isinstance(step, Download):
                moved += value
            elif isinstance(step, Act) and step.args and hasattr(step.args[0], "servers"):
                span.set_attribute("klavis.server_names", _names(step.args[0].servers))
        if moved:
            span.set_attribute("klavis.bytes", moved)
        if end is not None:
            end(span, result)
        return result
    except GeneratorExit:
        _interrupted(span)
        raise
    except BaseException as exc:
        _failed(span, exc)
        raise
    finally:
        context.detach(token)
        span.end()


def traced_call(
    name: str, start: Callable[..., Attributes]
) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Decorate a method (sync, or ``async def``): while tracing is on, each call runs in a span
    ``name`` with the attributes ``start(*args, **kwargs)``. An MCP tool's result that reports
    an error (``is_error``) sets the ERROR status too."""

    def decorate(fn: Callable[P, T]) -> Callable[P, T]:
        if inspect.iscoroutinefunction(fn):
            run = cast("Callable[P, Awaitable[Any]]", fn)

            @functools.wraps(fn)
            async def traced_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                tracer = _tracer
                if tracer is None:
                    return await run(*args, **kwargs)
                with _call_span(tracer, name, start(*args, **kwargs)) as span:
                    try:
                        result = await run(*args, **kwargs)
                    except BaseException as exc:
                        _failed(span, exc)
                        raise
                    _call_result(span, result)
                    return result

            return cast("Callable[P, T]", traced_async)

        @functools.wraps(fn)
        def traced(*args: P.args, **kwargs: P.kwargs) -> T:
            tracer = _tracer
            if tracer is None:
                return fn(*args, **kwargs)
            with _call_span(tracer, name, start(*args, **kwargs)) as span:
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    _failed(span, exc)
                    raise
                _call_result(span, result)
                return result

        return traced

    return decorate


def _call_span(tracer: Tracer, name: str, attributes: Attributes) -> Any:
    return tracer.start_as_current_span(
        name, attributes=attributes, record_exception=False, set_status_on_exception=False
    )


def _call_result(span: Span, result: Any) -> None:
    if getattr(result, "is_error", False) is True:  # a ToolResult whose tool failed
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", "tool_error")
        span.set_status(Status(StatusCode.ERROR, "the tool reported an error"))


_from_environment()
