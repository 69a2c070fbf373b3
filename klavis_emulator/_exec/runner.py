"""Running execution archives: one background thread per run, no FastAPI, no SQLite.

An execution folder (made by the state) looks like this::

    <folder>/work/        the unpacked archive; the run's working directory (exported)
    <folder>/output.log   stdout and stderr of every step, merged, as raw bytes
    <folder>/venv/        a virtual environment, only when the archive has requirements.txt
    <folder>/home/        HOME and TMPDIR of an unconfined run

A run goes through these steps in its own thread, never on the event loop:

1. ``packages.txt`` is reported in the log as not installed (the emulator installs no system
   packages);
2. ``requirements.txt``, when present, is checked (:func:`check_requirements`) and installed
   with pip into ``venv/``, **from wheels only** (pip's output goes to the log; pip runs with
   network access, the emulator's own pip drives it);
3. ``main.py`` runs with the emulator's Python (or the venv's), working directory ``work/``,
   ``AGENT_WORKSPACE`` set to the sandbox's workspace and an otherwise minimal environment.

When the emulator confines runs (see :mod:`klavis_emulator._exec.confinement`, which decides once at
startup and builds every ``bwrap`` command line), steps 2 and 3 are confined: the system
folders and the Python installation are mounted read-only, the workspace is mounted at
``/data``, the working directory at ``/execution``, ``/tmp`` is private, and there is no
network (unless allowed) for ``main.py``. An unconfined run (turned off on purpose, or no
bubblewrap installed) says so in one line of its log. Lines the emulator itself writes to
the log start with ``[emulator]``.

**The install step runs none of the archive's code.** It needs the network (PyPI), and the
network includes the host's loopback, where the emulator's control routes answer any client
without a control token (``POST /_emulator/clock/advance`` expires every tenant's
sandboxes). pip runs a package's own code when it builds one (an sdist, a local folder, an
editable or VCS requirement: ``build-backend``, ``setup.py``), so a requirement such as
``./evil`` moved every tenant's clock from inside a confined run. Therefore:

* pip installs wheels only (``--only-binary=:all:``), and installing a wheel runs no code;
* ``requirements.txt`` is checked line by line against an allow-list (names from an index,
  wheel files in the archive, wheel URLs, and the index, find-links, hash and pre-release
  options) and refused with one ``[emulator]`` line naming the line and the reason
  otherwise: local folders and source archives, ``-e``, VCS and other URLs, ``--no-binary``,
  build options (``--config-settings``, ``--global-option``), nested ``-r``/``-c`` files,
  ``${VARIABLES}``. pip does not see the tenant's file but the checked copy the emulator
  writes (absolute wheel paths, one option spelling), so what pip reads is what was checked;
* ``--only-binary=:all:`` alone is not enough: measured with pip 26.3, it does not stop pip
  from building a local folder, a local ``.tar.gz`` or a ``--no-binary :all:`` line of the
  file (each ran the in-tree build backend);
* Python runs with ``-I`` and pip outside the archive's folder, so a ``pip/`` or ``venv/``
  package in the archive is never imported instead of the real one (before, ``python -m
  venv`` imported the archive's ``venv/__main__.py`` *unconfined*, as the emulator's user,
  and ``python -m pip`` the archive's ``pip/``, confined but with the network).

pip itself only sends ``GET``/``HEAD`` requests, so an index URL pointing at the emulator
can read but changes nothing: the control routes' ``GET``s (health, faults, clock) are
reads, the API routes need a bearer token pip cannot send, and a storage download needs a
valid signature. A project that exists only as an sdist does not install: build its wheel
elsewhere (``pip wheel``), put the ``.whl`` in the archive and list its path
(``./wheels/pkg-1.0-py3-none-any.whl``). Rejected alternatives: parsing the file and passing
the original to pip (its decoding, line joining, ``${VAR}`` expansion and option
abbreviations, ``--edit`` for ``--editable``, would be a second parser to keep equal); a
network namespace without the host's loopback (slirp4netns ``--disable-host-loopback``,
pasta) is not installed here and would be one more tool that can fail.

The same rule holds unconfined, so an execution behaves alike with and without bubblewrap.
Unconfined runs are an opt-out: ``main.py`` can then do whatever the emulator's user can,
including calling the control routes on loopback, unless the emulator was started with
``--control-token``. ``--allow-network`` is one too (the machine's loopback services are
reachable), but a confined run's control requests are refused all the same: the emulator
recognises the socket as a sandbox's (:mod:`klavis_emulator._exec.peers`).

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
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

from .confinement import CONFINED_WORKSPACE, PRIVATE_TMP, Bind, Confinement, bwrap_args

__all__ = [
    "CONFINED_WORKDIR",
    "EXECUTION_STATUSES",
    "FINAL_STATUSES",
    "LOG_CHUNK_BYTES",
    "ExecutionRun",
    "RequirementsRefused",
    "RunSettings",
    "check_requirements",
    "complete_utf8_prefix",
    "execution_name_problem",
    "read_log",
]

logger = logging.getLogger("klavis_emulator")

EXECUTION_STATUSES: Final[tuple[str, ...]] = ("pending", "running", "completed", "failed")
FINAL_STATUSES: Final[frozenset[str]] = frozenset({"completed", "failed"})
LOG_CHUNK_BYTES: Final = 1024 * 1024
CONFINED_WORKDIR: Final = "/execution"
_CONFINED_VENV: Final = "/venv"
_CONFINED_CHECKED: Final = "/requirements"  # the checked requirements.txt, read-only
_CHECKED_NAME: Final = "requirements.txt"
_MAX_REQUIREMENTS_BYTES: Final = 1024 * 1024
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


# ---------------------------------------------------------------------- logs


def complete_utf8_prefix(data: bytes) -> int:
    """The length of ``data`` without a trailing, incomplete UTF-8 sequence."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # a continuation byte: keep looking for the lead byte
            continue
        if 0xF0 <= byte <= 0xF4:
            needed = 4
        elif 0xE0 <= byte <= 0xEF:
            needed = 3
        elif 0xC2 <= byte <= 0xDF:
            needed = 2
        else:  # ASCII, or a byte that starts no valid sequence
            needed = 1
        return len(data) - back if back < needed else len(data)
    return len(data)


