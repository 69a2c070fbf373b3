"""Pydantic request and response models of the emulator's HTTP layer.

Request models are strict (no coercion of ``"100"`` to ``100`` or of ``true`` to ``1``),
so anything the contract calls invalid answers 422 in the ``HTTPValidationError`` shape.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, field_validator

from ._state import BENCHMARKS, LOCAL_SERVER_NAMES, ServerName

Benchmark = Literal["MCP_Atlas", "Toolathlon", "MCP_Mark"]
SandboxStatus = Literal["idle", "occupied", "error"]
Region = Literal["us", "asia"]
ExecutionStatus = Literal["pending", "running", "completed", "failed"]

assert get_args(Benchmark) == BENCHMARKS

_VALID_NAMES = ", ".join(LOCAL_SERVER_NAMES)


class AcquireLocalSandboxRequest(BaseModel):
    """Body of ``POST /local-sandbox``."""

    model_config = ConfigDict(title="AcquireLocalSandboxRequest")

    server_names: list[ServerName] | Literal["ALL"] = Field(
        description="MCP servers to host, or the string 'ALL' for every local server."
    )
    benchmark: Benchmark | None = None
    test_account_email: StrictStr | None = None
    ttl_seconds: Annotated[StrictInt, Field(ge=60, le=86400)] | None = Field(
        default=7200, description="Seconds until automatic release (60..86400, null: never)."
    )

    @field_validator("server_names", mode="before")
    @classmethod
    def _check_server_names(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value == "ALL":
                return value
            raise ValueError(
                f"server_names must be a list of server names or the string 'ALL', "
                f"got the string {value[:100]!r}. Valid server names: {_VALID_NAMES}"
            )
        if not isinstance(value, list):
            raise ValueError(
                "server_names must be a list of server names or the string 'ALL'. "
                f"Valid server names: {_VALID_NAMES}"
            )
        if not value:
            raise ValueError(
                f"server_names must name at least one server. Valid server names: {_VALID_NAMES}"
            )
        for index, name in enumerate(value):
            if not isinstance(name, str) or name not in LOCAL_SERVER_NAMES:
                shown = repr(name[:100]) if isinstance(name, str) else f"a {type(name).__name__}"
                raise ValueError(
                    f"server_names[{index}] is {shown}, which is not a valid server name. "
                    f"Valid server names: {_VALID_NAMES}"
                )
        return value


class ExecutionNameRequest(BaseModel):
    """Body of the execution operations: ``{"execution_name": ...}``."""

    execution_name: StrictStr = Field(
        description="Name of the execution: 1-128 letters, digits, '.', '_' or '-'."
    )


class ExecuteResponse(BaseModel):
    """Answer of ``execute``."""

    message: str
    execution_name: str


class ExecutionStatusResponse(BaseModel):
    """Answer of ``execution-status``."""

    status: ExecutionStatus


class ExecutionLogsResponse(BaseModel):
    """Answer of ``execution-logs``: new log text and the next byte cursor."""

    status: ExecutionStatus
    logs: str = ""
    cursor: int = 0


class ServerDataDumpResponse(BaseModel):
    """Answer of the per-server ``dump`` operations."""

    sandbox_id: str
    server_name: str
    dumped_at: str
    data: dict[str, Any]


class LocalSandboxServerItem(BaseModel):
    """One MCP server of a sandbox."""

    server_name: str | None = None
    id: str
    mcp_server_url: str | None = None
    status: SandboxStatus | None = None
    benchmark: str | None = None
    updated_at: str | None = None
    metadata: dict[str, Any] | None = None
    auth_data: dict[str, Any] | None = None
    tags: list[str] | None = None


class AcquireLocalSandboxResponse(BaseModel):
    """Answer of ``POST /local-sandbox``."""

    local_sandbox_id: str
    status: SandboxStatus | None = None
    benchmark: str | None = None
    servers: list[LocalSandboxServerItem]
    message: str | None = None


class LocalSandboxInfo(BaseModel):
    """A sandbox as listed or fetched."""

    local_sandbox_id: str
    created_at: str
    status: SandboxStatus | None = None
    benchmark: str | None = None
    servers: list[LocalSandboxServerItem]


class ListLocalSandboxesResponse(BaseModel):
    """Answer of ``GET /local-sandbox``."""

    local_sandboxes: list[LocalSandboxInfo]
    total_count: int


class MessageResponse(BaseModel):
    """A JSON object with a human-readable ``message`` (release, reset)."""

    message: str


class UploadUrlResponse(BaseModel):
    """A signed URL to ``PUT`` an archive to."""

    upload_url: str
    expires_in_minutes: int


class DumpUrlResponse(BaseModel):
    """A signed URL to ``GET`` an archive from."""

    download_url: str
    expires_in_minutes: int


class InitializeSandboxResponse(BaseModel):
    """Answer of ``initialize``."""

    sandbox_id: str
    status: SandboxStatus
    message: str


class ErrorResponse(BaseModel):
    """A client or server error with a human-readable ``detail``."""

    detail: str


class FaultSettingsRequest(BaseModel):
    """Body of ``POST /_emulator/faults``: every field is optional."""

    model_config = ConfigDict(extra="forbid")

    rate: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    mode: Literal["before", "after", "mixed"] | None = None
    latency_ms: Annotated[int, Field(ge=0, le=600_000)] | None = None
    seed: int | None = None
    statuses: list[Literal[429, 500, 502, 503]] | None = Field(default=None, min_length=1)


class ClockAdvanceRequest(BaseModel):
    """Body of ``POST /_emulator/clock/advance``."""

    model_config = ConfigDict(extra="forbid")

    seconds: Annotated[float, Field(ge=0.0, le=10 * 365 * 86400)]
