"""Sandboxes across a Ray cluster (the ``ray`` extra): one cap, one acquire rate, one ledger.

* :class:`RaySandboxPool`: :class:`~workflows.SandboxPool`'s interface, with each task run as
  a Ray task on the cluster's workers, over at most ``size`` sandboxes across the cluster.
* :class:`SandboxBroker`: the cluster's broker (a named, detached Ray actor) that leases
  sandboxes to any Ray worker (a verl tool, a SkyRL env, an rllm actor) under the same cap
  and rate: ``with SandboxBroker.connect().sandbox(["filesystem"]) as sb:``; its settings
  (:class:`BrokerConfig`, one for the cluster: :meth:`SandboxBroker.reconfigure`) and its
  :class:`Warm` sandboxes, kept acquired ahead.
* :func:`reap`: release what dead holders left (``everything=True``: all of it).

The API key is never sent through Ray: the broker and each worker read ``KLAVIS_API_KEY`` (or
``KLAVIS_API_KEY_FILE``) from their own machine's environment, never from a ``runtime_env``,
which Ray stores where every job of the cluster reads it (see :class:`KeyInRayWarning`). A
holder that dies has its leases ended as soon as Ray reports its death; the broker that dies
is restarted and adopts what it leased (:mod:`workflows.ray._broker` says how).

Where it is written: the broker actor in :mod:`workflows.ray._broker` (its Ray methods), its
book in :mod:`~workflows.ray._book`, its acquires and releases in :mod:`~workflows.ray._grants`,
its records in Ray's KV in :mod:`~workflows.ray._store`, its adoption of a dead broker's leases
in :mod:`~workflows.ray._recovery`; a holder process's session (its heartbeat thread) in
:mod:`~workflows.ray._session`, the sandboxes a lease gives in :mod:`~workflows.ray._leased`,
the client and its :class:`~workflows.ray._client.Leases` in :mod:`~workflows.ray._client`; the
pool (:class:`~workflows.BackendPool` on a Ray backend of the public pool seam) in
:mod:`~workflows.ray._pool`; the settings and messages in :mod:`~workflows.ray._types`.
"""

from __future__ import annotations

try:
    import ray as _ray  # noqa: F401 - the extra's check
except ImportError as _exc:  # pragma: no cover - the dev extra installs ray
    from .._errors import MissingExtraError

    raise MissingExtraError("workflows.ray", extra="ray", detail=f" ({_exc})") from _exc

from ._client import DEFAULT_BROKER_NAME, DEFAULT_NAMESPACE, SandboxBroker, reap
from ._key import KeyInRayWarning
from ._pool import RaySandboxPool
from ._types import BrokerConfig, BrokerStats, Lease, LeaseState, Warm

__all__ = [
    "DEFAULT_BROKER_NAME",
    "DEFAULT_NAMESPACE",
    "BrokerConfig",
    "BrokerStats",
    "KeyInRayWarning",
    "Lease",
    "LeaseState",
    "RaySandboxPool",
    "SandboxBroker",
    "Warm",
    "reap",
]
