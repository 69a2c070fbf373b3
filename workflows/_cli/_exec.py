"""``exec``, which runs a script in a sandbox, and ``logs``, which reads an execution's output.

``exec`` sends its launcher as ``main.py`` and the script beside it
(:mod:`workflows._exec_streams`), so that the script's stdout alone reaches stdout (pip's
lines, the service's notes and the script's stderr go to stderr) and exec exits with the
script's own status, on the service as on the emulator. SIGTERM, SIGHUP and Ctrl-C stop the
wait, never the run: the service has no call that stops one execution (releasing its
sandbox does), so exec says what still runs.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from workflows._errors import InvalidInputError
from workflows._exec_streams import parse_execution_id, with_launcher
from workflows._execution import TERMINAL_STATUSES, Execution, check_execution_name
from workflows._execution_input import (
    directory_execution_files,
    execution_files,
    read_requirements_file,
)
from workflows._ownership import Terminated
from workflows._sandbox import LocalSandbox
from workflows._seed import SourceFile

from ._output import EXIT_ERROR, EXIT_HANGUP, EXIT_NO_STATUS, EXIT_OK, Output, UsageError

_HELD_CHARS = 256 * 1024


@contextlib.contextmanager
def stop_on_hangup() -> Iterator[None]:
    """While in the block, SIGHUP (the terminal closed, ``kill -HUP``) raises
    :class:`Terminated` with status 129 in the main thread, as SIGTERM does with 143."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def hangup(signum: int, frame: FrameType | None) -> None:
        raise Terminated(EXIT_HANGUP)

    before = signal.signal(signal.SIGHUP, hangup)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, before)


def _exec_requirements(args: argparse.Namespace) -> list[str]:
    """The lines of every ``-r FILE`` (read as pip reads them) and every ``--with SPEC``."""
    lines: list[str] = []
    for name in args.requirement:
        if not Path(name).exists() and not name.endswith(".txt"):
            raise UsageError(
                f"-r {name}: -r reads a requirements file, as pip does, and there is no file "
                f"{name!r}; to install one package, use --with {name}"
            )
        try:
            lines += read_requirements_file(name, what=f"-r {name}")
        except InvalidInputError as exc:
            raise UsageError(str(exc)) from None
    return lines + list(args.with_requirements)


def _exec_files(args: argparse.Namespace) -> dict[str, Path]:
    """``--file PATH`` as ``{name beside main.py: path}``, each checked."""
    files: dict[str, Path] = {}
    for given in args.files:
        path = Path(given)
        name = path.resolve().name if path.name in ("", ".", "..") else path.name
        if not path.exists():
            raise UsageError(f"--file {given}: no such file or folder")
        if name == "main.py":
            raise UsageError(f"--file {given}: the script to run is the SCRIPT argument")
        if name == "requirements.txt":
            raise UsageError(
                f"--file {given}: requirements files are installed with -r {given} "
                "(to send the file without installing it, give it another name)"
            )
        if name in files:
            raise UsageError(
                f"--file {files[name]} and --file {given} would both be sent as {name!r}"
            )
        files[name] = path
    return files


def _exec_status(run: Execution, status: str, ui: Output) -> int:
    """exec's exit status: the script's own (from its launcher's last record, else the
    emulator's last line), ``128 + N`` when a signal N killed it, and
    :data:`EXIT_NO_STATUS` with a line saying so when nothing tells it."""
    code = run.exit_code()
    if code is None:
        if status == "completed":
            return EXIT_OK
        ui.problem(
            f"execution {run.id} {status}, and no exit status is known (the script never ended: "
            f"pip failed, or a time limit; the output above says why): exit {EXIT_NO_STATUS}"
        )
        return EXIT_NO_STATUS
    if code < 0:
        ui.problem(f"execution {run.id}: the script was killed by signal {-code}")
        return 128 - code
    if code:
        ui.note(f"execution {run.id}: the script exited with status {code}")
        return code
    if status != "completed":  # the script ended well, the execution did not: say so
        ui.problem(f"execution {run.id} {status} although the script exited with status 0")
        return EXIT_ERROR
    ui.note(f"execution {run.id} {status}")
    return EXIT_OK


