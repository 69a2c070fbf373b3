"""Streams the tar reader reads from: the decompressed archive, forwards only.

A ``TarFile`` opened in mode ``"r"`` asks its file for whole reads, ``tell`` and seeks; forward
seeks are all it needs once members are read in order, so both readers here seek forwards by
reading on. (tarfile's stream mode ``"r|"`` copies its buffer for every header it takes and
wraps each member's contents in two more objects: reading 5,000 small files took 0.18 s
through it.) :class:`ForwardReader` reads in line, :class:`DecompressAhead` decompresses one
block ahead on a thread of its own. :class:`CountingStream` counts the compressed bytes read
(which the expansion-ratio caps are judged on) or written (by the packer).
"""

from __future__ import annotations

import contextlib
import io
import queue
import tarfile
import threading
from collections.abc import Callable
from typing import IO, Any, Final

from isal import igzip

from ._limits import CHUNK_SIZE

# isal's Python modules are untyped
igzip_file: Callable[..., Any] = igzip.IGzipFile
"""ISA-L's ``IGzipFile`` (reading and writing gzip)."""

# Reads of the decompressed archive under this size come from a block read ahead (see
# ForwardReader): the decompressor's own buffer reads 512 KiB of compressed data at a time,
# so the lead of the compressed count the expansion ratio is judged on barely moves.
_FORWARD_BLOCK: Final = 64 * 1024
_AHEAD_BLOCKS: Final = 2  # decompressed blocks of CHUNK_SIZE waiting for the tar reader


class CountingStream(io.RawIOBase):
    """The file ``raw`` as a raw stream that counts the bytes read from it or written to it
    (:attr:`count`): the compressed side of an archive. It never closes ``raw``, and once
    closed it no longer flushes it (``raw`` may be closed already: on Python 3.13 the flush
    that ``close`` makes, also when it is garbage collected, raised ValueError there)."""

    def __init__(self, raw: IO[bytes], *, writing: bool = False) -> None:
        super().__init__()
        self._raw = raw
        self._writing = writing
        self.count = 0

    def readable(self) -> bool:
        return not self._writing

    def writable(self) -> bool:
        return self._writing

    def readinto(self, buffer: Any) -> int:
        into = getattr(self._raw, "readinto", None)
        if into is not None:  # straight into the reader's buffer: one copy, not two
            n = into(buffer) or 0
        else:
            view = memoryview(buffer)
            data = self._raw.read(len(view))
            n = len(data)
            view[:n] = data
        self.count += n
        return n

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self._raw.write(data)
        self.count += n
        return n

    def flush(self) -> None:
        if self._writing and not self.closed:
            self._raw.flush()

    def close(self) -> None:
        """Mark this stream closed (``raw`` stays open; nothing is flushed)."""
        if not self.closed:
            self._writing = False  # IOBase.close calls flush: nothing more goes to raw
            super().close()


class ForwardReader(io.RawIOBase):
    """The decompressed archive ``raw``, read in line. Reads under :data:`_FORWARD_BLOCK` are
    served from a block read ahead (a header, a small file's contents and the padding after
    them cost one slice each, not a trip through the decompressor's Python layers); bigger ones
    go straight through."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__()
        self._raw = raw
        self._block = memoryview(b"")
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True  # forwards only

    def tell(self) -> int:
        return self._position

    def read(self, size: int | None = -1) -> bytes:
        """``size`` bytes, fewer only at the end. Reading it all at once (no size, or a
        negative one) is refused: nothing here needs it, and the archive can hold gigabytes."""
        if size is None or size < 0:
            raise tarfile.ReadError(f"a read of {size} bytes: the archive is read in pieces")
        block = self._block
        if size <= len(block):  # the common case
            self._block = block[size:]
            self._position += size
            return bytes(block[:size])
        data = bytes(block)
        self._block = memoryview(b"")
        if size - len(data) >= _FORWARD_BLOCK:
            data += self._raw.read(size - len(data))
        else:
            wanted = size - len(data)
            fresh = memoryview(self._raw.read(_FORWARD_BLOCK))
            data += fresh[:wanted]
            self._block = fresh[wanted:]
        self._position += len(data)
        return data

    def peek(self, size: int) -> bytes:
        """The next ``size`` bytes if they are already decompressed, else fewer (none read:
        the next read still returns them)."""
        return bytes(self._block[:size])

    def skip(self, size: int) -> int:
        """Pass over the next ``size`` bytes (fewer only at the end); return how many."""
        block = self._block
        if size <= len(block):
            self._block = block[size:]
            self._position += size
            return size
        return len(self.read(size))

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Skip forwards to ``offset`` (or to the end, if the archive ends before it)."""
        if whence != io.SEEK_SET or offset < self._position:
            raise io.UnsupportedOperation("the archive is read forwards only")
        while self._position < offset and self.read(min(offset - self._position, CHUNK_SIZE)):
            pass
        return self._position


