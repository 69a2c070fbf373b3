"""The keywords of acquire, attach, list and bulk release, each list written once.

``LocalSandbox.acquire``, ``AsyncLocalSandbox.acquire``, both pools, ``bulk_acquire`` and
``async_bulk_acquire`` take the same keywords; ``attach``, ``list`` and the bulk releases take
parts of them. Each signature says ``**options: Unpack[AcquireOptions]`` (or
:class:`ConnectionOptions`, :class:`AttachOptions`, :class:`ReleaseOptions`), so mypy and
editors see every keyword and its type (PEP 692); :func:`resolve_acquire` and
:func:`resolve_connection` check them, before anything is sent, in one place.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from ._config import Settings, check_keywords, resolve_settings
from ._models import AcquireRequest, Benchmark, ServerNames, check_acquire
from ._ownership import ledger_of

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover - Python 3.10
    from typing_extensions import Unpack

if TYPE_CHECKING:
    from ._config import ApiKey
    from ._dump._limits import ArchiveLimits
    from ._host_limits import HostLimits
    from ._ownership import Ledger

__all__ = [
    "Acquire",
    "AcquireOptions",
    "AttachOptions",
    "ConnectionOptions",
    "ReleaseOptions",
    "Unpack",
    "check_keywords",
    "resolve_acquire",
    "resolve_connection",
]


class ConnectionOptions(TypedDict, total=False):
    """The keywords of every call that connects (each optional, default None): ``api_key``,
    ``base_url`` and ``timeout``, resolved as :func:`~workflows.resolve_settings` does
    (argument, then environment, then default)."""

    api_key: str | ApiKey | None
    base_url: str | None
    timeout: float | None


class AttachOptions(ConnectionOptions, total=False):
    """The keywords of ``attach``: the connection's, and for the sandbox's work, ``progress``
    (None: bars when a terminal or notebook shows them) and ``limits`` (None: the default
    :class:`~workflows.ArchiveLimits` of its dumps)."""

    progress: bool | None
    limits: ArchiveLimits | None


class AcquireOptions(AttachOptions, total=False):
    """The keywords of every acquire (each optional; the default follows its name).

    * ``benchmark`` (None): a benchmark whose data the sandbox is configured with.
    * ``ttl_seconds`` (7200): released by the service after this many seconds (60..86400;
      None: never).
    * ``test_account_email`` (None): the test account the servers use.
    * ``api_key``, ``base_url``, ``timeout`` (None): the connection, resolved as
      :func:`~workflows.resolve_settings` does (argument, then environment, then default).
    * ``progress`` (None): show progress bars (None: when a terminal or notebook shows them).
    * ``ledger`` (True): record the sandbox in the default ledger, a :class:`~workflows.Ledger`
      of your own, or none (False).
    * ``limits`` (None: the defaults): the :class:`~workflows.ArchiveLimits` of its dumps.
    * ``host_limits`` (None: from ``KLAVIS_HOST_MAX_SANDBOXES`` and
      ``KLAVIS_HOST_MAX_ACQUIRES_PER_SECOND``, off when unset): a :class:`~workflows.HostLimits`
      shared by every process of this user on this host for this base URL and key.
    """

    benchmark: Benchmark | None
    ttl_seconds: int | None
    test_account_email: str | None
    ledger: Ledger | bool
    host_limits: HostLimits | None


class ReleaseOptions(ConnectionOptions, total=False):
    """The keywords of a bulk release: the connection's (for ids; a sandbox object is released
    with its own), ``progress`` (None: bars when shown) and ``ledger`` (True: the default one)."""

    progress: bool | None
    ledger: Ledger | bool


@dataclass(frozen=True)
class Acquire:
    """Acquire's keywords, checked and resolved: the request, the connection, the ledger, the
    host's limits (None: off)."""

    request: AcquireRequest
    settings: Settings
    ledger: Ledger | None
    progress: bool | None
    limits: ArchiveLimits | None
    host_limits: HostLimits | None = None

    def options(self) -> AcquireOptions:
        """The same acquire as keywords, for another acquire of the same kind (a pool's, a
        batch's): the resolved connection and ledger, and no progress bar of its own."""
        from ._host_limits import HostLimits

        request = self.request
        return AcquireOptions(
            benchmark=request.benchmark,
            ttl_seconds=request.ttl_seconds,
            test_account_email=request.test_account_email,
            api_key=self.settings.api_key,
            base_url=self.settings.base_url,
            timeout=self.settings.timeout,
            progress=self.progress,
            ledger=False if self.ledger is None else self.ledger,
            limits=self.limits,
            host_limits=self.host_limits or HostLimits(),
        )


def resolve_connection(where: str, options: ConnectionOptions, kind: Any) -> Settings:
    """The settings ``options`` (the keywords of ``where``, of the TypedDict ``kind``) name."""
    check_keywords(where, options, kind)
    return resolve_settings(
        options.get("api_key"), options.get("base_url"), timeout=options.get("timeout")
    )


def resolve_acquire(
    where: str,
    server_names: ServerNames,
    options: AcquireOptions,
    *,
    settings: Settings | None = None,
) -> Acquire:
    """Check ``options`` (the keywords of ``where``, e.g. ``"acquire"``) and resolve them;
    ``settings``, when given, is the connection already resolved."""
    from ._host_limits import resolve_host_limits  # the host's limits, imported when used

    check_keywords(where, options, AcquireOptions)
    request = check_acquire(
        server_names,
        benchmark=options.get("benchmark"),
        ttl_seconds=options.get("ttl_seconds", 7200),
        test_account_email=options.get("test_account_email"),
    )
    host_limits = resolve_host_limits(options.get("host_limits"))
    if settings is None:
        settings = resolve_settings(
            options.get("api_key"), options.get("base_url"), timeout=options.get("timeout")
        )
    return Acquire(
        request,
        settings,
        ledger_of(options.get("ledger", True)),
        options.get("progress"),
        options.get("limits"),
        host_limits,
    )
