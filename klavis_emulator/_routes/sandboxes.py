"""Routes of the sandbox lifecycle: acquire, list, get, release, reset."""

from __future__ import annotations

import functools
from typing import Any

import anyio
import anyio.to_thread
from fastapi import Request

from .._schemas import (
    AcquireLocalSandboxRequest,
    AcquireLocalSandboxResponse,
    ListLocalSandboxesResponse,
    LocalSandboxInfo,
    MessageResponse,
)
from ._shared import BaseUrl, State, Tenant, api_router

__all__ = ["router"]

router = api_router()


@router.post("", status_code=201, response_model=AcquireLocalSandboxResponse)
async def acquire_local_sandbox(
    body: AcquireLocalSandboxRequest,
    tenant: Tenant,
    state: State,
    base_url: BaseUrl,
    request: Request,
) -> dict[str, Any]:
    """Acquire a sandbox hosting the requested MCP servers."""
    record = await anyio.to_thread.run_sync(
        functools.partial(
            state.acquire,
            tenant,
            body.server_names,
            benchmark=body.benchmark,
            test_account_email=body.test_account_email,
            ttl_seconds=body.ttl_seconds,
        )
    )
    delay: float = request.app.state.config.acquire_delay
    if delay > 0:
        # the VM start of the service: the sandbox exists (listed, its MCP servers starting)
        # but is not returned before the delay; waited on the event loop, so that many
        # acquires at once do not hold anyio's worker threads (40) that sync routes share
        await anyio.sleep(delay)
    info = record.to_info(base_url)
    del info["created_at"]
    names = ", ".join(record.server_names)
    info["message"] = f"Local sandbox acquired with {len(record.servers)} servers: {names}."
    return info


@router.get("", response_model=ListLocalSandboxesResponse)
def list_local_sandboxes(tenant: Tenant, state: State, base_url: BaseUrl) -> dict[str, Any]:
    """List the caller's live sandboxes."""
    records = state.list_sandboxes(tenant)
    return {
        "local_sandboxes": [record.to_info(base_url) for record in records],
        "total_count": len(records),
    }


@router.get("/{local_sandbox_id}", response_model=LocalSandboxInfo)
def get_local_sandbox(
    local_sandbox_id: str, tenant: Tenant, state: State, base_url: BaseUrl
) -> dict[str, Any]:
    """One sandbox of the caller."""
    return state.get(tenant, local_sandbox_id).to_info(base_url)


@router.delete("/{local_sandbox_id}", response_model=MessageResponse)
def release_local_sandbox(
    local_sandbox_id: str, tenant: Tenant, state: State, is_ttl: bool = False
) -> dict[str, str]:
    """Release a sandbox (its workspace and stored objects are deleted)."""
    return {"message": state.release(tenant, local_sandbox_id, is_ttl=is_ttl)}


@router.post("/{local_sandbox_id}/reset", response_model=MessageResponse)
def reset_local_sandbox(local_sandbox_id: str, tenant: Tenant, state: State) -> dict[str, str]:
    """Empty the sandbox's workspace."""
    return {"message": state.reset(tenant, local_sandbox_id)}
