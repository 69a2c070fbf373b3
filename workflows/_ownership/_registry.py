"""What this process owns, and what it is about to own: all of the process-wide bookkeeping.

* **Owned sandboxes**: :func:`own` records a sandbox when it is acquired (in the ledger, and
  in a registry) and :func:`disown` when it is released. At exit, a short synchronous DELETE is
  sent for every sandbox still registered (async sandboxes included: their event loop may be
  gone by then). On the first registration a SIGTERM handler is installed, if the process has
  none of its own, that turns SIGTERM into ``SystemExit`` so ``with`` blocks unwind and release
  as on Ctrl-C (:func:`unwind_on_sigterm`; ``dump_to`` installs it too, so that its temporary
  files are removed on SIGTERM as on Ctrl-C).
* **Detached sandboxes**: :func:`own_detached` records one acquired to outlive this process
  (``klavis-sandbox acquire``, ``acquire(..., detach=True)``) in the ledger only, with when its
  TTL ends: nothing releases it at exit, and ``reap`` spares it until then.
* **Claims**: an acquire that takes a sandbox (answered, or adopted by reconciling, see
  :mod:`._reconcile`) claims it, so two acquires of this process never share one.
* **Attempts in flight**: the ledger's ``attempt`` records of acquires still running here, or
  whose sandbox is not yet recorded, which ``reap`` must not take for orphans.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING

from ._ledger import Ledger, default_ledger

if TYPE_CHECKING:
    import httpx

    from workflows._config import Settings

log = logging.getLogger("workflows")
_lock = threading.Lock()
_owned: dict[tuple[str, str], Owned] = {}
_claims: set[tuple[str, str]] = set()
_in_flight: set[str] = set()
_installed = False
_signal_installed = False
_exit_client: Callable[[Settings, float], httpx.Client] | None = None
"""What makes the release at exit's client (:func:`workflows._transport.exit_client`, httpx):
imported when the handlers are installed, never in the handler itself (an import at interpreter
exit may fail, and one in a signal handler may wait on an import lock held by the very code it
interrupted). Not at module level either: ``import workflows`` leaves httpx to the first
request."""


@dataclass(frozen=True)
class Owned:
    """A sandbox this process must release."""

    sandbox_id: str
    settings: Settings
    ledger: Ledger | None


class Terminated(SystemExit):
    """SIGTERM arrived (``kill``, ``timeout``, ``docker stop``, a cancelled CI job): raised by
    the handler of :func:`unwind_on_sigterm` in the main thread, with status 143 (128 + 15).
    A ``SystemExit``, so ``except Exception`` lets it pass and the interpreter exits quietly."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Terminated(128 + signum)


def _install_signal_locked() -> None:
    global _signal_installed
    if _signal_installed or threading.current_thread() is not threading.main_thread():
        return  # a signal handler can only be installed from the main thread
    _signal_installed = True
    try:
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):  # pragma: no cover - embedded interpreters
        pass


def _load_http_layer() -> None:
    """Import what :func:`release_all_owned` needs, before the lock is taken (an import may
    take a tenth of a second; a no-op once done)."""
    global _exit_client
    if _exit_client is None:
        from workflows._transport import exit_client

        _exit_client = exit_client


def _install() -> None:
    global _installed
    if not _installed:
        _installed = True
        atexit.register(release_all_owned)
    _install_signal_locked()


def unwind_on_sigterm() -> None:
    """From now on, SIGTERM raises :class:`Terminated` (a ``SystemExit``) in the main thread,
    so that ``with`` blocks and ``finally`` clauses run as on Ctrl-C: sandboxes are released,
    temporary files removed. Only when called from the main thread, the first time, and when
    the process has no SIGTERM handler of its own (nor ignores SIGTERM)."""
    with _lock:
        _install_signal_locked()


def install_exit_handlers() -> None:
    """Install the release at exit and the SIGTERM handler now, before anything is owned.

    :func:`own` installs them on the first registration, but the SIGTERM handler only from
    the main thread: code that acquires in worker threads (the sandbox pool) calls this first,
    from the thread that made it.
    """
    _load_http_layer()
    with _lock:
        _install()


def ledger_of(ledger: Ledger | bool) -> Ledger | None:
    """The ledger a ``ledger=`` argument names: True the default one, False none."""
    if ledger is True:
        return default_ledger()
    if ledger is False:
        return None
    return ledger


