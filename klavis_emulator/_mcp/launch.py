"""How each hosted MCP server is started: its command line, environment and confinement.

When the emulator confines (decided once at startup, see :mod:`klavis_emulator._exec.confinement`,
which also builds the ``bwrap`` command line shared with executions), a server runs in its
own mount, PID, network (unless its catalog entry says ``network``: playwright, whose
browser must reach pages on loopback, and poste_email_toolathlon, whose emails server talks
to its sandbox's mail server there) and IPC namespaces with only ``/usr``, ``/etc``, the
interpreters, the server's own files and a folder of common commands (``python``, ``node``,
``git``...) mounted read-only, no capabilities, and the sandbox's workspace
mounted read-write at ``/data`` (the real service's default ``AGENT_WORKSPACE``), so tool
paths match the cloud. ``--die-with-parent`` ends it with the emulator, whatever happens to
the emulator. Otherwise the server runs unconfined on the workspace's host path (and, where
``setpriv`` exists, still dies with its parent).

What each server runs (program, arguments, environment, extra mounts) comes from its
entry in :data:`~klavis_emulator._mcp.catalog.CATALOG`; this module adds what all servers
share: the environment, the mounts of its install (node and the npm packages, or its venv
and the interpreter under it), a private temporary folder for the servers that ask for one,
and the confinement around it.

No FastAPI and no fastmcp here: :func:`launch_spec` is plain data, easy to test.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from .._exec import CONFINED_PATH, CONFINED_WORKSPACE, PRIVATE_TMP, bwrap_args
from .catalog import CATALOG, HOSTED_SERVERS
from .kinds import LaunchContext, NotHosted, NpmPackage, OwnVenv
from .launchers import TERMINAL_ALLOWED_COMMANDS
from .setup import McpToolPaths

__all__ = [
    "DEFAULT_COMMAND_TIMEOUT",
    "HOSTED_SERVERS",
    "TERMINAL_ALLOWED_COMMANDS",
    "LaunchSpec",
    "launch_spec",
]

DEFAULT_COMMAND_TIMEOUT: Final = 30


@dataclass(frozen=True)
class LaunchSpec:
    """A command line for :class:`fastmcp.client.transports.StdioTransport`."""

    command: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    confined: bool = False
    workspace_as_seen: str = ""
    """The workspace's path as the server sees it (``/data`` when confined)."""


def _prefix_of(executable: Path) -> Path:
    """The install prefix of an executable (``/x/bin/tool`` -> ``/x``), symlinks resolved."""
    real = executable.resolve()
    return real.parent.parent if real.parent.name == "bin" else real.parent


