"""Which process is at the other end of a loopback connection (klavis_emulator._exec.peers)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from klavis_emulator._exec.confinement import bwrap_args
from klavis_emulator._exec.peers import peer_is_sandboxed

# Connects to the port in argv[1], then waits until the other end closes.
CONNECT = (
    "import socket, sys\ns = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\ns.recv(1)\n"
)


@contextlib.contextmanager
def _connection_from(command: list[str]) -> Iterator[tuple[tuple[str, int], tuple[str, int]]]:
    """Start ``command`` + [port]; yield (client, server) of the connection it opens."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(30)
        port = listener.getsockname()[1]
        process = subprocess.Popen([*command, str(port)])
        try:
            connection, client = listener.accept()
            with connection:
                yield (client[0], client[1]), ("127.0.0.1", port)
        finally:
            process.wait(timeout=30)


def test_a_plain_child_process_is_not_sandboxed() -> None:
    with _connection_from([sys.executable, "-c", CONNECT]) as (client, server):
        assert not peer_is_sandboxed(client, server)


def test_a_process_inside_a_bwrap_of_ours_sharing_the_network_is_sandboxed(
    tmp_path: Path,
) -> None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.skip("needs bubblewrap (apt-get install bubblewrap)")
    confined = bwrap_args(bwrap, workspace=tmp_path, env={}, network=True)
    with _connection_from([*confined, sys.executable, "-c", CONNECT]) as (client, server):
        assert peer_is_sandboxed(client, server)
        assert not peer_is_sandboxed((client[0], client[1] + 1), server)  # another socket


def test_our_own_connection_is_not_sandboxed() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        server = listener.getsockname()
        with socket.create_connection(server) as ours:
            client = ours.getsockname()
            accepted, _ = listener.accept()
            accepted.close()
            assert not peer_is_sandboxed((client[0], client[1]), (server[0], server[1]))
