"""HTTP plumbing shared by the sync and async faces: auth, logging, error mapping, clients.

Nothing here performs I/O of its own except the event hooks, which run inside httpx's calls.
This module is the HTTP layer's, with :mod:`._drivers` and :mod:`._transfer`: imported on the
first request (a driver made), not with ``workflows`` (httpx and the generated client's attrs
cost more than the rest of ``import workflows``). What must work without httpx lives beside
what it serves: the retry policy (:func:`~workflows._errors.retry_backoff`) with the error
tree, the log redaction (:mod:`._redaction`) in a module of its own.
"""

from __future__ import annotations

import email.utils
import logging
import re
import time
from collections.abc import Generator
from datetime import datetime, timezone
from typing import Any

import httpx

from ._config import ApiKey, Settings
from ._errors import (
    ApiConnectionError,
    ApiError,
    ApiTimeoutError,
    error_from_status,
)
from ._redaction import redact_url
from ._tls import shared_ssl_context

__all__ = [
    "BearerAuth",
    "after_retries",
    "api_hooks",
    "async_api_hooks",
    "connection_error",
    "exit_client",
    "make_async_client",
    "make_sync_client",
    "parse_retry_after",
    "sandbox_id_from_path",
]

log = logging.getLogger("workflows")

_START = "workflows_started"
_SANDBOX_PATH = re.compile(
    r"/local-sandbox/(?:(?:google_cloud|poste_email_toolathlon|canvas)/)?([^/]+)"
)


class BearerAuth(httpx.Auth):
    """Adds ``Authorization: Bearer <key>`` to API requests; its repr hides the key."""

    def __init__(self, key: ApiKey) -> None:
        self._key = key

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._key.reveal()}"
        yield request

    def __repr__(self) -> str:
        return "BearerAuth('********')"


