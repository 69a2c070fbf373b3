"""The emulator's settings: :class:`EmulatorConfig`, every tunable written once.

:func:`~klavis_emulator.create_app`, :class:`~klavis_emulator.EmulatorServer`,
:class:`~klavis_emulator.EmulatorState` and the ``klavis-emulator`` command all take one
``EmulatorConfig``; the command's defaults are read from it. The values are checked here,
when the config is made (``ValueError`` naming the field), and nowhere else.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, cast

import platformdirs

from ._archive import ArchiveLimits
from ._clock import Clock
from ._faults import FAULT_MODES

__all__ = ["EmulatorConfig", "default_data_dir", "field_default", "field_problem"]


def default_data_dir() -> Path:
    """The per-user folder the emulator keeps its state in when no data dir is given."""
    return Path(platformdirs.user_data_dir("klavis-emulator", appauthor=False))


@dataclass(frozen=True, kw_only=True, repr=False)
class EmulatorConfig:
    """Every tunable of one emulator (keyword-only; frozen: use :func:`dataclasses.replace`).

    Each field is described where it is declared. The values are checked when the config
    is made (``ValueError`` naming the field); ``repr`` never shows ``api_keys`` or
    ``control_token``.
    """

    # ------------------------------------------------------------------ where the state lives
    data_dir: str | os.PathLike[str] | None = None
    """Folder for the SQLite file, workspaces and stored objects (created if needed).
    ``None``: :func:`default_data_dir` for :func:`create_app` and the command; a temporary
    folder, removed on stop, for :class:`EmulatorServer`."""

    # ------------------------------------------------------------------ serving
    # (EmulatorServer and the command; create_app ignores them)
    host: str = "127.0.0.1"
    """Where to listen."""
    port: int = 0
    """Port to listen on (0: any free port, chosen by the OS)."""
    log_level: str = "warning"
    """uvicorn's log level."""
    startup_timeout: float = 30.0
    """Seconds :meth:`EmulatorServer.start` waits for the server."""

    # ------------------------------------------------------------------ faults
    # for testing clients' retries (live values: /_emulator/faults)
    latency_ms: int = 0
    """Delay added before every API and storage request."""
    fault_rate: float = 0.0
    """Fraction (0..1) of API and storage requests that answer 429/5xx."""
    fault_mode: str = "mixed"
    """``before`` (nothing happens), ``after`` (the operation takes effect, the answer is
    lost) or ``mixed`` (half each)."""
    fault_seed: int | None = None
    """Seed of the fault generator, for deterministic tests."""
    acquire_delay: float = 0.0
    """Seconds an acquire takes before it answers, as a VM start does on the service (the
    sandbox exists from the start of the wait; it is returned only after it). 0: at once."""

    # ------------------------------------------------------------------ requests, URLs, uploads
    api_keys: Iterable[str] | None = None
    """If given, only these bearer tokens are accepted (401 for others); at least one.
    ``None``: any key is accepted, each its own tenant."""
    public_url: str | None = None
    """Base URL written into signed and MCP URLs (default: the request's)."""
    signed_url_minutes: int = 30
    """Validity of signed upload/download URLs."""
    max_upload_mb: float = 1024
    """Size cap of an upload to a signed URL (413 above)."""
    archive_limits: ArchiveLimits = field(default_factory=ArchiveLimits)
    """Caps on the members, unpacked bytes and expansion ratio of an uploaded archive."""
    control_token: str | None = None
    """The secret the control routes (everything under ``/_emulator/`` but ``GET
    /_emulator/health``) require in the header ``X-Emulator-Control-Token`` (401 without it,
    403 with another; any client address). ``None``: they answer loopback clients only
    (127.0.0.0/8, ::1), 403 for others. Printable ASCII without whitespace."""

    # ------------------------------------------------------------------ time
    clock: Clock | None = None
    """The clock for timestamps, TTLs and URL expiry. ``None``: an :class:`OffsetClock` that
    ``/_emulator/clock/advance`` moves, its offset kept in the data dir across restarts."""
    reaper_interval: float | None = 2.0
    """How often (seconds) a background thread releases sandboxes whose TTL ran out
    (``None``: never; every operation still releases them first)."""

    # ------------------------------------------------------------------ executions, MCP servers
    execution_timeout: float = 3600.0
    """Seconds an execution may take (installing requirements included) before it is
    killed and fails."""
    allow_network: bool = False
    """Give confined executions network access (unconfined ones always have it)."""
    confine_executions: bool = True
    """Confine executions and MCP servers with bubblewrap where it is installed (``False``,
    ``--no-confine`` or ``$KLAVIS_EMULATOR_CONFINE=0``: never; see
    :mod:`klavis_emulator._exec.confinement`)."""
    host_mcp: bool = True
    """Serve the real MCP servers of the emulator's catalog at each sandbox's
    ``mcp_server_url`` (see :mod:`klavis_emulator._mcp`)."""
    mcp_at_acquire: bool = True
    """Start a sandbox's hosted MCP servers in the background when it is acquired, so they
    are up when a client first calls them, as on the service (``False``: on the first
    request instead)."""
    mcp_spares: int = 1
    """Spare server sets of each sandbox shape kept started ahead, so that a reset hands the
    sandbox fresh servers that are already up (confined, with ``mcp_at_acquire``): one set per
    shape that a live sandbox was reset with, for the whole emulator, dropped when the last
    such sandbox goes. ``0``: none; a reset then starts fresh servers in the background, and
    the first MCP call after it waits for its server."""
    mcp_fork_servers: bool | None = None
    """Start the Python servers that can be (git, terminal, arxiv) from a fork server of their
    kind when confined, so that sandboxes share their imported code (see
    :mod:`klavis_emulator._mcp.forks`); ``None``: yes unless ``$KLAVIS_EMULATOR_MCP_FORK`` is
    ``0``."""
    install_mcp_servers: bool | None = None
    """Install a hosted server whose parts (npm tree, venv) are missing when it is first
    needed, into the per-user tools folder (``False``: never, a missing server answers 503
    naming ``klavis-emulator setup --only NAME``; ``None``: yes unless
    ``$KLAVIS_EMULATOR_INSTALL_SERVERS`` is ``0``)."""

    # ------------------------------------------------------------------ benchmarks
    benchmark_data: Mapping[str, str | os.PathLike[str]] = field(default_factory=dict)
    """Benchmark name -> folder. A sandbox acquired with that benchmark starts (and restarts
    on reset) with a copy of the folder in its workspace and the data documents of its
    ``.server-data/`` folder loaded (see :mod:`klavis_emulator._benchmark_data`)."""

    def __post_init__(self) -> None:
        if self.data_dir is not None:
            object.__setattr__(self, "data_dir", Path(self.data_dir))
        if self.api_keys is not None:  # a generator would be used up by the first reader
            object.__setattr__(self, "api_keys", tuple(self.api_keys))
        if cast("ArchiveLimits | None", self.archive_limits) is None:  # as create_app took it
            object.__setattr__(self, "archive_limits", ArchiveLimits())
        packs = {str(name): Path(path) for name, path in dict(self.benchmark_data).items()}
        object.__setattr__(self, "benchmark_data", packs)
        for name in _CHECKS:
            problem = field_problem(name, getattr(self, name))
            if problem is not None:
                raise ValueError(f"{name} {problem}")

    def __repr__(self) -> str:
        shown = []
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            hidden = item.name in _SECRETS and value is not None
            shown.append(f"{item.name}=..." if hidden else f"{item.name}={value!r}")
        return f"EmulatorConfig({', '.join(shown)})"

    def resolved_data_dir(self) -> Path:
        """``data_dir``, or :func:`default_data_dir` when it is ``None``."""
        return Path(self.data_dir) if self.data_dir is not None else default_data_dir()

    @property
    def max_upload_bytes(self) -> int:
        """``max_upload_mb`` in bytes."""
        return int(self.max_upload_mb * 1024 * 1024)


