"""Installing and finding the real MCP servers the emulator hosts (no FastAPI, no fastmcp here).

Generic over :data:`~klavis_emulator._mcp.catalog.CATALOG`, by install kind, everything in the
per-user tools folder (``$KLAVIS_EMULATOR_TOOLS_DIR``, else
``platformdirs.user_cache_dir("klavis-emulator")``), nothing in the installed package:

- npm packages (filesystem, localmemory, code-runner, desktop-commander, playwright): one tree
  each, pinned by ``mcp_servers/npm/<server>/package.json`` + ``package-lock.json``, installed
  by ``npm ci`` in ``<tools dir>/node/<server>-<version>-<pins digest>/``;
- own virtual environments (terminal, excel, word, powerpoint, arxiv, pdf-tools,
  poste_email_toolathlon): ``<tools dir>/venvs/<name>-<version>-py3X-<pins digest>/``, built
  from ``mcp_servers/<name>-requirements.txt`` with uv (pip without it) by the emulator's
  interpreter, or a ``python3.X`` on the machine when the server needs a newer one
  (:func:`find_python`; never downloaded; none: setup skips it and ``missing`` names it). A
  venv serves every interpreter the emulator runs on;
- the emulator's own interpreter (git): a dependency of the emulator extra, nothing to do.

:func:`setup_mcp_servers` installs what is missing (all, or ``only`` some), four at a time,
each under a lock of its own; the host installs a missing server on first need
(:mod:`.on_demand`). Steps are in :mod:`.installs`.

Measured on a 2-core machine with three other jobs on it (load average 7 to 9), warm npm and
uv caches. Before (commit 79a869e: one ``npm ci`` of all five npm servers into the package,
then one pip venv after another): a fresh full setup 890 s (278 s on the idle machine of issue
25), 1,202 MB (an 894 MB tools folder and 308 MB of ``node_modules`` in the package). Now: 88 s
(53 s at load 4; 48.5 s and 998 MB, ``du`` of the tools folder, in ``scripts/bench`` at load 1);
filesystem + git + terminal
19 s; the venvs of terminal, excel and word 3.8 s with uv, terminal's alone 59 s with pip; 3.6 s
when all is installed. desktop-commander's tree: 500 packages and 179 MB instead of 685 and
277 MB (its md-to-pdf, which brings puppeteer, and sharp are stand-ins: see its package.json).
"""

from __future__ import annotations

import functools
import glob
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import platformdirs

from .catalog import CATALOG, HOSTED_SERVERS, server_entry
from .installs import DONE_MARKER, McpSetupError, locked, make_venv, npm_ci
from .kinds import EmulatorPython, NotHosted, NpmPackage, OwnVenv

__all__ = [
    "SETUP_JOBS",
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
    "setup_fix",
    "setup_mcp_servers",
]

TOOLS_DIR_ENV: Final = "KLAVIS_EMULATOR_TOOLS_DIR"

PACKAGE_DIR: Final = Path(__file__).resolve().parent.parent / "mcp_servers"
"""The pins shipped with the package (read, never written: installs go to the tools dir)."""
_DONE_MARKER: Final = DONE_MARKER


def setup_fix(server: str) -> str:
    """The command that installs ``server`` (named in every "not installed" message)."""
    return f"run `klavis-emulator setup --only {server}` (or `python -m klavis_emulator setup ...`)"


