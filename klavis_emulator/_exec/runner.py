"""Running execution archives: one background thread per run, no FastAPI, no SQLite.

An execution folder (made by the state) looks like this::

    <folder>/work/        the unpacked archive; the run's working directory (exported)
    <folder>/output.log   stdout and stderr of every step, merged (see :mod:`.run_log`)
    <folder>/venv/        a virtual environment, only when the archive has requirements.txt
    <folder>/home/        HOME and TMPDIR of an unconfined run

A run goes through these steps in its own thread, never on the event loop:

1. ``packages.txt`` is reported in the log as not installed (the emulator installs no system
   packages);
2. ``requirements.txt``, when present, is checked (:mod:`.requirements`: wheels only, no
   package's build code runs) and installed with pip into ``venv/``, with network access;
3. ``main.py`` runs with the emulator's Python (or the venv's), working directory ``work/``,
   ``AGENT_WORKSPACE`` set to the sandbox's workspace and an otherwise minimal environment;
4. the log's last line says how main.py ended: ``[emulator] main.py exited with status N.``
   (0 too) or ``[emulator] main.py was killed by signal N.`` (:func:`.run_log.exit_line`). The
   API has no field for an exit status (the real service reports none); the library reads
   this line. A run that fails before main.py ends (pip, the time limit) ends with another
   line, saying why.

Confined (see :mod:`.confinement`, decided once per emulator), steps 2 and 3 run in
``bwrap``: the system folders and the Python installation read-only, the workspace at
``/data``, the working directory at ``/execution``, a private ``/tmp``, and no network for
``main.py`` unless ``allow_network``. An unconfined run says so in one line of its log; it
can do whatever the emulator's user can, the control routes on loopback included unless the
emulator has a control token. Python runs with ``-I`` and pip outside the archive's folder,
so a ``pip/`` or ``venv/`` package in the archive is never imported instead of the real one.

A run has a time limit (all steps together); past it the process group is killed and the
run fails. :meth:`ExecutionRun.kill` stops a run without reporting an outcome (used on
reset, release and shutdown).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

from .confinement import CONFINED_WORKSPACE, PRIVATE_TMP, Bind, Confinement, bwrap_args
from .processes import kill_group
from .requirements import RequirementsRefused, check_requirements
from .run_log import ends_line, exit_line, note

__all__ = [
    "CONFINED_WORKDIR",
    "EXECUTION_STATUSES",
    "FINAL_STATUSES",
    "ExecutionRun",
    "RunSettings",
    "execution_name_problem",
]

logger = logging.getLogger("klavis_emulator")

EXECUTION_STATUSES: Final[tuple[str, ...]] = ("pending", "running", "completed", "failed")
FINAL_STATUSES: Final[frozenset[str]] = frozenset({"completed", "failed"})
CONFINED_WORKDIR: Final = "/execution"
_CONFINED_VENV: Final = "/venv"
_CONFINED_CHECKED: Final = "/requirements"  # the checked requirements.txt, read-only
_CHECKED_NAME: Final = "requirements.txt"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_KILL_WAIT: Final = 10.0
_UNCONFINED: Final = Confinement(False, "confinement was turned off")


def execution_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name an execution, or ``None`` when it can.

    Names are 1 to 128 characters of letters, digits, ``.``, ``_`` and ``-``, start with a
    letter or digit and contain no ``..`` (they become folder and object names).
    """
    if _NAME_RE.fullmatch(name) is None or ".." in name:
        shown = name if len(name) <= 80 else name[:80] + "..."
        return (
            f"Invalid execution name {shown!r}: use 1 to 128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (no path separators, no '..')."
        )
    return None


@dataclass(frozen=True)
class RunSettings:
    """How runs are carried out (the same for every run of one emulator)."""

    timeout: float = 3600.0
    allow_network: bool = False
    confinement: Confinement = _UNCONFINED
    python: str = sys.executable


