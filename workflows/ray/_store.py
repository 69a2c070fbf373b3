"""Where a broker writes down what it leases, so that the next broker of its name finds it:
the Ray cluster's own key-value store (GCS's internal KV).

Why there, rather than the ledger file on the head node: the KV is reachable from every node,
so Ray may restart the broker wherever it likes (a detached actor with ``max_restarts=-1``
lands on any node with room; pinning it to the head would override the user's
``actor_options``), and with GCS fault tolerance (KubeRay's external Redis) it outlives even
the head node's restart, when a file on the head pod would be gone. It is what Ray Serve's
controller, a detached actor in the same position, recovers its state from. Its cost: one
GCS round trip per write (about a millisecond), three per lease that acquires (its attempt,
its sandbox, its release) and none for a lease that waits: a waiting lease dies with the
broker and is asked again by its holder. What it cannot do: outlive the cluster (without GCS
fault tolerance): sandboxes then live until their TTL (the broker acquires with the
``ttl_seconds`` of each request, 7200 by default).

What is written, under ``<namespace>/<name>/`` in the KV namespace
:data:`KV_NAMESPACE`:

* ``config``: the broker's settings (pickled :class:`~workflows.ray._types.Settings`, which
  holds no key) and the token of the ``connect`` that made it, so that Ray restarting the
  actor (with its first arguments) keeps a later ``reconfigure``;
* ``incarnation``: how many brokers of this name started;
* ``a/<attempt>``: an acquire about to be sent, written *before* it is sent (its lease, its
  holder, the servers asked for and the sandbox ids the key had: the library's ledger
  ``attempt``, see :mod:`workflows._ownership._ledger`): a broker that dies mid-acquire
  leaves it, and the next one finds the sandbox it may have made by listing
  (:func:`workflows._ownership.orphans`), and releases it;
* ``s/<sandbox_id>``: a sandbox the broker holds, with its lease, holder and handle (a
  :class:`~workflows.SandboxHandle`: never the key), or marked warm (idle, nobody's).

The key is never written: records hold its one-way fingerprint at most.
"""

from __future__ import annotations

import base64
import contextvars
import json
import logging
import os
import pickle
from collections.abc import Iterator
from typing import Any

from ray.experimental import internal_kv as _kv

from .._handle import SandboxHandle
from .._ownership import Ledger
from ._types import Settings

__all__ = ["KV_NAMESPACE", "KvLedger", "Store", "current_lease"]

log = logging.getLogger("workflows")

KV_NAMESPACE = "klavis-sandbox-broker"
"""The namespace of Ray's internal KV that brokers write in."""

current_lease: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "klavis_broker_current_lease", default=None
)
"""The lease an acquire of the broker is made for (its id, holder, session), read by
:class:`KvLedger` when the acquire records its attempt."""


