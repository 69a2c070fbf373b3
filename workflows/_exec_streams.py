"""An execution's two streams and exit status, read back from its one merged log.

The service merges all an execution prints into one log and reports no exit status; the
emulator does the same (and ends the log with one line of its own saying main.py's status).
``klavis-sandbox exec`` therefore sends a launcher as ``main.py`` (:mod:`._exec_launcher`) that
runs the user's script, renamed ``_klavis_main.py``, and writes its stdout and stderr to the
log as record lines, then its exit status. :class:`LogSplitter` reads such a log in the pieces
it arrives in and tells each piece's stream: ``stdout`` and ``stderr`` for the script's own
streams, ``log`` for everything else (pip's install lines, the service's or the emulator's
notes). A log without records (an execution started by ``sb.execute``) is all ``log``.

Written here rather than taken from a library: the framing is this project's own (a line
prefix no line of the script can start with), and the splitting is a few lines of state over
text the server cuts anywhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from ._errors import InvalidInputError
from ._exec_launcher import PREFIX, SCRIPT
from ._seed import SourceFile, plan_mapping

__all__ = [
    "LogSplitter",
    "Piece",
    "Stream",
    "execution_id",
    "parse_execution_id",
    "with_launcher",
]

Stream = Literal["stdout", "stderr", "log"]
Piece = tuple[Stream, str]

_KINDS: dict[str, tuple[Stream, str]] = {
    "o": ("stdout", "\n"),
    "O": ("stdout", ""),
    "e": ("stderr", "\n"),
    "E": ("stderr", ""),
}


def with_launcher(entries: Sequence[SourceFile]) -> list[SourceFile]:
    """The execution archive ``entries`` with its ``main.py`` renamed ``_klavis_main.py`` and
    the launcher sent as ``main.py``; an archive that has a ``_klavis_main.py`` already is
    refused (:class:`InvalidInputError`)."""
    if any(e.name == SCRIPT for e in entries):
        raise InvalidInputError(
            f"{SCRIPT!r} is the name exec gives the script beside its launcher: rename that file"
        )
    launcher = Path(__file__).with_name("_exec_launcher.py").read_text(encoding="utf-8")
    renamed = [dataclasses.replace(e, name=SCRIPT) if e.name == "main.py" else e for e in entries]
    return sorted([*renamed, *plan_mapping({"main.py": launcher})], key=lambda e: e.name)


class LogSplitter:
    """Reads a log in the pieces it arrives in; :meth:`feed` and :meth:`end` return its text as
    ``(stream, text)`` pieces, in order. After the launcher's last record, :attr:`exit_code`
    is the script's exit status (``-N``: killed by signal N).

    >>> split = LogSplitter()
    >>> split.feed("Collecting httpx\\n##klavis-exec o 42\\n##klavis-exec e oops\\n##klav")
    [('log', 'Collecting httpx\\n'), ('stdout', '42\\n'), ('stderr', 'oops\\n')]
    >>> split.feed("is-exec x 3\\n"), split.exit_code
    ([], 3)
    """

    def __init__(self) -> None:
        self.exit_code: int | None = None
        self._held = ""  # the start of a line that may be a record: kept until its newline
        self._mid_line = False  # inside a line that is not a record

    def feed(self, text: str) -> list[Piece]:
        """The pieces of ``text``, the log's next characters; a line that may be a record is
        held back until its end arrives."""
        data, self._held = self._held + text, ""
        out: list[Piece] = []
        pos = 0
        while pos < len(data):
            newline = data.find("\n", pos)
            if self._mid_line:
                end = len(data) if newline < 0 else newline + 1
                out.append(("log", data[pos:end]))
                self._mid_line = newline < 0
                pos = end
                continue
            if newline < 0:
                rest = data[pos:]
                if rest.startswith(PREFIX) or PREFIX.startswith(rest):
                    self._held = rest
                else:
                    out.append(("log", rest))
                    self._mid_line = True
                break
            out.append(self._line(data[pos:newline]))
            pos = newline + 1
        return _joined(out)

    def end(self) -> list[Piece]:
        """What is held back once the log has ended (a line cut short: not a record)."""
        held, self._held = self._held, ""
        return [("log", held)] if held else []

    def _line(self, line: str) -> Piece:
        if line.startswith(PREFIX) and line[len(PREFIX) + 1 : len(PREFIX) + 2] == " ":
            kind, payload = line[len(PREFIX)], line[len(PREFIX) + 2 :]
            if kind in _KINDS:
                stream, ending = _KINDS[kind]
                return stream, payload + ending
            if kind == "x":
                try:
                    self.exit_code = int(payload)
                except ValueError:
                    pass
                else:
                    return "log", ""
        return "log", line + "\n"


def _joined(pieces: list[Piece]) -> list[Piece]:
    """``pieces`` without empty ones, neighbours of one stream joined."""
    out: list[Piece] = []
    for stream, text in pieces:
        if not text:
            continue
        if out and out[-1][0] == stream:
            out[-1] = (stream, out[-1][1] + text)
        else:
            out.append((stream, text))
    return out


def execution_id(sandbox_id: str, name: str) -> str:
    """How the CLI names an execution: ``SANDBOX_ID/NAME`` (``klavis-sandbox logs ID``)."""
    return f"{sandbox_id}/{name}"


def parse_execution_id(text: str) -> tuple[str, str]:
    """``(sandbox_id, name)`` of an execution id ``SANDBOX_ID/NAME``; InvalidInputError
    otherwise."""
    sandbox_id, slash, name = text.strip().rpartition("/")
    if not slash or not sandbox_id or not name:
        raise InvalidInputError(
            f"execution id {text!r} is not SANDBOX_ID/NAME (exec prints it when it starts)"
        )
    return sandbox_id, name
