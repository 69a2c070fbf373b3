"""A hostile object store on loopback: what a signed download URL may answer in the worst case.

The library downloads dumps from whatever URL the API hands out. To test how it copes with a
hostile or broken store, point an emulator's ``public_url`` at this server
(``EmulatorServer(EmulatorConfig(public_url=storage.url))``): the signed URLs of ``GET /dump``
then lead here, and every ``GET`` gets the behaviour set last:

* :meth:`HostileStorage.body`: given bytes (a crafted archive), with a ``Content-Length``;
* :meth:`HostileStorage.stream`: a head, then a filler repeated up to a total (junk that is not
  gzip, or an "endless" gzip-looking body), with or without a (possibly lying) length;
* :meth:`HostileStorage.cut_once`: given bytes, the first answer broken off part-way;
* :meth:`HostileStorage.trickle`: a body sent one byte at a time, paced by the server's own
  timer;
* :meth:`HostileStorage.paced`: a body sent in pieces at a steady pace (a slow but working
  link);
* :meth:`HostileStorage.stall`: the headers and a head, then nothing until
  :meth:`HostileStorage.end_pauses` (or a time limit).

It is a real HTTP server (stdlib ``ThreadingHTTPServer`` on port 0, in a thread). Every loop is
bounded (a total, a byte count, or the server's stop event), a client that hangs up ends its
response, and the server stops by itself after ``max_lifetime`` seconds even if a test forgets
to. Tests synchronise on :meth:`HostileStorage.wait_idle` and
:meth:`HostileStorage.wait_requests` (a condition), never on sleeps.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

__all__ = ["GZIP_HEAD", "HostileStorage"]

#: A valid 10-byte gzip member header (deflate, no flags, no time, unknown OS): what a tar.gz
#: starts with. What follows it in the bodies below is not valid deflate data, which only a
#: reader that decompresses would notice.
GZIP_HEAD = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"

_CHUNK = 64 * 1024


@dataclass(frozen=True)
class _Behaviour:
    """How to answer one GET: ``chunks()`` yields (bytes, seconds to wait before sending)."""

    chunks: Callable[[], Iterator[tuple[bytes, float]]]
    length: int | None
    status: int = 200
    content_type: str = "application/gzip"


class HostileStorage:
    """The running server: ``url`` for ``public_url``; counters to check what was sent.

    ``requests`` counts the GETs received, ``bytes_sent`` the body bytes written to clients
    (up to the moment each client hung up).
    """

    def __init__(self, *, max_lifetime: float = 600.0) -> None:
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._wake = threading.Event()  # ends the pauses of trickles and stalls
        self._behaviour = _Behaviour(lambda: iter(()), 0)
        self._active = 0
        self.requests = 0
        self.bytes_sent = 0
        storage = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # a client that neither reads nor hangs up cannot hold a thread for ever
            timeout = 60

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: tests read the counters instead

            def do_GET(self) -> None:
                with storage._lock:
                    storage.requests += 1
                    storage._active += 1
                    behaviour = storage._behaviour
                    storage._lock.notify_all()
                try:
                    storage._answer(self, behaviour)
                finally:
                    with storage._lock:
                        storage._active -= 1
                        storage._lock.notify_all()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        host, port = self._server.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="hostile-storage", daemon=True
        )
        # stops by itself: a forgotten server never outlives the test session for long
        self._watchdog = threading.Timer(max_lifetime, self.stop)
        self._watchdog.daemon = True

    # ---------------------------------------------------------------- lifetime

    def start(self) -> HostileStorage:
        """Serve in a background thread."""
        self._thread.start()
        self._watchdog.start()
        return self

    def stop(self) -> None:
        """Stop serving; responses in progress end at their next byte (or pause)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._wake.set()
        self._watchdog.cancel()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> HostileStorage:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until no response is being written (so the counters are final)."""
        with self._lock:
            return self._lock.wait_for(lambda: self._active == 0, timeout)

    def wait_requests(self, count: int, timeout: float = 60.0) -> bool:
        """Wait until ``count`` GETs have arrived since the last :meth:`reset` (a client is
        then in the middle of its download, when the behaviour stalls)."""
        with self._lock:
            return self._lock.wait_for(lambda: self.requests >= count, timeout)

    def end_pauses(self) -> None:
        """Cut short every pause in progress (a stall, a trickle): their responses end."""
        self._wake.set()

    def reset(self) -> None:
        """Zero the counters (after ending responses in progress) and serve nothing."""
        self.end_pauses()
        self.wait_idle()
        self._wake.clear()
        with self._lock:
            self.requests = 0
            self.bytes_sent = 0
            self._behaviour = _Behaviour(lambda: iter(()), 0)

    # ---------------------------------------------------------------- behaviours

    def _set(self, behaviour: _Behaviour) -> None:
        with self._lock:
            self._behaviour = behaviour

    def body(self, data: bytes, *, status: int = 200) -> None:
        """Answer ``data`` with its ``Content-Length``."""

        def chunks() -> Iterator[tuple[bytes, float]]:
            for start in range(0, len(data), _CHUNK):
                yield data[start : start + _CHUNK], 0.0

        self._set(_Behaviour(chunks, len(data), status))

    def stream(
        self, head: bytes, filler: bytes, total: int, *, declared: int | None = None
    ) -> None:
        """Answer ``head`` then ``filler`` repeated, ``total`` bytes in all.

        ``declared`` is the ``Content-Length`` sent (None: no length, the body ends when the
        connection closes), which may lie.
        """
        if not filler:
            raise ValueError("filler must not be empty")

        def chunks() -> Iterator[tuple[bytes, float]]:
            yield head[:total], 0.0
            left = total - len(head)
            block = (filler * (_CHUNK // len(filler) + 1))[:_CHUNK]
            while left > 0:
                step = min(left, len(block))
                yield block[:step], 0.0
                left -= step

        self._set(_Behaviour(chunks, declared))

    def cut_once(self, data: bytes, at: int) -> None:
        """Answer ``data`` with its ``Content-Length``, but end the first answer after ``at``
        bytes (the connection closes: a broken download, which the client retries)."""
        answers = iter(range(1 << 30))
        lock = threading.Lock()

        def chunks() -> Iterator[tuple[bytes, float]]:
            with lock:
                first = next(answers) == 0
            body = data[:at] if first else data
            for start in range(0, len(body), _CHUNK):
                yield body[start : start + _CHUNK], 0.0

        self._set(_Behaviour(chunks, len(data)))

    def trickle(self, data: bytes, interval: float) -> None:
        """Answer ``data`` (no length) one byte every ``interval`` seconds."""

        def chunks() -> Iterator[tuple[bytes, float]]:
            for i in range(len(data)):
                yield data[i : i + 1], interval if i else 0.0

        self._set(_Behaviour(chunks, None))

    def paced(self, data: bytes, *, piece: int, interval: float) -> None:
        """Answer ``data`` (no length) ``piece`` bytes every ``interval`` seconds."""
        if piece <= 0:
            raise ValueError("piece must be positive")

        def chunks() -> Iterator[tuple[bytes, float]]:
            for start in range(0, len(data), piece):
                yield data[start : start + piece], interval if start else 0.0

        self._set(_Behaviour(chunks, None))

    def stall(self, head: bytes, seconds: float) -> None:
        """Answer the headers and ``head``, then nothing for ``seconds`` (or until stopped)."""

        def chunks() -> Iterator[tuple[bytes, float]]:
            yield head, 0.0
            yield b"", seconds

        self._set(_Behaviour(chunks, None))

    # ---------------------------------------------------------------- the answer

    def _answer(self, handler: BaseHTTPRequestHandler, behaviour: _Behaviour) -> None:
        handler.send_response(behaviour.status)
        handler.send_header("Content-Type", behaviour.content_type)
        if behaviour.length is not None:
            handler.send_header("Content-Length", str(behaviour.length))
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True
        try:
            handler.wfile.flush()
            for data, pause in behaviour.chunks():
                # the server's own pacing timer; ends the response early when woken or stopped
                if pause and self._wake.wait(pause):
                    return
                if self._wake.is_set():
                    return
                if data:
                    handler.wfile.write(data)
                    handler.wfile.flush()
                    with self._lock:
                        self.bytes_sent += len(data)
        except OSError:
            return  # the client hung up (or stopped reading): what a refusing client does
