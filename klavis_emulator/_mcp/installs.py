"""The install steps behind ``klavis-emulator setup``: one ``npm ci`` per npm server, one venv
per Python server (with uv where it is installed, else pip), run a few at a time.

Everything is written under the per-user tools folder, never into the installed package:
an npm server's ``package.json`` + ``package-lock.json`` (and desktop-commander's stand-in
packages) are copied from ``mcp_servers/npm/<server>/`` to ``<tools dir>/node/<folder>/``,
where ``npm ci`` runs. A step writes its done marker last, so an interrupted one is redone.
No FastAPI, no fastmcp; :mod:`.setup` decides what to install and calls these.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Final

__all__ = [
    "DONE_MARKER",
    "UV_ENV",
    "McpSetupError",
    "locked",
    "make_venv",
    "npm_ci",
    "uv_binary",
]

DONE_MARKER: Final = ".klavis-emulator-ok"
UV_ENV: Final = "KLAVIS_EMULATOR_UV"
"""``0`` builds the venvs with pip even where uv is installed (the old way, for comparison)."""
_STEP_TIMEOUT: Final = 900


class McpSetupError(RuntimeError):
    """Installing the MCP servers failed; the message says which step and why."""


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (concurrent installs of one server wait for each
    other, across processes)."""
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
            timeout=_STEP_TIMEOUT,
            env={**os.environ, **env} if env else None,
        )
    except FileNotFoundError as exc:
        raise McpSetupError(f"{what} failed: {argv[0]} is not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise McpSetupError(f"{what} took more than {_STEP_TIMEOUT // 60} minutes") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-2000:]
        raise McpSetupError(f"{what} failed (exit {done.returncode}):\n{tail}")


def npm_ci(source: Path, target: Path, log: Callable[[str], None]) -> None:
    """Install the npm tree pinned in ``source`` (a folder of ``mcp_servers/npm/``) into
    ``target``: a fresh copy of ``source``, then ``npm ci`` there, then the done marker."""
    npm = shutil.which("npm")
    if npm is None:
        raise McpSetupError("npm is not on PATH; install Node.js (with npm) 18 or newer")
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, target)
    log(f"npm ci in {target}")
    # --ignore-scripts: no package of the locks needs its install script offline, and two
    # would reach the network: desktop-commander's postinstall reports the install (telemetry)
    # and checks ripgrep; playwright's would download a browser (the distribution's Chromium is
    # used). --prefer-offline: the locks name no tarball URLs (the registry is asked for each
    # package's metadata), and a cached copy is as good: measured, it cut desktop-commander's
    # npm ci from 24 s to 16 s of CPU time on a warm cache.
    _run(
        [npm, "ci", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund",
         "--prefer-offline", "--loglevel=error"],
        cwd=target,
        what=f"npm ci ({source.name})",
        env={"PUPPETEER_SKIP_DOWNLOAD": "1", "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"},
    )  # fmt: skip
    (target / DONE_MARKER).write_text((source / "package-lock.json").read_text("utf-8"))


def uv_binary() -> str | None:
    """The uv that builds the venvs: the one installed with the emulator extra (the ``uv``
    package), else ``uv`` on PATH; None where there is none or ``$KLAVIS_EMULATOR_UV=0``."""
    if os.environ.get(UV_ENV, "1") == "0":
        return None
    try:
        from uv import find_uv_bin  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return shutil.which("uv")
    try:
        found: str = find_uv_bin()
    except FileNotFoundError:
        return shutil.which("uv")
    return found


def _with_uv(uv: str, venv: Path, requirements: Path, python: Path) -> None:
    # pip compiles the .pyc files, uv only when asked: the servers run read-only (confined)
    # and would compile their imports again at every start
    env = {"UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"}
    _run([uv, "venv", "--quiet", "--python", str(python), str(venv)], cwd=None,
         what="uv venv", env=env)  # fmt: skip
    _run(
        [uv, "pip", "install", "--quiet", "--compile-bytecode",
         "--python", str(venv / "bin" / "python"), "-r", str(requirements)],
        cwd=None,
        what=f"uv pip install -r {requirements.name}",
        env=env,
    )  # fmt: skip


def _with_pip(venv: Path, requirements: Path, python: Path) -> None:
    _run([str(python), "-m", "venv", str(venv)], cwd=None, what="python -m venv")
    _run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
         "--disable-pip-version-check", "--no-input", "-r", str(requirements)],
        cwd=None,
        what=f"pip install -r {requirements.name}",
    )  # fmt: skip


def make_venv(venv: Path, requirements: Path, python: Path, log: Callable[[str], None]) -> None:
    """Build ``venv`` with ``python`` from the fully pinned ``requirements``, then write the
    done marker. With uv where there is one (it falls back to pip if uv fails: uv reads
    its own index settings, not pip's)."""
    shutil.rmtree(venv, ignore_errors=True)
    uv = uv_binary()
    if uv is not None:
        log(f"creating {venv.name} with uv (Python {python})")
        try:
            _with_uv(uv, venv, requirements, python)
        except McpSetupError as exc:
            log(f"uv failed, trying pip: {str(exc).splitlines()[0]}")
            shutil.rmtree(venv, ignore_errors=True)
            uv = None
    if uv is None:
        log(f"creating {venv.name} with pip (Python {python})")
        _with_pip(venv, requirements, python)
    (venv / DONE_MARKER).write_text(requirements.read_text(encoding="utf-8"))
