"""The packer's gzip writer (:class:`klavis_archive._gzip_writer.GzipWriter`): every reader
reads what it writes, a block that will not shrink is stored without being compressed, one
that will is compressed, and a failing output is raised in the calling thread, never a hang.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import subprocess
import tarfile
import threading
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from isal import igzip

if TYPE_CHECKING:
    from typing_extensions import Buffer

from klavis_archive import TarPacker
from klavis_archive._gzip_writer import GzipWriter, open_gzip_writer

_BLOCK = 64 * 1024
_HEADER, _FINAL_BLOCK, _TRAILER = 10, 2, 8


def _noise(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


def _text(size: int) -> bytes:
    words = [b"sandbox", b"workspace", b"archive", b"agent", b"episode", b"\n"]
    rng = random.Random(1)
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words) + b" "
    return bytes(out[:size])


def _gzip(data: bytes, *, pieces: int = 7_001, block: int = _BLOCK, level: int = 1) -> bytes:
    out = io.BytesIO()
    writer = GzipWriter(out, compresslevel=level, block_size=block)
    for start in range(0, len(data), pieces):
        writer.write(data[start : start + pieces])
    writer.close()
    return out.getvalue()


def _every_reader(packed: bytes) -> list[bytes]:
    readers = [
        zlib.decompress(packed, 31),
        igzip.decompress(packed),  # type: ignore[no-untyped-call]
        igzip.IGzipFile(fileobj=io.BytesIO(packed)).read(),  # type: ignore[no-untyped-call]
    ]
    if shutil.which("gzip"):
        readers.append(
            subprocess.run(["gzip", "-dc"], input=packed, capture_output=True, check=True).stdout
        )
    return readers


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"x", id="one-byte"),
        pytest.param(_noise(5 * _BLOCK + 123), id="noise"),
        pytest.param(_text(5 * _BLOCK + 123), id="text"),
        pytest.param(_text(2 * _BLOCK) + _noise(2 * _BLOCK), id="compressed-then-stored"),
        # stored, compressed, stored, compressed: every switch. The second text repeats the
        # first, which a compressor that kept its history across the noise would refer back
        # to at distances that land in the noise (the full flush forgets it)
        pytest.param(
            _noise(2 * _BLOCK) + _text(2 * _BLOCK) + _noise(_BLOCK + 7) + _text(3 * _BLOCK),
            id="alternating",
        ),
    ],
)
def test_every_gzip_reader_reads_what_it_writes(data: bytes) -> None:
    packed = _gzip(data)
    assert all(read == data for read in _every_reader(packed))


def test_a_block_that_will_not_shrink_is_stored_as_it_is() -> None:
    """Noise is written as stored deflate blocks: exactly 5 bytes of framing per 65,535 bytes
    (ISA-L's own stored blocks, after compressing, come in other sizes)."""
    data = _noise(4 * _BLOCK)
    stored_blocks = -(-_BLOCK // 0xFFFF) * 4
    packed = _gzip(data)
    assert len(packed) == _HEADER + len(data) + 5 * stored_blocks + _FINAL_BLOCK + _TRAILER
    assert zlib.decompress(packed, 31) == data


def test_a_block_that_shrinks_is_compressed_even_behind_noise() -> None:
    """A block whose first quarter is noise and the rest text is judged on all four quarters:
    compressed, not stored."""
    block = _noise(_BLOCK // 4) + _text(3 * _BLOCK // 4)
    packed = _gzip(block * 4)
    assert len(packed) < len(block) * 4 * 0.6
    assert zlib.decompress(packed, 31) == block * 4


def test_the_same_data_gives_the_same_bytes_however_it_is_written() -> None:
    data = _noise(3 * _BLOCK) + _text(3 * _BLOCK)
    assert _gzip(data, pieces=1_000) == _gzip(data, pieces=len(data)) == _gzip(data, pieces=_BLOCK)


class _FullDisk(io.BytesIO):
    """An output that takes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room
        self.flushed_after_failure = False
        self.failed = False

    def write(self, data: Buffer) -> int:
        size = memoryview(data).nbytes
        if size > self.room:
            self.failed = True
            raise OSError(28, "No space left on device")
        self.room -= size
        return size

    def flush(self) -> None:
        if self.failed:
            self.flushed_after_failure = True


def test_a_failing_output_is_raised_in_the_calling_thread_and_nothing_waits() -> None:
    out = _FullDisk(room=3 * _BLOCK)
    writer = GzipWriter(out, compresslevel=1, block_size=_BLOCK)
    with pytest.raises(OSError, match="No space left"):
        for _ in range(64):  # far more than the queue holds: a hang if the thread stopped taking
            writer.write(_noise(_BLOCK))
    with pytest.raises(OSError, match="No space left"):
        writer.close()  # the packer's abort: the failure again, and the thread ends
    writer.close()  # nothing more is raised or written
    assert writer.closed
    assert not out.flushed_after_failure
    assert [t for t in threading.enumerate() if t.name == "gzip-writer"] == []
    with pytest.raises(ValueError, match="closed"):
        writer.write(b"more")


def test_a_failure_at_the_end_is_raised_by_close() -> None:
    data = _noise(2 * _BLOCK)
    out = _FullDisk(room=_HEADER + len(data) + 5 * 4)  # room for the blocks, not the trailer
    writer = GzipWriter(out, compresslevel=1, block_size=_BLOCK)
    writer.write(data)
    with pytest.raises(OSError, match="No space left"):
        writer.close()
    assert writer.closed


def test_level_0_is_refused() -> None:
    with pytest.raises(ValueError, match="levels 1-3"):
        GzipWriter(io.BytesIO(), compresslevel=0, block_size=_BLOCK)


def test_the_packer_writes_archives_tar_reads_in_stream_mode(tmp_path: Path) -> None:
    """Through :class:`TarPacker` with one thread (what the emulator's dumps and the library's
    seeds use): tarfile's stream mode reads it member by member, and GNU tar lists it."""
    members = {"noise.bin": _noise(3 * 256 * 1024 + 5), "notes.txt": _text(300_000), "e": b""}
    archive = tmp_path / "a.tar.gz"
    with open(archive, "wb") as out:
        packer = TarPacker(out, compresslevel=1, threads=1)
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            packer.add(info, io.BytesIO(data))
        packer.finish()
    with tarfile.open(archive, "r|gz") as tar:
        read = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]
    assert read == members
    if shutil.which("tar"):
        listed = subprocess.run(["tar", "tzf", os.fspath(archive)], capture_output=True, check=True)
        assert sorted(listed.stdout.decode().split()) == sorted(members)


def test_a_buffer_changed_after_it_was_written_changes_nothing_written() -> None:
    """Only ``bytes`` (which cannot change) are cut into views; a bytearray or a view of one is
    copied, since its owner may reuse it at once (as ``BufferedWriter`` does its buffer)."""
    data = _noise(3 * _BLOCK) + _text(3 * _BLOCK)
    buffer = bytearray(data)
    out = io.BytesIO()
    writer = GzipWriter(out, compresslevel=1, block_size=_BLOCK)
    writer.write(buffer)
    writer.write(memoryview(buffer)[: _BLOCK + 5])
    buffer[:] = bytes(len(buffer))  # reused before the thread took the blocks
    writer.close()
    assert zlib.decompress(out.getvalue(), 31) == data + data[: _BLOCK + 5]


def test_small_writes_and_big_bytes_stay_in_order_through_the_packers_front() -> None:
    """:func:`open_gzip_writer` gathers small writes and sends big ``bytes`` straight on: what
    comes out is what went in, in order, and the same bytes as the writer alone."""
    pieces = [b"header" * 50, _noise(3 * _BLOCK + 11), b"pad" * 3, _text(2 * _BLOCK), b"x"]
    out = io.BytesIO()
    front = open_gzip_writer(out, compresslevel=1, block_size=_BLOCK)
    for piece in pieces:
        front.write(piece)
    front.close()
    assert zlib.decompress(out.getvalue(), 31) == b"".join(pieces)
    assert out.getvalue() == _gzip(b"".join(pieces), pieces=len(b"".join(pieces)))
