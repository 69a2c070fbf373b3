"""The emulator's HTTP layer: :func:`create_app` builds a FastAPI app over :class:`EmulatorState`.

The app is assembled here (lifespan, middleware, the routers of :mod:`._routes`, error
handlers, the MCP host); the routes themselves are thin and live in ``_routes/``, the
middleware in ``_middleware`` (and fault injection in ``_faults``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import fastapi.routing
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Scope

from ._archive import ArchiveRejected, ArchiveTooLarge
from ._config import EmulatorConfig
from ._faults import FaultInjectionMiddleware, FaultSettings
from ._middleware import BearerAuthMiddleware, ControlAccessMiddleware, StrictJsonMiddleware
from ._routes import ROUTERS
from ._routes._shared import error_response
from ._signing import SignatureError
from ._state import EmulatorError, EmulatorState, tenant_for_token

__all__ = ["create_app"]

logger = logging.getLogger("klavis_emulator")

_iter_route_contexts: Callable[[Sequence[BaseRoute]], Iterator[Any]] | None = getattr(
    fastapi.routing, "iter_route_contexts", None
)  # FastAPI >= 0.137.2; see _allowed_methods


def create_app(config: EmulatorConfig | None = None) -> FastAPI:
    """Build the emulator's FastAPI application from ``config`` (default: every default;
    see :class:`~klavis_emulator.EmulatorConfig` for what each tunable does).

    The state is reachable as ``app.state.emulator`` (an :class:`EmulatorState`), so other
    modules can subscribe to it (:meth:`EmulatorState.add_listener`) and mount their own
    ASGI apps on the returned app; ``app.state.faults`` holds the live fault settings and
    ``app.state.config`` the config.
    """
    config = config if config is not None else EmulatorConfig()
    state = EmulatorState(config)
    faults = FaultSettings()
    faults.configure(
        rate=config.fault_rate,
        mode=config.fault_mode,
        latency_ms=config.latency_ms,
        seed=config.fault_seed,
    )
    api_keys = config.api_keys
    allowed = None if api_keys is None else frozenset(tenant_for_token(k) for k in api_keys)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        state.close()

    app = FastAPI(
        title="Klavis local-sandbox emulator",
        version="0.1.0",
        description="A local implementation of the Klavis /local-sandbox API for tests.",
        lifespan=lifespan,
    )
    app.state.emulator = state
    app.state.faults = faults
    app.state.config = config
    app.add_middleware(StrictJsonMiddleware)
    app.add_middleware(BearerAuthMiddleware, allowed_tenants=allowed)
    app.add_middleware(ControlAccessMiddleware, token=config.control_token)
    app.add_middleware(FaultInjectionMiddleware, settings=faults)
    _install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)

    if config.host_mcp:
        from ._mcp import install_mcp  # fastmcp is heavy: only when MCP is served

        install_mcp(
            app,
            state,
            start_at_acquire=config.mcp_at_acquire,
            install=config.install_mcp_servers,
            spares=config.mcp_spares,
            fork_servers=config.mcp_fork_servers,
        )
    return app


def _install_error_handlers(app: FastAPI) -> None:
    statuses: tuple[tuple[type[Exception], int], ...] = (
        (ArchiveTooLarge, 413),
        (ArchiveRejected, 400),
        (SignatureError, 403),
    )
    for exc_type, status in statuses:
        app.add_exception_handler(exc_type, _handler_for(status))

    async def state_error(request: Request, exc: Exception) -> JSONResponse:
        status = exc.status if isinstance(exc, EmulatorError) else 400
        return error_response(status, str(exc))

    app.add_exception_handler(EmulatorError, state_error)  # each says its status

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(500, f"Internal emulator error ({type(exc).__name__}).")

    app.add_exception_handler(Exception, unexpected)

    async def method_not_allowed(request: Request, exc: Exception) -> JSONResponse:
        allowed = sorted(_allowed_methods(app.router.routes, request.scope))
        return error_response(
            405,
            f"Method {request.method} is not allowed here; allowed: "
            f"{', '.join(allowed) or 'none'}.",
            headers={"Allow": ", ".join(allowed)},
        )

    app.add_exception_handler(405, method_not_allowed)


def _allowed_methods(routes: Sequence[BaseRoute], scope: Scope) -> set[str]:
    """The methods of every route, in every included router, whose path matches the request.

    Since FastAPI 0.137, ``include_router`` keeps each router as one node of ``app.routes``
    (no ``path``, no ``methods``; its routes carry their paths without the prefix), so the
    walk goes through :func:`fastapi.routing.iter_route_contexts`, which yields every route
    with its full path. Older FastAPI copied each route into ``app.routes``, and has no such
    function. Mounts (the MCP host) answer their own methods and are left out.
    """
    walked: Iterable[tuple[Any, BaseRoute]]
    if _iter_route_contexts is None:
        walked = ((route, route) for route in routes)
    else:
        walked = ((context, context.original_route) for context in _iter_route_contexts(routes))
    allowed: set[str] = set()
    for route, original in walked:
        match, _ = route.matches(scope)
        if match is not Match.NONE and isinstance(original, APIRoute | Route):
            allowed.update(route.methods or ())
    return allowed


def _handler_for(status: int) -> Any:
    async def handler(request: Request, exc: Exception) -> JSONResponse:
        return error_response(status, str(exc))

    return handler
