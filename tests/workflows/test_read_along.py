"""The dump's read-along sink (``workflows._dump._read_along``): a reader follows a download as
it is written, starts again with it, and never outlives it.

The drivers' side is played by hand here (rewind and empty, write, finish), as
``workflows._drivers`` does it for every attempt; the end-to-end cases (a download broken off
and retried, one refused at its first bad block) are in
``tests/workflows/live/test_attacks_archives.py``.
"""

from __future__ import annotations

import io
import os
import threading
from typing import IO, Any

import pytest

from tests.crafted import file, tar_gz
from workflows import Snapshot, UnsafeArchiveError
from workflows._dump._archive import read_snapshot
from workflows._dump._read_along import MEMORY_CAP, ReadAlong


def _readers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "dump-read-along"]


class _Recorder:
    """A consumer that reads everything, telling the test when it has had its first bytes."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.discarded: list[bytes] = []

    def consume(self, stream: IO[bytes]) -> bytes:
        out = io.BytesIO()
        while chunk := stream.read(3):
            out.write(chunk)
            self.started.set()
        return out.getvalue()

    def discard(self, value: bytes) -> None:
        self.discarded.append(value)


def _attempt(sink: ReadAlong[Any], *pieces: bytes) -> None:
    """What a driver does for one attempt: rewind and empty the sink, then write."""
    sink.seek(0)
    sink.truncate()
    for piece in pieces:
        sink.write(piece)


def test_a_restarted_download_is_read_again_from_its_start() -> None:
    recorder = _Recorder()
    with ReadAlong(recorder.consume, discard=recorder.discard) as sink:
        _attempt(sink, b"first attempt, broken off")
        assert recorder.started.wait(30)  # the reader has had some of it
        _attempt(sink, b"second ", b"attempt, whole")
        assert sink.finish() == b"second attempt, whole"
    assert recorder.discarded == []  # the first reader stopped, and built nothing
    assert _readers() == []


def test_a_snapshot_is_read_while_the_archive_arrives() -> None:
    archive = tar_gz([file("a.txt", "A" * 100_000), file("sub/b.txt", "B")])
    with ReadAlong(read_snapshot, discard=Snapshot.close) as sink:
        _attempt(sink, *(archive[i : i + 7_000] for i in range(0, len(archive), 7_000)))
        with sink.finish() as snapshot:
            assert dict(snapshot) == {"a.txt": b"A" * 100_000, "sub/b.txt": b"B"}


def test_the_readers_failure_is_raised_by_finish() -> None:
    with ReadAlong(read_snapshot, discard=Snapshot.close) as sink:
        _attempt(sink, b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + b"\xa5junk" * 100)
        with pytest.raises(UnsafeArchiveError, match=r"not a valid tar\.gz"):
            sink.finish()
    assert _readers() == []


def test_nothing_written_is_read_as_an_empty_download() -> None:
    with ReadAlong(read_snapshot, discard=Snapshot.close) as sink:
        _attempt(sink)
        with pytest.raises(UnsafeArchiveError, match="empty"):
            sink.finish()


def test_closing_stops_a_reader_that_waits_for_more() -> None:
    recorder = _Recorder()
    sink: ReadAlong[bytes] = ReadAlong(recorder.consume, discard=recorder.discard)
    _attempt(sink, b"part of a download that never ends")
    assert recorder.started.wait(30)
    sink.close()  # the flow failed or was cancelled: the reader must not wait for ever
    assert _readers() == []
    assert recorder.discarded == []


def test_a_result_nobody_took_is_discarded_on_close() -> None:
    recorder = _Recorder()
    finished = threading.Event()

    def consume(stream: IO[bytes]) -> bytes:
        value = stream.read(5)  # reads what it needs, not to the end
        finished.set()
        return value

    sink: ReadAlong[bytes] = ReadAlong(consume, discard=recorder.discard)
    _attempt(sink, b"hello, and more")
    assert finished.wait(30)
    sink.close()  # the download then failed: finish() was never called
    assert recorder.discarded == [b"hello"]


def test_only_a_rewind_and_an_emptying_are_accepted() -> None:
    with ReadAlong(lambda stream: stream.read()) as sink:
        with pytest.raises(OSError, match="rewound"):
            sink.seek(5)
        with pytest.raises(OSError, match="emptied"):
            sink.truncate(5)


def test_what_the_reader_has_not_taken_past_the_memory_cap_waits_in_the_file() -> None:
    go = threading.Event()

    def consume(stream: IO[bytes]) -> bytes:
        assert go.wait(30)  # a slow reader: everything arrives before it reads
        out = io.BytesIO()
        while chunk := stream.read(100_000):
            out.write(chunk)
        return out.getvalue()

    pieces = [bytes([n]) * 1_000_003 for n in range(3 * MEMORY_CAP // 1_000_003)]
    with ReadAlong(consume) as sink:
        _attempt(sink, *pieces)
        assert os.fstat(sink._fd).st_size >= MEMORY_CAP  # spilled, not held in memory
        go.set()
        assert sink.finish() == b"".join(pieces)


def test_a_reader_filling_its_buffer_takes_every_byte_in_order_from_memory_and_the_file() -> None:
    """``readinto`` (how the gzip reader takes its input) fills the buffer from as many pieces
    as fit, whether they wait in memory or in the file past the cap."""
    go = threading.Event()
    fills: list[int] = []

    def consume(stream: IO[bytes]) -> bytes:
        assert go.wait(30)
        out, buffer = bytearray(), bytearray(300_007)
        while filled := stream.readinto(buffer):  # type: ignore[attr-defined]
            fills.append(filled)
            out += buffer[:filled]
        return bytes(out)

    small = [bytes([n]) * 1_000 for n in range(5)]  # several of them fill one buffer
    pieces = small + [bytes([n]) * 1_000_003 for n in range(3 * MEMORY_CAP // 1_000_003)]
    with ReadAlong(consume) as sink:
        _attempt(sink, *pieces)
        assert os.fstat(sink._fd).st_size >= MEMORY_CAP
        go.set()
        assert sink.finish() == b"".join(pieces)
    assert fills[0] == 300_007  # the five small pieces and the start of the next


def test_a_whole_piece_is_read_as_it_arrived_and_a_part_of_one_as_a_copy() -> None:
    pieces = [b"a" * 10, b"b" * 10]

    def consume(stream: IO[bytes]) -> list[bytes]:
        return [stream.read(100), stream.read(4), stream.read(100), stream.read(100)]

    with ReadAlong(consume) as sink:
        _attempt(sink, *pieces)
        first, part, rest, end = sink.finish()
    assert first is pieces[0]  # not copied
    assert (part, rest, end) == (b"bbbb", b"bbbbbb", b"")