def _record_acquired(
    sandbox_id: str,
    settings: Settings,
    ledger: Ledger | None,
    attempt: str | None,
    *,
    detached: bool = False,
    ttl_seconds: int | None = None,
) -> None:
    """Record ``sandbox_id`` as acquired in ``ledger`` (if any; ``detached``, its TTL ending
    ``ttl_seconds`` from now) and settle its ``attempt``: what :func:`own` and
    :func:`own_detached` both do first."""
    if ledger is not None:
        ledger.record(
            "acquired",
            sandbox_id,
            base_url=settings.base_url,
            key=settings.api_key.fingerprint,
            attempt=attempt,
            detached=detached,
            ttl_seconds=ttl_seconds,
        )
    if attempt is not None:
        attempt_ended(attempt)


def own(
    sandbox_id: str, settings: Settings, ledger: Ledger | None, *, attempt: str | None = None
) -> None:
    """Record that this process must release ``sandbox_id``: in the ledger (settling the
    ``attempt`` record that announced it, which is in flight until then) and for interpreter
    exit and SIGTERM."""
    _record_acquired(sandbox_id, settings, ledger, attempt)
    _load_http_layer()
    with _lock:
        _owned[(settings.base_url, sandbox_id)] = Owned(sandbox_id, settings, ledger)
        _install()


def own_detached(
    sandbox_id: str,
    settings: Settings,
    ledger: Ledger | None,
    *,
    ttl_seconds: int | None,
    attempt: str | None = None,
) -> None:
    """Record ``sandbox_id`` as acquired to outlive this process (``klavis-sandbox acquire``,
    ``acquire(..., detach=True)``): in the ledger, detached, with when its TTL ends (None:
    never), settling its ``attempt``; never released at exit or on SIGTERM, and spared by
    ``reap`` until its TTL ends. A release by name (:func:`disown`) settles it as any other."""
    _record_acquired(sandbox_id, settings, ledger, attempt, detached=True, ttl_seconds=ttl_seconds)


def disown(sandbox_id: str, settings: Settings, ledger: Ledger | None) -> None:
    """The sandbox was released: forget it everywhere (its place under the host's limits
    too), and say so in the ledger."""
    from workflows._host_limits import release_host_slot  # after a release: never at exit

    forget(sandbox_id, settings)
    release_claim(settings.base_url, sandbox_id)
    release_host_slot(settings.base_url, sandbox_id)
    if ledger is not None:
        ledger.record(
            "released", sandbox_id, base_url=settings.base_url, key=settings.api_key.fingerprint
        )


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
    make_client = _exit_client
    for item in pending:
        try:
            if make_client is None:  # pragma: no cover - own() loaded it before registering
                raise RuntimeError("the HTTP layer was never imported")
            with make_client(item.settings, timeout) as client:
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


def claim(base_url: str, sandbox_id: str) -> bool:
    """Claim a sandbox for one acquire of this process; False if another acquire has it."""
    with _lock:
        key = (base_url, sandbox_id)
        if key in _claims:
            return False
        _claims.add(key)
        return True


def release_claim(base_url: str, sandbox_id: str) -> None:
    """Forget a claim once the sandbox is released (ids are never reused; this saves memory)."""
    with _lock:
        _claims.discard((base_url, sandbox_id))


def new_attempt() -> str:
    """A fresh attempt id, marked in flight until :func:`attempt_ended`."""
    attempt = os.urandom(16).hex()  # what uuid4().hex is made of (uuid costs an import)
    with _lock:
        _in_flight.add(attempt)
    return attempt


def attempt_ended(attempt: str) -> None:
    """The acquire of ``attempt`` raised (settled or not), or its sandbox is recorded."""
    with _lock:
        _in_flight.discard(attempt)


def in_flight(attempt: str) -> bool:
    """Whether an acquire of this process is still waiting on ``attempt``."""
    with _lock:
        return attempt in _in_flight


def clear() -> None:
    """Forget everything above, without releasing anything (for tests: each starts afresh),
    and give back this process's slots under host limits."""
    with _lock:
        _owned.clear()
        _claims.clear()
        _in_flight.clear()
    from workflows._host_limits import release_all_host_slots

    release_all_host_slots()
