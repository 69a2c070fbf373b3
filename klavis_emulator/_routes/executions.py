"""Routes of executions: upload an archive, run its ``main.py``, follow it, export artifacts."""

from __future__ import annotations

from typing import Annotated, Any, Final

from fastapi import Query

from .._schemas import (
    DumpUrlResponse,
    ErrorResponse,
    ExecuteResponse,
    ExecutionLogsResponse,
    ExecutionNameRequest,
    ExecutionStatusResponse,
    UploadUrlResponse,
)
from ._shared import Caller, RegionQuery, State, Tenant, api_router, signed_answer

__all__ = ["router"]

router = api_router()

_BAD_NAME: Final[dict[int | str, dict[str, Any]]] = {
    400: {"model": ErrorResponse, "description": "The execution name is not acceptable"},
}
_NO_EXECUTION: Final[dict[int | str, dict[str, Any]]] = {
    404: {"model": ErrorResponse, "description": "No such sandbox, or no such execution"},
}


@router.post(
    "/{local_sandbox_id}/execution-upload-url",
    response_model=UploadUrlResponse,
    responses=_BAD_NAME,
)
def get_execution_upload_url(
    local_sandbox_id: str, body: ExecutionNameRequest, caller: Caller, region: RegionQuery = "us"
) -> dict[str, Any]:
    """A signed URL to PUT an execution's tar.gz (main.py, requirements.txt, ...) to."""
    name = body.execution_name
    signed = caller.state.execution_upload_url(
        caller.tenant, local_sandbox_id, name, region, caller.base_url
    )
    return signed_answer("upload_url", signed)


@router.post(
    "/{local_sandbox_id}/execute",
    response_model=ExecuteResponse,
    responses={
        400: {
            "model": ErrorResponse,
            "description": "Bad execution name, or the archive is unsafe or unreadable",
        },
        409: {
            "model": ErrorResponse,
            "description": "Nothing uploaded under that name, or it is still running",
        },
        413: {"model": ErrorResponse, "description": "The archive exceeds the caps"},
    },
)
def execute_script(
    local_sandbox_id: str,
    tenant: Tenant,
    body: ExecutionNameRequest,
    state: State,
    region: RegionQuery = "us",
) -> dict[str, Any]:
    """Unpack the uploaded execution archive and run its main.py in the background."""
    name = body.execution_name
    state.execute(tenant, local_sandbox_id, name, region)
    return {
        "message": (
            f"Execution {name!r} started in local sandbox {local_sandbox_id}; "
            "follow it with execution-logs or execution-status."
        ),
        "execution_name": name,
    }


@router.get(
    "/{local_sandbox_id}/execution-status",
    response_model=ExecutionStatusResponse,
    responses={**_BAD_NAME, **_NO_EXECUTION},
)
def get_execution_status(
    local_sandbox_id: str, tenant: Tenant, execution_name: str, state: State
) -> dict[str, Any]:
    """pending, running, completed or failed."""
    return {"status": state.execution_status(tenant, local_sandbox_id, execution_name)}


@router.get(
    "/{local_sandbox_id}/execution-logs",
    response_model=ExecutionLogsResponse,
    responses={**_BAD_NAME, **_NO_EXECUTION},
)
def get_execution_logs(
    local_sandbox_id: str,
    tenant: Tenant,
    execution_name: str,
    state: State,
    cursor: Annotated[int, Query(ge=0, description="Byte offset in the log.")] = 0,
) -> dict[str, Any]:
    """The log text after the byte cursor (complete UTF-8 characters) and the next cursor."""
    status, text, next_cursor = state.execution_logs(
        tenant, local_sandbox_id, execution_name, cursor
    )
    return {"status": status, "logs": text, "cursor": next_cursor}


@router.post(
    "/{local_sandbox_id}/export-artifacts",
    response_model=DumpUrlResponse,
    responses={
        **_BAD_NAME,
        **_NO_EXECUTION,
        409: {"model": ErrorResponse, "description": "The execution has not finished yet"},
    },
)
def export_artifacts(
    local_sandbox_id: str, body: ExecutionNameRequest, caller: Caller, region: RegionQuery = "us"
) -> dict[str, Any]:
    """Archive a finished execution's working directory behind a signed download URL."""
    name = body.execution_name
    signed = caller.state.export_artifacts(caller.tenant, local_sandbox_id, name, caller.base_url)
    return signed_answer("download_url", signed)
