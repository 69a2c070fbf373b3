"""Whether the other end of a loopback connection is a process of one of our sandboxes.

The control routes (``/_emulator/...``: clock, faults, which change every tenant's world)
answer loopback clients without a token. A confined server or execution normally has no network
at all, so "loopback" meant "the emulator's user". Some confined processes share the emulator's
network on purpose: the servers whose catalog entry says ``network`` (playwright: its browser
must load pages served on loopback, and its ``browser_run_code_unsafe`` tool runs any code a
tenant sends; poste_email_toolathlon's emails server: it talks to its sandbox's mail server on
loopback) and executions run with ``--allow-network``. Their loopback connections must not
count as the user's: :func:`peer_is_sandboxed` finds the process that owns the client's socket
among the emulator's descendants, and says whether it runs inside a bubblewrap sandbox that the
emulator started. With ``--unshare-pid``, everything a confined tenant starts stays below its
``bwrap`` process, however it forks or detaches, so the ancestry cannot be escaped.

Why by hand: neither the ASGI server nor the kernel tells a listener which process is
connecting (``SO_PEERCRED`` exists for Unix sockets only); psutil (a well-kept library, in the
emulator extra) reads the socket tables and descriptors from ``/proc``. Only the emulator's own
descendants are searched (psutil still reads every process's parent to find them, and each
sandboxed process's socket table: milliseconds with a few sandboxes, more with many browsers),
paid only by loopback control requests without a token. A client that hangs up before the check
changes nothing: every control route that changes state reads a body, which a closed connection
no longer delivers. Unconfined servers and executions are opt-outs (they run as the emulator's
user and can do whatever it can): they are not searched.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
from typing import Final

import psutil

__all__ = ["peer_is_sandboxed"]

_SANDBOX_LAUNCHER: Final = "bwrap"


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _sandboxed_descendants() -> list[psutil.Process]:
    """Every process below a ``bwrap`` that is itself below this process."""
    found: dict[int, psutil.Process] = {}
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(os.getpid()).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if child.pid not in found and child.name() == _SANDBOX_LAUNCHER:
                    found[child.pid] = child
                    for inner in child.children(recursive=True):
                        found[inner.pid] = inner
    return list(found.values())


def peer_is_sandboxed(client: tuple[str, int], server: tuple[str, int]) -> bool:
    """True when the TCP connection from ``client`` to ``server`` (as the ASGI scope gives
    them) belongs to a process inside one of this emulator's bubblewrap sandboxes.

    >>> peer_is_sandboxed(("127.0.0.1", 1), ("127.0.0.1", 2))  # no such connection
    False
    """
    client_ip, server_ip = _address(client[0]), _address(server[0])
    if client_ip is None or server_ip is None:
        return False
    for process in _sandboxed_descendants():
        try:
            connections = process.net_connections(kind="inet")
        except psutil.Error:
            continue
        for connection in connections:
            local, remote = connection.laddr, connection.raddr
            if not local or not remote:
                continue
            if (
                local.port == client[1]
                and remote.port == server[1]
                and _address(local.ip) == client_ip
                and _address(remote.ip) == server_ip
            ):
                return True
    return False
