"""A local emulator of the Klavis ``/local-sandbox`` API, for tests, notebooks and demos.

The state (SQLite + one workspace folder per sandbox) lives in :class:`EmulatorState`,
apart from the HTTP layer built by :func:`create_app`. :class:`EmulatorServer` serves it
from a thread on a free port::

    from klavis_emulator import EmulatorConfig, EmulatorServer

    with EmulatorServer(EmulatorConfig(fault_rate=0.1)) as server:
        print(server.base_url)

Every tunable (data folder, faults, signed URLs, API keys, confinement, MCP hosting, ...)
is a field of :class:`EmulatorConfig`, which :func:`create_app` takes too.

From a shell: ``python -m klavis_emulator --port 0`` (or ``klavis-emulator``).

Besides the sandbox lifecycle it runs executions (``main.py`` of an uploaded archive, in the
background, confined with bubblewrap where it works: see ``_exec/runner.py``), keeps the typed
data documents of google_cloud, poste_email_toolathlon and canvas, expires sandboxes on a
clock that ``POST /_emulator/clock/advance`` moves, and keeps everything in its data folder
across restarts. Other modules follow sandboxes through
:meth:`EmulatorState.add_listener` and reach the state as ``app.state.emulator``.

``__all__`` is what users use: serving, configuring, confinement. The state's records, the
URL signer and the contract's name lists are internal (tests import them from their
private modules).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._extra import EmulatorExtraMissing
from ._extra import missing as _missing
from ._extra import missing_message as _missing_message

# Without the emulator extra the package still imports (so the command can say what to
# install), and every name raises EmulatorExtraMissing with that one line.
_MISSING = _missing()
if _MISSING and not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise EmulatorExtraMissing(_missing_message(_MISSING), name=_MISSING[0])

else:
    from ._app import create_app
    from ._archive import ArchiveLimits
    from ._clock import Clock, ManualClock, OffsetClock, SystemClock
    from ._config import EmulatorConfig, default_data_dir
    from ._exec import Confinement, ConfinementError, detect_confinement
    from ._faults import FaultSettings
    from ._middleware import CONTROL_TOKEN_HEADER
    from ._server import EmulatorServer
    from ._state import EmulatorState

__all__ = [
    # serving it
    "EmulatorServer",
    "EmulatorConfig",
    "create_app",
    "default_data_dir",
    "CONTROL_TOKEN_HEADER",
    # what its config and server name
    "ArchiveLimits",
    "Clock",
    "ManualClock",
    "OffsetClock",
    "SystemClock",
    "FaultSettings",
    "EmulatorState",
    # confinement
    "Confinement",
    "ConfinementError",
    "detect_confinement",
    # errors
    "EmulatorExtraMissing",
]
