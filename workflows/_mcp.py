"""MCP client helpers: a sandbox server's tools through the official ``mcp`` SDK.

A sandbox's servers speak MCP Streamable HTTP at their ``mcp_server_url``.
:func:`open_session` yields an initialised :class:`mcp.ClientSession` for one of them;
:func:`list_tools` and :func:`call_tool` are blocking conveniences for scripts and
notebooks, with :func:`async_list_tools` / :func:`async_call_tool` as their async twins.
Each convenience opens a session, does one thing, and closes it. :class:`McpSession` keeps one
session open for many calls, blocking (``with sb.mcp_session("git") as s: s.call_tool(...)``).

The blocking functions and :class:`McpSession` run the async SDK on an event loop of their own
in a helper thread, never with ``asyncio.run`` on the caller's thread: they work in a notebook
cell and from inside any running event loop's thread (that loop just waits). The sync sandbox
face needs no such bridge for HTTP (its flows run on a sync driver); MCP has only an async SDK.

Errors:

- the MCP URL answers an HTTP error before a session exists: the status is mapped like
  the API's (404 :class:`NotFoundError` for an unknown or released sandbox, 501 and other
  5xx :class:`ServerError`, ...), with the server's ``detail`` as the message;
- the URL cannot be reached: :class:`ApiConnectionError` (:class:`ApiTimeoutError`);
- the server answers a JSON-RPC error (for example a session that ended because its
  sandbox was released): :class:`McpError` with its ``code``;
- a tool that failed is **not** raised: :class:`ToolResult` has ``is_error`` set and the
  server's explanation in ``text`` (agents are meant to read it). Call
  :meth:`ToolResult.raise_for_error` to turn it into an :class:`McpError`. An unknown tool
  or arguments that do not match the tool's schema come back this way from the emulator
  (its proxy reports them as failed calls); a server that answers them with a protocol
  error instead raises :class:`McpError`.

``mcp`` (1.12 or newer, 1.x or 2.x: see :mod:`workflows._mcp_compat`, the one place that
knows the difference) is imported on first use only: ``import workflows`` stays fast.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar
from urllib.parse import parse_qs, urlsplit

from . import _mcp_compat as _compat
from ._config import DEFAULT_MCP_TIMEOUT
from ._errors import (
    ApiConnectionError,
    ApiTimeoutError,
    InvalidInputError,
    KlavisError,
    McpError,
    error_from_status,
    for_spans,
)
from ._tracing import session_start, traced_call

if TYPE_CHECKING:
    import httpx2
    from mcp import ClientSession

__all__ = [
    "DEFAULT_MCP_TIMEOUT",
    "McpSession",
    "ToolInfo",
    "ToolResult",
    "async_call_tool",
    "async_list_tools",
    "call_tool",
    "list_tools",
    "open_session",
]

T = TypeVar("T")
P = ParamSpec("P")


@dataclass(frozen=True)
class ToolInfo:
    """One tool a server offers: its name, description and JSON Schema of arguments."""

    name: str
    description: str | None = None
    input_schema: Mapping[str, Any] = field(default_factory=dict, repr=False)
    output_schema: Mapping[str, Any] | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        """Name, arguments (``?``: optional) and the start of the description, e.g.
        ``ToolInfo(name='read_text_file', arguments='path: string, head?: number', ...)``."""
        description = _shortened(self.description or "", 60)
        return (
            f"ToolInfo(name={self.name!r}, arguments={_arguments(self.input_schema)!r}, "
            f"description={description!r})"
        )


def _shortened(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _arguments(schema: Mapping[str, Any]) -> str:
    """A JSON Schema's properties as ``name: type`` (``name?`` when optional), shortened."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return ""
    required = schema.get("required") or ()
    parts = []
    for name, spec in properties.items():
        kind = spec.get("type", "any") if isinstance(spec, Mapping) else "any"
        kind = "|".join(map(str, kind)) if isinstance(kind, list) else str(kind)
        parts.append(f"{name}{'' if name in required else '?'}: {kind}")
    return _shortened(", ".join(parts), 100)


