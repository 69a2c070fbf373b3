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

import typing  # typing.TYPE_CHECKING: the namespace holds public names and modules only

from ._acquire import AcquireOptions, AttachOptions, ConnectionOptions, ReleaseOptions
from ._async_sandbox import AsyncLocalSandbox, PendingSandbox, async_list_sandboxes
from ._config import (
    API_KEY_ENV,
    BASE_URL_ENV,
    DEFAULT_BASE_URL,
    DEFAULT_MAX_FILE_SIZE,
    ApiKey,
    Settings,
)
from ._dump._limits import ArchiveLimits
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
    SeedTemplateError,
    ServerError,
    SourceChangedError,
    TaskTimeoutError,
    TransferError,
    TransferTimeoutError,
    UnsafeArchiveError,
    WorkerDiedError,
)
from ._handle import SandboxHandle
from ._models import (
    BENCHMARKS,
    SERVER_NAMES,
    Benchmark,
    SandboxInfo,
    ServerInfo,
    ServerName,
    ServerNames,
)
from ._redaction import install_log_redaction as _install_log_redaction
from ._sandbox import LocalSandbox, list_sandboxes
from ._tracing import TRACING_ENV, disable_tracing, enable_tracing

# The names below are imported on first use (PEP 562, :func:`__getattr__`): each needs modules
# that ``import workflows`` would otherwise pay for whether or not the program uses them (the
# pools, the recipes, reaping, MCP, executions, snapshots, templates, the host's limits, the
# emulator's process, and the distribution's metadata for ``__version__``). Type checkers and
# editors read them here. ``_LAZY`` says where each one lives; tests/workflows/test_imports.py
# checks that it matches these imports and ``__all__``.
if typing.TYPE_CHECKING:
    from ._emulator_process import EmulatorProcess
    from ._execution import AsyncExecution, Execution
    from ._host_limits import HOST_MAX_ACQUIRES_PER_SECOND_ENV, HOST_MAX_SANDBOXES_ENV, HostLimits
    from ._mcp import McpSession, ToolInfo, ToolResult
    from ._ownership import AcquireAttempt, Ledger, LedgerEntry, default_ledger
    from ._pool import (
        AcquireAbandoned,
        AsyncBackendPool,
        AsyncPoolBackend,
        AsyncSandboxPool,
        Attempt,
        AttemptOutcome,
        BackendPool,
        FailureKind,
        PoolBackend,
        PooledSandbox,
        PoolOptions,
        PoolResults,
        RetryOn,
        RunOptions,
        SandboxPool,
        SandboxPoolOptions,
        TaskResult,
        failure_kind,
    )
    from ._reap import (
        ReapOptions,
        ReapResults,
        ServiceEntries,
        async_reap,
        held_sandboxes,
        reap,
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
    from ._seed import FolderOptions
    from ._server_data import DATA_SERVERS, ServerData
    from ._snapshot import ManifestEntry, Snapshot, SnapshotDiff
    from ._template import SeedTemplate

    __version__: str

_LAZY: dict[str, str] = {
    **dict.fromkeys(["EmulatorProcess"], "_emulator_process"),
    **dict.fromkeys(["AsyncExecution", "Execution"], "_execution"),
    **dict.fromkeys(
        ["HOST_MAX_ACQUIRES_PER_SECOND_ENV", "HOST_MAX_SANDBOXES_ENV", "HostLimits"],
        "_host_limits",
    ),
    **dict.fromkeys(["McpSession", "ToolInfo", "ToolResult"], "_mcp"),
    **dict.fromkeys(["AcquireAttempt", "Ledger", "LedgerEntry", "default_ledger"], "_ownership"),
    **dict.fromkeys(
        ["ReapOptions", "ReapResults", "ServiceEntries", "async_reap", "held_sandboxes", "reap"],
        "_reap",
    ),
    **dict.fromkeys(
        [
            "AcquireAbandoned",
            "AsyncBackendPool",
            "AsyncPoolBackend",
            "AsyncSandboxPool",
            "Attempt",
            "AttemptOutcome",
            "BackendPool",
            "FailureKind",
            "PoolBackend",
            "PooledSandbox",
            "PoolOptions",
            "PoolResults",
            "RetryOn",
            "RunOptions",
            "SandboxPool",
            "SandboxPoolOptions",
            "TaskResult",
            "failure_kind",
        ],
        "_pool",
    ),
    **dict.fromkeys(
        [
            "AcquireResult",
            "AsyncSandboxBatch",
            "ReleaseResult",
            "RoundTripReport",
            "SandboxBatch",
            "async_bulk_acquire",
            "async_bulk_release",
            "async_round_trip_dump",
            "async_seed_from_dict",
            "bulk_acquire",
            "bulk_release",
            "round_trip_dump",
            "seed_from_dict",
        ],
        "_recipes",
    ),
    **dict.fromkeys(["FolderOptions"], "_seed"),
    **dict.fromkeys(["DATA_SERVERS", "ServerData"], "_server_data"),
    **dict.fromkeys(["ManifestEntry", "Snapshot", "SnapshotDiff"], "_snapshot"),
    **dict.fromkeys(["SeedTemplate"], "_template"),
}

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
    "FolderOptions",
    "ManifestEntry",
    "SeedTemplate",
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
    "PoolOptions",
    "RunOptions",
    "SandboxPoolOptions",
    # the seam of pool backends: write a pool on another engine
    "AcquireAbandoned",
    "AsyncBackendPool",
    "AsyncPoolBackend",
    "Attempt",
    "AttemptOutcome",
    "BackendPool",
    "PoolBackend",
    "PooledSandbox",
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
    "SourceChangedError",
    "TaskTimeoutError",
    "SeedTemplateError",
    "TransferError",
    "TransferTimeoutError",
    "UnsafeArchiveError",
    "WorkerDiedError",
]


def _version() -> str:
    """The distribution's version (``importlib.metadata`` costs an import: read when asked)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("klavis-sandbox")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - from a folder
        return "0+unknown"


def _load(name: str) -> object:
    """The lazily imported public ``name`` (or ``__version__``), kept in the module's namespace
    so that the next lookup is a plain one; AttributeError for any other name, as for a module
    without ``__getattr__``."""
    import importlib

    if name == "__version__":
        value: object = _version()
    elif name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def _names() -> list[str]:
    """What ``dir(workflows)`` lists: what is loaded, and every public name not loaded yet."""
    return sorted({*globals(), *__all__, "__version__"})


# Hidden from type checkers, which would otherwise accept any name ``from workflows import``
# (the names above are all they need to see).
if not typing.TYPE_CHECKING:
    __getattr__ = _load
    __dir__ = _names

_install_log_redaction()
