"""gzip compressed on one background thread, where a block that will not shrink is stored
without compressing it first.

Why by hand: ``isal.igzip_threaded`` compresses every block, and ISA-L stores a block that
did not shrink only after compressing it. On data that does not compress (a repository's
packs, images, archives, model weights: the bench's ``large_binary`` shape) that attempt is
most of a dump's time: 64 MiB of random bytes, read from tmpfs and packed at level 1 by
``make_archive``, took 0.084 s, where reading them and writing them out took 0.044 s (this
project's 2-core machine). Here :data:`SAMPLE` bytes of each block are compressed first (a
thirty-second of the work); a block whose sample does not shrink below
:data:`STORE_RATIO` of its size is written as stored deflate blocks, the others are
compressed. No library offers that choice per block.

The output is one gzip member holding one deflate stream, as ``igzip_threaded`` writes it, so
every gzip reader reads it (zlib, ISA-L, tarfile's stream mode, GNU tar). One compressor keeps
its history across compressed blocks; before a stored run it is flushed with
``Z_FULL_FLUSH``, which ends its output on a byte boundary and forgets its history, so that
nothing it writes later refers back across the stored bytes. A stored block is the three-bit
header ``000`` padded to a byte, ``LEN`` and its complement (RFC 1951, 3.2.4), then the bytes.

Errors are the writer's as with ``igzip_threaded``: what the thread meets (the output's
``write`` failing, a full disk) is raised by the next :meth:`GzipWriter.write`, by
:meth:`~GzipWriter.flush` and by :meth:`~GzipWriter.close`; the thread then drops what it is
given, so the calling thread never waits on it forever.
"""

from __future__ import annotations

import io
import queue
import struct
import threading
from typing import IO, TYPE_CHECKING, Any, Final, cast

from isal import isal_zlib

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

__all__ = ["SAMPLE", "STORE_RATIO", "GzipWriter", "open_gzip_writer"]

SAMPLE: Final = 8 * 1024
"""Bytes of each block compressed to judge it (a quarter from each quarter of the block)."""

STORE_RATIO: Final = 0.97
"""A block is stored when its sample compresses to at least this share of its size."""

_STORED_MAX: Final = 0xFFFF  # bytes of one stored deflate block
_HEADER: Final = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # no name, no time, OS unknown
_STOP: Final = None
_WAITING: Final = 2  # blocks handed over, not yet taken (1 and 4 packed as fast)


def _stored_blocks(data: memoryview) -> list[bytes | memoryview]:
    """``data`` as non-final stored deflate blocks, starting on a byte boundary."""
    pieces: list[bytes | memoryview] = []
    for start in range(0, len(data), _STORED_MAX):
        piece = data[start : start + _STORED_MAX]
        pieces.append(struct.pack("<BHH", 0, len(piece), len(piece) ^ 0xFFFF))
        pieces.append(piece)
    return pieces