@dataclass(frozen=True)
class ToolResult:
    """What a tool call returned.

    Attributes:
        tool: the tool called.
        text: the text of every text content block, joined with newlines.
        is_error: whether the tool reported a failure (then ``text`` says why).
        structured: the structured content, when the tool returns one (else None).
        content: the raw content blocks (``mcp`` types: text, image, resource...).
    """

    tool: str
    text: str
    is_error: bool = False
    structured: Any = None
    content: tuple[Any, ...] = field(default=(), repr=False)

    def __str__(self) -> str:
        return self.text

    def raise_for_error(self) -> ToolResult:
        """Raise :class:`McpError` if the tool failed; return the result otherwise."""
        if self.is_error:
            summary = self.text.strip()[:500] or "no explanation"
            error = McpError(f"tool {self.tool!r} failed: {summary}", tool=self.tool, result=self)
            raise for_spans(error, f"tool {self.tool!r} failed")
        return self


def _redacted(url: str) -> tuple[str, str | None]:
    """The URL without its query string, and the sandbox id it names (if any)."""
    parts = urlsplit(url)
    ids = parse_qs(parts.query).get("local_sandbox_id")
    return f"{parts.scheme}://{parts.netloc}{parts.path}", (ids[0] if ids else None)


class _HttpErrors:
    """Remembers the first error answer of the MCP URL (the SDK keeps only a stand-in)."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.body: Any = None
        self.retry_after: float | None = None

    async def hook(self, response: httpx2.Response) -> None:
        # (an httpx.Response under mcp 1.x: the attributes used here are the same)
        # Only the POSTs carry requests: a 405 on the optional GET stream, or a 404 on the
        # closing DELETE of a released sandbox's session, says nothing about a failure.
        if response.status_code < 400 or self.status is not None:
            return
        if response.request.method != "POST":
            return
        self.status = response.status_code
        try:
            await response.aread()
            self.body = response.json()
        except Exception:  # noqa: BLE001 - a body that is not JSON: keep its text
            self.body = response.text if response.is_stream_consumed else None
        retry = response.headers.get("retry-after", "")
        self.retry_after = float(retry) if retry.replace(".", "", 1).isdigit() else None


def _exceptions_of(exc: BaseException) -> list[BaseException]:
    """Flatten exception groups (the SDK's task groups wrap transport failures)."""
    inner = getattr(exc, "exceptions", None)
    if isinstance(inner, tuple) and all(isinstance(e, BaseException) for e in inner):
        found: list[BaseException] = []
        for item in inner:
            found.extend(_exceptions_of(item))
        return found
    return [exc]


_CONNECTION_CODES = frozenset({-32000, -32001, 408})
"""The SDK's JSON-RPC codes for a session that failed rather than answered: connection closed
(-32000), request timed out (-32001 in ``mcp`` 2.x, 408 in 1.x)."""


def _translate(exc: BaseException, url: str, errors: _HttpErrors) -> KlavisError | None:
    """Our error for a failure of the SDK while talking to ``url``, or None to re-raise."""
    timeouts, transport_errors = _compat.http_errors()
    flat = _exceptions_of(exc)
    if any(isinstance(e, asyncio.CancelledError | KeyboardInterrupt | SystemExit) for e in flat):
        return None
    where, sandbox_id = _redacted(url)
    if errors.status is not None:
        path = urlsplit(url).path
        answered = error_from_status(
            errors.status,
            errors.body,
            sandbox_id=sandbox_id,
            method="POST",
            path=path,
            retry_after=errors.retry_after,
        )  # the answer to a POST that carried a tool's arguments: spans keep only the status
        return for_spans(answered, f"{errors.status} (POST {path}) from the MCP server")
    for inner in flat:
        if isinstance(inner, KlavisError):
            return inner
        if isinstance(inner, timeouts):
            return ApiTimeoutError(f"timed out talking to the MCP server at {where}")
        if isinstance(inner, transport_errors):
            return ApiConnectionError(
                f"could not reach the MCP server at {where}: {type(inner).__name__}: {inner}"
            )
        code = _compat.jsonrpc_error_code(inner)
        if code is not None:
            lost = code in _CONNECTION_CODES
            error = McpError(f"MCP server at {where}: {inner}", code=code, connection_lost=lost)
            return for_spans(error, f"MCP server at {where}: JSON-RPC error {code}")
    return None


@contextlib.asynccontextmanager
async def _open(
    url: str, timeout: float, headers: Mapping[str, str] | None
) -> AsyncIterator[tuple[ClientSession, _HttpErrors]]:
    """An initialised session and the recorder of the URL's HTTP errors."""
    _compat.is_legacy()  # ConfigurationError when mcp is missing or unsupported
    import anyio

    errors = _HttpErrors()
    connection = _compat.streams(
        url,
        headers=headers,
        timeout=timeout,
        read_timeout=max(timeout, 300.0),
        on_response=errors.hook,
    )
    stack = contextlib.AsyncExitStack()
    try:
        read, write = await stack.enter_async_context(connection)
        session = await stack.enter_async_context(_compat.new_session(read, write, timeout))
        with anyio.fail_after(timeout):
            await session.initialize()
    except BaseException as exc:
        # Close first: a transport failure cancels initialize() and only the closing
        # task group says what went wrong (for example a refused connection).
        close_error: BaseException | None = None
        try:
            await stack.aclose()
        except BaseException as err:  # noqa: BLE001 - translated or re-raised below
            close_error = err
        for cause in (close_error, exc):
            translated = None if cause is None else _translate(cause, url, errors)
            if translated is not None:
                raise translated from cause
        raise
    try:
        async with stack:
            yield session, errors
    except BaseException as exc:
        # The SDK's task group wraps what the caller's block raised in an exception group;
        # hand a lone exception back as itself.
        leaves = _exceptions_of(exc)
        if len(leaves) == 1 and leaves[0] is not exc:
            raise leaves[0] from None
        raise


@contextlib.asynccontextmanager
async def open_session(
    url: str,
    *,
    timeout: float = DEFAULT_MCP_TIMEOUT,
    headers: Mapping[str, str] | None = None,
) -> AsyncIterator[ClientSession]:
    """Open an initialised MCP session with the server at ``url`` (Streamable HTTP).

    ``timeout`` bounds connecting and initialising, and each answer of the session;
    ``headers`` are sent with every request (a sandbox's MCP URL needs none). Errors while
    opening the session are translated (see the module docs); inside the ``async with``
    block the session is the SDK's own and raises its own errors (``mcp.MCPError``; under
    ``mcp`` 1.x, ``mcp.shared.exceptions.McpError``).
    """
    async with _open(url, timeout, headers) as (session, _errors):
        yield session


def _tool_result(tool: str, raw: Any) -> ToolResult:
    content, is_error, structured = _compat.result_fields(raw)
    text = "\n".join(str(block.text) for block in content if getattr(block, "type", "") == "text")
    return ToolResult(
        tool=tool, text=text, is_error=is_error, structured=structured, content=content
    )


async def _all_tools(session: ClientSession) -> list[ToolInfo]:
    """Every tool of the session's server, in the server's order (all pages)."""
    tools: list[ToolInfo] = []
    cursor: str | None = None
    while True:
        page, cursor = await _compat.list_tools_page(session, cursor)
        for tool in page:
            name, description, input_schema, output_schema = _compat.tool_fields(tool)
            tools.append(ToolInfo(name, description, input_schema, output_schema))
        if not cursor:
            return tools


def _tool_call(
    tool: str, arguments: Mapping[str, Any] | None
) -> Callable[[ClientSession], Awaitable[ToolResult]]:
    """The work of calling ``tool`` with ``arguments`` in a session."""
    payload = dict(arguments or {})

    async def work(session: ClientSession) -> ToolResult:
        return _tool_result(tool, await session.call_tool(tool, payload))

    return work


async def _one_shot(
    url: str,
    work: Callable[[ClientSession], Awaitable[T]],
    *,
    timeout: float,
    headers: Mapping[str, str] | None,
) -> T:
    """Open a session, run ``work`` in it, close it; ``timeout`` bounds the whole."""
    import anyio

    errors = _HttpErrors()
    try:
        with anyio.fail_after(timeout):
            async with _open(url, timeout, headers) as (session, errors):
                return await work(session)
    except KlavisError:
        raise
    except BaseException as exc:
        translated = _translate(exc, url, errors)
        if translated is None:
            raise
        raise translated from exc


async def async_list_tools(
    url: str,
    *,
    timeout: float = DEFAULT_MCP_TIMEOUT,
    headers: Mapping[str, str] | None = None,
) -> list[ToolInfo]:
    """The tools of the MCP server at ``url``, in the server's order (all pages)."""
    return await _one_shot(url, _all_tools, timeout=timeout, headers=headers)


async def async_call_tool(
    url: str,
    tool: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    timeout: float = DEFAULT_MCP_TIMEOUT,
    headers: Mapping[str, str] | None = None,
) -> ToolResult:
    """Call ``tool`` with ``arguments`` on the MCP server at ``url``; ``timeout`` bounds it all.

    A tool that fails is returned with ``is_error=True`` (see :meth:`ToolResult.raise_for_error`);
    a JSON-RPC error answer raises :class:`McpError`.
    """

    return await _one_shot(url, _tool_call(tool, arguments), timeout=timeout, headers=headers)


def _run_in_thread(factory: Callable[[], Awaitable[T]], timeout: float) -> T:
    """Run a coroutine on a new event loop in a helper thread and wait for its result."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        async def main() -> T:
            return await factory()

        try:
            outcome["value"] = asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = exc

    # in the caller's context: its current span (a traced call's) is the MCP client's parent
    context = contextvars.copy_context()
    worker = threading.Thread(target=context.run, args=(target,), name="workflows-mcp", daemon=True)
    worker.start()
    worker.join(2 * timeout + 30.0)  # the work is bounded by timeout, its cleanup too
    if worker.is_alive():
        raise ApiTimeoutError("the MCP call did not finish in time")
    if "error" in outcome:
        error: BaseException = outcome["error"]
        raise error
    value: T = outcome["value"]
    return value


def _blocking(fn: Callable[P, Awaitable[T]]) -> Callable[P, T]:
    """``fn`` made blocking: run on an event loop of its own in a helper thread, so it is safe
    in notebooks and inside a running loop; waits at most about twice its ``timeout=``."""

    @functools.wraps(fn)
    def blocking(*args: P.args, **kwargs: P.kwargs) -> T:
        timeout = kwargs.get("timeout", DEFAULT_MCP_TIMEOUT)
        assert isinstance(timeout, int | float)
        return _run_in_thread(lambda: fn(*args, **kwargs), timeout)

    blocking.__name__ = blocking.__qualname__ = fn.__name__.removeprefix("async_")
    return blocking


list_tools = _blocking(async_list_tools)
call_tool = _blocking(async_call_tool)


class McpSession:
    """A blocking MCP session with one server, open for many calls: MCP for plain scripts.

    >>> with sb.mcp_session("git") as git:  # doctest: +SKIP
    ...     print([t.name for t in git.list_tools()][:2])
    ...     print(git.call_tool("git_status", {"repo_path": "/data"}).text)

    The session (the ``mcp`` SDK's async ``ClientSession``, as ``sb.mcp(...)`` gives async
    code) lives on an event loop of its own in a helper thread, from :meth:`open` (or entering
    ``with``) to :meth:`close` (or leaving it); each call waits for its answer. One session
    saves the connection and initialisation that every ``sb.call_tool(...)`` pays (20 calls to
    the emulator's filesystem server: 7.2 s one by one, 0.9 s in one session; ``scripts/bench
    --only mcp`` measures it as ``mcp_session_speedup``). Errors are
    those of the module's conveniences (:class:`McpError`, :class:`ApiConnectionError`, a
    tool's failure in ``ToolResult.is_error``...); ``timeout`` bounds opening and each call.
    Calls from several threads are allowed (the SDK multiplexes them).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = DEFAULT_MCP_TIMEOUT,
        headers: Mapping[str, str] | None = None,
        _span_attributes: Mapping[str, Any] | None = None,
    ) -> None:
        """Prepare a session with the server at ``url`` (see :meth:`open`). (``_span_attributes``,
        private: what its calls' spans say of the sandbox and server, when tracing is on.)"""
        self._url = url
        self._span_attributes = dict(_span_attributes or {})
        self._timeout = timeout
        self._headers = dict(headers or {})
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._session: ClientSession | None = None
        self._errors = _HttpErrors()
        self._live = False
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._live else "not open"
        return f"McpSession({_redacted(self._url)[0]!r}, {state})"

    @property
    def _wait(self) -> float:
        return 2 * self._timeout + 30.0  # the work is bounded by timeout, its cleanup too

    def open(self) -> McpSession:
        """Connect and initialise the session (done by ``with``); returns the session."""
        with self._lock:
            if self._thread is not None:
                raise InvalidInputError("this MCP session was opened already; make a new one")
            ready: concurrent.futures.Future[None] = concurrent.futures.Future()
            self._thread = threading.Thread(
                target=asyncio.run,
                args=(self._serve(ready),),
                name="workflows-mcp-session",
                daemon=True,
            )
        self._thread.start()
        try:
            ready.result(self._wait)
        except concurrent.futures.TimeoutError:
            self.close()
            raise ApiTimeoutError("the MCP session did not open in time") from None
        except BaseException:
            self.close()  # the helper thread ends with the failed opening: wait for it
            raise
        return self

    async def _serve(self, ready: concurrent.futures.Future[None]) -> None:
        """The helper thread's one task: open the session, hold it until told to stop."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            async with _open(self._url, self._timeout, self._headers) as (session, errors):
                self._session, self._errors = session, errors
                with self._lock:
                    self._live = True
                ready.set_result(None)
                await self._stop.wait()
                with self._lock:
                    self._live = False
        except BaseException as exc:  # noqa: BLE001 - handed to open(), or the end of the session
            with self._lock:
                self._live = False
            if not ready.done():
                ready.set_exception(exc)
            # else the connection ended on its own: the calls in flight fail, later ones too

    def _run(self, work: Callable[[ClientSession], Awaitable[T]]) -> T:
        with self._lock:
            if not self._live or self._loop is None:
                state = "was closed" if self._closed or self._thread else "is not open"
                lost = not self._closed and self._thread is not None  # it ended on its own
                raise McpError(f"the MCP session {state}; open a new one", connection_lost=lost)
            future = asyncio.run_coroutine_threadsafe(self._guarded(work), self._loop)
        try:
            return future.result(self._wait)
        except concurrent.futures.CancelledError:
            raise McpError("the MCP session ended during the call", connection_lost=True) from None
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ApiTimeoutError("the MCP call did not finish in time") from None

    async def _guarded(self, work: Callable[[ClientSession], Awaitable[T]]) -> T:
        import anyio

        assert self._session is not None
        try:
            with anyio.fail_after(self._timeout):
                return await work(self._session)
        except KlavisError:
            raise
        except BaseException as exc:
            translated = _translate(exc, self._url, self._errors)
            if translated is None:
                raise
            raise translated from exc

    @traced_call("klavis.mcp.list_tools", session_start)
    def list_tools(self) -> list[ToolInfo]:
        """The tools of the server, in its order (all pages)."""
        return self._run(_all_tools)

    @traced_call("klavis.mcp.call_tool", session_start)
    def call_tool(self, tool: str, arguments: Mapping[str, Any] | None = None) -> ToolResult:
        """Call ``tool``; a tool's own failure comes back with ``is_error`` set (see
        :meth:`ToolResult.raise_for_error`), a JSON-RPC error raises :class:`McpError`."""
        return self._run(_tool_call(tool, arguments))

    def close(self) -> None:
        """End the session and its thread (idempotent; done by leaving ``with``)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None:
            return
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop ended already
                loop.call_soon_threadsafe(stop.set)
        thread.join(self._wait)

    def __enter__(self) -> McpSession:
        if self._thread is None:
            self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
