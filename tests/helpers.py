"""Helpers shared by several test modules (imported by them, never by conftest)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest


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


def isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No key or URL in the environment, a private ledger, an empty working folder (returned,
    and made the current one, so that no stray ``.env`` supplies a key)."""
    monkeypatch.delenv("KLAVIS_API_KEY", raising=False)
    monkeypatch.delenv("KLAVIS_BASE_URL", raising=False)
    monkeypatch.setenv("KLAVIS_SANDBOX_STATE_DIR", str(tmp_path / "state"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def run_cli(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, module: str = "workflows"
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m <module> argv...`` in a fresh process (the environment is this one's,
    without a key or URL, plus ``env``); its status, stdout and stderr."""
    full = {k: v for k, v in os.environ.items() if k not in ("KLAVIS_API_KEY", "KLAVIS_BASE_URL")}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", module, *argv],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
        check=False,
    )
