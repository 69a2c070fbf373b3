"""What a catalog entry is made of: install kinds, system programs, launch context and parts.

:class:`McpServer` (one server of the contract's enum) says how the server is installed
(:data:`Install`: :class:`NpmPackage`, :class:`OwnVenv`, :class:`EmulatorPython`, or
:class:`NotHosted` with the reason) and launched (a function from :class:`LaunchContext` to
:class:`LaunchParts`). The entries themselves are in :mod:`.catalog`. No I/O here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "EmulatorPython",
    "ForkRecipe",
    "Install",
    "LaunchContext",
    "LaunchParts",
    "McpServer",
    "NotHosted",
    "NpmPackage",
    "OwnVenv",
    "SystemProgram",
]


# ---------------------------------------------------------------------- install kinds


@dataclass(frozen=True)
class NpmPackage:
    """An npm package pinned in ``mcp_servers/npm/<server>/package.json`` +
    ``package-lock.json`` (``npm ci`` installs it in the tools folder, one tree per server);
    run as ``node <package>/<entry>``."""

    package: str
    version: str
    entry: str
    """The script inside the package (its ``bin``), e.g. ``dist/index.js``."""


@dataclass(frozen=True)
class OwnVenv:
    """A PyPI distribution in a virtual environment of its own, built with the emulator's
    interpreter from ``mcp_servers/<requirements>`` (the whole tree pinned, as ``pip
    freeze`` printed it in that venv); run as the console script ``script``."""

    distribution: str
    version: str
    requirements: str
    script: str
    why: str
    """Why it does not share the emulator's environment."""
    min_python: tuple[int, int] = (3, 11)
    """The oldest Python the server runs on: by default the one its requirements file was
    frozen with (3.11; cli-mcp-server's pins include pycparser 3.12, which needs it). When
    the emulator's own interpreter is older (it runs on 3.10 too),
    setup builds the venv with a ``python3.X`` (X at least this) found on the machine, never
    downloaded (see :func:`klavis_emulator._mcp.setup.find_python`); where there is none,
    the server is reported as not installed, naming the Python it needs."""


@dataclass(frozen=True)
class EmulatorPython:
    """A module the emulator's own interpreter imports (a dependency of the emulator extra)."""

    distribution: str
    module: str


@dataclass(frozen=True)
class NotHosted:
    """The emulator does not run this server; ``reason`` is said in its 501 answer."""

    reason: str
    offline_feasible: bool = False
    """True when only the packaging is missing (a candidate package is named)."""


Install = NpmPackage | OwnVenv | EmulatorPython | NotHosted


@dataclass(frozen=True)
class SystemProgram:
    """A program a server needs from the machine, not from a package registry: the
    distribution's package (found on ``PATH``; under ``/usr``, so confined servers see it)."""

    names: tuple[str, ...]
    """Executable names tried in order on ``PATH``; the first is the program's key."""
    apt: str
    """The Debian/Ubuntu package that provides it (named in the "not installed" answer)."""
    why: str
    """What the server does with it."""
    paths: tuple[str, ...] = ()
    """Absolute paths tried, in order, when none of :attr:`names` is on ``PATH``."""

    @property
    def key(self) -> str:
        """The name :attr:`LaunchContext.system` and ``McpToolPaths.system`` use."""
        return self.names[0]


# ---------------------------------------------------------------------- launching


@dataclass(frozen=True)
class LaunchContext:
    """What a server's command line is built from."""

    program: Path
    """The node entry script, the venv's console script, or the emulator's interpreter."""
    node: Path | None
    """The ``node`` executable (npm servers)."""
    workspace: str
    """The workspace as the server sees it (``/data`` when confined, else the host path)."""
    tmp: str
    """The server's private temporary folder as it sees it (``/tmp`` when confined)."""
    command_timeout: int
    system: Mapping[str, Path] = field(default_factory=dict)
    """The :class:`SystemProgram` s the server needs, by key, where they were found."""
    confined: bool = False
    """Whether the server runs inside the bubblewrap confinement."""
    system_tmp: str = "/tmp"  # noqa: S108 - a path as the server sees it, not made here
    """The system's temporary folder as the server sees it (confined, the private ``/tmp``)."""
    mail: Mapping[str, Any] | None = None
    """For a server with :attr:`McpServer.mail_server`: its sandbox's mail server and
    account (the ``auth_data``, see :meth:`klavis_emulator._mail.server.MailServer.auth_data`)."""


@dataclass(frozen=True)
class LaunchParts:
    """A server's own command line and environment (confinement is added around it)."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    read_only: tuple[Path, ...] = ()
    """Extra folders to mount read-only (beyond the server's own install)."""


@dataclass(frozen=True)
class ForkRecipe:
    """How a Python server is started from a fork server when confined (see :mod:`.forks`):
    Python code run by the server's own interpreter, where ``WORKSPACE`` is the workspace as
    the server sees it (``/data``).

    ``prepare`` runs once, outside any sandbox, before the first fork: it must not touch the
    file system or the network, and may import, build and warm up only what is the same for
    every sandbox (a confined server's command line and environment are). ``serve`` runs in
    each forked child, inside its sandbox (in ``/data``, with the server's environment and
    ``sys.argv`` as ``prepare`` left them), and serves MCP on stdin and stdout."""

    prepare: str
    serve: str


@dataclass(frozen=True)
class McpServer:
    """One server of the contract's enum: how it is installed and launched."""

    name: str
    install: Install
    summary: str
    launch: Callable[[LaunchContext], LaunchParts] | None = None
    private_tmp: bool = False
    """Unconfined, give the process ``TMPDIR`` in a per-sandbox folder outside the
    workspace (confined, ``/tmp`` is a private tmpfs anyway)."""
    needs: tuple[SystemProgram, ...] = ()
    """Programs from the distribution it needs (missing: the URL answers 503 naming them)."""
    network: bool = False
    """Confined, share the emulator's network namespace (default: none at all)."""
    mail_server: bool = False
    """The sandbox gets a mail server of its own (IMAP + SMTP on loopback, see
    :mod:`klavis_emulator._mail.server`), named in the server item's ``auth_data``; the launch
    receives it as :attr:`LaunchContext.mail`."""
    fork: ForkRecipe | None = None
    """Confined, start the server from a fork server of its kind that has imported its code
    (copy-on-write sharing of that memory between sandboxes); None: a process of its own."""

    @property
    def hosted(self) -> bool:
        """Whether the emulator runs this server for real."""
        return not isinstance(self.install, NotHosted)
