"""The ``main.py`` that ``klavis-sandbox exec`` sends: it runs the user's script and frames its
two streams in the execution's log.

This file is not imported by the library: its text is sent as the execution's ``main.py``
(:func:`workflows._exec_streams.with_launcher`), beside the user's script renamed
``_klavis_main.py``; once running, it gives the script back its name (``main.py``) and runs
it. The service (and the emulator) merge everything an execution prints (pip's install lines,
their own notes, the script's stdout and stderr) into one log and report no exit status. So
this launcher runs the script as a child process with two pipes and writes each piece of its
output to the log as one record line, ``##klavis-exec K TEXT``, where ``K`` says which stream
and whether a newline follows (``o``/``O`` stdout, ``e``/``E`` stderr, capital: no newline),
and last ``##klavis-exec x N``, the script's exit status (``-N``: killed by signal N).
:class:`workflows._exec_streams.LogSplitter` reads them back. Each stream keeps its own order;
between the two, pieces are in the order the launcher read them (a stderr line written just
before a stdout line may follow it, as with any two pipes). A record always starts a line and
every line the script prints is inside one, so the script cannot forge a record, nor pip's
lines pass for the script's.

It runs on the sandbox's Python, whatever its version: standard library only, nothing newer
than Python 3.8. The script runs with this interpreter (a requirements venv's when there is
one) and its isolation flag (the emulator runs ``python -I``), in the same working directory,
environment and standard input. SIGTERM and SIGINT are passed on to it.
"""

from __future__ import annotations

import codecs
import os
import signal
import subprocess
import sys
import threading
from typing import IO, Any

SCRIPT = "_klavis_main.py"
PREFIX = "##klavis-exec "
_CHUNK = 65536

_lock = threading.Lock()


def _write(kind: str, text: str) -> None:
    with _lock:
        sys.stdout.buffer.write(f"{PREFIX}{kind} {text}\n".encode("utf-8", "replace"))
        sys.stdout.buffer.flush()


def _pump(pipe: IO[bytes], full: str, partial: str) -> None:
    """Copy one of the script's streams into records, a line per record, and what a read
    ends with short of a newline as a partial record at once (a progress line shows)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    fd = pipe.fileno()
    while True:
        chunk = os.read(fd, _CHUNK)
        text = decoder.decode(chunk, final=not chunk)
        lines = text.split("\n")
        for line in lines[:-1]:
            _write(full, line)
        if lines[-1]:
            _write(partial, lines[-1])
        if not chunk:
            return


def main() -> int:
    # The launcher is read and running: the script takes back its own name, so that its
    # folder, its __file__ and the exported artifacts look as they would without a launcher.
    try:
        os.replace(SCRIPT, "main.py")
        script = "main.py"
    except OSError:
        script = SCRIPT
    flags: list[str] = ["-I"] if sys.flags.isolated else []
    child = subprocess.Popen(
        [sys.executable, *flags, script], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )

    def forward(signum: int, frame: Any) -> None:
        child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    assert child.stdout is not None
    assert child.stderr is not None
    pumps = [
        threading.Thread(target=_pump, args=(child.stdout, "o", "O")),
        threading.Thread(target=_pump, args=(child.stderr, "e", "E")),
    ]
    for pump in pumps:
        pump.start()
    code: int | None = child.wait()
    for pump in pumps:
        pump.join()
    _write("x", str(code))
    assert code is not None
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
