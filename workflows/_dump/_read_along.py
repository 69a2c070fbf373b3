"""A download's sink that a reader follows while it is written: the dump is read as it arrives.

``sb.dump()`` and ``dump_to(folder)`` used to download the whole archive into a temporary file
and only then read it (inflate, check, hash, write). The two are independent until the last
byte: ISA-L, hashlib and file writes release the GIL, and the download waits on the socket, so
on two cores each can run while the other does. :class:`ReadAlong` is the temporary file the
driver downloads into, and a thread that reads it as it grows: the reading (``consume``, e.g.
:func:`~workflows._dump._archive.read_snapshot`) then ends shortly after the last byte
arrives, not a whole read later. Measured on the bench's ``large_binary`` shape (4 x 16 MiB,
incompressible), this project's 2-core machine: the download 0.06-0.10 s and the read
0.09-0.11 s, one after the other before.

What does not change:

* **Memory stays flat.** The bytes go to the temporary file as before (unbuffered, so the
  reader sees every written byte); the reader follows it with ``pread`` at its own offset.
  The driver's thread (an event loop's, with the async driver) never waits for the reader.
* **Retries start from the start.** The driver empties its sink before each attempt
  (``seek(0)``, ``truncate()``): that starts a new *generation*. The reader of the old one
  stops at its next read (:class:`Superseded`, a ``BaseException`` so that no consumer's
  handler takes it for its own failure) and drops what it built; a new reader starts with the
  new bytes.
* **A failure is the consumer's own.** :meth:`ReadAlong.finish` (after the download) waits for
  the reader and returns its result or raises its exception, as the read that followed the
  download did. One difference: once the reader has failed (an unsafe member, a corrupt
  archive, a limit), the next ``write`` raises that failure, which ends the download early
  instead of fetching the rest of an archive already refused (not retried: the driver retries
  transfer failures only).

Why by hand: ``os.pipe`` or a queue would bound memory only by making the writer wait for the
reader, which must never happen on an event loop's thread, and would lose the restart; no
library offers a file read while it is written with restarts.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable
from typing import IO, Any, Generic, TypeVar, cast

__all__ = ["ReadAlong", "Superseded"]

T = TypeVar("T")


class Superseded(BaseException):
    """The download this reader followed was started again, or given up: stop reading."""


class _Generation(Generic[T]):
    """One attempt's bytes and the reader that follows them."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.written = 0
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

    def read(self, size: int = -1, /) -> bytes:
        owner, generation = self._owner, self._generation
        with owner._changed:
            while True:
                if owner._current is not generation or owner._closed:
                    raise Superseded
                available = generation.written - self._position
                if available > 0:
                    break
                if generation.complete:
                    return b""
                owner._changed.wait()
        want = available if size is None or size < 0 else min(size, available)
        data = os.pread(owner._fd, want, self._position)
        self._position += len(data)
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
        folder: str | None = None,
    ) -> None:
        self._consume = consume
        self._discard = discard
        self._file = tempfile.TemporaryFile(buffering=0, dir=folder)  # noqa: SIM115 - closed in close()
        self._fd = self._file.fileno()
        self._changed = threading.Condition()
        self._current: _Generation[T] = _Generation(0)
        self._threads: list[threading.Thread] = []
        self._closed = False

    # --- the sink, as the drivers use it ---

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Append ``data`` for the reader; raise the reader's failure once it has one."""
        generation = self._current
        if generation.error is not None and not isinstance(generation.error, Superseded):
            raise generation.error
        view = memoryview(data)
        while view:
            written = self._file.write(view)
            view = view[written or 0 :]
        with self._changed:
            generation.written += len(data)
            if generation.thread is None:
                self._start(generation)
            self._changed.notify_all()
        return len(data)

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
            self._current = _Generation(self._current.number + 1)
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
