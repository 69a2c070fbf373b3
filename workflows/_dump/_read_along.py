"""A download's sink that a reader follows while it is written: the dump is read as it arrives.

``sb.dump()`` used to download the whole archive into a temporary file and only then read it
(inflate, check, hash, write into the snapshot). The two are independent until the last byte:
ISA-L, hashlib and file writes release the GIL, and the download waits on the socket, so on two
cores each can run while the other does. :class:`ReadAlong` is the sink the driver downloads
into, and a thread that reads what arrives (``consume``, e.g.
:func:`~workflows._dump._archive.read_snapshot`): the reading then ends shortly after the last
byte, not a whole read later.

Measured on the bench's ``large_binary`` shape (4 x 16 MiB, incompressible; this project's
2-core machine, medians of 9, load under 1): the download and the read were 0.10 s and 0.11 s
one after the other; read along, 0.15 s for both. Handing the pieces over in memory, not
through the temporary file, spares writing and reading 64 MiB again (0.05-0.065 s of CPU on
tmpfs, on a machine whose two cores the download, the reading and the emulator share).

What does not change:

* **Memory stays bounded.** Up to :data:`MEMORY_CAP` bytes the reader has not taken wait in
  memory; what arrives past it goes to an anonymous temporary file (written and read with
  ``pwrite``/``pread``, reused once the reader has caught up). The driver's thread (an event
  loop's, with the async driver) never waits for the reader.
* **Retries start from the start.** The driver empties its sink before each attempt
  (``seek(0)``, ``truncate()``): that starts a new *generation*. The reader of the old one
  stops at its next read (:class:`Superseded`, a ``BaseException`` so that no consumer's
  handler takes it for its own failure) and drops what it built; a new reader starts with the
  new bytes, once the old one has ended (consumers never overlap).
* **A failure is the consumer's own.** :meth:`ReadAlong.finish` (after the download) waits for
  the reader and returns its result or raises its exception, as the read that followed the
  download did. One difference: once the reader has failed (an unsafe member, a corrupt
  archive, a limit), the next ``write`` raises that failure, which ends the download early
  instead of fetching the rest of an archive already refused (not retried: the driver retries
  transfer failures only).

Why by hand: a queue or ``os.pipe`` bounds memory only by making the writer wait for the
reader, which must never happen on an event loop's thread, and neither starts again with a
retry; no library offers that.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections import deque
from collections.abc import Callable
from typing import IO, Any, Generic, TypeVar, cast

__all__ = ["MEMORY_CAP", "ReadAlong", "Superseded"]

T = TypeVar("T")


class Superseded(BaseException):
    """The download this reader followed was started again, or given up: stop reading."""


#: Bytes the reader has not taken yet that are kept in memory; past this, what arrives goes to
#: the temporary file until the reader catches up.
MEMORY_CAP = 8 * 1024 * 1024


class _Generation(Generic[T]):
    """One attempt's bytes, waiting for the reader in arrival order: pieces in memory, or
    ``(offset, length)`` regions of the temporary file."""

    def __init__(self) -> None:
        self.pending: deque[memoryview | tuple[int, int]] = deque()
        self.in_memory = 0
        self.in_file = 0  # regions of the file still pending: 0 lets the file be reused
        self.file_end = 0
        self.complete = False
        self.thread: threading.Thread | None = None
        self.result: T | None = None
        self.error: BaseException | None = None


class _Follower:
    """The reader's view of one generation: ``read`` waits for bytes, ``tell`` counts them."""

    def __init__(self, owner: ReadAlong[Any], generation: _Generation[Any]) -> None:
        self._owner = owner
        self._generation = generation
        self._position = 0

    def _wait(self) -> _Generation[Any] | None:
        """Under the lock: the generation once it has bytes pending, or None at its end."""
        owner, generation = self._owner, self._generation
        while True:
            if owner._current is not generation or owner._closed:
                raise Superseded
            if generation.pending:
                return generation
            if generation.complete:
                return None
            owner._changed.wait()

    def read(self, size: int = -1, /) -> bytes:
        with self._owner._changed:
            generation = self._wait()
            if generation is None:
                return b""
            part = self._take(generation, size if size is not None and size >= 0 else None)
        self._position += len(part)
        piece = part.obj if isinstance(part, memoryview) else part
        if isinstance(piece, bytes) and len(piece) == len(part):
            return piece  # a whole piece as it arrived (or as read from the file): no copy
        return bytes(part)

    def readinto(self, buffer: Any, /) -> int:
        """Fill ``buffer`` from the pieces waiting, as many as fit (one copy each, where
        ``read`` and then a copy into the caller's buffer made two): the gzip reader reads its
        compressed input so."""
        view = memoryview(buffer).cast("B")
        filled = 0
        with self._owner._changed:
            generation = self._wait()
            while generation is not None and generation.pending and filled < len(view):
                part = self._take(generation, len(view) - filled)
                view[filled : filled + len(part)] = part
                filled += len(part)
        self._position += filled
        return filled

    def _take(self, generation: _Generation[Any], size: int | None) -> memoryview | bytes:
        """Under the lock: up to ``size`` bytes (all, if None) of the head of the queue, a view
        of a piece in memory or bytes of the file (read under the lock: a new attempt empties
        the file, and a writer reuses it)."""
        head = generation.pending[0]
        if isinstance(head, memoryview):
            part = head if size is None else head[:size]
            if len(part) == len(head):
                generation.pending.popleft()
            else:
                generation.pending[0] = head[len(part) :]
            generation.in_memory -= len(part)
            return part
        offset, length = head
        take = length if size is None else min(size, length)
        data = os.pread(self._owner._fd, take, offset)
        if len(data) != take:  # pragma: no cover - the temporary file was tampered with
            raise OSError("the downloaded archive's temporary file is short")
        if take == length:
            generation.pending.popleft()
            generation.in_file -= 1
        else:
            generation.pending[0] = (offset + take, length - take)
        return data

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position