class ExecutionRun:
    """One run of an execution folder, in a background thread.

    ``on_running()`` is called when ``main.py`` starts; ``on_finished(status, exit_code)``
    once when the run ends by itself (``completed`` or ``failed``), after the log's last
    line was written. Neither is called after :meth:`kill`.
    """

    def __init__(
        self,
        *,
        folder: Path,
        workspace: Path,
        settings: RunSettings,
        on_running: Callable[[], None],
        on_finished: Callable[[str, int | None], None],
        label: str,
    ) -> None:
        self.folder = folder
        self.workdir = folder / "work"
        self.log_path = folder / "output.log"
        self.workspace = workspace
        self.settings = settings
        self._on_running = on_running
        self._on_finished = on_finished
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._killed = False
        self._deadline = 0.0
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"execution {label}", daemon=True)

    def start(self) -> None:
        """Start the run's thread."""
        self._deadline = time.monotonic() + self.settings.timeout
        self._thread.start()

    def kill(self, wait: float = _KILL_WAIT) -> None:
        """Stop the run (no outcome is reported) and wait up to ``wait`` s for its thread."""
        with self._lock:
            self._killed = True
            process = self._process
        if process is not None:
            kill_group(process, _KILL_WAIT)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(wait)

    # ------------------------------------------------------------------ the thread

    def _main(self) -> None:
        try:
            with self.log_path.open("ab", buffering=0) as log:
                outcome = self._steps(log)
                if outcome is None:
                    return
                status, exit_code, message = outcome
                if message:  # on a line of its own, even after output without a final newline
                    note(log, message, new_line=not ends_line(self.log_path))
            with self._lock:
                if self._killed:
                    return
            self._on_finished(status, exit_code)
        except Exception:
            with self._lock:
                killed = self._killed
            if killed:  # its folder may be gone already (release, reset): nothing to report
                return
            logger.exception("execution thread for %s failed", self.folder.name)
            with contextlib.suppress(Exception):
                self._on_finished("failed", None)
        finally:
            self.done.set()

    def _steps(self, log: BinaryIO) -> tuple[str, int | None, str] | None:
        settings = self.settings
        confined = settings.confinement.enabled
        if not confined:  # the one line about confinement; a failing bwrap never gets here
            note(
                log,
                f"Not confined: {settings.confinement.reason}; main.py runs as the emulator's "
                "user with the emulator's network access.",
            )
        packages = self.workdir / "packages.txt"
        if packages.is_file():
            names = _listed_names(packages)
            note(
                log,
                "packages.txt lists system packages "
                f"({', '.join(names) if names else 'none'}); the emulator does not install "
                "system packages: they are NOT installed.",
            )
        if not (self.workdir / "main.py").is_file():
            return "failed", None, "The execution archive has no main.py at its top level."
        python = settings.python
        venv: Path | None = None
        if (self.workdir / "requirements.txt").is_file():
            venv = self.folder / "venv"
            outcome = self._install_requirements(log, venv)
            if outcome is not None:
                return outcome
            python = f"{_CONFINED_VENV}/bin/python" if confined else str(venv / "bin" / "python")
        with self._lock:
            if self._killed:
                return None
        self._on_running()
        env = self._environment(venv)
        argv = [python, "main.py"]
        code = self._run_step(log, argv, env=env, venv=venv, venv_writable=False, network=None)
        if code is None:
            return None
        if isinstance(code, str):
            return "failed", None, code
        # The last line of the log, in a stable format (run_log.exit_line): the service reports
        # no exit status, so the library reads it from here (Execution.exit_code).
        return ("completed" if code == 0 else "failed"), code, exit_line(code)

    def _install_requirements(
        self, log: BinaryIO, venv: Path
    ) -> tuple[str, int | None, str] | None:
        confined = self.settings.confinement.enabled
        checked_dir = self.folder / "requirements"
        try:
            data = (self.workdir / "requirements.txt").read_bytes()
            checked = check_requirements(
                data, self.workdir, CONFINED_WORKDIR if confined else str(self.workdir)
            )
        except RequirementsRefused as refused:
            return "failed", None, f"{refused} main.py was not run."
        except OSError as exc:
            return "failed", None, f"requirements.txt could not be read ({exc.strerror})."
        shutil.rmtree(checked_dir, ignore_errors=True)
        checked_dir.mkdir()
        (checked_dir / _CHECKED_NAME).write_text(checked, "utf-8")
        note(
            log,
            "Installing requirements.txt into this execution's virtual environment (wheels only).",
        )
        shutil.rmtree(venv, ignore_errors=True)
        code = self._run_step(  # -I and cwd outside work/: never the archive's venv/ package
            log,
            [self.settings.python, "-I", "-m", "venv", "--without-pip", str(venv)],
            env=self._environment(None, host=True),
            venv=None,
            venv_writable=False,
            network=True,
            confine=False,
            cwd=self.folder,
        )
        if code is None:
            return None
        if code != 0 or isinstance(code, str):
            reason = code if isinstance(code, str) else f"status {code}"
            return "failed", None, f"Creating the virtual environment failed ({reason})."
        target = f"{_CONFINED_VENV}/bin/python" if confined else str(venv / "bin" / "python")
        checked_path = (
            f"{_CONFINED_CHECKED}/{_CHECKED_NAME}" if confined else str(checked_dir / _CHECKED_NAME)
        )
        argv = [
            self.settings.python,
            "-I",  # the archive's pip/ package (or any module) is never imported
            "-m",
            "pip",
            "--python",
            target,
            "install",
            "--no-input",
            "--disable-pip-version-check",
            "--only-binary=:all:",  # no build, so none of the archive's code runs
            "-r",
            checked_path,  # the checked copy, never the archive's own file
        ]
        env = self._environment(venv)
        home = self.folder / "home"  # pip's folder when unconfined: not the archive's
        home.mkdir(exist_ok=True)
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        env["PIP_KEYRING_PROVIDER"] = "disabled"  # import nothing a wheel just installed
        code = self._run_step(
            log,
            argv,
            env=env,
            venv=venv,
            venv_writable=True,
            # pip needs PyPI. Rejected: a network namespace without the host's loopback
            # (slirp4netns --disable-host-loopback, pasta): not installed here, and one more
            # tool that can fail; the wheels-only rule (see .requirements) is what protects.
            network=True,
            binds=[Bind(checked_dir, _CONFINED_CHECKED)],
            chdir=PRIVATE_TMP,
            cwd=home,
        )
        if code is None:
            return None
        if isinstance(code, str):
            return "failed", None, code
        if code != 0:
            return (
                "failed",
                None,
                (
                    f"pip failed with status {code}; main.py was not run. (Requirements are "
                    "installed from wheels only: a package without a wheel for this Python needs "
                    "its .whl in the archive, listed by path.)"
                ),
            )
        return None

    def _environment(self, venv: Path | None, *, host: bool = False) -> dict[str, str]:
        confined = self.settings.confinement.enabled and not host
        python_dir = os.path.dirname(self.settings.python)
        if venv is not None:
            bin_dir = f"{_CONFINED_VENV}/bin" if confined else str(venv / "bin")
        else:
            bin_dir = python_dir
        env = {
            "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "PYTHONIOENCODING": "utf-8",
            "AGENT_WORKSPACE": CONFINED_WORKSPACE if confined else str(self.workspace),
        }
        if venv is not None:
            env["VIRTUAL_ENV"] = f"{_CONFINED_VENV}" if confined else str(venv)
        if confined:
            env["HOME"] = env["TMPDIR"] = PRIVATE_TMP
        else:
            home = self.folder / "home"
            home.mkdir(exist_ok=True)
            env["HOME"] = env["TMPDIR"] = str(home)
        return env

    def _run_step(
        self,
        log: BinaryIO,
        argv: Sequence[str],
        *,
        env: dict[str, str],
        venv: Path | None,
        venv_writable: bool,
        network: bool | None,
        confine: bool = True,
        binds: Sequence[Bind] = (),
        chdir: str = CONFINED_WORKDIR,
        cwd: Path | None = None,
    ) -> int | str | None:
        """Run one process with output to the log; its exit code, a failure sentence, or
        ``None`` when the run was killed.

        Confined, it runs in ``chdir`` (inside the sandbox) with ``work/``, the venv and
        ``binds`` mounted; unconfined, in ``cwd`` (``work/`` by default)."""
        command = list(argv)
        confinement = self.settings.confinement
        if confine and confinement.enabled:
            assert confinement.bwrap is not None  # decide_confinement sets it when enabled
            mounts = [Bind(self.workdir, CONFINED_WORKDIR, writable=True)]
            if venv is not None:
                mounts.append(Bind(venv, _CONFINED_VENV, writable=venv_writable))
            mounts += binds
            command = [
                *bwrap_args(
                    confinement.bwrap,
                    workspace=self.workspace,
                    env=env,
                    chdir=chdir,
                    binds=mounts,
                    network=self.settings.allow_network if network is None else network,
                ),
                *command,
            ]
        with self._lock:
            if self._killed:
                return None
            try:
                self._process = subprocess.Popen(
                    command,
                    cwd=self.workdir if cwd is None else cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                return f"Could not start {os.path.basename(argv[0])}: {exc.strerror or exc}."
            process = self._process
        try:
            code = process.wait(timeout=max(0.0, self._deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_group(process, _KILL_WAIT)
            process.wait()
            with self._lock:
                if self._killed:
                    return None
            return (
                f"The execution exceeded the emulator's time limit of "
                f"{self.settings.timeout:g} s and was killed."
            )
        finally:
            with self._lock:
                self._process = None
        with self._lock:
            if self._killed:
                return None
        return code


def _listed_names(path: Path) -> list[str]:
    names: list[str] = []
    with contextlib.suppress(OSError):
        for line in path.read_text("utf-8", "replace").splitlines():
            name = line.split("#", 1)[0].strip()
            if name:
                names.append(name[:100])
    return names[:50]
