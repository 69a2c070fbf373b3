"""The acquire keywords, written once: :class:`AcquireOptions` and what they resolve to.

``LocalSandbox.acquire``, ``AsyncLocalSandbox.acquire``, both pools, ``bulk_acquire`` and
``async_bulk_acquire`` take the same keywords. Each signature says
``**options: Unpack[AcquireOptions]``, so mypy and editors see every keyword and its type
(PEP 692), and :func:`resolve_acquire` checks them all, before anything is sent, in one place.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from ._config import Settings, resolve_settings
from ._models import AcquireRequest, check_acquire
from ._ownership import ledger_of

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover - Python 3.10
    from typing_extensions import Unpack

if TYPE_CHECKING:
    from ._archive import ArchiveLimits
    from ._config import ApiKey
    from ._ledger import Ledger

__all__ = ["Acquire", "AcquireOptions", "Unpack", "resolve_acquire"]


class AcquireOptions(TypedDict, total=False):
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
    """

    benchmark: str | None
    ttl_seconds: int | None
    test_account_email: str | None
    api_key: str | ApiKey | None
    base_url: str | None
    timeout: float | None
    progress: bool | None
    ledger: Ledger | bool
    limits: ArchiveLimits | None


_KEYWORDS = frozenset(AcquireOptions.__annotations__)


@dataclass(frozen=True)
class Acquire:
    """Acquire's keywords, checked and resolved: the request, the connection, the ledger."""

    request: AcquireRequest
    settings: Settings
    ledger: Ledger | None
    progress: bool | None
    limits: ArchiveLimits | None

    def options(self) -> AcquireOptions:
        """The same acquire as keywords, for another acquire of the same kind (a pool's, a
        batch's): the resolved connection and ledger, and no progress bar of its own."""
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
        )


def check_keywords(where: str, options: Mapping[str, Any]) -> None:
    """A ``TypeError`` naming the first keyword ``options`` holds that acquire does not take,
    as Python says it of a signature."""
    for name in options:
        if name not in _KEYWORDS:
            raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")


def resolve_acquire(
    where: str,
    server_names: Sequence[str] | str,
    options: AcquireOptions,
    *,
    settings: Settings | None = None,
) -> Acquire:
    """Check ``options`` (the keywords of ``where``, e.g. ``"acquire"``) and resolve them;
    ``settings``, when given, is the connection already resolved."""
    check_keywords(where, options)
    request = check_acquire(
        server_names,
        benchmark=options.get("benchmark"),
        ttl_seconds=options.get("ttl_seconds", 7200),
        test_account_email=options.get("test_account_email"),
    )
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
    )
