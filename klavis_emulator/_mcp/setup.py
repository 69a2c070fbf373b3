"""Installing and finding the real MCP servers the emulator hosts (no FastAPI, no fastmcp here).

Generic over :data:`~klavis_emulator._mcp.catalog.CATALOG`, by install kind:

- npm packages (filesystem, localmemory, code-runner, desktop-commander, playwright): pinned by
  ``mcp_servers/package.json`` + ``package-lock.json`` beside this module, all installed by
  one ``npm ci`` into ``mcp_servers/node_modules`` (or, when the package folder is not
  writable, into ``<tools dir>/node``);
- own virtual environments (terminal, excel, word, powerpoint, arxiv, pdf-tools): one per
  server under ``<tools dir>/venvs/``, built from the server's fully pinned
  ``mcp_servers/<name>-requirements.txt``, named after its pins and the interpreter: the
  emulator's own, or, for a server that needs a newer Python (pdf-tools: 3.12), a
  ``python3.X`` already on the machine (:func:`find_python`; never downloaded). Where there
  is none, setup skips that server and ``missing`` names the Python it needs;
- the emulator's own interpreter (git): a dependency of the emulator extra, nothing to do.

The tools dir is ``$KLAVIS_EMULATOR_TOOLS_DIR`` or the per-user cache folder
(``platformdirs.user_cache_dir("klavis-emulator")``). :func:`setup_mcp_servers` installs
what is missing (all installable servers, or ``only`` some) and is fast when everything is
already there.

Measured on a 2-core machine, fresh tools dir and ``node_modules``, warm pip and npm caches:
``npm ci`` of the three npm servers 4.3 s (5.5 s for the filesystem server alone before),
the terminal venv 10.8 s, excel 11.9 s (33 pins), word 18.9 s (82 pins): 46.5 s in all, up
from about 17 s for filesystem + terminal; 0.5 s when everything is installed.
desktop-commander brings 620 more npm packages (puppeteer, sharp, pdf and office libraries):
``npm ci`` of the lock then took 57.1 s on the same machine (warm npm cache), +53 s. The venvs are
built one after another (building them in parallel is not tried yet: on two cores the pip
installs would compete for the CPU). powerpoint (41 pins), arxiv (47) and pdf-tools (75, with
pyenv's Python 3.12.1) add 48 s, 62 s and 32 s on that machine while other jobs shared its
cores: 142 s (172 s on a second fresh tools dir, of which 48 s CPU time in setup's own
processes), so a fresh setup now takes about three times as long.
playwright adds three npm packages (``@playwright/mcp``, ``playwright``, ``playwright-core``;
no browser: the distribution's Chromium is used); ``npm ci`` of that lock took 33.6 s on a
2-core machine with a warm npm cache.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import platformdirs

from .catalog import CATALOG, HOSTED_SERVERS, server_entry
from .kinds import EmulatorPython, McpServer, NotHosted, NpmPackage, OwnVenv

__all__ = [
    "TOOLS_DIR_ENV",
    "FoundPython",
    "McpSetupError",
    "McpToolPaths",
    "default_tools_dir",
    "find_python",
    "find_tools",
    "installed_version",
    "missing_python",
    "python_of",
    "setup_mcp_servers",
]

TOOLS_DIR_ENV: Final = "KLAVIS_EMULATOR_TOOLS_DIR"

PACKAGE_DIR: Final = Path(__file__).resolve().parent.parent / "mcp_servers"
_DONE_MARKER: Final = ".klavis-emulator-ok"
_SETUP_FIX: Final = "run `klavis-emulator setup` (or `python -m klavis_emulator setup`)"


class McpSetupError(RuntimeError):
    """Installing the MCP servers failed; the message says which step and why."""


def default_tools_dir() -> Path:
    """Where the emulator keeps installed tools: ``$KLAVIS_EMULATOR_TOOLS_DIR`` or a cache dir."""
    configured = os.environ.get(TOOLS_DIR_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    return Path(platformdirs.user_cache_dir("klavis-emulator", appauthor=False)).resolve()


def _npm_servers() -> list[McpServer]:
    return [entry for entry in CATALOG.values() if isinstance(entry.install, NpmPackage)]


def _package_dir(install: NpmPackage) -> Path:
    return Path("node_modules", *install.package.split("/"))


def _venv_name(install: OwnVenv, tag: str) -> str:
    """A server's venv folder name: its pins and the interpreter's ``tag`` (``py311``)."""
    digest = hashlib.sha256((PACKAGE_DIR / install.requirements).read_bytes()).hexdigest()[:12]
    return f"{install.distribution}-{install.version}-{tag}-{digest}"


def _venv_dir(tools_dir: Path, install: OwnVenv, python: tuple[int, int]) -> Path:
    """A server's venv: named after its pins and the interpreter (``python``) that builds it."""
    return tools_dir / "venvs" / _venv_name(install, f"py{python[0]}{python[1]}")