class DecompressAhead(io.RawIOBase):
    """The decompressed stream of ``gz``, decompressed one block ahead on a thread of its own.

    ISA-L releases the GIL while it inflates, so the next block is decompressed while this
    thread parses tar headers and writes files: an initialize then takes about the longer of
    the two, not their sum (measured on the 100 MiB benchmark workspace in RAM: 0.32-0.37 s ->
    0.23-0.29 s, against 0.17 s to decompress alone). Why by hand: ``isal.igzip_threaded``
    reads the same way, but reads the compressed file 8 blocks ahead and cannot say which
    compressed position a decompressed byte came from, which the expansion-ratio cap needs;
    here each block carries the compressed file's position *before* it was decompressed
    (:attr:`compressed_position`), never more than what producing the bytes read so far took,
    so the cap is at least as strict as with ``raw.tell()`` read in line. (A real deflate
    stream expands at most ~1032:1, so a block's lag cannot push a genuine archive over the
    2000:1 cap once the grace is passed: the ratio measured is at most 8/7 of the real one.)

    At most :data:`_AHEAD_BLOCKS` blocks of :data:`CHUNK_SIZE` wait in memory. Whatever the
    worker meets (the decompressor's error, or any other) is handed to the reader where the
    block would have been, with its own type, and raised again on every later read; a worker
    that dies without a word still ends the reader's wait (it checks the worker is alive).

    It is read as a TarFile opened in mode "r" reads its file: whole reads (never everything
    at once), ``tell`` and seeks forwards (by reading on); tarfile's stream mode ("r|") copied
    its buffer for every header it took, 0.03 s on 5,000 files.
    """

    def __init__(self, gz: IO[bytes], raw: IO[bytes]) -> None:
        super().__init__()
        self._blocks: queue.Queue[tuple[bytes, int, BaseException | None]] = queue.Queue(
            _AHEAD_BLOCKS
        )
        self._stop = threading.Event()
        self._block = memoryview(b"")
        self._at_end = False
        self._error: BaseException | None = None
        self._position = 0
        self.compressed_position = 0
        self._worker = threading.Thread(
            target=self._decompress, args=(gz, raw), name="archive-decompress", daemon=True
        )
        self._worker.start()

    def _decompress(self, gz: IO[bytes], raw: IO[bytes]) -> None:
        while not self._stop.is_set():
            try:
                before = raw.tell()
                item: tuple[bytes, int, BaseException | None] = (gz.read(CHUNK_SIZE), before, None)
            except BaseException as exc:  # noqa: BLE001 - handed to the reader, raised there
                item = (b"", 0, exc)
            while not self._stop.is_set():
                try:
                    self._blocks.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if not item[0]:
                return

    def _next_block(self) -> tuple[bytes, int, BaseException | None]:
        while True:
            try:
                return self._blocks.get(timeout=0.5)
            except queue.Empty:
                if not self._worker.is_alive() and self._blocks.empty():
                    return b"", 0, RuntimeError("the archive's decompressing thread ended")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True  # forwards only: what a TarFile opened in mode "r" asks of its file

    def tell(self) -> int:
        """The position in the decompressed stream."""
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Skip forwards to ``offset`` (or to the end, if the stream ends before it)."""
        if whence != io.SEEK_SET or offset < self._position:
            raise io.UnsupportedOperation("the decompressed archive only seeks forwards")
        while self._position < offset and self._take(offset - self._position):
            pass
        return self._position

    def peek(self, size: int) -> bytes:
        """The next ``size`` bytes if the current block holds them, else fewer (none read:
        the next read still returns them)."""
        return bytes(self._block[:size]) if self._error is None else b""

    def skip(self, size: int) -> int:
        """Pass over the next ``size`` bytes (fewer only at the end); return how many."""
        block = self._block
        if size <= len(block) and self._error is None:
            self._block = block[size:]
            self._position += size
            return size
        skipped = 0
        while skipped < size and (piece := self._take(size - skipped)):
            skipped += len(piece)
        return skipped

    def read(self, size: int | None = -1) -> bytes:
        """``size`` bytes, fewer only at the end of the stream. Reading it all at once (no
        size, or a negative one) is refused: nothing here needs it, and the stream can hold
        gigabytes."""
        if size is None or size < 0:
            raise tarfile.ReadError(f"a read of {size} bytes: the archive is read in pieces")
        block = self._block
        if len(block) >= size and self._error is None:  # the common case, in one block
            self._block = block[size:]
            self._position += size
            return bytes(block[:size])
        pieces: list[memoryview] = []
        left = size
        while left and (piece := self._take(left)):
            pieces.append(piece)
            left -= len(piece)
        return b"".join(pieces)

    def _take(self, size: int) -> memoryview:
        """At most ``size`` bytes from the current block (the next one if it is used up)."""
        if self._error is not None:
            raise self._error
        if self._at_end:
            return memoryview(b"")
        if not self._block:
            data, position, error = self._next_block()
            if error is not None:
                self._error = error
                raise error
            if not data:
                self._at_end = True
                return memoryview(b"")
            self._block = memoryview(data)
            self.compressed_position = position
        taken = self._block[:size]
        self._block = self._block[size:]
        self._position += len(taken)
        return taken

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(queue.Empty):
            while True:  # free a worker blocked on a full queue
                self._blocks.get_nowait()
        self._worker.join()
        super().close()
