"""The emulator's HTTP layer: a FastAPI app with thin routes over :class:`EmulatorState`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, BinaryIO, Final, Literal

import anyio.to_thread
from fastapi import Body, Depends, FastAPI, Query, Request, Security
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from starlette.routing import Match, Route

from ._archive import ArchiveRejected, ArchiveTooLarge
from ._clock import isoformat
from ._config import EmulatorConfig
from ._faults import FaultInjectionMiddleware, FaultSettings
from ._middleware import (
    API_PREFIX,
    BearerAuthMiddleware,
    ControlAccessMiddleware,
    StrictJsonMiddleware,
)
from ._schemas import (
    AcquireLocalSandboxRequest,
    AcquireLocalSandboxResponse,
    ClockAdvanceRequest,
    DumpUrlResponse,
    ErrorResponse,
    ExecuteResponse,
    ExecutionLogsResponse,
    ExecutionNameRequest,
    ExecutionStatusResponse,
    FaultSettingsRequest,
    InitializeSandboxResponse,
    ListLocalSandboxesResponse,
    LocalSandboxInfo,
    MessageResponse,
    ServerDataDumpResponse,
    UploadUrlResponse,
)
from ._server_data import DATA_MODELS, DATA_SERVERS, document_for, empty_document
from ._signing import SignatureError
from ._state import (
    EmulatorError,
    EmulatorState,
    ExecutionConflict,
    ExecutionNotFound,
    InvalidExecutionName,
    NoUploadedArchive,
    ObjectNotFound,
    SandboxNotFound,
    ServerNotInSandbox,
    UploadTooLarge,
    tenant_for_token,
)

__all__ = ["create_app"]

logger = logging.getLogger("klavis_emulator")

_API_PREFIX: Final = API_PREFIX
_DOWNLOAD_CHUNK: Final = 256 * 1024
_ERRORS: Final[dict[int | str, dict[str, Any]]] = {
    401: {"model": ErrorResponse, "description": "Missing, empty or unknown bearer token"},
    404: {"model": ErrorResponse, "description": "No such sandbox for this API key"},
}

RegionQuery = Annotated[
    Literal["us", "asia"], Query(description="Storage region of the signed URL (us or asia).")
]


def _tenant(request: Request) -> str:
    tenant: str = request.state.tenant
    return tenant


Tenant = Annotated[str, Depends(_tenant)]


def _error(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def create_app(config: EmulatorConfig | None = None) -> FastAPI:
    """Build the emulator's FastAPI application from ``config`` (default: every default;
    see :class:`~klavis_emulator.EmulatorConfig` for what each tunable does).

    The state is reachable as ``app.state.emulator`` (an :class:`EmulatorState`), so other
    modules can subscribe to it (:meth:`EmulatorState.add_listener`) and mount their own
    ASGI apps on the returned app.
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
    public_url = config.public_url

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
    app.add_middleware(StrictJsonMiddleware)
    app.add_middleware(BearerAuthMiddleware, allowed_tenants=allowed)
    app.add_middleware(ControlAccessMiddleware, token=config.control_token)
    app.add_middleware(FaultInjectionMiddleware, settings=faults)
    _install_error_handlers(app)

    def base_url(request: Request) -> str:
        return (public_url or str(request.base_url)).rstrip("/")

    bearer = Security(HTTPBearer(auto_error=False, description="Your API key (any for tests)."))

    # ------------------------------------------------------------------ lifecycle

    @app.post(
        _API_PREFIX,
        status_code=201,
        response_model=AcquireLocalSandboxResponse,
        responses=_ERRORS,
        dependencies=[bearer],
        tags=["local-sandbox"],
    )
    def acquire_local_sandbox(
        body: AcquireLocalSandboxRequest, tenant: Tenant, request: Request
    ) -> dict[str, Any]:
        """Acquire a sandbox hosting the requested MCP servers."""
        record = state.acquire(
            tenant,
            body.server_names,
            benchmark=body.benchmark,
            test_account_email=body.test_account_email,
            ttl_seconds=body.ttl_seconds,
        )
        info = record.to_info(base_url(request))
        del info["created_at"]
        names = ", ".join(record.server_names)
        info["message"] = f"Local sandbox acquired with {len(record.servers)} servers: {names}."
        return info

    @app.get(
        _API_PREFIX,
        response_model=ListLocalSandboxesResponse,
        responses=_ERRORS,
        dependencies=[bearer],
        tags=["local-sandbox"],
    )
    def list_local_sandboxes(tenant: Tenant, request: Request) -> dict[str, Any]:
        """List the caller's live sandboxes."""
        records = state.list_sandboxes(tenant)
        url = base_url(request)
        return {
            "local_sandboxes": [record.to_info(url) for record in records],
            "total_count": len(records),
        }

    @app.get(
        _API_PREFIX + "/{local_sandbox_id}",
        response_model=LocalSandboxInfo,
        responses=_ERRORS,
        dependencies=[bearer],
        tags=["local-sandbox"],
    )
    def get_local_sandbox(
        local_sandbox_id: str, tenant: Tenant, request: Request
    ) -> dict[str, Any]:
        """One sandbox of the caller."""
        return state.get(tenant, local_sandbox_id).to_info(base_url(request))

    @app.delete(
        _API_PREFIX + "/{local_sandbox_id}",
        response_model=MessageResponse,
        responses=_ERRORS,
        dependencies=[bearer],
        tags=["local-sandbox"],
    )
    def release_local_sandbox(
        local_sandbox_id: str, tenant: Tenant, is_ttl: bool = False
    ) -> dict[str, str]:
        """Release a sandbox (its workspace and stored objects are deleted)."""
        return {"message": state.release(tenant, local_sandbox_id, is_ttl=is_ttl)}

    @app.post(
        _API_PREFIX + "/{local_sandbox_id}/reset",
        response_model=MessageResponse,
        responses=_ERRORS,
        dependencies=[bearer],
        tags=["local-sandbox"],
    )
    def reset_local_sandbox(local_sandbox_id: str, tenant: Tenant) -> dict[str, str]:
        """Empty the sandbox's workspace."""
        return {"message": state.reset(tenant, local_sandbox_id)}

    # ------------------------------------------------------------------ workspace archives

    @app.post(
        _API_PREFIX + "/{local_sandbox_id}/upload-url",
        response_model=UploadUrlResponse,
        responses=_ERRORS,
        dependencies=[bearer],
        tags=["local-sandbox"],
    )
    def get_upload_url(
        local_sandbox_id: str, tenant: Tenant, request: Request, region: RegionQuery = "us"
    ) -> dict[str, Any]:
        """A signed URL to PUT the workspace tar.gz to."""
        signed = state.upload_url(tenant, local_sandbox_id, region, base_url(request))
        return {"upload_url": signed.url, "expires_in_minutes": signed.expires_in_minutes}

    @app.post(
        _API_PREFIX + "/{local_sandbox_id}/initialize",
        response_model=InitializeSandboxResponse,
        responses={
            **_ERRORS,
            400: {"model": ErrorResponse, "description": "The archive is unsafe or unreadable"},
            409: {"model": ErrorResponse, "description": "No archive was uploaded"},
            413: {"model": ErrorResponse, "description": "The archive exceeds the caps"},
        },
        dependencies=[bearer],
        tags=["local-sandbox"],
    )
    def initialize_workspace(
        local_sandbox_id: str, tenant: Tenant, region: RegionQuery = "us"
    ) -> dict[str, Any]:
        """Extract the uploaded tar.gz into the workspace."""
        state.initialize(tenant, local_sandbox_id, region)
        return {
            "sandbox_id": local_sandbox_id,
            "status": "occupied",
            "message": "Extracted archive to workspace",
        }

    @app.get(
        _API_PREFIX + "/{local_sandbox_id}/dump",
        response_model=DumpUrlResponse,
        responses=_ERRORS,
        dependencies=[bearer],
        tags=["local-sandbox"],
    )
    def dump_workspace(
        local_sandbox_id: str, tenant: Tenant, request: Request, region: RegionQuery = "us"
    ) -> dict[str, Any]:
        """Archive the workspace behind a signed download URL."""
        signed = state.dump(tenant, local_sandbox_id, base_url(request))
        return {"download_url": signed.url, "expires_in_minutes": signed.expires_in_minutes}

    # ------------------------------------------------------------------ executions

    bad_name: dict[int | str, dict[str, Any]] = {
        400: {"model": ErrorResponse, "description": "The execution name is not acceptable"},
    }
    no_execution: dict[int | str, dict[str, Any]] = {
        404: {"model": ErrorResponse, "description": "No such sandbox, or no such execution"},
    }

    @app.post(
        _API_PREFIX + "/{local_sandbox_id}/execution-upload-url",
        response_model=UploadUrlResponse,
        responses={**_ERRORS, **bad_name},
        dependencies=[bearer],
        tags=["local-sandbox"],
    )
    def get_execution_upload_url(
        local_sandbox_id: str,
        tenant: Tenant,
        body: ExecutionNameRequest,
        request: Request,
        region: RegionQuery = "us",
    ) -> dict[str, Any]:
        """A signed URL to PUT an execution's tar.gz (main.py, requirements.txt, ...) to."""
        signed = state.execution_upload_url(
            tenant, local_sandbox_id, body.execution_name, region, base_url(request)
        )
        return {"upload_url": signed.url, "expires_in_minutes": signed.expires_in_minutes}

    @app.post(
        _API_PREFIX + "/{local_sandbox_id}/execute",
        response_model=ExecuteResponse,
        responses={
            **_ERRORS,
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
        dependencies=[bearer],
        tags=["local-sandbox"],
    )
    def execute_script(
        local_sandbox_id: str,
        tenant: Tenant,
        body: ExecutionNameRequest,
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

    @app.get(
        _API_PREFIX + "/{local_sandbox_id}/execution-status",
        response_model=ExecutionStatusResponse,
        responses={**_ERRORS, **bad_name, **no_execution},
        dependencies=[bearer],
        tags=["local-sandbox"],
    )
    def get_execution_status(
        local_sandbox_id: str, tenant: Tenant, execution_name: str
    ) -> dict[str, Any]:
        """pending, running, completed or failed."""
        return {"status": state.execution_status(tenant, local_sandbox_id, execution_name)}

    @app.get(
        _API_PREFIX + "/{local_sandbox_id}/execution-logs",
        response_model=ExecutionLogsResponse,
        responses={**_ERRORS, **bad_name, **no_execution},
        dependencies=[bearer],
        tags=["local-sandbox"],
    )
    def get_execution_logs(
        local_sandbox_id: str,
        tenant: Tenant,
        execution_name: str,
        cursor: Annotated[int, Query(ge=0, description="Byte offset in the log.")] = 0,
    ) -> dict[str, Any]:
        """The log text after the byte cursor (complete UTF-8 characters) and the next cursor."""
        status, text, next_cursor = state.execution_logs(
            tenant, local_sandbox_id, execution_name, cursor
        )
        return {"status": status, "logs": text, "cursor": next_cursor}

    @app.post(
        _API_PREFIX + "/{local_sandbox_id}/export-artifacts",
        response_model=DumpUrlResponse,
        responses={
            **_ERRORS,
            **bad_name,
            **no_execution,
            409: {"model": ErrorResponse, "description": "The execution has not finished yet"},
        },
        dependencies=[bearer],
        tags=["local-sandbox"],
    )
    def export_artifacts(
        local_sandbox_id: str,
        tenant: Tenant,
        body: ExecutionNameRequest,
        request: Request,
        region: RegionQuery = "us",
    ) -> dict[str, Any]:
        """Archive a finished execution's working directory behind a signed download URL."""
        signed = state.export_artifacts(
            tenant, local_sandbox_id, body.execution_name, base_url(request)
        )
        return {"download_url": signed.url, "expires_in_minutes": signed.expires_in_minutes}

    # ------------------------------------------------------------------ per-server data

    for server_name in DATA_SERVERS:
        _add_server_data_routes(app, state, server_name, bearer)

    # ------------------------------------------------------------------ signed storage

    @app.put("/_storage/upload/{key:path}", tags=["storage"])
    async def storage_upload(
        key: str,
        request: Request,
        expires: str | None = None,
        signature: str | None = None,
    ) -> JSONResponse:
        """Receive an upload to a signed URL (streamed to disk)."""
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        length_header = request.headers.get("content-length")
        content_length = int(length_header) if length_header and length_header.isdigit() else None
        writer = await anyio.to_thread.run_sync(
            lambda: state.begin_upload(
                key, expires=expires, signature=signature, content_length=content_length
            )
        )
        if content_type not in ("application/gzip", "application/x-gzip"):
            writer.abort()
            return _error(
                400,
                "Uploads must carry the header 'Content-Type: application/gzip' "
                f"(got {content_type[:80] or 'none'!r}).",
            )
        try:
            async for chunk in request.stream():
                if chunk:
                    writer.write(chunk)
            await anyio.to_thread.run_sync(writer.commit)
        except BaseException:
            writer.abort()
            raise
        return JSONResponse({"message": "Upload stored", "size": writer.size})

    @app.get("/_storage/download/{key:path}", tags=["storage"])
    def storage_download(
        key: str, expires: str | None = None, signature: str | None = None
    ) -> StreamingResponse:
        """Stream an object behind a signed download URL."""
        stream, size = state.open_download(key, expires=expires, signature=signature)
        return StreamingResponse(
            _iter_file(stream),
            media_type="application/gzip",
            headers={"Content-Length": str(size)},
        )

    # ------------------------------------------------------------------ control routes

    @app.get("/_emulator/health", tags=["emulator"])
    def health() -> dict[str, str]:
        """Liveness probe."""
        return {"status": "ok"}

    @app.get("/_emulator/faults", tags=["emulator"])
    async def get_faults() -> dict[str, object]:
        """The current fault-injection settings."""
        return faults.as_dict()

    @app.post("/_emulator/faults", tags=["emulator"])
    async def set_faults(body: FaultSettingsRequest) -> dict[str, object]:
        """Change fault injection at run time (omitted fields keep their value)."""
        faults.configure(
            rate=body.rate,
            mode=body.mode,
            latency_ms=body.latency_ms,
            seed=body.seed,
            statuses=body.statuses,
        )
        return faults.as_dict()

    @app.get("/_emulator/clock", tags=["emulator"])
    def get_clock() -> dict[str, object]:
        """The emulator clock's current time."""
        now = state.now()
        return {"time": now, "now": isoformat(now)}

    @app.post(
        "/_emulator/clock/advance", tags=["emulator"], responses={409: {"model": ErrorResponse}}
    )
    def advance_clock(body: ClockAdvanceRequest) -> Any:
        """Move the emulator clock forward (expires TTLs and signed URLs at once)."""
        try:
            now = state.advance_clock(body.seconds)
        except TypeError:
            return _error(409, "This emulator's clock cannot be moved.")
        return {"time": now, "now": isoformat(now)}

    if config.host_mcp:
        from ._mcp_host import install_mcp  # fastmcp is heavy: only when MCP is served

        install_mcp(app, state)
    return app


def _iter_file(stream: BinaryIO) -> Iterator[bytes]:
    with stream:
        while chunk := stream.read(_DOWNLOAD_CHUNK):
            yield chunk


def _add_server_data_routes(
    app: FastAPI, state: EmulatorState, server_name: str, bearer: Any
) -> None:
    prefix = f"{_API_PREFIX}/{server_name}/{{sandbox_id}}"
    model = DATA_MODELS[server_name]
    not_held: dict[int | str, dict[str, Any]] = {
        400: {"model": ErrorResponse, "description": f"The sandbox does not hold {server_name}"},
    }

    def initialize_server_data(
        sandbox_id: str, tenant: Tenant, body: Any = None, init_default_data: bool = False
    ) -> dict[str, Any]:
        document = document_for(server_name, body, default=init_default_data)
        state.initialize_server_data(tenant, sandbox_id, server_name, document)
        what = "default data" if init_default_data and body is None else "data"
        if init_default_data and body is not None:
            what = "default data and the given data"
        return {
            "sandbox_id": sandbox_id,
            "status": "occupied",
            "message": f"Loaded {what} into the {server_name} server.",
        }

    # The body's model differs per server: give FastAPI the real type, not a string.
    initialize_server_data.__annotations__["body"] = Annotated[model | None, Body()]

    def dump_server_data(sandbox_id: str, tenant: Tenant) -> dict[str, Any]:
        data = state.dump_server_data(tenant, sandbox_id, server_name)
        return {
            "sandbox_id": sandbox_id,
            "server_name": server_name,
            "dumped_at": isoformat(state.now()),
            "data": data if data is not None else empty_document(server_name),
        }

    app.add_api_route(
        prefix + "/initialize",
        initialize_server_data,
        methods=["POST"],
        response_model=InitializeSandboxResponse,
        responses={**_ERRORS, **not_held},
        dependencies=[bearer],
        tags=["local-sandbox"],
        name=f"initialize_{server_name}_data",
        summary=f"Load {server_name} data (validated, replaces what the server held)",
    )
    app.add_api_route(
        prefix + "/dump",
        dump_server_data,
        methods=["GET"],
        response_model=ServerDataDumpResponse,
        responses={**_ERRORS, **not_held},
        dependencies=[bearer],
        tags=["local-sandbox"],
        name=f"dump_{server_name}_data",
        summary=f"Export the {server_name} data",
    )


def _install_error_handlers(app: FastAPI) -> None:
    statuses: tuple[tuple[type[Exception], int], ...] = (
        (SandboxNotFound, 404),
        (ExecutionNotFound, 404),
        (ServerNotInSandbox, 400),
        (InvalidExecutionName, 400),
        (ObjectNotFound, 404),
        (NoUploadedArchive, 409),
        (ExecutionConflict, 409),
        (UploadTooLarge, 413),
        (ArchiveTooLarge, 413),
        (ArchiveRejected, 400),
        (SignatureError, 403),
    )
    for exc_type, status in statuses:
        app.add_exception_handler(exc_type, _handler_for(status))
    app.add_exception_handler(EmulatorError, _handler_for(400))

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error on %s %s", request.method, request.url.path)
        return _error(500, f"Internal emulator error ({type(exc).__name__}).")

    app.add_exception_handler(Exception, unexpected)

    async def method_not_allowed(request: Request, exc: Exception) -> JSONResponse:
        allowed: set[str] = set()
        for route in app.router.routes:
            match, _ = route.matches(request.scope)
            if match is not Match.NONE and isinstance(route, APIRoute | Route):
                allowed.update(route.methods or ())
        return _error(
            405,
            f"Method {request.method} is not allowed here; allowed: "
            f"{', '.join(sorted(allowed)) or 'none'}.",
            headers={"Allow": ", ".join(sorted(allowed))},
        )

    app.add_exception_handler(405, method_not_allowed)


def _handler_for(status: int) -> Any:
    async def handler(request: Request, exc: Exception) -> JSONResponse:
        return _error(status, str(exc))

    return handler
