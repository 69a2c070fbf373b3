"""Pieces shared by the sync and async sandboxes that do no I/O."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from klavis_sandbox_client.types import Response

from . import _reconcile, _registry
from ._config import Settings
from ._errors import ApiError
from ._ledger import Ledger, default_ledger
from ._models import SandboxInfo, sandbox_info_from_dict
from ._snapshot import Snapshot

__all__ = [
    "ArchiveTarget",
    "RoundTripReport",
    "body_dict",
    "disown",
    "ledger_of",
    "own",
    "compare_round_trip",
    "info_from",
    "signed_url_from",
]

log = logging.getLogger("workflows")


def body_dict(response: Response[Any]) -> dict[str, Any]:
    """The parsed body of a 2xx response as a JSON-like dict."""
    parsed = response.parsed
    to_dict = getattr(parsed, "to_dict", None)
    if callable(to_dict):
        data = to_dict()
        if isinstance(data, dict):
            return data
    raise ApiError(
        "the API answered a body the contract does not describe",
        status_code=int(response.status_code),
        body=response.content[:500],
    )


def info_from(response: Response[Any]) -> SandboxInfo:
    """A :class:`SandboxInfo` from an acquire or get response."""
    return sandbox_info_from_dict(body_dict(response))


def signed_url_from(response: Response[Any], key: str) -> str:
    """The signed URL (``upload_url`` or ``download_url``) of a response."""
    data = body_dict(response)
    url = data.get(key)
    if not isinstance(url, str) or not url:
        raise ApiError(f"the API answered no {key}", status_code=int(response.status_code))
    return url


@dataclass(frozen=True)
class ArchiveTarget:
    """Where ``dump_to`` writes: a folder to extract into, or a ``.tar.gz`` file to keep as is."""

    path: Path
    keep_archive: bool


@dataclass(frozen=True)
class RoundTripReport:
    """What came back after seeding files and dumping the workspace.

    ``ok`` is true when every seeded file came back byte for byte; files the workspace held
    before (``extra``) do not make it false.
    """

    missing: tuple[str, ...]
    changed: tuple[str, ...]
    extra: tuple[str, ...]
    snapshot: Snapshot = field(repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """True when nothing seeded is missing or different."""
        return not self.missing and not self.changed

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return (
            f"RoundTripReport(ok={self.ok}, missing={self.missing!r}, changed={self.changed!r}, "
            f"extra={self.extra!r})"
        )

    def summary(self) -> str:
        """One line, e.g. ``ok: 3 files came back`` or ``1 missing, 0 changed, 2 extra``."""
        if self.ok:
            came_back = len(self.snapshot) - len(self.extra)
            extra = f", {len(self.extra)} extra" if self.extra else ""
            noun = "file" if came_back == 1 else "files"
            return f"ok: {came_back} {noun} came back{extra}"
        return f"{len(self.missing)} missing, {len(self.changed)} changed, {len(self.extra)} extra"


def compare_round_trip(seeded: Mapping[str, bytes], snapshot: Snapshot) -> RoundTripReport:
    """Compare what was seeded with what the dump holds."""
    expected = Snapshot.from_mapping(seeded)
    diff = expected.diff(snapshot)
    return RoundTripReport(
        missing=diff.removed, changed=diff.modified, extra=diff.added, snapshot=snapshot
    )


def ledger_of(ledger: Ledger | bool) -> Ledger | None:
    if ledger is True:
        return default_ledger()
    if ledger is False:
        return None
    return ledger


def own(
    sandbox_id: str, settings: Settings, ledger: Ledger | None, *, attempt: str | None = None
) -> None:
    if ledger is not None:
        ledger.record(
            "acquired",
            sandbox_id,
            base_url=settings.base_url,
            key=settings.api_key.fingerprint,
            attempt=attempt,
        )
    _registry.own(sandbox_id, settings, ledger)


def disown(sandbox_id: str, settings: Settings, ledger: Ledger | None) -> None:
    _registry.forget(sandbox_id, settings)
    _reconcile.release_claim(settings.base_url, sandbox_id)
    if ledger is not None:
        ledger.record(
            "released", sandbox_id, base_url=settings.base_url, key=settings.api_key.fingerprint
        )
