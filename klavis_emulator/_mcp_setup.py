"""Installing and finding the real MCP servers the emulator hosts (no FastAPI, no fastmcp here).

Three open-source servers, pinned:

- ``filesystem``: ``@modelcontextprotocol/server-filesystem`` from npm, pinned by
  ``mcp_servers/package.json`` + ``package-lock.json`` beside this module and installed
  with ``npm ci`` into ``mcp_servers/node_modules`` (or, when the package folder is not
  writable, into ``<tools dir>/node``);
- ``git``: ``mcp-server-git`` from PyPI, a dependency of the emulator extra (it runs on the
  emulator's own interpreter);
- ``terminal``: ``cli-mcp-server`` from PyPI, which crashes on import under ``mcp`` 2.x, so
  it gets its own virtual environment with ``mcp<2`` (``mcp_servers/cli-requirements.txt``)
  under ``<tools dir>/venvs/``.

The tools dir is ``$KLAVIS_EMULATOR_TOOLS_DIR`` or the per-user cache folder
(``platformdirs.user_cache_dir("klavis-emulator")``). :func:`setup_mcp_servers` installs
what is missing and is fast when everything is already there.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import platformdirs

__all__ = [
    "CLI_SERVER_VERSION",
    "FILESYSTEM_PACKAGE",
    "FILESYSTEM_VERSION",
    "TOOLS_DIR_ENV",
    "McpSetupError",
    "McpToolPaths",
    "default_tools_dir",
    "find_tools",
    "setup_mcp_servers",
]

TOOLS_DIR_ENV: Final = "KLAVIS_EMULATOR_TOOLS_DIR"
FILESYSTEM_PACKAGE: Final = "@modelcontextprotocol/server-filesystem"
FILESYSTEM_VERSION: Final = "2026.8.31"
CLI_SERVER_VERSION: Final = "0.2.5"

PACKAGE_DIR: Final = Path(__file__).resolve().parent / "mcp_servers"
_CLI_REQUIREMENTS: Final = PACKAGE_DIR / "cli-requirements.txt"
_FILESYSTEM_ENTRY: Final = Path("node_modules", *FILESYSTEM_PACKAGE.split("/"), "dist", "index.js")
_DONE_MARKER: Final = ".klavis-emulator-ok"


class McpSetupError(RuntimeError):
    """Installing the MCP servers failed; the message says which step and why."""


def default_tools_dir() -> Path:
    """Where the emulator keeps installed tools: ``$KLAVIS_EMULATOR_TOOLS_DIR`` or a cache dir."""
    configured = os.environ.get(TOOLS_DIR_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    return Path(platformdirs.user_cache_dir("klavis-emulator", appauthor=False)).resolve()


def _cli_venv_dir(tools_dir: Path) -> Path:
    """The cli-mcp-server venv: named after its pins and the interpreter that builds it."""
    digest = hashlib.sha256(_CLI_REQUIREMENTS.read_bytes()).hexdigest()[:12]
    python = f"py{sys.version_info[0]}{sys.version_info[1]}"
    return tools_dir / "venvs" / f"cli-mcp-server-{CLI_SERVER_VERSION}-{python}-{digest}"


def _node_dirs(tools_dir: Path) -> tuple[Path, ...]:
    """Folders that may hold the npm install, in order of preference."""
    return (PACKAGE_DIR, tools_dir / "node")


@dataclass(frozen=True)
class McpToolPaths:
    """Where each hosted server's program is, or None when it is not installed."""

    node: Path | None
    """The ``node`` executable."""
    filesystem_entry: Path | None
    """``.../server-filesystem/dist/index.js`` (run with ``node``)."""
    git_python: Path | None
    """The interpreter that has ``mcp_server_git`` (the emulator's own)."""
    cli_server: Path | None
    """The ``cli-mcp-server`` console script in its own venv."""

    def missing(self, server: str) -> str | None:
        """Why ``server`` cannot start (a sentence naming the fix), or None if it can."""
        fix = "run `klavis-emulator setup` (or `python -m klavis_emulator setup`)"
        if server == "filesystem":
            if self.node is None:
                return "Node.js (`node`) is not on PATH; install Node.js 18 or newer."
            if self.filesystem_entry is None:
                return f"the npm package {FILESYSTEM_PACKAGE} is not installed: {fix}."
        elif server == "git":
            if self.git_python is None:
                return (
                    "the PyPI package mcp-server-git is not installed: "
                    "pip install 'klavis-sandbox[emulator]'."
                )
        elif server == "terminal" and self.cli_server is None:
            return f"the cli-mcp-server environment is not installed: {fix}."
        return None


