"""The emulator's own control routes under ``/_emulator``: health, fault injection, the clock,
the MCP host's background work.

Everything here but ``GET /_emulator/health`` is guarded by
:class:`~klavis_emulator._middleware.ControlAccessMiddleware` (loopback clients, or the control
token); none of it needs an API key.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from .._clock import isoformat
from .._middleware import CONTROL_PREFIX
from .._schemas import ClockAdvanceRequest, ErrorResponse, FaultSettingsRequest
from ._shared import Faults, State, error_response

__all__ = ["router"]

router = APIRouter(prefix=CONTROL_PREFIX, tags=["emulator"])


@router.get("/health")
def health() -> dict[str, str]:
    """Liveness probe."""
    return {"status": "ok"}


@router.get("/faults")
async def get_faults(faults: Faults) -> dict[str, object]:
    """The current fault-injection settings."""
    return faults.as_dict()


@router.post("/faults")
async def set_faults(body: FaultSettingsRequest, faults: Faults) -> dict[str, object]:
    """Change fault injection at run time (omitted fields keep their value)."""
    faults.configure(**body.model_dump())  # the body's fields are configure's keywords
    return faults.as_dict()


@router.get("/clock")
def get_clock(state: State) -> dict[str, object]:
    """The emulator clock's current time."""
    now = state.now()
    return {"time": now, "now": isoformat(now)}


@router.get("/mcp")
async def mcp_status(request: Request) -> dict[str, object]:
    """What the MCP host runs: sandboxes' servers, whether it is starting servers in the
    background, the spare server sets ready (for benchmarks and tests, which wait for the
    background work to end between measurements)."""
    host = getattr(request.app.state, "mcp", None)
    if host is None:
        return {"hosted": False}
    status: dict[str, object] = {"hosted": True, **host.status()}
    return status


@router.post("/clock/advance", responses={409: {"model": ErrorResponse}})
def advance_clock(body: ClockAdvanceRequest, state: State) -> Any:
    """Move the emulator clock forward (expires TTLs and signed URLs at once)."""
    try:
        now = state.advance_clock(body.seconds)
    except TypeError:
        return error_response(409, "This emulator's clock cannot be moved.")
    return {"time": now, "now": isoformat(now)}
