"""Klavis local sandboxes made safe and fast: acquire, seed, dump, release, in a ``with`` block.

>>> from workflows import LocalSandbox
>>> with LocalSandbox.acquire(["filesystem", "git"], ttl_seconds=600) as sb:  # doctest: +SKIP
...     sb.seed({"hello.txt": "hi"})
...     snap = sb.dump()

Configuration comes from arguments, then ``KLAVIS_API_KEY`` / ``KLAVIS_BASE_URL``, then a
``.env`` file (the key only), then the default ``https://api.klavis.ai``. Logging goes to the
``workflows`` logger; the API key and signed-URL query strings never appear in it.
"""

from __future__ import annotations

import importlib.metadata as _metadata

from ._acquire import AcquireOptions, AttachOptions, ConnectionOptions, ReleaseOptions
from ._async_sandbox import AsyncLocalSandbox, PendingSandbox, async_list_sandboxes
from ._config import API_KEY_ENV, BASE_URL_ENV, DEFAULT_BASE_URL, ApiKey, Settings
from ._dump._archive import ArchiveLimits
from ._emulator_process import EmulatorProcess
from ._errors import (
    AcquireAmbiguousError,
    ApiConnectionError,
    ApiError,
    ApiTimeoutError,
    AuthenticationError,
    BadRequestError,
    BrokerUnavailableError,
    ConfigurationError,
    ConflictError,
    EmulatorStartError,
    ExecutionTimeoutError,
    FileTooLargeError,
    InvalidInputError,
    InvalidSeedPathError,
    KlavisError,
    LeaseExpiredError,
    LocalWriteError,
    McpError,
    MissingExtraError,
    NotFoundError,
    RateLimitError,
    RequestValidationError,
    ServerError,
    TaskTimeoutError,
    TransferError,
    TransferTimeoutError,
    UnsafeArchiveError,
    WorkerDiedError,
)
from ._execution import AsyncExecution, Execution
from ._handle import SandboxHandle
from ._host_limits import HOST_MAX_ACQUIRES_PER_SECOND_ENV, HOST_MAX_SANDBOXES_ENV, HostLimits
from ._mcp import McpSession, ToolInfo, ToolResult
from ._models import (
    BENCHMARKS,
    SERVER_NAMES,
    Benchmark,
    SandboxInfo,
    ServerInfo,
    ServerName,
    ServerNames,
)
from ._ownership import AcquireAttempt, Ledger, LedgerEntry, default_ledger
from ._ownership._reap import (
    ReapOptions,
    ReapResults,
    ServiceEntries,
    async_reap,
    held_sandboxes,
    reap,
)
from ._pool import (
    AsyncSandboxPool,
    FailureKind,
    PoolResults,
    RetryOn,
    SandboxPool,
    TaskResult,
    failure_kind,
)
from ._recipes import (
    AcquireResult,
    AsyncSandboxBatch,
    ReleaseResult,
    RoundTripReport,
    SandboxBatch,
    async_bulk_acquire,
    async_bulk_release,
    async_round_trip_dump,
    async_seed_from_dict,
    bulk_acquire,
    bulk_release,
    round_trip_dump,
    seed_from_dict,
)
from ._sandbox import LocalSandbox, list_sandboxes
from ._seed import DEFAULT_MAX_FILE_SIZE
from ._server_data import DATA_SERVERS, ServerData
from ._snapshot import ManifestEntry, Snapshot, SnapshotDiff
from ._tracing import TRACING_ENV, disable_tracing, enable_tracing
from ._transport import install_log_redaction as _install_log_redaction

__all__ = [
    # the sandboxes, and what acquiring one returns
    "AcquireOptions",
    "AttachOptions",
    "AsyncLocalSandbox",
    "LocalSandbox",
    "PendingSandbox",
    "SandboxInfo",
    "ServerInfo",
    "async_list_sandboxes",
    "list_sandboxes",
    # configuration
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "DEFAULT_BASE_URL",
    "ApiKey",
    "ConnectionOptions",
    "Settings",
    # a local emulator started from an environment of its own (beside a harness pinning mcp 1.x)
    "EmulatorProcess",
    # OpenTelemetry spans (the otel extra), off until enabled
    "TRACING_ENV",
    "disable_tracing",
    "enable_tracing",
    # workspaces: seeding, dumping, their limits
    "DEFAULT_MAX_FILE_SIZE",
    "ArchiveLimits",
    "ManifestEntry",
    "Snapshot",
    "SnapshotDiff",
    # MCP servers, executions and server data
    "BENCHMARKS",
    "DATA_SERVERS",
    "SERVER_NAMES",
    "AsyncExecution",
    "Benchmark",
    "Execution",
    "McpSession",
    "ServerData",
    "ServerName",
    "ServerNames",
    "ToolInfo",
    "ToolResult",
    # recipes: many sandboxes at once
    "AcquireResult",
    "AsyncSandboxBatch",
    "ReleaseOptions",
    "ReleaseResult",
    "SandboxBatch",
    "SandboxHandle",
    "async_bulk_acquire",
    "async_bulk_release",
    "bulk_acquire",
    "bulk_release",
    # recipes: seed and compare
    "RoundTripReport",
    "async_round_trip_dump",
    "async_seed_from_dict",
    "round_trip_dump",
    "seed_from_dict",
    # the pool: many tasks over a few sandboxes
    "AsyncSandboxPool",
    "FailureKind",
    "failure_kind",
    "PoolResults",
    "RetryOn",
    "SandboxPool",
    "TaskResult",
    # what this user holds: the ledger and reaping
    "AcquireAttempt",
    "Ledger",
    "LedgerEntry",
    "ReapOptions",
    "ReapResults",
    "ServiceEntries",
    "async_reap",
    "default_ledger",
    "held_sandboxes",
    "reap",
    # limits shared by every process of this user on this host (a cap, an acquire rate)
    "HOST_MAX_ACQUIRES_PER_SECOND_ENV",
    "HOST_MAX_SANDBOXES_ENV",
    "HostLimits",
    # errors (the tree is drawn in workflows._errors)
    "AcquireAmbiguousError",
    "ApiConnectionError",
    "ApiError",
    "ApiTimeoutError",
    "AuthenticationError",
    "BadRequestError",
    "BrokerUnavailableError",
    "ConfigurationError",
    "ConflictError",
    "EmulatorStartError",
    "ExecutionTimeoutError",
    "FileTooLargeError",
    "InvalidInputError",
    "InvalidSeedPathError",
    "KlavisError",
    "LeaseExpiredError",
    "LocalWriteError",
    "McpError",
    "MissingExtraError",
    "NotFoundError",
    "RateLimitError",
    "RequestValidationError",
    "ServerError",
    "TaskTimeoutError",
    "TransferError",
    "TransferTimeoutError",
    "UnsafeArchiveError",
    "WorkerDiedError",
]

try:
    __version__ = _metadata.version("klavis-sandbox")
except _metadata.PackageNotFoundError:  # pragma: no cover - imported from a folder, not installed
    __version__ = "0+unknown"

_install_log_redaction()
