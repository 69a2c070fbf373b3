"""How each hosted MCP server is started: its command line, environment and confinement.

Where bubblewrap (``bwrap``) is installed and works, a server runs in its own mount, PID,
network and IPC namespaces with only ``/usr``, ``/etc``, the interpreters and the server's
own files mounted read-only and the sandbox's workspace mounted read-write at ``/data``
(the real service's default ``AGENT_WORKSPACE``), so tool paths match the cloud.
``--die-with-parent`` ends it with the emulator, whatever happens to the emulator.
Otherwise the server runs unconfined on the workspace's host path (and, where ``setpriv``
exists, still dies with its parent).

No FastAPI and no fastmcp here: :func:`launch_spec` is plain data, easy to test.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ._mcp_setup import McpToolPaths

__all__ = [
    "CONFINED_WORKSPACE",
    "DEFAULT_COMMAND_TIMEOUT",
    "HOSTED_SERVERS",
    "TERMINAL_ALLOWED_COMMANDS",
    "LaunchSpec",
    "bwrap_path",
    "launch_spec",
]

HOSTED_SERVERS: Final[tuple[str, ...]] = ("filesystem", "git", "terminal")
"""The servers of the contract's enum that the emulator runs for real."""

CONFINED_WORKSPACE: Final = "/data"
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

_SYSTEM_READ_ONLY: Final[tuple[str, ...]] = ("/usr", "/etc")
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


@functools.lru_cache(maxsize=1)
def bwrap_path() -> str | None:
    """``bwrap`` if it is installed and can create namespaces here (probed once), else None."""
    found = shutil.which("bwrap")
    if found is None:
        return None
    probe = [
        found,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/usr",
        "/usr",
        *_usr_merge_links(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--",
        "/usr/bin/env",
        "true",
    ]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return found if done.returncode == 0 else None


def _usr_merge_links() -> list[str]:
    """Recreate ``/bin``, ``/lib``... as on the host: symlinks into ``/usr`` or read-only binds."""
    args: list[str] = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/", name)
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
    return args


def _prefix_of(executable: Path) -> Path:
    """The install prefix of an executable (``/x/bin/tool`` -> ``/x``), symlinks resolved."""
    real = executable.resolve()
    return real.parent.parent if real.parent.name == "bin" else real.parent


def _read_only_roots(paths: Sequence[Path]) -> list[Path]:
    """Deduplicated folders to bind read-only (nested and system ones dropped)."""
    roots: list[Path] = []
    for path in sorted({p.resolve() for p in paths}, key=lambda p: len(p.parts)):
        if any(path == root or root in path.parents for root in roots):
            continue
        if any(str(path) == s or str(path).startswith(s + "/") for s in _SYSTEM_READ_ONLY):
            continue
        if path == Path("/") or not path.exists():
            continue
        roots.append(path)
    return roots


def _bwrap_args(bwrap: str, workspace: Path, read_only: Sequence[Path]) -> list[str]:
    args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv"]
    for system in _SYSTEM_READ_ONLY:
        if Path(system).is_dir():
            args += ["--ro-bind", system, system]
    args += _usr_merge_links()
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]  # noqa: S108 - a private tmpfs
    for root in _read_only_roots(read_only):
        args += ["--ro-bind", str(root), str(root)]
    args += ["--bind", str(workspace), CONFINED_WORKSPACE, "--chdir", CONFINED_WORKSPACE]
    return args


def _python_roots() -> list[Path]:
    """The running interpreter's venv and base install (the git server runs on them)."""
    return [Path(sys.prefix), Path(sys.base_prefix), _prefix_of(Path(sys.executable))]


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
        "HOME": "/tmp",  # noqa: S108 - the sandbox's own tmpfs
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",  # noqa: S108 - the sandbox's own tmpfs
        "AGENT_WORKSPACE": CONFINED_WORKSPACE,
    }


def launch_spec(
    server: str,
    workspace: Path,
    tools: McpToolPaths,
    *,
    confine: bool,
    command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
) -> LaunchSpec:
    """The command that runs ``server`` over ``workspace``.

    ``tools`` must have the server installed (see :meth:`McpToolPaths.missing`);
    ``confine`` needs :func:`bwrap_path` to be non-None.
    """
    bwrap = bwrap_path() if confine else None
    if confine and bwrap is None:
        raise RuntimeError("bubblewrap is not available here")
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
        read_only += _python_roots()
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
    wrapper = _bwrap_args(bwrap, workspace, read_only)
    for key, value in sorted(env.items()):
        wrapper += ["--setenv", key, value]
    return LaunchSpec(
        command=wrapper[0],
        args=(*wrapper[1:], "--", *argv),
        env={},
        cwd=None,
        confined=True,
        workspace_as_seen=seen,
    )