def _own_python_suffices(install: OwnVenv) -> bool:
    return sys.version_info[:2] >= install.min_python


_NEWEST_MINOR: Final = 14
"""``find_python`` asks for ``python3.X`` from the server's minimum up to ``3.14``."""

_PROBE: Final = "import sys; print(sys.executable); print(*sys.version_info[:2])"


def _probe(candidate: str, minimum: tuple[int, int]) -> FoundPython | None:
    """``candidate``'s real executable if it runs and is at least ``minimum``, else None.

    Run rather than trusted by name: a pyenv shim ``python3.12`` is on PATH even where
    pyenv does not select that version, and then fails ("command not found").
    """
    try:
        done = subprocess.run(
            [candidate, "-I", "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.split("\n")
    if done.returncode != 0 or len(lines) < 2:
        return None
    try:
        major, minor = (int(part) for part in lines[1].split())
    except ValueError:
        return None
    if (major, minor) < minimum or not lines[0]:
        return None
    return FoundPython(Path(lines[0]), (major, minor))


def _candidates(minor: int) -> Iterator[str]:
    """Where a ``python3.<minor>`` may be, in order: PATH, pyenv's versions, uv's."""
    name = f"python3.{minor}"
    on_path = shutil.which(name)
    if on_path:
        yield on_path
    pyenv_root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    yield from sorted(glob.glob(f"{glob.escape(pyenv_root)}/versions/3.{minor}.*/bin/{name}"))
    uv = shutil.which("uv")
    if uv is not None:  # an interpreter uv already manages; UV_PYTHON_DOWNLOADS: never fetch
        try:
            done = subprocess.run(
                [uv, "python", "find", "--no-project", f"3.{minor}"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
                env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
            )
        except (OSError, subprocess.SubprocessError):
            return
        if done.returncode == 0 and done.stdout.strip():
            yield done.stdout.strip()


@functools.cache
def find_python(minimum: tuple[int, int]) -> FoundPython | None:
    """A Python interpreter of version ``minimum`` or newer already on this machine.

    The emulator's own when it is new enough; otherwise, for each ``3.X`` from ``minimum``
    up (the oldest first: the server's pins were frozen with it), ``python3.X`` on PATH,
    then pyenv's installed versions (``$PYENV_ROOT/versions/3.X.*``), then an interpreter uv
    manages (``uv python find``), each run once to check it. Nothing is downloaded. The
    answer is kept for the life of the process (it runs a few subprocesses).
    """
    if sys.version_info[:2] >= minimum:
        return FoundPython(Path(sys.executable), (sys.version_info[0], sys.version_info[1]))
    for minor in range(minimum[1], _NEWEST_MINOR + 1):
        for candidate in _candidates(minor):
            found = _probe(candidate, minimum)
            if found is not None:
                return found
    return None


def python_of(minor: int) -> FoundPython | None:
    """The newest patch release of Python ``3.<minor>`` on this machine (PATH, pyenv's,
    uv's, as :func:`find_python` looks), or None. ``scripts/test`` runs the suite again with
    the oldest and the newest Python the package claims, where the machine has them.

    >>> found = python_of(sys.version_info[1])
    >>> found is None or found.version == sys.version_info[:2]
    True
    """
    for candidate in reversed(list(_candidates(minor))):  # the newest patch release first
        found = _probe(candidate, (3, minor))
        if found is not None and found.version == (3, minor):
            return found
    return None


def missing_python(server: str) -> str | None:
    """Why ``server`` cannot be installed here for want of an interpreter (a sentence naming
    the Python it needs), or None (its interpreter is here, or it needs none of its own)."""
    entry = CATALOG.get(server)
    if entry is None or not isinstance(entry.install, OwnVenv):
        return None
    install = entry.install
    if _own_python_suffices(install) or find_python(install.min_python) is not None:
        return None
    wanted = ".".join(map(str, install.min_python))
    return (
        f"{install.distribution} needs Python {wanted} or newer, and none was found on this "
        f"machine (python3.{install.min_python[1]} or newer on PATH, pyenv's or uv's "
        f"interpreters; the emulator runs on {sys.version.split()[0]}): install Python "
        f"{wanted}, then {_SETUP_FIX}."
    )


def _node_dirs(tools_dir: Path) -> tuple[Path, ...]:
    """Folders that may hold the npm install, in order of preference."""
    return (PACKAGE_DIR, tools_dir / "node")


@dataclass(frozen=True)
class FoundPython:
    """An interpreter on this machine: its real executable and its ``(major, minor)``."""

    executable: Path
    version: tuple[int, int]


@dataclass(frozen=True)
class McpToolPaths:
    """Where each hosted server's program is (absent: not installed here)."""

    node: Path | None
    """The ``node`` executable."""
    programs: Mapping[str, Path] = field(default_factory=dict)
    """Server name -> its program: the npm package's entry script (run with ``node``), the
    console script in its own venv, or the emulator's interpreter."""
    system: Mapping[str, Path] = field(default_factory=dict)
    """:class:`~klavis_emulator._mcp.catalog.SystemProgram` key -> where it was found."""

    def program(self, server: str) -> Path | None:
        """The program of ``server``, or None when it is not installed here."""
        return self.programs.get(server)

    def missing(self, server: str) -> str | None:
        """Why ``server`` cannot start here (a sentence naming the fix), or None if it can.

        None as well for servers the emulator does not host (see
        :attr:`~klavis_emulator._mcp.catalog.NotHosted.reason` for those).
        """
        outside = self.missing_outside(server)
        if outside is not None:
            return outside
        entry = CATALOG.get(server)
        if entry is None or isinstance(entry.install, NotHosted) or server in self.programs:
            return None
        install = entry.install
        if isinstance(install, NpmPackage):
            return f"the npm package {install.package} is not installed: {_SETUP_FIX}."
        if isinstance(install, EmulatorPython):
            return (
                f"the PyPI package {install.distribution} is not installed: "
                "pip install 'klavis-sandbox[emulator]'."
            )
        return f"the {install.distribution} environment is not installed: {_SETUP_FIX}."

    def missing_outside(self, server: str) -> str | None:
        """The part of :meth:`missing` that the project cannot install itself: Node.js, a
        program of the distribution, a Python version. (Tests skip for these only; what
        ``klavis-emulator setup`` installs must be there.)"""
        entry = CATALOG.get(server)
        if entry is None or isinstance(entry.install, NotHosted):
            return None
        install = entry.install
        if isinstance(install, NpmPackage) and self.node is None:
            return "Node.js (`node`) is not on PATH; install Node.js 18 or newer."
        if isinstance(install, OwnVenv) and server not in self.programs:
            needs_python = missing_python(server)
            if needs_python is not None:
                return needs_python
        for needed in entry.needs:
            if needed.key not in self.system:
                return (
                    f"{needed.key} is not installed ({needed.why}): install the "
                    f"distribution's package, e.g. `apt-get install {needed.apt}`."
                )
        return None


def _npm_program(tools_dir: Path, install: NpmPackage) -> Path | None:
    for folder in _node_dirs(tools_dir):
        entry = folder / _package_dir(install) / install.entry
        if entry.is_file():
            return entry
    return None


def _venv_program(tools_dir: Path, install: OwnVenv) -> Path | None:
    if _own_python_suffices(install):
        venvs = [_venv_dir(tools_dir, install, (sys.version_info[0], sys.version_info[1]))]
    else:  # built with another interpreter: whichever one setup found (no probing here)
        pattern = glob.escape(_venv_name(install, "@")).replace("@", "py3*")
        venvs = sorted((tools_dir / "venvs").glob(pattern))
    for venv in venvs:
        script = venv / "bin" / install.script
        if (venv / _DONE_MARKER).is_file() and script.is_file() and script.resolve().exists():
            return script
    return None


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


_SBIN: Final = ("/usr/local/sbin", "/usr/sbin", "/sbin")
"""Searched after ``PATH`` for the distribution's programs: daemons such as ``dovecot``
live there, which a normal user's ``PATH`` leaves out."""


def _which(name: str) -> str | None:
    search = os.pathsep.join([os.environ.get("PATH", os.defpath), *_SBIN])
    return shutil.which(name, path=search)


def find_tools(tools_dir: Path | None = None) -> McpToolPaths:
    """Locate the installed servers (cheap: a few ``stat`` calls)."""
    tools = tools_dir if tools_dir is not None else default_tools_dir()
    node = shutil.which("node")
    programs: dict[str, Path] = {}
    for name in HOSTED_SERVERS:
        install = CATALOG[name].install
        found: Path | None = None
        if isinstance(install, NpmPackage):
            found = _npm_program(tools, install)
        elif isinstance(install, OwnVenv):
            found = _venv_program(tools, install)
        elif isinstance(install, EmulatorPython) and importlib.util.find_spec(install.module):
            found = Path(sys.executable)
        if found is not None:
            programs[name] = found
    system: dict[str, Path] = {}
    for needed in {needed for name in HOSTED_SERVERS for needed in CATALOG[name].needs}:
        where = next(filter(None, (_which(name) for name in needed.names)), None)
        if where is None:
            where = next((path for path in needed.paths if _executable(path)), None)
        if where is not None:
            system[needed.key] = Path(where)
    return McpToolPaths(node=Path(node) if node else None, programs=programs, system=system)


def installed_version(server: str, tools: McpToolPaths) -> str | None:
    """The version of ``server`` installed here (read from its package metadata), or None."""
    install = server_entry(server).install
    program = tools.program(server)
    if program is None or isinstance(install, NotHosted):
        return None
    try:
        if isinstance(install, NpmPackage):
            package_json = program.parent
            while package_json.name != install.package.split("/")[-1]:
                if package_json.parent == package_json:  # not inside its package folder
                    return None
                package_json = package_json.parent
            version = json.loads((package_json / "package.json").read_text("utf-8"))["version"]
            return str(version)
        if isinstance(install, EmulatorPython):
            return importlib.metadata.version(install.distribution)
        venv = program.parent.parent
        names = {install.distribution.replace("-", "_").lower()}
        for info in venv.glob("lib/python*/site-packages/*.dist-info"):
            name, _, version = info.name[: -len(".dist-info")].rpartition("-")
            if name.replace("-", "_").lower() in names:
                return version
    except (OSError, ValueError, KeyError, importlib.metadata.PackageNotFoundError):
        return None
    return None


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


def _run(
    argv: list[str], *, cwd: Path | None, what: str, env: Mapping[str, str] | None = None
) -> None:
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
            env={**os.environ, **env} if env else None,
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
    # --ignore-scripts: no package of the lock needs its install script offline, and three
    # would reach the network: desktop-commander's postinstall reports the install (telemetry)
    # and checks ripgrep, puppeteer's (a dependency of its md-to-pdf) downloads a Chrome,
    # sharp's only checks its prebuilt libvips (an npm package). The servers' tests pass
    # without any of them.
    _run(
        [npm, "ci", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund",
         "--loglevel=error"],
        cwd=target,
        what="npm ci",
        env={"PUPPETEER_SKIP_DOWNLOAD": "1", "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"},
    )  # fmt: skip


def _lock_is_current(folder: Path) -> bool:
    """Whether ``folder``'s install matches the pinned lock file: npm keeps a copy of it,
    and every npm server of the catalog is there at its pinned version."""
    if not (folder / "node_modules" / ".package-lock.json").is_file():
        return False
    for entry in _npm_servers():
        assert isinstance(entry.install, NpmPackage)
        package = folder / _package_dir(entry.install)
        try:
            version = json.loads((package / "package.json").read_text("utf-8")).get("version")
        except (OSError, ValueError):
            return False
        if version != entry.install.version or not (package / entry.install.entry).is_file():
            return False
    return True


def _make_venv(venv: Path, install: OwnVenv, python: Path, log: Callable[[str], None]) -> None:
    requirements = PACKAGE_DIR / install.requirements
    shutil.rmtree(venv, ignore_errors=True)
    log(f"creating the {install.distribution} venv in {venv} (with {python})")
    _run([str(python), "-m", "venv", str(venv)], cwd=None, what="python -m venv")
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
            str(requirements),
        ],
        cwd=None,
        what=f"pip install {install.distribution}",
    )
    (venv / _DONE_MARKER).write_text(requirements.read_text(encoding="utf-8"))


def _selected(only: Collection[str] | None) -> list[str]:
    """The hosted servers to install: ``only`` (checked against the catalog) or all."""
    if only is None:
        return list(HOSTED_SERVERS)
    chosen: list[str] = []
    for name in only:
        entry = server_entry(name)  # ValueError for a name outside the contract
        if isinstance(entry.install, NotHosted):
            raise McpSetupError(f"the emulator does not host {name!r}: {entry.install.reason}")
        if name not in chosen:
            chosen.append(name)
    return chosen


def setup_mcp_servers(
    *,
    tools_dir: str | os.PathLike[str] | None = None,
    only: Collection[str] | None = None,
    force: bool = False,
    log: Callable[[str], None] | None = None,
) -> McpToolPaths:
    """Install the hosted MCP servers that need installing (idempotent).

    Args:
        tools_dir: where the venvs (and, if the package folder is read-only, the npm
            install) go; default :func:`default_tools_dir`.
        only: the servers to install (default: every hosted one). The npm servers share
            one lock file, so asking for one of them installs all three.
        force: reinstall even when an install is already there.
        log: called with one line per step taken (nothing when all is installed).

    Returns:
        Where the servers are now. Raises :class:`McpSetupError` when a step fails or a
        server of ``only`` is not hosted, ``ValueError`` for a name outside the contract.
    """
    say = log if log is not None else (lambda line: None)
    chosen = _selected(only)
    tools = Path(tools_dir).resolve() if tools_dir is not None else default_tools_dir()
    tools.mkdir(parents=True, exist_ok=True)
    with _locked(tools / ".setup.lock"):
        if any(isinstance(CATALOG[name].install, NpmPackage) for name in chosen):
            current = [folder for folder in _node_dirs(tools) if _lock_is_current(folder)]
            if force or not current:
                target = PACKAGE_DIR if _writable(PACKAGE_DIR) else tools / "node"
                started = time.monotonic()
                _npm_ci(target, say)
                say(f"npm ci done in {time.monotonic() - started:.1f} s")
        for name in chosen:
            install = CATALOG[name].install
            if not isinstance(install, OwnVenv):
                continue
            python = find_python(install.min_python)
            if python is None:  # not installable here; `missing` says why, setup goes on
                say(f"{name}: skipped: {missing_python(name)}")
                continue
            venv = _venv_dir(tools, install, python.version)
            if force or not (venv / _DONE_MARKER).is_file():
                started = time.monotonic()
                _make_venv(venv, install, python.executable, say)
                say(f"{install.distribution} venv ready in {time.monotonic() - started:.1f} s")
    return find_tools(tools)