def _common_env() -> dict[str, str]:
    return {
        # git refuses repositories owned by another uid ("dubious ownership") without this
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "safe.directory",
        "GIT_CONFIG_VALUE_0": "*",
        "GIT_AUTHOR_NAME": "Klavis Sandbox",
        "GIT_AUTHOR_EMAIL": "sandbox@klavis.invalid",
        "GIT_COMMITTER_NAME": "Klavis Sandbox",
        "GIT_COMMITTER_EMAIL": "sandbox@klavis.invalid",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _confined_env() -> dict[str, str]:
    return {
        "PATH": CONFINED_PATH,  # the builder adds its folder of commands (python, node...)
        "HOME": PRIVATE_TMP,
        "LANG": "C.UTF-8",
        "TMPDIR": PRIVATE_TMP,
        "AGENT_WORKSPACE": CONFINED_WORKSPACE,
    }


def _install_roots(server: str, program: Path, tools: McpToolPaths) -> list[Path]:
    """The folders of a server's install that a confined process needs (read-only)."""
    install = CATALOG[server].install
    if isinstance(install, NpmPackage):
        assert tools.node is not None
        node_modules = program
        while node_modules.name != "node_modules":
            node_modules = node_modules.parent
        # the server's whole folder: its node_modules may link to packages beside it
        # (desktop-commander's stand-ins in stubs/)
        return [_prefix_of(tools.node), node_modules.parent]
    if isinstance(install, OwnVenv):
        venv = program.parent.parent
        return [venv, _prefix_of(venv / "bin" / "python")]
    return [_prefix_of(program)]  # the emulator's Python (always mounted anyway)


def launch_spec(
    server: str,
    workspace: Path,
    tools: McpToolPaths,
    *,
    bwrap: str | None,
    command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
    tmp_dir: Path | None = None,
    mail: Mapping[str, Any] | None = None,
) -> LaunchSpec:
    """The command that runs ``server`` over ``workspace``.

    ``tools`` must have the server installed (see :meth:`McpToolPaths.missing`).
    ``bwrap`` is the bubblewrap that confines the server (the ``bwrap`` of the emulator's
    :class:`~klavis_emulator._exec.confinement.Confinement`), or ``None`` to run it unconfined.
    ``tmp_dir`` is the server's private temporary folder on the host, outside the
    workspace, used unconfined by servers that ask for one (confined, ``/tmp`` is a private
    tmpfs); without it they get a private folder under the system's temporary folder.
    ``mail`` is the sandbox's mail server and account, for a server with a mail server
    (:attr:`~klavis_emulator._mcp.catalog.McpServer.mail_server`).

    Raises:
        ValueError: the emulator does not host ``server`` (or it is not installed).
    """
    entry = CATALOG.get(server)
    if entry is None or isinstance(entry.install, NotHosted) or entry.launch is None:
        raise ValueError(f"the emulator does not host the {server!r} MCP server")
    program = tools.program(server)
    if (
        program is None
        or (isinstance(entry.install, NpmPackage) and tools.node is None)
        or any(need.key not in tools.system for need in entry.needs)
    ):
        raise ValueError(f"the {server!r} MCP server is not installed: {tools.missing(server)}")
    if entry.mail_server and mail is None:
        raise ValueError(f"the {server!r} MCP server needs its sandbox's mail server (mail=)")
    confine = bwrap is not None
    seen = CONFINED_WORKSPACE if confine else str(workspace)
    if confine:
        tmp = PRIVATE_TMP
    elif entry.private_tmp:
        if tmp_dir is None:
            tmp_dir = Path(tempfile.mkdtemp(prefix=f"klavis-mcp-{server}-"))
        tmp = str(tmp_dir)
    else:
        tmp = tempfile.gettempdir()
    parts = entry.launch(
        LaunchContext(
            program=program,
            node=tools.node,
            workspace=seen,
            tmp=tmp,
            command_timeout=command_timeout,
            system={need.key: tools.system[need.key] for need in entry.needs},
            confined=confine,
            system_tmp=PRIVATE_TMP if confine else tempfile.gettempdir(),
            mail=mail,
        )
    )
    env = _common_env()
    env.update(parts.env)
    argv = list(parts.argv)
    read_only = [*_install_roots(server, program, tools), *parts.read_only]
    # programs from the distribution live under /usr (mounted anyway); elsewhere, their prefix
    read_only += [_prefix_of(tools.system[need.key]) for need in entry.needs]

    if bwrap is None:
        setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
        if setpriv is not None:  # the server still dies with the emulator
            argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]
        return LaunchSpec(
            command=argv[0],
            args=tuple(argv[1:]),
            env=env,
            cwd=str(workspace),
            confined=False,
            workspace_as_seen=seen,
        )
    env.update(_confined_env())
    wrapper = bwrap_args(
        bwrap,
        workspace=workspace,
        env=dict(sorted(env.items())),
        read_only=read_only,
        network=entry.network,
    )
    return LaunchSpec(
        command=wrapper[0],
        args=(*wrapper[1:], *argv),
        env={},
        cwd=None,
        confined=True,
        workspace_as_seen=seen,
    )
