"""An execution's log (``<folder>/output.log``): read by byte cursor, and the emulator's lines.

The log holds stdout and stderr of every step of a run, merged, as raw bytes; lines the
emulator itself writes start with ``[emulator]``. The last line of a run whose main.py ended
is :func:`exit_line`'s, a stable format the library parses (``workflows._execution``): change
both together, and their live test (tests/workflows/live/test_execution.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Final

__all__ = [
    "LOG_CHUNK_BYTES",
    "append_note",
    "complete_utf8_prefix",
    "ends_line",
    "exit_line",
    "note",
    "read_log",
]

LOG_CHUNK_BYTES: Final = 1024 * 1024


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


def note(log: BinaryIO, message: str, *, new_line: bool = False) -> None:
    """Append one ``[emulator]`` line to a log (after a line break when ``new_line``)."""
    log.write(f"{chr(10) if new_line else ''}[emulator] {message}\n".encode())


def ends_line(path: Path) -> bool:
    """Whether the log at ``path`` is empty or ends with a line break (so a note written now
    starts a line of its own)."""
    try:
        with path.open("rb") as log:
            size = os.fstat(log.fileno()).st_size
            if size == 0:
                return True
            log.seek(size - 1)
            return log.read(1) == b"\n"
    except FileNotFoundError:
        return True


def exit_line(code: int) -> str:
    """How main.py ended, as the log's last line says it (after ``[emulator] ``): ``main.py
    exited with status 3.``, or, for a negative ``code`` (a signal, as :mod:`subprocess` gives
    it), ``main.py was killed by signal 9.``

    >>> exit_line(0), exit_line(-9)
    ('main.py exited with status 0.', 'main.py was killed by signal 9.')
    """
    if code < 0:
        return f"main.py was killed by signal {-code}."
    return f"main.py exited with status {code}."


def append_note(path: Path, message: str) -> None:
    """Append one ``[emulator]`` line to the log file at ``path`` (created if missing)."""
    with path.open("ab", buffering=0) as log:
        note(log, message)
