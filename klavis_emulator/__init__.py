"""A local emulator of the Klavis ``/local-sandbox`` API, for tests, notebooks and demos.

The state (SQLite + one workspace folder per sandbox) lives in :class:`EmulatorState`,
apart from the HTTP layer built by :func:`create_app`. :class:`EmulatorServer` serves it
from a thread on a free port::

    from klavis_emulator import EmulatorServer

    with EmulatorServer() as server:
        print(server.base_url)

From a shell: ``python -m klavis_emulator --port 0`` (or ``klavis-emulator``).
"""

from __future__ import annotations

from ._app import create_app, default_data_dir
from ._archive import ArchiveLimits, ArchiveRejected, ArchiveTooLarge
from ._clock import Clock, ManualClock, OffsetClock, SystemClock
from ._faults import FaultSettings
from ._server import EmulatorServer
from ._signing import SignatureError, UrlSigner
from ._state import (
    BENCHMARKS,
    LOCAL_SERVER_NAMES,
    EmulatorError,
    EmulatorState,
    tenant_for_token,
)

__all__ = [
    "BENCHMARKS",
    "LOCAL_SERVER_NAMES",
    "ArchiveLimits",
    "ArchiveRejected",
    "ArchiveTooLarge",
    "Clock",
    "EmulatorError",
    "EmulatorServer",
    "EmulatorState",
    "FaultSettings",
    "ManualClock",
    "OffsetClock",
    "SignatureError",
    "SystemClock",
    "UrlSigner",
    "create_app",
    "default_data_dir",
    "tenant_for_token",
]
