"""A sandbox handed to another process: :class:`SandboxHandle`, and pickling without the key.

A Ray task, a ``multiprocessing`` worker or a queue gets a sandbox by pickling it. What crosses
is a :class:`SandboxHandle`: the sandbox's id, status and servers (names, MCP URLs), the base
URL, the connection timeout and a one-way fingerprint of the key that acquired it. Never the key
(it would sit in Ray's object store, a worker's log, a spilled file) and never the servers'
``auth_data`` or ``metadata``, which may hold credentials (``refresh()`` fetches them with the
receiver's key). The receiver reads the key from its own environment (``KLAVIS_API_KEY`` or
``KLAVIS_API_KEY_FILE``; with Ray, the environment of the cluster's machines, never a
``runtime_env``: see :mod:`workflows.ray._key`), and is told so, before anything is sent, when
that key is missing or is not the one that acquired the sandbox.

A handed sandbox is not owned: leaving its ``with`` block does not release it (as ``attach``);
the process that acquired it stays in charge, and ``release()`` still ends it from anywhere.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ._acquire import AttachOptions, Unpack, check_keywords
from ._config import API_KEY_ENV, Settings, resolve_settings
from ._errors import ConfigurationError
from ._models import SandboxInfo, ServerInfo

if TYPE_CHECKING:
    from ._dump._limits import ArchiveLimits

__all__ = ["SandboxHandle", "handle_of", "restore", "settings_for"]

_NO_KEY_HINT = (
    "a sandbox handed to another process carries no API key (it is never pickled): set "
    f"{API_KEY_ENV} (or {API_KEY_ENV}_FILE, a file holding it) in this process's environment "
    "(with Ray: in the environment of the cluster's machines, exported before ray.init() starts "
    "a local cluster or before `ray start` on each node; never in a runtime_env, which every "
    "job of the cluster can read)"
)


@dataclass(frozen=True)
class SandboxHandle:
    """What another process needs to use a sandbox: no key, no credentials.

    ``key_fingerprint`` is :attr:`~workflows.ApiKey.fingerprint` of the key that acquired it (a
    one-way digest), so a receiver holding another key is told so at once.

    >>> handle = sb.handle()  # doctest: +SKIP
    >>> LocalSandbox.from_handle(handle).dump()  # doctest: +SKIP
    """

    info: SandboxInfo
    base_url: str
    key_fingerprint: str
    timeout: float

    @property
    def id(self) -> str:
        """The sandbox id."""
        return self.info.id


class _Handed(Protocol):
    """What :func:`handle_of` reads of a sandbox (a ``workflows._sandbox_base.SandboxBase``,
    which imports this module: named by a protocol, not imported back)."""

    @property
    def servers(self) -> tuple[ServerInfo, ...]: ...

    @property
    def info(self) -> SandboxInfo: ...

    @property
    def settings(self) -> Settings: ...


def handle_of(sandbox: _Handed) -> SandboxHandle:
    """The handle of ``sandbox``: its info without servers' ``auth_data`` and ``metadata``."""
    servers = tuple(
        dataclasses.replace(server, auth_data=None, metadata=None) for server in sandbox.servers
    )
    settings = sandbox.settings
    return SandboxHandle(
        dataclasses.replace(sandbox.info, servers=servers),
        settings.base_url,
        settings.api_key.fingerprint,
        settings.timeout,
    )


def settings_for(where: str, handle: SandboxHandle, options: AttachOptions) -> Settings:
    """The connection of a handed sandbox: the handle's base URL and timeout unless ``options``
    name others, the key from ``options`` or this process's environment, checked against the
    handle's fingerprint."""
    if not isinstance(handle, SandboxHandle):
        raise TypeError(f"{where}() takes a SandboxHandle, not {type(handle).__name__}")
    check_keywords(where, options, AttachOptions)
    try:
        settings = resolve_settings(
            options.get("api_key"),
            options.get("base_url") or handle.base_url,
            timeout=options.get("timeout") or handle.timeout,
        )
    except ConfigurationError as exc:
        if "no Klavis API key" in str(exc):
            raise ConfigurationError(f"sandbox {handle.id}: {_NO_KEY_HINT}") from None
        raise
    if settings.api_key.fingerprint != handle.key_fingerprint:
        raise ConfigurationError(
            f"sandbox {handle.id} was acquired with another API key (fingerprint "
            f"{handle.key_fingerprint}) than this process's (fingerprint "
            f"{settings.api_key.fingerprint}): the key is never pickled; set {API_KEY_ENV} in "
            "this process's environment to the key that acquired it"
        )
    return settings


class _FromHandle(Protocol):
    def from_handle(self, handle: SandboxHandle, **options: Unpack[AttachOptions]) -> Any: ...


def restore(
    face: _FromHandle, handle: SandboxHandle, progress: bool | None, limits: ArchiveLimits
) -> Any:
    """Unpickle a sandbox: ``face.from_handle`` (``LocalSandbox`` or ``AsyncLocalSandbox``)."""
    return face.from_handle(handle, progress=progress, limits=limits)