def find_tools(tools_dir: Path | None = None) -> McpToolPaths:
    """Locate the installed servers (cheap: a few ``stat`` calls)."""
    tools = tools_dir if tools_dir is not None else default_tools_dir()
    node = shutil.which("node")
    entry = next(
        (
            folder / _FILESYSTEM_ENTRY
            for folder in _node_dirs(tools)
            if (folder / _FILESYSTEM_ENTRY).is_file()
        ),
        None,
    )
    git_python = Path(sys.executable) if importlib.util.find_spec("mcp_server_git") else None
    venv = _cli_venv_dir(tools)
    script = venv / "bin" / "cli-mcp-server"
    cli = script if (venv / _DONE_MARKER).is_file() and script.is_file() else None
    return McpToolPaths(
        node=Path(node) if node else None,
        filesystem_entry=entry,
        git_python=git_python,
        cli_server=cli,
    )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (concurrent setups wait for each other)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as handle:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            yield
            return
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _run(argv: list[str], *, cwd: Path | None, what: str) -> None:
    try:
        done = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, check=False, timeout=900
        )
    except FileNotFoundError as exc:
        raise McpSetupError(f"{what} failed: {argv[0]} is not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise McpSetupError(f"{what} took more than 15 minutes") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-2000:]
        raise McpSetupError(f"{what} failed (exit {done.returncode}):\n{tail}")


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK)


def _npm_ci(target: Path, log: Callable[[str], None]) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise McpSetupError("npm is not on PATH; install Node.js (with npm) 18 or newer")
    if target != PACKAGE_DIR:
        target.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(PACKAGE_DIR / name, target / name)
    log(f"npm ci in {target}")
    _run(
        [npm, "ci", "--omit=dev", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=target,
        what="npm ci",
    )


def _lock_is_current(folder: Path) -> bool:
    """Whether ``folder``'s install matches the pinned lock file (npm keeps a copy of it)."""
    hidden = folder / "node_modules" / ".package-lock.json"
    entry = folder / _FILESYSTEM_ENTRY
    if not (hidden.is_file() and entry.is_file()):
        return False
    package = folder / "node_modules" / Path(*FILESYSTEM_PACKAGE.split("/")) / "package.json"
    try:
        return f'"version": "{FILESYSTEM_VERSION}"' in package.read_text(encoding="utf-8")
    except OSError:
        return False


def _make_cli_venv(venv: Path, log: Callable[[str], None]) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    log(f"creating the cli-mcp-server venv in {venv}")
    _run([sys.executable, "-m", "venv", str(venv)], cwd=None, what="python -m venv")
    _run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            "-r",
            str(_CLI_REQUIREMENTS),
        ],
        cwd=None,
        what="pip install cli-mcp-server",
    )
    (venv / _DONE_MARKER).write_text(_CLI_REQUIREMENTS.read_text(encoding="utf-8"))


def setup_mcp_servers(
    *,
    tools_dir: str | os.PathLike[str] | None = None,
    node: bool = True,
    terminal: bool = True,
    force: bool = False,
    log: Callable[[str], None] | None = None,
) -> McpToolPaths:
    """Install the npm filesystem server and the cli-mcp-server venv (idempotent).

    Args:
        tools_dir: where the venv (and, if the package folder is read-only, the npm
            install) goes; default :func:`default_tools_dir`.
        node: install the filesystem server with ``npm ci``.
        terminal: create the cli-mcp-server venv.
        force: reinstall even when an install is already there.
        log: called with one line per step taken (nothing when all is installed).

    Returns:
        Where the servers are now. The git server needs no setup (it is a dependency of
        the emulator extra). Raises :class:`McpSetupError` when a step fails.
    """
    say = log if log is not None else (lambda line: None)
    tools = Path(tools_dir).resolve() if tools_dir is not None else default_tools_dir()
    tools.mkdir(parents=True, exist_ok=True)
    with _locked(tools / ".setup.lock"):
        if node:
            current = [folder for folder in _node_dirs(tools) if _lock_is_current(folder)]
            if force or not current:
                target = PACKAGE_DIR if _writable(PACKAGE_DIR) else tools / "node"
                started = time.monotonic()
                _npm_ci(target, say)
                say(f"npm ci done in {time.monotonic() - started:.1f} s")
        if terminal:
            venv = _cli_venv_dir(tools)
            if force or not (venv / _DONE_MARKER).is_file():
                started = time.monotonic()
                _make_cli_venv(venv, say)
                say(f"cli-mcp-server venv ready in {time.monotonic() - started:.1f} s")
    return find_tools(tools)
