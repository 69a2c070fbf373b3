"""How each hosted MCP server is started: its command line, environment and confinement.

When the emulator confines (decided once at startup, see :mod:`klavis_emulator._bwrap`,
which also builds the ``bwrap`` command line shared with executions), a server runs in its
own mount, PID, network and IPC namespaces with only ``/usr``, ``/etc``, the interpreters
and the server's own files mounted read-only and the sandbox's workspace mounted read-write
at ``/data`` (the real service's default ``AGENT_WORKSPACE``), so tool paths match the
cloud. ``--die-with-parent`` ends it with the emulator, whatever happens to the emulator.
Otherwise the server runs unconfined on the workspace's host path (and, where ``setpriv``
exists, still dies with its parent).

No FastAPI and no fastmcp here: :func:`launch_spec` is plain data, easy to test.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ._bwrap import CONFINED_WORKSPACE, PRIVATE_TMP, bwrap_args
from ._mcp_setup import McpToolPaths

__all__ = [
    "DEFAULT_COMMAND_TIMEOUT",
    "HOSTED_SERVERS",
    "TERMINAL_ALLOWED_COMMANDS",
    "LaunchSpec",
    "launch_spec",
]

HOSTED_SERVERS: Final[tuple[str, ...]] = ("filesystem", "git", "terminal")
"""The servers of the contract's enum that the emulator runs for real."""

DEFAULT_COMMAND_TIMEOUT: Final = 30

TERMINAL_ALLOWED_COMMANDS: Final[tuple[str, ...]] = (
    # files and folders
    "ls", "cat", "head", "tail", "wc", "pwd", "echo", "printf", "mkdir", "rmdir", "cp", "mv",
    "rm", "touch", "ln", "stat", "file", "du", "df", "tree", "find", "basename", "dirname",
    "realpath", "readlink", "chmod", "test", "true", "false",
    # text
    "grep", "egrep", "fgrep", "sed", "awk", "sort", "uniq", "cut", "tr", "paste", "join",
    "diff", "cmp", "comm", "tee", "xargs", "nl", "fold", "fmt", "column", "rev", "tac",
    "split", "jq", "iconv",
    # archives and checksums
    "tar", "gzip", "gunzip", "zcat", "zip", "unzip", "md5sum", "sha1sum", "sha256sum", "base64",
    # environment
    "env", "date", "whoami", "id", "uname", "which", "sleep", "seq", "yes", "expr",
    # development
    "git", "python", "python3", "pip", "pip3", "node", "npm", "npx", "make", "bash", "sh",
)  # fmt: skip
"""``ALLOWED_COMMANDS`` of the terminal server: everyday shell work in the workspace."""

_GIT_LAUNCHER: Final = (
    # mcp-server-git's own server and confinement (`create_server(repository)`), without
    # the CLI's start-up check that exits when the workspace is not (yet) a repository,
    # and without its walk up to a parent repository, which could leave the workspace.
    "import logging, sys\n"
    "from pathlib import Path\n"
    "import anyio\n"
    "from mcp_server_git.server import create_server\n"
    "logging.basicConfig(level=logging.WARNING, stream=sys.stderr)\n"
    "anyio.run(create_server(Path(sys.argv[1])).run_stdio_async)\n"
)


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
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": PRIVATE_TMP,
        "LANG": "C.UTF-8",
        "TMPDIR": PRIVATE_TMP,
        "AGENT_WORKSPACE": CONFINED_WORKSPACE,
    }


def launch_spec(
    server: str,
    workspace: Path,
    tools: McpToolPaths,
    *,
    bwrap: str | None,
    command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
) -> LaunchSpec:
    """The command that runs ``server`` over ``workspace``.

    ``tools`` must have the server installed (see :meth:`McpToolPaths.missing`).
    ``bwrap`` is the bubblewrap that confines the server (the ``bwrap`` of the emulator's
    :class:`~klavis_emulator._bwrap.Confinement`), or ``None`` to run it unconfined.
    """
    confine = bwrap is not None
    seen = CONFINED_WORKSPACE if confine else str(workspace)
    env = _common_env()
    read_only: list[Path] = []
    if server == "filesystem":
        assert tools.node is not None
        assert tools.filesystem_entry is not None
        node_modules = tools.filesystem_entry.parents[3]  # .../node_modules
        argv = [str(tools.node), str(tools.filesystem_entry), seen]
        read_only += [_prefix_of(tools.node), node_modules]
    elif server == "git":
        assert tools.git_python is not None
        argv = [str(tools.git_python), "-c", _GIT_LAUNCHER, seen]
        read_only.append(_prefix_of(tools.git_python))  # the emulator's Python is always in
    elif server == "terminal":
        assert tools.cli_server is not None
        venv = tools.cli_server.parent.parent
        argv = [str(tools.cli_server)]
        read_only += [venv, _prefix_of(venv / "bin" / "python")]
        env.update(
            {
                "ALLOWED_DIR": seen,
                "ALLOWED_COMMANDS": ",".join(TERMINAL_ALLOWED_COMMANDS),
                "ALLOWED_FLAGS": "all",
                "ALLOW_SHELL_OPERATORS": "true",
                "MAX_COMMAND_LENGTH": "8192",
                "COMMAND_TIMEOUT": str(command_timeout),
            }
        )
    else:
        raise ValueError(f"the emulator does not host the {server!r} MCP server")

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
        bwrap, workspace=workspace, env=dict(sorted(env.items())), read_only=read_only
    )
    return LaunchSpec(
        command=wrapper[0],
        args=(*wrapper[1:], *argv),
        env={},
        cwd=None,
        confined=True,
        workspace_as_seen=seen,
    )
