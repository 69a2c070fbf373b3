"""The differences between the ``mcp`` SDK's 1.x (1.12 or newer) and 2.x lines, written once.

Why both: benchmark harnesses pin ``mcp`` 1.x (MCP-Atlas and MCPMark lock 1.12.1, Klavis's
notebooks use the 1.x three-value ``streamablehttp_client``), and installing
``klavis-sandbox[mcp]`` beside them must not break them. So :mod:`workflows._mcp` works with
``mcp>=1.12,<3``, and this module is the only place that knows which line is installed.
``scripts/test`` runs the MCP tests under both (1.12.1, and the 2.x of the dev install).

What differs (read from the 1.12.1 and 2.3 sources), 1.x first:

- the Streamable HTTP transport: ``streamablehttp_client(url, headers, timeout,
  sse_read_timeout, httpx_client_factory=...)`` yielding ``(read, write, get_session_id)``,
  over ``httpx`` clients it builds through the factory; 2.x: ``streamable_http_client(url,
  http_client=...)`` yielding ``(read, write)``, over the caller's ``httpx2`` client;
- a JSON-RPC error answer: ``mcp.shared.exceptions.McpError``; 2.x: ``mcp.MCPError``;
- ``ClientSession``'s read timeout: a ``timedelta``; 2.x: seconds;
- the next page of tools: ``list_tools(cursor=...)``; 2.x: ``list_tools(params=
  PaginatedRequestParams(cursor=...))``;
- the models' attributes: camelCase (``inputSchema``, ``isError``, ``structuredContent``,
  ``nextCursor``); 2.x: snake_case (``input_schema``, ``is_error``, ...).

Both lines keep ``.error.code`` on their error and the same content blocks. The SDK's
objects are typed ``Any`` here: mypy sees the 2.x of the dev install only, and the 1.x names
are reached through :func:`importlib.import_module` rather than ignored type errors.
Nothing here imports ``mcp`` before it is used: ``import workflows`` stays fast.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ._errors import ConfigurationError, MissingExtraError
from ._tls import shared_ssl_context

if TYPE_CHECKING:
    from mcp import ClientSession

__all__ = [
    "SUPPORTED",
    "ToolFields",
    "http_errors",
    "is_legacy",
    "jsonrpc_error_code",
    "list_tools_page",
    "new_session",
    "result_fields",
    "streams",
    "tool_fields",
]

SUPPORTED = "mcp>=1.12,<3"
"""The requirement of the ``mcp`` extra, named in error messages."""

ResponseHook = Callable[[Any], Awaitable[None]]
"""An httpx/httpx2 response event hook (the two libraries' ``Response`` share the API used)."""

ToolFields = tuple[str, "str | None", dict[str, Any], "dict[str, Any] | None"]
"""A tool's name, description, input schema and output schema."""


def _installed(name: str) -> str | None:
    """The installed version of the distribution ``name``, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _parse(text: str) -> tuple[int, int]:
    major, minor = ([int(p) if p.isdigit() else 0 for p in text.split(".")] + [0, 0])[:2]
    return major, minor


def _unsupported(text: str) -> ConfigurationError | None:
    if (1, 12) <= _parse(text) < (3, 0):
        return None
    return ConfigurationError(f"workflows needs {SUPPORTED}, found mcp {text}")


def _broken(exc: ImportError, installed: str | None) -> ConfigurationError:
    """The error for an ``mcp`` that is installed but fails to import: the real cause, the
    versions involved and the fix, rather than "install the extra" (which is done)."""
    pydantic = _installed("pydantic")
    cause = f"{type(exc).__name__}: {exc}"
    found = f"mcp {installed or '(version unknown)'}, pydantic {pydantic or '(not installed)'}"
    if (exc.name or "").startswith("pydantic") or "pydantic" in str(exc):
        # mcp up to 1.12.x imports pydantic._internal._typing_extra.eval_type_backport,
        # which pydantic 2.12 removed (measured: 1.12.1 with 2.11.7 works, with 2.14 fails)
        fix = "pip install 'pydantic<2.12' (or an mcp release made for your pydantic)"
    else:
        fix = f"pip install --force-reinstall '{SUPPORTED}'"
    return ConfigurationError(
        f"talking to MCP servers: mcp is installed but cannot be imported ({found}): "
        f"{cause}; fix: {fix}"
    )


@functools.cache
def _version() -> tuple[int, int]:
    """The installed ``mcp``'s (major, minor).

    Raises MissingExtraError when ``mcp`` is not installed, ConfigurationError when its version
    is unsupported or it is installed but fails to import (a dependency it needs is missing or
    changed: the message names the exception, the mcp and pydantic versions and the fix).
    """
    try:
        import mcp.client.streamable_http  # noqa: F401
    except ImportError as exc:
        installed = _installed("mcp")
        if exc.name == "mcp" and installed is None:  # not installed: the extra says all
            raise MissingExtraError(
                "talking to MCP servers", extra="mcp", detail=f" ({SUPPORTED})"
            ) from None
        wrong = None if installed is None else _unsupported(installed)
        raise (wrong or _broken(exc, installed)) from exc
    text = importlib.metadata.version("mcp")
    wrong = _unsupported(text)
    if wrong is not None:
        raise wrong
    return _parse(text)


def is_legacy() -> bool:
    """Whether the installed ``mcp`` is a 1.x (the 1.x names and shapes apply)."""
    return _version()[0] == 1


def _http() -> Any:
    """The HTTP library of the installed SDK: ``httpx`` under 1.x, ``httpx2`` under 2.x."""
    return importlib.import_module("httpx" if is_legacy() else "httpx2")


def http_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """The SDK's HTTP library's (timeout, transport) exception classes, builtins included."""
    http = _http()
    return (http.TimeoutException, TimeoutError), (http.TransportError, OSError)


def jsonrpc_error_code(exc: BaseException) -> int | None:
    """The code of ``exc`` if it is the SDK's JSON-RPC error answer, else None."""
    if is_legacy():
        error_class: Any = importlib.import_module("mcp.shared.exceptions").McpError
    else:
        from mcp import MCPError as error_class
    if not isinstance(exc, error_class):
        return None
    answer: Any = exc  # both lines keep the ErrorData as .error
    return int(answer.error.code)


@contextlib.asynccontextmanager
async def streams(
    url: str,
    *,
    headers: Mapping[str, str] | None,
    timeout: float,
    read_timeout: float,
    on_response: ResponseHook,
) -> AsyncIterator[tuple[Any, Any]]:
    """The (read, write) streams of a Streamable HTTP connection to ``url``.

    ``timeout`` bounds connecting and writing, ``read_timeout`` each read; ``on_response`` sees
    every HTTP response. Under 1.x the SDK builds its client through our factory (with the
    redirect-following 1.x default); under 2.x it uses ours (2.x follows same-origin redirects
    itself). The 1.x session-id callback is dropped: no caller needs it.
    """
    http = _http()
    hooks = {"response": [on_response]}
    if is_legacy():
        transport = importlib.import_module("mcp.client.streamable_http")

        def factory(
            headers: dict[str, str] | None = None,
            timeout: Any = None,
            auth: Any = None,
        ) -> Any:
            return http.AsyncClient(
                headers=headers,
                timeout=timeout,
                auth=auth,
                event_hooks=hooks,
                follow_redirects=True,
                verify=shared_ssl_context(http.__name__),
            )

        async with transport.streamablehttp_client(
            url,
            headers=dict(headers or {}),
            timeout=timeout,
            sse_read_timeout=read_timeout,
            httpx_client_factory=factory,
        ) as (read, write, _get_session_id):
            yield read, write
        return
    from mcp.client.streamable_http import streamable_http_client

    async with (
        http.AsyncClient(
            headers=dict(headers or {}),
            timeout=http.Timeout(timeout, read=read_timeout),
            event_hooks=hooks,
            verify=shared_ssl_context(http.__name__),
        ) as client,
        streamable_http_client(url, http_client=client) as (read, write),
    ):
        yield read, write


def new_session(read: Any, write: Any, timeout: float) -> ClientSession:
    """A (not yet entered) ``ClientSession`` whose every answer is awaited ``timeout`` seconds."""
    from mcp import ClientSession

    if is_legacy():
        # 1.x takes a timedelta (mypy sees 2.x's float)
        wait = timedelta(seconds=timeout)
        return ClientSession(read, write, read_timeout_seconds=wait)  # type: ignore[arg-type]
    return ClientSession(read, write, read_timeout_seconds=timeout)


async def list_tools_page(
    session: ClientSession, cursor: str | None
) -> tuple[list[Any], str | None]:
    """One page of the session's tools (from ``cursor``, or the first) and the next cursor."""
    if is_legacy():
        # 1.x names the cursor (mypy sees 2.x's params)
        page: Any = await session.list_tools(cursor=cursor)  # type: ignore[call-arg]
        return list(page.tools), page.nextCursor
    from mcp.types import PaginatedRequestParams

    params = None if cursor is None else PaginatedRequestParams(cursor=cursor)
    result = await session.list_tools(params=params)
    return list(result.tools), result.next_cursor


def tool_fields(tool: Any) -> ToolFields:
    """A tool's name, description, input schema and output schema (copied as dicts)."""
    if is_legacy():
        schema, output = tool.inputSchema, tool.outputSchema
    else:
        schema, output = tool.input_schema, tool.output_schema
    return tool.name, tool.description, dict(schema), None if output is None else dict(output)


def result_fields(raw: Any) -> tuple[tuple[Any, ...], bool, Any]:
    """A tool call result's content blocks, error flag and structured content."""
    if is_legacy():
        return tuple(raw.content), bool(raw.isError), raw.structuredContent
    return tuple(raw.content), bool(raw.is_error), raw.structured_content