def default_tools_dir() -> Path:
    """Where the emulator keeps installed tools: ``$KLAVIS_EMULATOR_TOOLS_DIR`` or a cache dir."""
    configured = os.environ.get(TOOLS_DIR_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    return Path(platformdirs.user_cache_dir("klavis-emulator", appauthor=False)).resolve()


def _npm_source(server: str) -> Path:
    """The pinned npm tree of ``server``: ``mcp_servers/npm/<server>/`` (package.json + lock)."""
    return PACKAGE_DIR / "npm" / server


@functools.cache
def _npm_digest(server: str) -> str:
    source = _npm_source(server)
    digest = hashlib.sha256()
    for path in sorted(path for path in source.rglob("*") if path.is_file()):
        digest.update(path.relative_to(source).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def _npm_dir(tools_dir: Path, server: str, install: NpmPackage) -> Path:
    """Where ``server``'s npm tree is installed: named after its version and its pins."""
    return tools_dir / "node" / f"{server}-{install.version}-{_npm_digest(server)}"


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
        f"{wanted}, then {setup_fix(server)}."
    )


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
            return f"the npm package {install.package} is not installed: {setup_fix(server)}."
        if isinstance(install, EmulatorPython):
            return (
                f"the PyPI package {install.distribution} is not installed: "
                "pip install 'klavis-sandbox[emulator]'."
            )
        return f"the {install.distribution} environment is not installed: {setup_fix(server)}."

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


def _npm_program(tools_dir: Path, server: str, install: NpmPackage) -> Path | None:
    folder = _npm_dir(tools_dir, server, install)
    entry = folder.joinpath("node_modules", *install.package.split("/"), install.entry)
    if (folder / _DONE_MARKER).is_file() and entry.is_file():
        return entry
    return None


_TAG: Final = re.compile(r"-py3(\d+)-[0-9a-f]+$")


def _venv_program(tools_dir: Path, install: OwnVenv) -> Path | None:
    """The console script of a complete venv of ``install``'s pins, built by any Python it
    runs on: the emulator's own interpreter's first, then the others. A server runs in a
    process of its own, so one venv serves every interpreter the emulator runs on (a 3.13
    emulator uses the 3.11 venvs instead of building a second set)."""
    own = _venv_name(install, f"py{sys.version_info[0]}{sys.version_info[1]}")
    pattern = glob.escape(_venv_name(install, "@")).replace("@", "py3*")
    venvs = sorted((tools_dir / "venvs").glob(pattern), key=lambda venv: venv.name != own)
    for venv in venvs:
        tag = _TAG.search(venv.name)
        if tag is None or (3, int(tag[1])) < install.min_python:
            continue
        script = venv / "bin" / install.script
        python = venv / "bin" / "python"
        if (
            (venv / _DONE_MARKER).is_file()
            and script.is_file()
            and script.resolve().exists()
            and python.resolve().exists()  # its interpreter was not uninstalled since
        ):
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
            found = _npm_program(tools, name, install)
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


SETUP_JOBS: Final = 4
"""How many installs :func:`setup_mcp_servers` runs at once by default: npm and the venv
builds wait mostly on the network and the disk; measured on 2 cores, see the module docstring."""


def _step(
    tools: Path, name: str, *, force: bool, say: Callable[[str], None]
) -> Callable[[], None] | None:
    """The install of ``name`` (None when it needs none here, or cannot have one)."""
    install = CATALOG[name].install
    if isinstance(install, NpmPackage):
        target = _npm_dir(tools, name, install)

        def npm_step() -> None:
            with locked(tools / "locks" / f"{name}.lock"):
                if not force and _npm_program(tools, name, install) is not None:
                    return  # another process installed it meanwhile
                started = time.monotonic()
                npm_ci(_npm_source(name), target, lambda line: say(f"{name}: {line}"))
                say(f"{name}: npm ci done in {time.monotonic() - started:.1f} s")

        return npm_step if force or _npm_program(tools, name, install) is None else None
    if not isinstance(install, OwnVenv):
        return None
    if not force and _venv_program(tools, install) is not None:
        return None
    python = find_python(install.min_python)
    if python is None:  # not installable here; `missing` says why, setup goes on
        say(f"{name}: skipped: {missing_python(name)}")
        return None
    venv = _venv_dir(tools, install, python.version)

    def venv_step() -> None:
        with locked(tools / "locks" / f"{name}.lock"):
            if not force and _venv_program(tools, install) is not None:
                return
            started = time.monotonic()
            requirements = PACKAGE_DIR / install.requirements
            make_venv(venv, requirements, python.executable, lambda line: say(f"{name}: {line}"))
            say(f"{name}: venv ready in {time.monotonic() - started:.1f} s")

    return venv_step


def setup_mcp_servers(
    *,
    tools_dir: str | os.PathLike[str] | None = None,
    only: Collection[str] | None = None,
    force: bool = False,
    log: Callable[[str], None] | None = None,
    jobs: int = SETUP_JOBS,
) -> McpToolPaths:
    """Install the hosted MCP servers that need installing (idempotent).

    Args:
        tools_dir: where everything goes (npm trees, venvs); default
            :func:`default_tools_dir`. Nothing is written into the installed package.
        only: the servers to install (default: every hosted one).
        force: reinstall even when an install is already there.
        log: called with one line per step taken (nothing when all is installed); from
            several threads at once.
        jobs: how many installs run at once (each server's own lock keeps two processes
            from installing one server twice).

    Returns:
        Where the servers are now. Raises :class:`McpSetupError` when a step fails (after
        the others ended; it names each failed server and its ``setup --only`` command) or
        a server of ``only`` is not hosted, ``ValueError`` for a name outside the contract.
    """
    if jobs < 1:
        raise ValueError("jobs must be at least 1")
    say = log if log is not None else (lambda line: None)
    chosen = _selected(only)
    tools = Path(tools_dir).resolve() if tools_dir is not None else default_tools_dir()
    tools.mkdir(parents=True, exist_ok=True)
    # the npm trees first (desktop-commander's is the longest), then the venvs
    chosen.sort(key=lambda name: not isinstance(CATALOG[name].install, NpmPackage))
    steps = [(name, step) for name in chosen if (step := _step(tools, name, force=force, say=say))]
    failures: list[str] = []
    if steps:
        with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="mcp-setup") as pool:
            running = [(name, pool.submit(step)) for name, step in steps]
            for name, future in running:
                try:
                    future.result()
                except (McpSetupError, OSError) as exc:
                    failures.append(f"{name}: {exc}\n(then {setup_fix(name)})")
    if failures:
        raise McpSetupError("\n".join(failures))
    return find_tools(tools)