class Store:
    """One broker's records in the cluster's KV (see the module)."""

    def __init__(self, name: str, namespace: str) -> None:
        self._prefix = f"{namespace}/{name}/"

    def _key(self, suffix: str) -> bytes:
        return (self._prefix + suffix).encode()

    def _put(self, suffix: str, value: bytes) -> None:
        _kv._internal_kv_put(self._key(suffix), value, True, namespace=KV_NAMESPACE)

    def _get(self, suffix: str) -> bytes | None:
        value: bytes | None = _kv._internal_kv_get(self._key(suffix), namespace=KV_NAMESPACE)
        return value

    def _delete(self, suffix: str) -> None:
        _kv._internal_kv_del(self._key(suffix), namespace=KV_NAMESPACE)

    # ----------------------------------------------------------------- settings
    def settings(self) -> tuple[Settings, str] | None:
        """The settings the last broker of this name ran with, and the token of the
        ``connect`` that made it; None for a new name."""
        raw = self._get("config")
        if raw is None:
            return None
        try:
            settings, token = pickle.loads(raw)  # noqa: S301 - written by our own broker
        except Exception as exc:  # noqa: BLE001 - a record of another version: start afresh
            log.warning("broker: could not read its settings from Ray's KV: %s", exc)
            return None
        if not isinstance(settings, Settings) or not isinstance(token, str):
            return None
        return settings, token

    def put_settings(self, settings: Settings, token: str) -> None:
        self._put("config", pickle.dumps((settings, token)))

    def next_incarnation(self) -> int:
        """Count one more broker of this name; its number (1 for the first)."""
        raw = self._get("incarnation")
        number = (int(raw) if raw and raw.isdigit() else 0) + 1
        self._put("incarnation", str(number).encode())
        return number

    # ----------------------------------------------------------------- records
    def put_attempt(self, attempt: str, record: dict[str, Any]) -> None:
        self._put(f"a/{attempt}", json.dumps(record, sort_keys=True).encode())

    def delete_attempt(self, attempt: str) -> None:
        self._delete(f"a/{attempt}")

    def put_sandbox(self, sandbox_id: str, record: dict[str, Any]) -> None:
        self._put(f"s/{sandbox_id}", json.dumps(record, sort_keys=True).encode())

    def delete_sandbox(self, sandbox_id: str) -> None:
        self._delete(f"s/{sandbox_id}")

    def records(self, kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every record of ``kind`` (``"a"``: attempts, ``"s"``: sandboxes): (id, record)."""
        prefix = self._key(f"{kind}/")
        keys: list[bytes] = _kv._internal_kv_list(prefix, namespace=KV_NAMESPACE)
        for key in keys:
            raw = _kv._internal_kv_get(key, namespace=KV_NAMESPACE)
            if raw is None:
                continue
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield key[len(prefix) :].decode(), record

    def forget(self) -> None:
        """Delete every record of this broker (its shutdown: nothing is left to adopt)."""
        _kv._internal_kv_del(self._key(""), del_by_prefix=True, namespace=KV_NAMESPACE)


def encode_handle(handle: SandboxHandle) -> str:
    """A handle as a record holds it (it pickles without the key, by design)."""
    return base64.b64encode(pickle.dumps(handle)).decode()


def decode_handle(text: object) -> SandboxHandle | None:
    """The handle of a record; None if it holds none that reads."""
    if not isinstance(text, str):
        return None
    try:
        handle = pickle.loads(base64.b64decode(text))  # noqa: S301 - written by our own broker
    except Exception:  # noqa: BLE001 - another version's record: adopted by id instead
        return None
    return handle if isinstance(handle, SandboxHandle) else None


class KvLedger(Ledger):
    """The library's ledger (:class:`~workflows._ownership.Ledger`), kept in the broker's
    records rather than a file: the broker's acquires go through the library's own flow
    (list first, record the attempt, send, reconcile an ambiguous answer), and what that flow
    records lands in the KV, where the next broker reads it. Only what recovery needs is
    kept: open attempts (``a/``); the sandboxes themselves are written by the broker (``s/``,
    with their lease), and a sandbox's release by the broker deletes its record."""

    def __init__(self, store: Store) -> None:
        super().__init__(os.devnull)
        self._store = store
        self._in_flight: dict[str, dict[str, Any]] = {}  # attempt -> its record, while in flight
        self.ambiguous: set[str] = set()  # attempts that ended ambiguously: to reconcile
        self._left_open: set[str] = set()  # the leases whose acquire left such an attempt

    def __repr__(self) -> str:
        return "KvLedger()"

    def _append(self, record: dict[str, object]) -> None:
        event = record.get("event")
        try:
            if event == "attempt":
                attempt = str(record["attempt"])
                full: dict[str, Any] = {**record, **(current_lease.get() or {})}
                self._in_flight[attempt] = full
                self._store.put_attempt(attempt, full)
            elif event == "acquired":  # the sandbox's record first, then the attempt's end
                settles = record.get("attempt")
                opened = self._in_flight.pop(settles, None) if isinstance(settles, str) else None
                if opened is not None and isinstance(settles, str):
                    sandbox_id = str(record["sandbox_id"])
                    self._store.put_sandbox(
                        sandbox_id,
                        {
                            "sandbox_id": sandbox_id,
                            "base_url": record.get("base_url"),
                            "lease": opened.get("lease"),
                            "session": opened.get("session"),
                            "holder": opened.get("holder"),
                            "warm": bool(opened.get("warm")),
                        },
                    )
                    self._store.delete_attempt(settles)
            elif event in ("attempt-settled", "attempt-forgotten"):
                settled = record.get("attempt")
                if isinstance(settled, str) and self._in_flight.pop(settled, None) is not None:
                    self._store.delete_attempt(settled)
            elif event == "attempt-ended":  # ambiguous: reconciled by listing, later
                ended = record.get("ended")
                opened = self._in_flight.pop(ended, None) if isinstance(ended, str) else None
                if opened is not None and isinstance(ended, str):
                    self.ambiguous.add(ended)
                    self._left_open.add(str(opened.get("lease")))
            # "released" is the broker's to record: it deletes the sandbox's record
        except Exception as exc:  # noqa: BLE001 - the ledger must never break the work
            log.warning("broker: could not write its record to Ray's KV: %s", exc)

    def left_open(self, lease_id: str) -> bool:
        """Whether the acquire of ``lease_id`` ended leaving an attempt to reconcile (its slot
        stays counted until :meth:`Recovery.reconcile_ambiguous` is done with it); asked once."""
        if lease_id in self._left_open:
            self._left_open.discard(lease_id)
            return True
        return False

    def _items(self) -> Iterator[dict[str, object]]:
        return iter(())  # what other processes hold is theirs: the broker holds its own
