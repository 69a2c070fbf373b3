"""Sandboxes across a Ray cluster (the ``ray`` extra): one cap, one acquire rate, one ledger.

* :class:`RaySandboxPool`: :class:`~workflows.SandboxPool`'s interface, with each task run as
  a Ray task on the cluster's workers, over at most ``size`` sandboxes across the cluster.
* :class:`SandboxBroker`: the cluster's broker (a named, detached Ray actor) that leases
  sandboxes to any Ray worker (a verl tool, a SkyRL env, an rllm actor) under the same cap
  and rate: ``with SandboxBroker.connect().sandbox(["filesystem"]) as sb:``.
* :func:`reap`: release whatever the broker still holds, after a driver crashed.

The API key is never sent through Ray: the broker and each worker read ``KLAVIS_API_KEY`` (or
``KLAVIS_API_KEY_FILE``) from their own machine's environment, never from a ``runtime_env``,
which Ray stores where every job of the cluster reads it (see :class:`KeyInRayWarning`). A
worker that dies stops renewing its leases, and the broker releases its sandboxes
``lease_timeout`` seconds later.

Where it is written: the broker actor in :mod:`workflows.ray._broker`, its client in
:mod:`workflows.ray._client`, the pool (the sync pool's flow and threads with Ray hands) in
:mod:`workflows.ray._pool`.
"""

from __future__ import annotations

try:
    import ray as _ray  # noqa: F401 - the extra's check
except ImportError as _exc:  # pragma: no cover - the dev extra installs ray
    from .._errors import MissingExtraError

    raise MissingExtraError("workflows.ray", extra="ray", detail=f" ({_exc})") from _exc

from ._broker import BrokerStats, Lease, LeaseState
from ._client import DEFAULT_BROKER_NAME, DEFAULT_NAMESPACE, SandboxBroker, reap
from ._key import KeyInRayWarning
from ._pool import RaySandboxPool

__all__ = [
    "DEFAULT_BROKER_NAME",
    "DEFAULT_NAMESPACE",
    "BrokerStats",
    "KeyInRayWarning",
    "Lease",
    "LeaseState",
    "RaySandboxPool",
    "SandboxBroker",
    "reap",
]