def sandbox_id_from_path(path: str) -> str | None:
    """The sandbox id an API path is about, if any.

    >>> sandbox_id_from_path("/local-sandbox/abc/dump"), sandbox_id_from_path("/local-sandbox")
    ('abc', None)
    """
    match = _SANDBOX_PATH.search(path)
    return match.group(1) if match else None


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date), capped at 60.

    >>> parse_retry_after("3"), parse_retry_after(None), parse_retry_after("soon")
    (3.0, None, None)
    """
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        current = datetime.now(timezone.utc).timestamp() if now is None else now
        seconds = when.timestamp() - current
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), 60.0)


def connection_error(
    exc: httpx.TransportError, request: httpx.Request | None
) -> ApiConnectionError:
    """Translate an httpx transport failure into our error, without the query string."""
    method = request.method if request is not None else None
    path = request.url.path if request is not None else None
    where = f"{method} {redact_url(request.url)}" if request is not None else "the API"
    if isinstance(exc, httpx.TimeoutException):
        return ApiTimeoutError(f"timed out talking to {where}", method=method, path=path)
    return ApiConnectionError(
        f"could not reach {where}: {type(exc).__name__}: {exc}", method=method, path=path
    )


def after_retries(exc: ApiConnectionError, attempts: int, seconds: float) -> ApiConnectionError:
    """``exc`` again (same class, method and path), its message saying what was tried.

    >>> str(after_retries(ApiConnectionError("could not reach GET /x"), 5, 2.34))
    'could not reach GET /x (5 attempts over 2.3 s)'
    """
    if attempts < 2:
        return exc
    return type(exc)(
        f"{exc} ({attempts} attempts over {seconds:.1f} s)", method=exc.method, path=exc.path
    )


def _on_request(request: httpx.Request) -> None:
    request.extensions[_START] = time.perf_counter()


def _elapsed_ms(request: httpx.Request) -> float:
    started = request.extensions.get(_START)
    return (time.perf_counter() - started) * 1000 if isinstance(started, float) else 0.0


def _error_for(response: httpx.Response) -> ApiError:
    request = response.request
    body: Any
    try:
        body = response.json()
    except ValueError:
        body = response.text
    return error_from_status(
        response.status_code,
        body,
        sandbox_id=sandbox_id_from_path(request.url.path),
        method=request.method,
        path=request.url.path,
        retry_after=parse_retry_after(response.headers.get("Retry-After")),
    )


def _log_response(response: httpx.Response) -> None:
    if not log.isEnabledFor(logging.DEBUG):
        return
    request = response.request
    signed = "authorization" not in request.headers
    log.debug(
        "%s %s -> %d in %.0f ms",
        request.method,
        redact_url(request.url) if signed else str(request.url),
        response.status_code,
        _elapsed_ms(request),
    )


def _on_response(response: httpx.Response) -> None:
    _log_response(response)
    if response.status_code >= 400:
        response.read()
        raise _error_for(response)


async def _aon_request(request: httpx.Request) -> None:
    _on_request(request)


async def _aon_response(response: httpx.Response) -> None:
    _log_response(response)
    if response.status_code >= 400:
        await response.aread()
        raise _error_for(response)


def api_hooks() -> dict[str, list[Any]]:
    """Event hooks of the sync API client: time, log, and raise our error on any status >= 400."""
    return {"request": [_on_request], "response": [_on_response]}


def async_api_hooks() -> dict[str, list[Any]]:
    """Event hooks of the async API client: time, log, and raise our error on any status
    >= 400."""
    return {"request": [_aon_request], "response": [_aon_response]}


def _limits() -> httpx.Limits:
    return httpx.Limits(max_connections=64, max_keepalive_connections=32)


def _timeout(settings: Settings) -> httpx.Timeout:
    """Per operation (connect, each read, each write). Downloads also bound the whole transfer
    when given ``timeout=``, or otherwise end below a minimum speed (see
    ``workflows._transfer.DownloadGuard``); uploads, whose size the caller chose, do neither."""
    return httpx.Timeout(settings.timeout, connect=min(settings.timeout, 15.0))


def _client_options(settings: Settings, *, authenticated: bool) -> dict[str, Any]:
    """What both clients are made with, but their event hooks: for the API (base URL, bearer
    auth) or, unauthenticated, for signed URLs."""
    options: dict[str, Any] = {
        "timeout": _timeout(settings),
        "limits": _limits(),
        "verify": shared_ssl_context(),
        "headers": {"User-Agent": "klavis-sandbox-workflows"},
    }
    if authenticated:
        options.update(base_url=settings.base_url, auth=BearerAuth(settings.api_key))
    return options


def exit_client(settings: Settings, timeout: float) -> httpx.Client:
    """A plain client for the release at interpreter exit (:mod:`workflows._ownership._registry`):
    bearer auth, one timeout for everything, no hooks, no shared pool (the event loop or the
    pooled clients may be gone by then)."""
    return httpx.Client(
        base_url=settings.base_url, auth=BearerAuth(settings.api_key), timeout=timeout
    )


def make_sync_client(settings: Settings, *, authenticated: bool = True) -> httpx.Client:
    """An httpx client for the API (bearer auth, hooks) or, unauthenticated, for signed URLs."""
    hooks: dict[str, list[Any]] = (
        api_hooks() if authenticated else {"request": [_on_request], "response": [_log_response]}
    )
    return httpx.Client(event_hooks=hooks, **_client_options(settings, authenticated=authenticated))


def make_async_client(settings: Settings, *, authenticated: bool = True) -> httpx.AsyncClient:
    """An asyncio httpx client for the API (bearer auth, hooks) or, unauthenticated, for
    signed URLs."""

    async def _alog(response: httpx.Response) -> None:
        _log_response(response)

    hooks: dict[str, list[Any]] = (
        async_api_hooks() if authenticated else {"request": [_aon_request], "response": [_alog]}
    )
    options = _client_options(settings, authenticated=authenticated)
    return httpx.AsyncClient(event_hooks=hooks, **options)
