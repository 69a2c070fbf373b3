"""Helpers shared by several test modules (imported by them, never by conftest)."""

from __future__ import annotations

import socket


class SilentService:
    """A loopback listener standing in for the service: it accepts nothing, and counts."""

    def __init__(self) -> None:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._listener.setblocking(False)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._connected = 0

    def connections(self) -> int:
        """How many clients connected so far (each connection is closed at once)."""
        while True:
            try:
                conn, _ = self._listener.accept()
            except BlockingIOError:
                return self._connected
            conn.close()
            self._connected += 1

    def close(self) -> None:
        """Stop listening."""
        self._listener.close()

    def __enter__(self) -> SilentService:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
