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

from ._archive import ArchiveLimits
from ._async_sandbox import AsyncLocalSandbox, async_list_sandboxes
from ._config import API_KEY_ENV, BASE_URL_ENV, DEFAULT_BASE_URL, ApiKey
from ._errors import (
    AcquireAmbiguousError,
    ApiConnectionError,
    ApiError,
    ApiTimeoutError,
    AuthenticationError,
    BadRequestError,
    ConfigurationError,
    ConflictError,
    FileTooLargeError,
    InvalidInputError,
    InvalidSeedPathError,
    KlavisError,
    NotFoundError,
    RateLimitError,
    RequestValidationError,
    ServerError,
    TransferError,
    TransferTimeoutError,
    UnsafeArchiveError,
)
from ._execution import AsyncExecution, Execution, ExecutionTimeoutError
from ._http import install_log_redaction as _install_log_redaction
from ._ledger import Ledger, LedgerEntry, default_ledger
from ._mcp import McpError, ToolInfo, ToolResult
from ._models import BENCHMARKS, SERVER_NAMES, SandboxInfo, ServerInfo
from ._reap import async_reap, held_sandboxes, reap
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
from ._seed_plan import DEFAULT_MAX_FILE_SIZE
from ._server_data import DATA_SERVERS, ServerData
from ._snapshot import ManifestEntry, Snapshot, SnapshotDiff

__all__ = [
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "BENCHMARKS",
    "DATA_SERVERS",
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_FILE_SIZE",
    "SERVER_NAMES",
    "AcquireAmbiguousError",
    "AcquireResult",
    "ApiConnectionError",
    "ApiError",
    "ApiKey",
    "ApiTimeoutError",
    "ArchiveLimits",
    "AsyncExecution",
    "AsyncLocalSandbox",
    "AsyncSandboxBatch",
    "AuthenticationError",
    "BadRequestError",
    "ConfigurationError",
    "ConflictError",
    "Execution",
    "ExecutionTimeoutError",
    "FileTooLargeError",
    "InvalidInputError",
    "InvalidSeedPathError",
    "KlavisError",
    "Ledger",
    "LedgerEntry",
    "LocalSandbox",
    "ManifestEntry",
    "McpError",
    "NotFoundError",
    "RateLimitError",
    "ReleaseResult",
    "RequestValidationError",
    "RoundTripReport",
    "SandboxBatch",
    "SandboxInfo",
    "ServerData",
    "ServerError",
    "ServerInfo",
    "Snapshot",
    "SnapshotDiff",
    "ToolInfo",
    "ToolResult",
    "TransferError",
    "TransferTimeoutError",
    "UnsafeArchiveError",
    "async_bulk_acquire",
    "async_bulk_release",
    "async_list_sandboxes",
    "async_reap",
    "async_round_trip_dump",
    "async_seed_from_dict",
    "bulk_acquire",
    "bulk_release",
    "default_ledger",
    "held_sandboxes",
    "list_sandboxes",
    "reap",
    "round_trip_dump",
    "seed_from_dict",
]

__version__ = "0.1.0"

_install_log_redaction()