def read_log(
    path: Path, cursor: int, *, final: bool, limit: int = LOG_CHUNK_BYTES
) -> tuple[str, int]:
    """Read the log text after byte ``cursor``; return it and the next cursor.

    At most ``limit`` bytes are read. The cursor only moves over complete UTF-8 characters:
    a character whose last bytes are not written yet is left for the next call. Once the run
    is over (``final``) nothing more will come, so an incomplete tail is returned too. Bytes
    that are not valid UTF-8 (including continuation bytes at a cursor that points inside a
    character) decode to U+FFFD. A cursor at or past the end answers ``("", cursor)``.
    """
    try:
        log = path.open("rb")
    except FileNotFoundError:
        return "", cursor
    with log:
        size = os.fstat(log.fileno()).st_size
        if cursor >= size:
            return "", cursor
        log.seek(cursor)
        data = log.read(limit)
    cut = complete_utf8_prefix(data)
    if cut < len(data) and final and cursor + len(data) >= size:
        cut = len(data)
    return data[:cut].decode("utf-8", "replace"), cursor + cut


# ---------------------------------------------------------------------- requirements

WHEELS_ONLY_HINT: Final = (
    "The emulator installs requirements from wheels only and runs no package's build code "
    "(a build would run with network access, and the emulator's control routes answer on "
    "loopback): name packages from an index (pip picks their wheels), or build the wheel "
    "elsewhere (pip wheel), put the .whl in the archive and list its path, e.g. "
    "./wheels/pkg-1.0-py3-none-any.whl."
)
_NAME_CHARS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-\[\],<>=!~*+;()'\" ]*")
_LEADING_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_ARCHIVE_SUFFIXES: Final = (
    ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tlz",
    ".tar.lz", ".tar.lzma",
)  # fmt: skip
_URL = re.compile(r"https?://[A-Za-z0-9._~:/?&=%+@!,;-]+")
_REL_PATH = re.compile(r"[A-Za-z0-9_.+-][A-Za-z0-9_.+/-]*")
_HOST = re.compile(r"[A-Za-z0-9.-]+(:[0-9]{1,5})?")
_HASH = re.compile(r"[a-z0-9]+:[0-9a-fA-F]+")
_FLAGS: Final = frozenset({"--no-index", "--pre", "--prefer-binary", "--require-hashes"})
_VALUED: Final = {
    "-i": "--index-url",
    "--index-url": "--index-url",
    "--extra-index-url": "--extra-index-url",
    "-f": "--find-links",
    "--find-links": "--find-links",
    "--trusted-host": "--trusted-host",
    "--only-binary": "--only-binary",
    "--hash": "--hash",
}
_REFUSED_OPTIONS: Final = {
    ("-e", "--editable"): "an editable install builds the project (its own code)",
    ("--no-binary",): "--no-binary asks pip to build from source",
    ("-r", "--requirement", "-c", "--constraint"): (
        "nested requirement and constraint files are not read: list every requirement in "
        "requirements.txt itself"
    ),
    ("-C", "--config-settings", "--global-option", "--install-option", "--build-option"): (
        "build options only matter when pip builds a package"
    ),
}