def _will_not_shrink(block: bytes | memoryview, judge: Any) -> bool:
    """Whether :data:`SAMPLE` bytes of ``block``, taken from four places (so that one kind of
    file at its start does not decide for the whole block), stay above :data:`STORE_RATIO`
    of their size once compressed by ``judge`` (a compressor kept for this, forgetting its
    history after each sample: one made for each sample cost the packing thread an
    allocation, and the thread reading the files 5 % of a dump of 5,000 small files)."""
    piece = SAMPLE // 4
    step = max(len(block) // 4, piece)
    sample = b"".join(block[start : start + piece] for start in range(0, len(block), step)[:4])
    size = len(judge.compress(sample)) + len(judge.flush(isal_zlib.Z_FULL_FLUSH))
    return size >= len(sample) * STORE_RATIO


class GzipWriter(io.RawIOBase):
    """A writable gzip stream over ``out`` (written to and flushed, never closed), in blocks of
    ``block_size`` handed to one thread that compresses them at ISA-L ``compresslevel`` (1-3)
    or stores them (see the module). At most :data:`_WAITING` blocks wait for the thread."""

    def __init__(self, out: IO[bytes], *, compresslevel: int, block_size: int) -> None:
        super().__init__()
        if not 1 <= compresslevel <= 3:  # ISA-L's level 0 never stores: no sample can judge it
            raise ValueError(f"GzipWriter compresses at ISA-L levels 1-3, not {compresslevel}")
        self._out = out
        self._level = compresslevel
        self._block_size = block_size
        self._pending = bytearray()
        self._blocks: queue.Queue[bytes | memoryview | None] = queue.Queue(_WAITING)
        self._error: BaseException | None = None
        self._judge: Any = isal_zlib.compressobj(compresslevel, isal_zlib.DEFLATED, -15)
        self._compressor: Any = None  # for the blocks that shrink, made at the first one
        self._compressing = False  # it has taken bytes since its last full flush
        self._crc = 0
        self._size = 0
        self._finished = False
        self._out.write(_HEADER)
        self._thread = threading.Thread(target=self._work, name="gzip-writer", daemon=True)
        self._thread.start()

    # --- the calling thread ---

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        """Take ``data``; each full block goes to the thread (raise its failure, if any).
        Blocks cut from a ``bytes`` object go as views of it (it cannot change); from anything
        else, as copies."""
        if self._finished:
            raise ValueError("write to a closed gzip stream")
        self._raise_failure()
        owned = type(data) is bytes
        view = memoryview(data).cast("B")
        taken = len(view)
        pending, size = self._pending, self._block_size
        if pending:
            fill = min(size - len(pending), len(view))
            pending += view[:fill]
            view = view[fill:]
            if len(pending) < size:
                return taken
            self._hand_over(bytes(pending))
            pending.clear()
        while len(view) >= size:
            self._hand_over(view[:size] if owned else bytes(view[:size]))
            view = view[size:]
        pending += view
        return taken

    def flush(self) -> None:
        """Raise the thread's failure, if any (a block waits until it is full: nothing is
        flushed before :meth:`close`)."""
        if not self._finished:
            self._raise_failure()

    def close(self) -> None:
        """Compress what is left, end the stream and flush ``out``; raise the thread's failure.
        Once closed (also after a failure), nothing more is written to ``out``."""
        if self.closed:
            return
        try:
            if self._error is None:
                if self._pending:
                    self._hand_over(bytes(self._pending))
                    self._pending.clear()
                self._hand_over(_STOP)
                self._thread.join()
            self._raise_failure()
            self._out.flush()
        finally:
            self._finished = True
            self._stop_thread()
            super().close()

    def _hand_over(self, block: bytes | memoryview | None) -> None:
        while self._thread.is_alive():
            try:
                self._blocks.put(block, timeout=0.1)
                return
            except queue.Full:
                continue
        self._raise_failure()
        raise RuntimeError("the gzip writer's thread ended")

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error

    def _stop_thread(self) -> None:
        """Let the thread end (it drops what it is given once ``_finished`` is set)."""
        while self._thread.is_alive():
            try:
                self._blocks.put(_STOP, timeout=0.1)
            except queue.Full:
                continue
            self._thread.join(0.1)

    # --- the thread ---

    def _work(self) -> None:
        while True:
            block = self._blocks.get()
            if self._error is not None or self._finished:
                if block is _STOP:
                    return
                continue
            try:
                if block is _STOP:
                    self._end()
                    return
                self._add(block)
            except BaseException as exc:  # noqa: BLE001 - raised in the calling thread
                self._error = exc
                if block is _STOP:
                    return

    def _add(self, block: bytes | memoryview) -> None:
        self._crc = isal_zlib.crc32(block, self._crc)
        self._size += len(block)
        if _will_not_shrink(block, self._judge):
            if self._compressing:
                self._out.write(self._compressor.flush(isal_zlib.Z_FULL_FLUSH))
                self._compressing = False
            for piece in _stored_blocks(memoryview(block)):
                self._out.write(piece)
            return
        if self._compressor is None:
            self._compressor = isal_zlib.compressobj(self._level, isal_zlib.DEFLATED, -15)
        self._compressing = True
        self._out.write(self._compressor.compress(block))

    def _end(self) -> None:
        compressor = self._compressor
        if compressor is None:
            compressor = isal_zlib.compressobj(self._level, isal_zlib.DEFLATED, -15)
        self._out.write(compressor.flush(isal_zlib.Z_FINISH))  # the final block
        self._out.write(struct.pack("<II", self._crc, self._size & 0xFFFFFFFF))


class _Gathering(io.BufferedWriter):
    """The writer's front: small writes (a small member's header, contents and padding) gather
    in C, as ``igzip_threaded``'s do (one Python call each cost 8 % of a dump of 5,000 small
    files); a ``bytes`` object of a block or more goes straight to the writer, after what was
    gathered, so that its blocks are views of it. (``BufferedWriter`` would hand it over as a
    view of memory it does not own, which the writer must copy: 64 MiB of file contents
    packed 0.063 -> 0.056 s without that copy.)"""

    def __init__(self, writer: GzipWriter, block_size: int) -> None:
        super().__init__(writer, buffer_size=block_size)
        self._writer = writer
        self._block_size = block_size

    def write(self, buffer: ReadableBuffer, /) -> int:
        if type(buffer) is bytes and len(buffer) >= self._block_size:
            super().flush()
            return self._writer.write(buffer)
        return super().write(buffer)


def open_gzip_writer(out: IO[bytes], *, compresslevel: int, block_size: int) -> IO[bytes]:
    """A :class:`GzipWriter` over ``out`` behind the buffer that gathers small writes: what the
    packer writes to. Close it to end the stream."""
    return cast(
        "IO[bytes]",
        _Gathering(GzipWriter(out, compresslevel=compresslevel, block_size=block_size), block_size),
    )
