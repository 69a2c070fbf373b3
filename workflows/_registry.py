"""What this process owns, so that interpreter exit and SIGTERM release it.

A sandbox registers here when it is acquired and unregisters when it is released. At exit, a
short synchronous DELETE is sent for every sandbox still registered (async sandboxes included:
their event loop may be gone by then). On the first registration a SIGTERM handler is installed,
if the process has none of its own, that turns SIGTERM into ``SystemExit`` so ``with`` blocks
unwind and release as on Ctrl-C.
"""

from __future__ import annotations

import atexit
import logging
import signal
import threading
from dataclasses import dataclass
from types import FrameType

import httpx

from ._config import Settings
from ._http import BearerAuth
from ._ledger import Ledger

__all__ = ["Owned", "forget", "own", "owned", "release_all_owned"]

log = logging.getLogger("workflows")
_lock = threading.Lock()
_owned: dict[tuple[str, str], Owned] = {}
_installed = False


@dataclass(frozen=True)
class Owned:
    """A sandbox this process must release."""

    sandbox_id: str
    settings: Settings
    ledger: Ledger | None


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    atexit.register(release_all_owned)
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):  # pragma: no cover - embedded interpreters
        pass


def own(sandbox_id: str, settings: Settings, ledger: Ledger | None) -> None:
    """Record that this process must release ``sandbox_id``."""
    with _lock:
        _owned[(settings.base_url, sandbox_id)] = Owned(sandbox_id, settings, ledger)
        _install()


def forget(sandbox_id: str, settings: Settings) -> None:
    """The sandbox was released (or handed over): nothing left to do at exit."""
    with _lock:
        _owned.pop((settings.base_url, sandbox_id), None)


def owned() -> list[Owned]:
    """The sandboxes this process still owns."""
    with _lock:
        return list(_owned.values())


def release_all_owned(timeout: float = 10.0) -> int:
    """Release every sandbox still owned; returns how many were released. Runs at exit."""
    with _lock:
        pending = list(_owned.values())
        _owned.clear()
    released = 0
    for item in pending:
        try:
            with httpx.Client(
                base_url=item.settings.base_url,
                auth=BearerAuth(item.settings.api_key),
                timeout=timeout,
            ) as client:
                response = client.delete(f"/local-sandbox/{item.sandbox_id}")
            if response.status_code < 300 or response.status_code == 404:
                released += 1
                if item.ledger is not None:
                    item.ledger.record(
                        "released",
                        item.sandbox_id,
                        base_url=item.settings.base_url,
                        key=item.settings.api_key.fingerprint,
                    )
            else:
                log.warning(
                    "could not release sandbox %s at exit: HTTP %d",
                    item.sandbox_id,
                    response.status_code,
                )
        except Exception as exc:  # noqa: BLE001 - best effort at exit; the ledger keeps it
            log.warning("could not release sandbox %s at exit: %s", item.sandbox_id, exc)
    return released
