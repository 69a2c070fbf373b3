"""A harness process of the host-limits tests: acquires under the limits its environment sets
(``KLAVIS_HOST_MAX_SANDBOXES``, ``KLAVIS_HOST_MAX_ACQUIRES_PER_SECOND``), as a shell loop's
processes would, and says what it did on stdout, one JSON line per event.

* ``cycles N [--hold-first]``: acquire and release N times, one sandbox at a time; with
  ``--hold-first`` the first sandbox is held until a line arrives on stdin.
* ``hold``: acquire one sandbox and hold it until stdin closes (the test SIGKILLs it first).
* ``pool N``: a ``SandboxPool`` of size 2 runs N tasks, then closes.

Every ``acquired`` line has the time the acquire returned; a ``releasing`` line the time just
before its release; a ``sent`` line the time an acquire's request left (read at the HTTP
transport, which the library's client uses as is); a ``turn`` line the time the host's rate
gave the request (the library's DEBUG log) with the time it was logged.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time

import httpx

from workflows import LocalSandbox, SandboxPool

_send = httpx.HTTPTransport.handle_request


def _timed_send(transport: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
    if request.method == "POST" and request.url.path.endswith("/local-sandbox"):
        say(sent=time.time())
    return _send(transport, request)


httpx.HTTPTransport.handle_request = _timed_send  # type: ignore[method-assign,assignment]


class _Turns(logging.Handler):
    """Says each acquire's turn under the host's rate, which the library logs at DEBUG."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("acquire turn under the host's rate"):
            say(turn=record.args[0] if isinstance(record.args, tuple) else None, t=time.time())


_library_log = logging.getLogger("workflows")
_library_log.addHandler(_Turns())
_library_log.setLevel(logging.DEBUG)


_say_lock = threading.Lock()


def say(**event: object) -> None:
    """One JSON line, whole (a pool's workers say things at once)."""
    with _say_lock:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def cycles(count: int, hold_first: bool) -> None:
    for n in range(count):
        sandbox = LocalSandbox.acquire(["git"], progress=False)
        say(acquired=sandbox.id, t=time.time())
        if n == 0 and hold_first:
            sys.stdin.readline()
        say(releasing=sandbox.id, t=time.time())
        sandbox.release()


def hold() -> None:
    sandbox = LocalSandbox.acquire(["git"], progress=False)
    say(acquired=sandbox.id, t=time.time())
    sys.stdin.read()


def pool(count: int) -> None:
    with SandboxPool(["git"], size=2, progress=False) as sandboxes:
        results = sandboxes.map(lambda sb, task: sb.id, range(count))
    say(pool=[r.ok for r in results], sandboxes=sorted({str(v) for v in results.values}))


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "cycles":
        cycles(int(sys.argv[2]), "--hold-first" in sys.argv)
    elif mode == "hold":
        hold()
    else:
        pool(int(sys.argv[2]))