class ReadAlong(Generic[T]):
    """A binary sink for a :class:`~workflows._steps.Download` whose bytes ``consume`` reads
    on a thread while they arrive; :meth:`finish` returns what ``consume`` returned.

    Use it in a ``with`` (closing stops the reader and frees the file). ``discard(result)`` is
    called on a result that nobody will take (a reader that finished for an attempt that was
    then started again, or one left when the flow failed), e.g. ``Snapshot.close``.
    """

    def __init__(
        self,
        consume: Callable[[IO[bytes]], T],
        *,
        discard: Callable[[T], None] | None = None,
    ) -> None:
        self._consume = consume
        self._discard = discard
        self._file = tempfile.TemporaryFile(buffering=0)  # noqa: SIM115 - closed in close()
        self._fd = self._file.fileno()
        self._changed = threading.Condition()
        self._current: _Generation[T] = _Generation()
        self._threads: list[threading.Thread] = []
        self._closed = False

    # --- the sink, as the drivers use it ---

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Hand ``data`` to the reader (kept in memory up to :data:`MEMORY_CAP` not yet read,
        past it in the temporary file); raise the reader's failure once it has one."""
        generation = self._current
        if generation.error is not None and not isinstance(generation.error, Superseded):
            raise generation.error
        piece = memoryview(bytes(data) if not isinstance(data, bytes) else data)
        size = len(piece)
        with self._changed:
            if generation.in_memory + size <= MEMORY_CAP:
                generation.pending.append(piece)
                generation.in_memory += size
            else:
                if generation.in_file == 0:
                    generation.file_end = 0  # nothing of the file is pending: use it again
                offset = generation.file_end
                written = 0
                while written < size:
                    written += os.pwrite(self._fd, piece[written:], offset + written)
                generation.file_end += size
                generation.in_file += 1
                generation.pending.append((offset, size))
            if generation.thread is None:
                self._start(generation)
            self._changed.notify_all()
        return size

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        """Only ``seek(0)`` (the drivers' rewind) is meaningful; the reader keeps its own place."""
        if offset != 0 or whence != os.SEEK_SET:
            raise OSError("a download being read along can only be rewound to its start")
        return 0

    def truncate(self, size: int | None = None) -> int:
        """Empty the sink: the download starts again, and so does the reader."""
        if size not in (None, 0):
            raise OSError("a download being read along can only be emptied")
        with self._changed:
            self._current = _Generation()
            self._file.truncate(0)
            self._file.seek(0)
            self._changed.notify_all()
        return 0

    def flush(self) -> None:
        """Nothing waits in a buffer (the file is unbuffered)."""

    # --- the end ---

    def finish(self) -> T:
        """The download is complete: wait for the reader and return its result (or raise its
        failure). Runs ``consume`` here if nothing was ever written."""
        with self._changed:
            generation = self._current
            generation.complete = True
            self._changed.notify_all()
            thread = generation.thread
        if thread is None:
            return self._consume(cast("IO[bytes]", _Follower(self, generation)))
        thread.join()
        if generation.error is not None:
            raise generation.error
        result = cast("T", generation.result)
        generation.result = None  # taken: close() must not discard it
        return result

    def close(self) -> None:
        """Stop every reader, drop results nobody took, and free the file."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        for thread in self._threads:
            thread.join()
        left, self._current.result = self._current.result, None
        if left is not None and self._discard is not None:
            self._discard(left)
        self._file.close()

    def __enter__(self) -> ReadAlong[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _start(self, generation: _Generation[T]) -> None:
        follower = cast("IO[bytes]", _Follower(self, generation))
        earlier = list(self._threads)

        def read() -> None:
            for thread in earlier:  # consumers never overlap (one output folder, one memory)
                thread.join()
            try:
                result = self._consume(follower)
            except BaseException as exc:  # noqa: BLE001 - handed to finish() or write()
                generation.error = exc
                return
            with self._changed:
                wanted = self._current is generation and not self._closed
            if wanted:
                generation.result = result
            elif self._discard is not None:
                self._discard(result)

        thread = threading.Thread(target=read, name="dump-read-along", daemon=True)
        generation.thread = thread
        self._threads.append(thread)
        thread.start()