_SECRETS: Final = frozenset({"api_keys", "control_token"})


def _non_negative(value: float) -> str | None:
    return "must not be negative" if value < 0 else None


def _positive(value: float) -> str | None:
    return "must be positive" if not value > 0 else None


def _at_least_one(value: int) -> str | None:
    return "must be at least 1" if value < 1 else None


def _fraction(value: float) -> str | None:
    return None if 0.0 <= value <= 1.0 else "must be between 0.0 and 1.0"


def _fault_mode(value: str) -> str | None:
    return None if value in FAULT_MODES else f"must be one of {', '.join(FAULT_MODES)}"


def _upload_cap(value: float) -> str | None:
    if not value > 0:
        return "must be positive"
    if int(value * 1024 * 1024) < 1:
        return "must be at least one byte (1/1048576)"
    return None


def _api_keys(value: tuple[str, ...] | None) -> str | None:
    if value is not None and not value:
        return "must name at least one key (or be None to accept any)"
    return None


def _control_token(token: str | None) -> str | None:
    if token is None:
        return None
    if not token or any(ch.isspace() or not ch.isprintable() for ch in token):
        return "must be a non-empty string without whitespace or control characters"
    if not token.isascii():
        return "must be ASCII (it travels in an HTTP header)"
    return None


def _interval(value: float | None) -> str | None:
    return "must be positive (or None)" if value is not None and not value > 0 else None


_CHECKS: Final[dict[str, Callable[[Any], str | None]]] = {
    "port": _non_negative,
    "latency_ms": _non_negative,
    "acquire_delay": _non_negative,
    "fault_rate": _fraction,
    "fault_mode": _fault_mode,
    "api_keys": _api_keys,
    "signed_url_minutes": _at_least_one,
    "max_upload_mb": _upload_cap,
    "control_token": _control_token,
    "reaper_interval": _interval,
    "mcp_spares": _non_negative,
    "execution_timeout": _positive,
}


def field_problem(name: str, value: Any) -> str | None:
    """Why ``value`` cannot be the field ``name`` (``"must be positive"``), or ``None``."""
    check = _CHECKS.get(name)
    return None if check is None else check(value)


def field_default(name: str) -> Any:
    """The default value of the field ``name`` (for the command's ``--help``)."""
    for item in dataclasses.fields(EmulatorConfig):
        if item.name == name:
            if item.default_factory is not dataclasses.MISSING:
                return item.default_factory()
            return item.default
    raise KeyError(name)
