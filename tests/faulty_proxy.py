"""A reverse proxy on loopback that breaks chosen requests on their way to the emulator.

The emulator's own fault injection is random by rate; lifecycle attacks need a *script*: "let
the acquire reach the emulator, then lose its answer; then fail the listing". The proxy is a
real HTTP server (stdlib ``ThreadingHTTPServer`` on port 0, in a thread) that forwards every
request to ``upstream`` with httpx, unless ``decide(method, path)`` says otherwise:

* ``None``: forward and answer what the emulator answered;
* ``("after", status)``: forward (the operation takes effect), then answer ``status`` instead;
* ``("before", status)``: answer ``status`` without forwarding (nothing happens).

Every request is recorded in ``seen`` as ``(method, path, outcome)``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

import httpx

Decision = tuple[Literal["before", "after"], int] | None
Decide = Callable[[str, str], Decision]

_HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})


class FaultyProxy:
    """The running proxy: ``base_url`` to point the library at, ``seen`` to check the script."""

    def __init__(self, upstream: str, decide: Decide) -> None:
        self.upstream = upstream.rstrip("/")
        self.decide = decide
        self.seen: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()
        self._client = httpx.Client(timeout=30.0)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: tests read ``seen`` instead

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                decision = proxy.decide(self.command, path)
                outcome = "forwarded" if decision is None else f"{decision[0]} {decision[1]}"
                with proxy._lock:
                    proxy.seen.append((self.command, path, outcome))
                if decision is not None and decision[0] == "before":
                    self._answer(decision[1], {"detail": "injected by the test proxy"})
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
                response = proxy._client.request(
                    self.command, proxy.upstream + self.path, headers=headers, content=body
                )
                if decision is not None:
                    self._answer(decision[1], {"detail": "answer lost (test proxy)"})
                    return
                self.send_response(response.status_code)
                for key, value in response.headers.items():
                    if key.lower() not in _HOP_HEADERS | {"content-encoding"}:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(response.content)))
                self.end_headers()
                self.wfile.write(response.content)

            def _answer(self, status: int, body: dict[str, str]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        host, port = self._server.server_address[:2]
        self.base_url = f"http://{host!s}:{port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> None:
        """Serve in a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the upstream connections."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
        self._client.close()


@contextmanager
def faulty_proxy(upstream: str, decide: Decide) -> Iterator[FaultyProxy]:
    """A started :class:`FaultyProxy` in front of ``upstream``, stopped on exit."""
    proxy = FaultyProxy(upstream, decide)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
