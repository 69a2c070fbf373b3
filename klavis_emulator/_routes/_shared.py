"""What the routers share: the caller's tenant, the state, the base of signed and MCP URLs,
the region query, the contract's error answers, and :func:`api_router` for contract routes.

Routes reach the state through dependencies (``app.state.emulator``, ``app.state.faults``,
``app.state.config``, set by :func:`~klavis_emulator.create_app`), never through closures,
so each router is built once, at import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

from fastapi import APIRouter, Depends, Query, Request, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer

from .._config import EmulatorConfig
from .._faults import FaultSettings
from .._middleware import API_PREFIX
from .._schemas import ErrorResponse
from .._signing import SignedUrl
from .._state import EmulatorState

__all__ = [
    "API_ERRORS",
    "BaseUrl",
    "Caller",
    "Asker",
    "Faults",
    "RegionQuery",
    "State",
    "Tenant",
    "api_router",
    "error_response",
    "signed_answer",
]

API_ERRORS: Final[dict[int | str, dict[str, Any]]] = {
    401: {"model": ErrorResponse, "description": "Missing, empty or unknown bearer token"},
    404: {"model": ErrorResponse, "description": "No such sandbox for this API key"},
}
"""The answers every contract route may give (each router adds its own)."""

_BEARER: Final = Security(HTTPBearer(auto_error=False, description="Your API key (any for tests)."))


def api_router() -> APIRouter:
    """A router for contract routes, under ``/local-sandbox``: the bearer scheme (checked by
    :class:`~klavis_emulator._middleware.BearerAuthMiddleware`), :data:`API_ERRORS` and the
    ``local-sandbox`` tag, set once for all its routes."""
    return APIRouter(
        prefix=API_PREFIX,
        tags=["local-sandbox"],
        dependencies=[_BEARER],
        responses=API_ERRORS,
    )


def error_response(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """A JSON answer ``{"detail": ...}`` with ``status``."""
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def _tenant(request: Request) -> str:
    tenant: str = request.state.tenant
    return tenant


async def _state(request: Request) -> EmulatorState:
    state: EmulatorState = request.app.state.emulator
    return state


async def _faults(request: Request) -> FaultSettings:
    faults: FaultSettings = request.app.state.faults
    return faults


async def _base_url(request: Request) -> str:
    config: EmulatorConfig = request.app.state.config
    return (config.public_url or str(request.base_url)).rstrip("/")


Tenant = Annotated[str, Depends(_tenant)]
"""The caller's tenant (a hash of its API key, put there by the auth middleware)."""
State = Annotated[EmulatorState, Depends(_state)]
"""The emulator's state."""
Faults = Annotated[FaultSettings, Depends(_faults)]
"""The live fault-injection settings."""
BaseUrl = Annotated[str, Depends(_base_url)]
"""The base of signed and MCP URLs: ``public_url``, or the request's own."""
RegionQuery = Annotated[
    Literal["us", "asia"], Query(description="Storage region of the signed URL (us or asia).")
]


@dataclass(frozen=True)
class Asker:
    """Who asks (its tenant), the state it asks, and the base of the URLs it is given."""

    tenant: str
    state: EmulatorState
    base_url: str


async def _asker(tenant: Tenant, state: State, base_url: BaseUrl) -> Asker:
    return Asker(tenant, state, base_url)


Caller = Annotated[Asker, Depends(_asker)]
"""The tenant, the state and the base URL at once (the routes that answer signed URLs)."""


def signed_answer(field: str, signed: SignedUrl) -> dict[str, Any]:
    """The contract's answer carrying a signed URL: ``{field: url, "expires_in_minutes": n}``."""
    return {field: signed.url, "expires_in_minutes": signed.expires_in_minutes}