def _write(ui: Output, pieces: list[tuple[str, str]], *, framed_only: bool) -> None:
    """The script's stdout to stdout, everything else to stderr (as messages: -q silences
    what is not the script's own stderr)."""
    for stream, text in pieces:
        if stream == "stdout" or (stream == "log" and not framed_only):
            ui.data(text)
            ui.out.flush()
        elif stream == "stderr" or not ui.quiet:
            ui.err.write(text)
            ui.err.flush()


def _follow(run: Execution, ui: Output) -> str:
    """Stream the run's output until it ends; SIGTERM, SIGHUP or Ctrl-C stop the wait (not
    the run) and say on stderr what still runs on the sandbox and how to stop it."""
    try:
        with stop_on_hangup():
            for stream, text in run.output():
                _write(ui, [(stream, text)], framed_only=True)
            return run.wait()
    except (KeyboardInterrupt, Terminated):
        ui.problem(
            f"stopped waiting; execution {run.id} may still be running on sandbox "
            f"{run.sandbox_id} (the service cannot stop one execution: `klavis-sandbox release "
            f"{run.sandbox_id}` stops it with its sandbox; `klavis-sandbox logs {run.id}` reads "
            "its output)"
        )
        raise


def start_launched(sb: LocalSandbox, entries: list[SourceFile], name: str) -> Execution:
    """Start the execution archive ``entries`` (with exec's launcher) as ``name``."""
    start, run_name, _ = sb._start_entries(entries, name, False)
    sb._driver.run(start)
    return sb.execution(run_name)


def cmd_exec(args: argparse.Namespace, ui: Output) -> int:
    script = Path(args.script)
    if not script.exists():
        raise UsageError(f"{args.script}: no such script or folder")
    requirements = _exec_requirements(args)
    files = _exec_files(args)
    if script.is_dir() and requirements and (script / "requirements.txt").is_file():
        raise UsageError(
            f"{args.script} has a requirements.txt, which is installed: drop -r/--with "
            "(or list them in that file)"
        )
    try:  # every argument is checked before the first request (attach is one)
        if script.is_dir():
            entries = directory_execution_files(script, requirements=requirements, files=files)
        else:
            entries = execution_files(script, requirements=requirements, files=files)
        entries = with_launcher(entries)
        name = check_execution_name(args.name)
    except InvalidInputError as exc:
        raise UsageError(str(exc)) from None
    sb = LocalSandbox.attach(args.id, base_url=args.base_url, progress=False)
    run = start_launched(sb, entries, name)
    ui.note(f"execution {run.id} started (klavis-sandbox logs {run.id} reads it again)")
    status = _follow(run, ui)
    return _exec_status(run, status, ui)


def cmd_logs(args: argparse.Namespace, ui: Output) -> int:
    try:
        sandbox_id, name = parse_execution_id(args.execution_id)
        check_execution_name(name)
    except InvalidInputError as exc:
        raise UsageError(str(exc)) from None
    run = LocalSandbox.attach(sandbox_id, base_url=args.base_url, progress=False).execution(name)
    # What comes before the first record is pip's (exec's launcher frames the script's
    # output), or the whole log of an execution started by execute(): held until a record
    # tells which, or the log ends, or 256 KiB of it (then it is taken as a plain log).
    held: list[tuple[str, str]] = []
    size, framed, plain = 0, False, False
    for stream, text in run.output(follow=args.follow):
        framed = framed or stream != "log"
        if framed or plain:
            _write(ui, [*held, (stream, text)], framed_only=framed)
            held = []
            continue
        held.append((stream, text))
        size += len(text)
        plain = size > _HELD_CHARS
    _write(ui, held, framed_only=False)  # a log without records: all of it is the output
    status = run.status()
    if status not in TERMINAL_STATUSES:
        ui.note(f"execution {run.id} is still {status}")
        return EXIT_OK
    return _exec_status(run, status, ui)
