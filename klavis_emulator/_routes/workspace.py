"""Routes of the workspace archive: a signed upload URL, extract it, dump the workspace."""

from __future__ import annotations

from typing import Any

from .._schemas import DumpUrlResponse, ErrorResponse, InitializeSandboxResponse, UploadUrlResponse
from ._shared import Caller, RegionQuery, State, Tenant, api_router, signed_answer

__all__ = ["router"]

router = api_router()


@router.post("/{local_sandbox_id}/upload-url", response_model=UploadUrlResponse)
def get_upload_url(
    local_sandbox_id: str, caller: Caller, region: RegionQuery = "us"
) -> dict[str, Any]:
    """A signed URL to PUT the workspace tar.gz to."""
    signed = caller.state.upload_url(caller.tenant, local_sandbox_id, region, caller.base_url)
    return signed_answer("upload_url", signed)


@router.post(
    "/{local_sandbox_id}/initialize",
    response_model=InitializeSandboxResponse,
    responses={
        400: {"model": ErrorResponse, "description": "The archive is unsafe or unreadable"},
        409: {"model": ErrorResponse, "description": "No archive was uploaded"},
        413: {"model": ErrorResponse, "description": "The archive exceeds the caps"},
    },
)
def initialize_workspace(
    local_sandbox_id: str, tenant: Tenant, state: State, region: RegionQuery = "us"
) -> dict[str, Any]:
    """Extract the uploaded tar.gz into the workspace."""
    state.initialize(tenant, local_sandbox_id, region)
    return {
        "sandbox_id": local_sandbox_id,
        "status": "occupied",
        "message": "Extracted archive to workspace",
    }


@router.get("/{local_sandbox_id}/dump", response_model=DumpUrlResponse)
def dump_workspace(
    local_sandbox_id: str, caller: Caller, region: RegionQuery = "us"
) -> dict[str, Any]:
    """Archive the workspace behind a signed download URL."""
    signed = caller.state.dump(caller.tenant, local_sandbox_id, caller.base_url)
    return signed_answer("download_url", signed)
