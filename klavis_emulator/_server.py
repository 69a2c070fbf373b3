"""Serving the emulator: binding sockets and running uvicorn in a thread or in the foreground."""

from __future__ import annotations

import dataclasses
import shutil
import socket
import tempfile
import threading
from pathlib import Path
from typing import TypeVar

import uvicorn
from fastapi import FastAPI

from ._app import create_app
from ._config import EmulatorConfig
from ._faults import FaultSettings
from ._state import EmulatorState

__all__ = ["EmulatorServer", "bind_socket", "url_for_socket"]

_T = TypeVar("_T")


def bind_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """Bind and listen on ``host:port`` (port 0: any free port) and return the socket."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    # Keep the protocol number (IPPROTO_TCP): asyncio only sets TCP_NODELAY on accepted
    # sockets whose proto says TCP; without it every answer waits ~40 ms for delayed ACKs.
    sock = socket.socket(family, kind, proto or socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.listen(2048)
        sock.set_inheritable(True)
    except BaseException:
        sock.close()
        raise
    return sock


def url_for_socket(sock: socket.socket) -> str:
    """The ``http://host:port`` URL of a bound socket (wildcard hosts shown as loopback)."""
    host, port = sock.getsockname()[:2]
    if host in ("0.0.0.0", ""):  # noqa: S104 - only used to display a reachable address
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


class _ThreadServer(uvicorn.Server):
    """A uvicorn server that reports the end of its startup through an event."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=sockets)
        finally:
            self.ready.set()


def _running(value: _T | None) -> _T:
    """``value``, which exists while the server runs."""
    if value is None:
        raise RuntimeError("the emulator server is not running")
    return value


class EmulatorServer:
    """The emulator served by uvicorn in a background thread, on a port chosen by the OS.

    Use it as a context manager (or call :meth:`start` and :meth:`stop`)::

        with EmulatorServer(EmulatorConfig(fault_rate=0.2, fault_seed=1)) as server:
            httpx.get(f"{server.base_url}/_emulator/health")

    Every tunable is a field of ``config`` (:class:`~klavis_emulator.EmulatorConfig`;
    default: all defaults, port 0, loopback). Without ``config.data_dir`` the state lives
    in a temporary folder removed on stop. Each :meth:`start` builds a fresh app (and
    state) on the same data dir, so a server can be stopped and restarted.

    With ``config.control_token`` the control routes (``/_emulator/...`` but ``GET
    /_emulator/health``) require the header ``X-Emulator-Control-Token: <token>``; without
    it they answer loopback clients only (the default host is loopback, so tests need no
    token).
    """

    def __init__(self, config: EmulatorConfig | None = None) -> None:
        self.config = config if config is not None else EmulatorConfig()
        self._temp_dir: Path | None = None
        self._app: FastAPI | None = None
        self._server: _ThreadServer | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._base_url: str | None = None
        self._error: BaseException | None = None

    def __repr__(self) -> str:
        where = self._base_url or "not running"
        return f"EmulatorServer({where})"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>`` of the running server."""
        return _running(self._base_url)

    @property
    def host(self) -> str:
        """The host it listens on (``config.host``)."""
        return self.config.host

    @property
    def port(self) -> int:
        """The port asked for (``config.port``; 0: any free one, see :attr:`base_url`)."""
        return self.config.port

    @property
    def data_dir(self) -> Path:
        """The folder holding the emulator's state."""
        if self.config.data_dir is not None:
            return Path(self.config.data_dir)
        return _running(self._temp_dir)

    @property
    def app(self) -> FastAPI:
        """The FastAPI application being served."""
        return _running(self._app)

    @property
    def state(self) -> EmulatorState:
        """The backend state (for tests: its ``clock`` can be advanced)."""
        state: EmulatorState = self.app.state.emulator
        return state

    @property
    def faults(self) -> FaultSettings:
        """The live fault-injection settings."""
        faults: FaultSettings = self.app.state.faults
        return faults

    def start(self) -> EmulatorServer:
        """Bind a socket, start uvicorn in a thread, and wait until it serves."""
        if self._thread is not None:
            raise RuntimeError("the emulator server is already running")
        config = self.config
        if config.data_dir is None:
            self._temp_dir = Path(tempfile.mkdtemp(prefix="klavis-emulator-"))
            config = dataclasses.replace(config, data_dir=self._temp_dir)
        try:
            self._app = create_app(config)
            self._socket = bind_socket(config.host, config.port)
            serving = uvicorn.Config(
                self._app,
                log_level=config.log_level,
                access_log=False,
                lifespan="on",
                timeout_graceful_shutdown=5,
            )
            self._server = _ThreadServer(serving)
            self._error = None
            self._thread = threading.Thread(target=self._run, name="klavis-emulator", daemon=True)
            self._thread.start()
            if not self._server.ready.wait(config.startup_timeout):
                raise RuntimeError("the emulator server did not start in time")
            if self._error is not None or not self._server.started:
                raise RuntimeError("the emulator server failed to start") from self._error
        except BaseException:
            self.stop()
            raise
        self._base_url = url_for_socket(self._socket)
        return self

    def _run(self) -> None:
        assert self._server is not None
        assert self._socket is not None
        try:
            self._server.run(sockets=[self._socket])
        except BaseException as exc:  # noqa: BLE001 - reported by start() (SystemExit too)
            self._error = exc
        finally:
            self._server.ready.set()

    def stop(self) -> None:
        """Stop serving, close the state, and remove the temporary data dir (idempotent)."""
        mcp = getattr(self._app.state, "mcp", None) if self._app is not None else None
        if mcp is not None:
            mcp.shutdown(wait=10)  # open MCP sessions would otherwise hold uvicorn's shutdown
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._socket is not None:
            self._socket.close()
        if self._app is not None:
            self.state.close()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None
        self._server = self._thread = self._socket = self._base_url = self._app = None

    def __enter__(self) -> EmulatorServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