class RequirementsRefused(ValueError):
    """A ``requirements.txt`` line the emulator does not hand to pip (the message says which
    line, why, and what to do instead)."""


def _refused(number: int, shown: str, reason: str) -> RequirementsRefused:
    line = shown if len(shown) <= 120 else shown[:120] + "..."
    return RequirementsRefused(
        f"requirements.txt line {number} ({line!r}) is refused: {reason}. {WHEELS_ONLY_HINT}"
    )


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """pip's logical lines: ``\\``-continued lines joined, ``#`` comments removed (a ``#``
    at the start or after whitespace), blank lines dropped; each with its first line
    number."""
    lines: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        if raw.endswith("\\"):
            pending.append(raw[:-1])
            continue
        pending.append(raw)
        joined = re.sub(r"(^|\s+)#.*$", "", "".join(pending)).strip()
        pending = []
        if joined:
            lines.append((start, joined))
    if pending:
        joined = re.sub(r"(^|\s+)#.*$", "", "".join(pending)).strip()
        if joined:
            lines.append((start, joined))
    return lines


def _inside(workdir: Path, relative: str, *, want_dir: bool) -> str | None:
    """``relative`` as a path below ``workdir`` (``a/b``), or ``None`` when it leaves it,
    does not exist, or is not the wanted kind."""
    if relative.startswith("/") or not _REL_PATH.fullmatch(relative):
        return None
    root = workdir.resolve()
    target = (workdir / relative).resolve()
    if target != root and root not in target.parents:
        return None
    if not (target.is_dir() if want_dir else target.is_file()):
        return None
    return target.relative_to(root).as_posix()


def _option_value(
    number: int, line: str, name: str, value: str, workdir: Path, shown_workdir: str
) -> str:
    """The checked, canonical value of an accepted option (raises when it is not safe)."""
    if name in ("--index-url", "--extra-index-url"):
        if _URL.fullmatch(value):
            return value
        raise _refused(number, line, f"{name} takes an http(s) URL without spaces or quotes")
    if name == "--find-links":
        if _URL.fullmatch(value):
            return value
        inside = _inside(workdir, value, want_dir=True)
        if inside is None and value.endswith(".whl"):
            inside = _inside(workdir, value, want_dir=False)
        if inside is not None:
            return f"{shown_workdir}/{inside}" if inside != "." else shown_workdir
        raise _refused(
            number, line, "--find-links takes an http(s) URL or a folder inside the archive"
        )
    if name == "--trusted-host":
        if _HOST.fullmatch(value):
            return value
        raise _refused(number, line, "--trusted-host takes a host name (and a port)")
    if name == "--hash":
        if _HASH.fullmatch(value):
            return value
        raise _refused(number, line, "--hash takes algorithm:hexdigest")
    return value


def _options(
    number: int, line: str, tokens: list[str], workdir: Path, shown_workdir: str
) -> list[tuple[str, str | None]]:
    """The options in ``tokens`` as ``(name, value)`` pairs (``None`` for flags)."""
    found: list[tuple[str, str | None]] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if token in _FLAGS:
            found.append((token, None))
            continue
        name, has_value, value = token.partition("=")
        if not has_value and name not in _VALUED and name[:2] in ("-i", "-f") and len(name) > 2:
            name, value, has_value = name[:2], name[2:], "="  # -iURL, -fPATH
        if name in _VALUED:
            if not has_value:
                if index >= len(tokens):
                    raise _refused(number, line, f"{name} needs a value")
                value = tokens[index]
                index += 1
            canonical = _VALUED[name]
            found.append(
                (canonical, _option_value(number, line, canonical, value, workdir, shown_workdir))
            )
            continue
        for names, reason in _REFUSED_OPTIONS.items():
            if name in names:
                raise _refused(number, line, reason)
        raise _refused(number, line, f"the option {name[:40]!r} is not accepted here")
    return found


