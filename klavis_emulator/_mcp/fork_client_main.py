"""The command a forked server's stdio transport runs: hand the start to the fork server, then
become the sandbox's bubblewrap with a holder in the server's place.

Not imported by the emulator: :mod:`.forks` runs this file's text with ``python -I -S -c``
(the standard library only; about 30 ms, and its memory is gone at the ``exec``). Arguments:
the fork server's socket, ``k`` and ``h``, then the server's full confined command line (its
last ``k`` arguments are the server's own argv), then the holder's ``h`` arguments.

It makes two pipes: the readiness pipe (the holder writes one byte to it once the sandbox's
init has mounted its overlays and dropped its capabilities) and the life pipe (the holder
reads it until its only writer, the server, is gone). It sends its stdin, stdout and stderr,
the readiness pipe's read end and the life pipe's write end to the fork server (see
:mod:`.fork_server_main`) and waits for its ``+``; then it ``exec``\\ s the bubblewrap command
with the holder as the command, the pipes' other ends at descriptors 9 and 8. If the fork
server cannot be reached, or closes the connection before its ``+`` (not running, failed to
prepare), it ``exec``\\ s the server's own command line instead: the server starts as it would
without a fork server.
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
from typing import NoReturn

READY_FD = 9
LIFE_FD = 8


def main(argv: list[str]) -> NoReturn:
    """Hand the start over, then become the holder's bubblewrap (see the module docs)."""
    path, own, held = argv[1], int(argv[2]), int(argv[3])
    command, holder = argv[4 : len(argv) - held], argv[len(argv) - held :]
    ready_r, ready_w = os.pipe()
    life_r, life_w = os.pipe()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            socket.send_fds(conn, [b"F"], [0, 1, 2, ready_r, life_w])
            if conn.recv(1) != b"+":
                raise ConnectionError("the fork server closed the connection")
    except OSError:
        os.execv(command[0], command)  # noqa: S606 - without a fork server: the server itself
    os.close(ready_r)
    os.close(life_w)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (ready_w, life_r)]
    for fd, target in zip(high, (READY_FD, LIFE_FD), strict=True):
        os.dup2(fd, target)  # inheritable: bubblewrap passes them to the init
    os.execv(command[0], [*command[: len(command) - own], *holder])  # noqa: S606


if __name__ == "__main__":
    main(sys.argv)
