"""The API key stays out of Ray: refused in the options we are given, warned about in the job's.

Whatever goes into a ``runtime_env`` is stored by Ray where others read it: the job's in the
cluster's job table (any job connected to the cluster reads it back, with no key of its own:
``serialized_runtime_env`` of the GCS job info, measured with ray 2.60.0), a task's or an
actor's in the tables of tasks and actors, and all of them in plain text in the session's
``logs/runtime_env_agent.log`` (mode 0644, in a folder every local user can enter). So the key
reaches the broker and the workers through their own machines' environment instead: a local
cluster's processes inherit the environment of the driver that started it (``ray.init()`` with
``KLAVIS_API_KEY`` exported), a multi-node cluster's from ``ray start`` on each node (a
Kubernetes ``Secret`` mounted as an environment variable or a file), or
``KLAVIS_API_KEY_FILE``, the path of a file holding it, which may itself travel in a
``runtime_env`` (the path is no secret).

What this module does about it: options handed to us (``task_options``, ``actor_options``) that
would put the key in a ``runtime_env`` are refused before anything is sent; a job whose own
``runtime_env`` already carries it (too late to take back) gets one :class:`KeyInRayWarning`.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Mapping
from typing import Any

from .._config import API_KEY_ENV
from .._errors import InvalidInputError

__all__ = ["KeyInRayWarning", "refuse_key_in_options", "warn_if_the_job_carries_the_key"]

log = logging.getLogger("workflows")

_WARNED: set[str] = set()  # the jobs warned about, once each per process


class KeyInRayWarning(UserWarning):
    """The Ray job's ``runtime_env`` holds the Klavis API key: every job of the cluster can
    read it back from Ray's job table, and it is in the session's log files."""


def _carries_key(runtime_env: object) -> str | None:
    """The name of the ``env_vars`` entry of ``runtime_env`` that holds a key (a value under
    the name ``KLAVIS_API_KEY``, or this process's ``KLAVIS_API_KEY`` under any name), or
    None."""
    if not isinstance(runtime_env, Mapping):
        return None
    env_vars = runtime_env.get("env_vars")
    if not isinstance(env_vars, Mapping):
        return None
    own = os.environ.get(API_KEY_ENV, "").strip()
    for name, value in env_vars.items():
        held = value.strip() if isinstance(value, str) else ""
        if held and (name == API_KEY_ENV or held == own):  # an empty one hides the key: fine
            return str(name)
    return None


_HOW = (
    "give the key to the cluster's machines instead: export KLAVIS_API_KEY before ray.init() "
    "starts a local cluster (its processes inherit it), or before `ray start` on each node, or "
    "point KLAVIS_API_KEY_FILE at a file that holds it (the path may go in a runtime_env)"
)


def refuse_key_in_options(options: Mapping[str, Any] | None, argument: str) -> None:
    """Raise :class:`~workflows.InvalidInputError` when ``options`` (Ray ``.options()``
    given as ``argument``) would put the key in a ``runtime_env``: Ray would store it where any
    job of the cluster reads it."""
    if not options:
        return
    name = _carries_key(options.get("runtime_env"))
    if name is not None:
        raise InvalidInputError(
            f"{argument}['runtime_env']['env_vars'][{name!r}] holds the Klavis API key, which "
            f"Ray would store in its tables and logs, readable by every job of the cluster; "
            f"{_HOW}"
        )


def warn_if_the_job_carries_the_key(runtime_env: object, job: str) -> None:
    """Warn once per job (:class:`KeyInRayWarning`, and a WARNING log line) when this Ray job's
    ``runtime_env`` holds the key."""
    name = _carries_key(runtime_env)
    if name is None or job in _WARNED:
        return
    _WARNED.add(job)
    message = (
        f"this Ray job's runtime_env holds the Klavis API key (env_vars[{name!r}]): Ray keeps it "
        "in the cluster's job table, which every job connected to the cluster can read, and in "
        f"plain text in the session's logs; {_HOW}, and start a new job without it"
    )
    log.warning("%s", message)
    warnings.warn(message, KeyInRayWarning, stacklevel=3)