def _requirement(number: int, line: str, text: str, workdir: Path, shown_workdir: str) -> str:
    """The checked form of a requirement (a name from an index, or a wheel)."""
    if text.endswith(".whl") and " " not in text:
        if _URL.fullmatch(text):
            return text
        inside = _inside(workdir, text, want_dir=False)
        if inside is not None:
            return f"{shown_workdir}/{inside}"
        raise _refused(number, line, "this wheel is not a file inside the archive")
    if "$" in text:
        raise _refused(number, line, "${VARIABLES} are not expanded")
    if "@" in text or ":" in text or "/" in text or "\\" in text or text.startswith("."):
        raise _refused(
            number,
            line,
            "a local folder, a source archive, a VCS or other URL is built by pip (its "
            "own code runs); only wheel files (.whl) and names from an index are installed",
        )
    leading = _LEADING_NAME.match(text)
    if leading is not None and leading.group().lower().endswith(_ARCHIVE_SUFFIXES):
        raise _refused(number, line, "a source archive is built by pip (its own code runs)")
    if not _NAME_CHARS.fullmatch(text):
        raise _refused(number, line, "this is not a requirement pip and the emulator agree on")
    return text


def check_requirements(data: bytes, workdir: Path, shown_workdir: str) -> str:
    """Check ``requirements.txt`` (its bytes) and return the copy pip will read.

    Accepted, line by line: names from an index with extras, versions and markers
    (``--hash=...`` after them), wheel files inside ``workdir`` (written as absolute paths
    below ``shown_workdir``, where pip sees ``workdir``), ``http(s)`` URLs of wheels, and the
    options ``--index-url``/``-i``, ``--extra-index-url``, ``--find-links``/``-f`` (a URL or a
    folder inside the archive), ``--trusted-host``, ``--no-index``, ``--pre``,
    ``--prefer-binary``, ``--require-hashes``; ``--only-binary`` is dropped (the emulator
    passes ``--only-binary=:all:`` itself). Anything else raises.

    Raises:
        RequirementsRefused: the first line that is not accepted (the message names it).
    """
    if len(data) > _MAX_REQUIREMENTS_BYTES:
        raise RequirementsRefused(
            f"requirements.txt is larger than {_MAX_REQUIREMENTS_BYTES:,} bytes: it is refused."
        )
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise RequirementsRefused(
            "requirements.txt is not UTF-8 text: it is refused (write it in UTF-8)."
        ) from None
    checked: list[str] = []
    for number, line in _logical_lines(text):
        if "${" in line:
            raise _refused(number, line, "${VARIABLES} are not expanded")
        tokens = line.split()
        split = next((i for i, token in enumerate(tokens) if token.startswith("-")), len(tokens))
        options = _options(number, line, tokens[split:], workdir, shown_workdir)
        if split:
            requirement = _requirement(
                number, line, " ".join(tokens[:split]), workdir, shown_workdir
            )
            if any(name != "--hash" for name, _ in options):
                raise _refused(number, line, "only --hash may follow a requirement")
            checked.append(" ".join([requirement, *(f"--hash={v}" for _, v in options)]))
            continue
        for name, value in options:
            if name == "--hash":
                raise _refused(number, line, "--hash must follow a requirement")
            if name == "--only-binary":
                continue  # the emulator passes --only-binary=:all: itself
            checked.append(name if value is None else f"{name}={value}")
    return "".join(f"{line}\n" for line in checked)


# ---------------------------------------------------------------------- runs


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
            _kill_group(process)
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
                if message:
                    _note(log, message)
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
            _note(
                log,
                f"Not confined: {settings.confinement.reason}; main.py runs as the emulator's "
                "user with the emulator's network access.",
            )
        packages = self.workdir / "packages.txt"
        if packages.is_file():
            names = _listed_names(packages)
            _note(
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
        if code == 0:
            return "completed", 0, ""
        if code < 0:
            return "failed", code, f"main.py was killed by signal {-code}."
        return "failed", code, f"main.py exited with status {code}."

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
        _note(
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
            _kill_group(process)
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


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill a process and its process group (it was started in a new session)."""
    killpg = getattr(os, "killpg", None)  # POSIX only
    if killpg is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=_KILL_WAIT)


def _note(log: BinaryIO, message: str) -> None:
    """Append one ``[emulator]`` line to a log."""
    log.write(f"[emulator] {message}\n".encode())


def append_note(path: Path, message: str) -> None:
    """Append one ``[emulator]`` line to the log file at ``path`` (created if missing)."""
    with path.open("ab", buffering=0) as log:
        _note(log, message)


def _listed_names(path: Path) -> list[str]:
    names: list[str] = []
    with contextlib.suppress(OSError):
        for line in path.read_text("utf-8", "replace").splitlines():
            name = line.split("#", 1)[0].strip()
            if name:
                names.append(name[:100])
    return names[:50]
