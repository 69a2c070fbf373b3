"""The fork server of one hosted Python MCP server: a program run by the server's interpreter.

Not imported by the emulator: :mod:`.forks` reads this file and runs it with ``python -c`` in
the server's interpreter (its venv, or the emulator's for git), so it uses the standard
library only and runs on every supported Python (3.10 to 3.13). Linux only.

**What it does.** It runs the server's *prepare* code once (imports, and the server built as
far as it is the same for every sandbox, with a first ``tools/list`` answered in memory so
that the lazily made parts exist), freezes the garbage collector's view of that heap, then
waits on a Unix socket. For each start a client (:mod:`.fork_client_main`, the command the
sandbox's stdio transport runs) sends its stdin, stdout and stderr, a readiness pipe and a
life pipe, then becomes the server's bubblewrap with a *holder* as its command. The fork
server forks a child per start, which never touches another start's data:

1. the child takes the descriptors, answers ``+``, and waits until the holder says the
   sandbox is ready (its init mounted the overlays and dropped its capabilities);
2. it joins every namespace of that sandbox (user first, mount last) from outside, through
   ``/proc/<init>/ns/*``, and forks again: the grandchild is in the sandbox's PID namespace,
   with the sandbox's mounts (``/data``, the read-only system and installs, private
   ``/tmp``, ``/proc``), network, IPC, UTS and cgroup views;
3. the grandchild (the server) drops what bubblewrap and the init drop: supplementary groups,
   every capability (bounding, ambient, inheritable, permitted, effective), gains
   ``no_new_privs`` (checked in ``/proc/self/status``), starts a session of its own, keeps
   exactly its stdin, stdout, stderr and the life pipe, restores default signal handling,
   works in ``/data``, and runs the *serve* code. The holder exits when the life pipe's only
   writer (the server) is gone, and the sandbox with it; when the sandbox ends first (a reset
   kills its bubblewrap), the kernel kills the server with its PID namespace.

The fork server is a child subreaper: servers whose forking parent exited are reparented to
it, and it reaps them (a PID namespace's init waits for every process in it to be reaped).
It dies with the emulator (``PR_SET_PDEATHSIG``).

**Sharing.** The children share the fork server's pages until they write them (copy on
write); ``gc.freeze`` keeps the collector from writing to every tracked object of the
prepared heap. Measured per child on the project's 2-core machine (private dirty memory after
``initialize`` and ``tools/list``): git 24 MiB forked after the imports alone, 7 MiB with
the server built and warmed in the fork server (a fresh process: 57 MiB PSS).

Arguments: the listening socket's descriptor, the emulator's PID, the workspace as the
server sees it, the prepare code, the serve code, then the server's ``sys.argv``. Its
environment is the server's (a confined server's is the same in every sandbox).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import io
import os
import select
import signal
import socket
import struct
import sys
import threading
import traceback
from typing import Any, NoReturn

# prctl options and namespace flags (linux/prctl.h, linux/sched.h)
_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
NAMESPACES = (  # the order they are joined in: user first (it grants the rest), mount last
    ("user", 0x10000000),
    ("cgroup", 0x02000000),
    ("ipc", 0x08000000),
    ("uts", 0x04000000),
    ("net", 0x40000000),
    ("pid", 0x20000000),
    ("mnt", 0x00020000),
)
DESCRIPTORS = 5  # stdin, stdout, stderr, the readiness pipe's read end, the life pipe's write end
READY_TIMEOUT = 120.0
STATUS_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")

_libc = ctypes.CDLL(None, use_errno=True)


class ForkError(Exception):
    """A start that cannot go on (said in the server's log)."""


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _prctl(option: int, arg: int = 0) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl({option})")


def _setns(fd: int, kind: int) -> None:
    _check(_libc.setns(fd, kind), f"setns({kind:#x})")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_privileges(last_cap: int) -> None:
    """Drop what bubblewrap's ``--cap-drop ALL`` and the init's ``setpriv`` drop, and set
    ``no_new_privs`` as bubblewrap does; raise unless ``/proc/self/status`` agrees."""
    # an unprivileged user namespace denies setgroups (bwrap's too)
    with contextlib.suppress(PermissionError):
        os.setgroups([])
    for cap in range(last_cap + 1):
        _prctl(_PR_CAPBSET_DROP, cap)
    _check(_libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient caps")
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    with open("/proc/self/status", encoding="ascii") as status:
        fields = dict(line.split(":", 1) for line in status if ":" in line)
    wrong = [name for name in STATUS_FIELDS if int(fields[name].strip(), 16) != 0]
    if wrong or fields["NoNewPrivs"].strip() != "1":
        raise ForkError(f"privileges left after the drop: {wrong or 'no NoNewPrivs'}")


def child_of(pid: int) -> int:
    """The only child of ``pid`` (bubblewrap's: the sandbox's init)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as listed:
            children = [int(part) for part in listed.read().split()]
    except FileNotFoundError:  # a kernel without CONFIG_PROC_CHILDREN: scan the table
        children = [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
        children = [child for child in children if parent_of(child) == pid]
    if len(children) != 1:
        raise ForkError(f"the sandbox's bubblewrap has {len(children)} children, not one")
    return children[0]


def parent_of(pid: int) -> int | None:
    """The parent of ``pid``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            text = stat.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(text[text.rindex(")") + 2 :].split()[1])


def _alive(pidfd: int) -> bool:
    return not select.select([pidfd], [], [], 0)[0]


class ForkServer:
    """The fork server's state: what every fork must close, and the loop."""

    def __init__(self, listener: socket.socket, workspace: str, serve: str) -> None:
        """``workspace``: where the server works (``/data``); ``serve``: its serve code."""
        self.listener = listener
        self.workspace = workspace
        self.serve = serve
        self.namespace: dict[str, Any] = {"__name__": "__main__", "sys": sys}
        self.wakeup_r, self.wakeup_w = os.pipe()
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as last:
            self.last_cap = int(last.read())
        self.own = {kind: os.stat(f"/proc/self/ns/{kind}").st_ino for kind, _ in NAMESPACES}

    def close_own(self) -> None:
        """Close the fork server's descriptors (in a forked child)."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        self.listener.close()
        os.close(self.wakeup_r)
        os.close(self.wakeup_w)

    def run(self) -> NoReturn:
        """Accept starts and reap servers, forever."""
        os.set_blocking(self.wakeup_w, False)
        signal.set_wakeup_fd(self.wakeup_w)
        signal.signal(signal.SIGCHLD, lambda number, frame: None)
        while True:
            ready: list[Any] = select.select([self.listener.fileno(), self.wakeup_r], [], [])[0]
            if self.wakeup_r in ready:
                os.read(self.wakeup_r, 4096)
                self._reap()
            if self.listener.fileno() in ready:
                try:
                    conn, _ = self.listener.accept()
                except BlockingIOError:
                    continue
                self._fork_start(conn)

    def _reap(self) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    def _fork_start(self, conn: socket.socket) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError:
            traceback.print_exc()
            conn.close()
            return
        if pid:
            conn.close()
            return
        code = 1
        try:
            self.close_own()
            code = self._start(conn)
        except BaseException:  # noqa: BLE001 - the child reports and exits, whatever happened
            traceback.print_exc()
        finally:
            os._exit(code)

    def _start(self, conn: socket.socket) -> int:
        """In the first child: take the start's descriptors, join its sandbox, fork the
        server. Errors go to the start's own stderr (the server's log)."""
        credentials = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        pid, uid, _ = struct.unpack("3i", credentials)
        if uid != os.geteuid():
            return 1
        message, fds, _, _ = socket.recv_fds(conn, 16, DESCRIPTORS)
        if message != b"F" or len(fds) != DESCRIPTORS:
            for fd in fds:
                os.close(fd)
            return 1
        stdin, stdout, stderr, ready, life = fds
        os.dup2(stderr, 2)
        pidfd = os.pidfd_open(pid)  # the client, soon its bubblewrap (an exec keeps the pid)
        conn.sendall(b"+")
        conn.close()
        try:
            init = self._await_sandbox(pidfd, pid, ready)
            namespaces = self._open_namespaces(init)
            if not _alive(pidfd) or parent_of(init) != pid:
                raise ForkError("the sandbox ended while its server was being started")
            for kind, flag in NAMESPACES:
                if kind in namespaces:
                    _setns(namespaces[kind], flag)
            for fd in [*namespaces.values(), pidfd, ready]:
                os.close(fd)
        except ForkError as problem:
            print(f"klavis fork server: {problem}", file=sys.stderr)
            return 1
        server = os.fork()
        if server == 0:
            self._become_server(stdin, stdout, stderr, life)
        return 0

    def _await_sandbox(self, pidfd: int, pid: int, ready: int) -> int:
        readable = select.select([ready, pidfd], [], [], READY_TIMEOUT)[0]
        if ready not in readable or os.read(ready, 1) != b".":
            raise ForkError("the sandbox did not start (its bubblewrap ended or said nothing)")
        return child_of(pid)

    def _open_namespaces(self, init: int) -> dict[str, int]:
        opened: dict[str, int] = {}
        for kind, _ in NAMESPACES:
            fd = os.open(f"/proc/{init}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)
            if os.fstat(fd).st_ino == self.own[kind]:
                os.close(fd)  # shared with the emulator (a server given the network)
            else:
                opened[kind] = fd
        if "user" not in opened or "mnt" not in opened or "pid" not in opened:
            raise ForkError("the sandbox has no user, mount or PID namespace of its own")
        return opened

    def _become_server(self, stdin: int, stdout: int, stderr: int, life: int) -> NoReturn:
        """In the grandchild, inside the sandbox: become the server."""
        code: Any = 1
        try:
            os.setsid()
            drop_privileges(self.last_cap)
            for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
                os.dup2(fd, target)
            keep = os.dup(life)  # not inherited by what the server runs
            for fd in (stdin, stdout, stderr, life):
                if fd > 2 and fd != keep:
                    os.close(fd)
            for entry in os.listdir("/proc/self/fd"):  # the sandbox's /proc now
                fd = int(entry)
                if fd > 2 and fd != keep:
                    with contextlib.suppress(OSError):  # the listing's own descriptor
                        os.close(fd)
            os.chdir(self.workspace)
            reopen_stdio()
            exec(self.serve, self.namespace)  # noqa: S102 - the emulator's own code
            code = 0
        except SystemExit as done:
            code = done.code
        except BaseException:  # noqa: BLE001 - said in the server's log, as a crash would be
            traceback.print_exc()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)


def reopen_stdio() -> None:
    """New ``sys.stdin``, ``sys.stdout`` and ``sys.stderr`` on descriptors 0, 1 and 2, made as
    the interpreter made the fork server's (which were on other files: /dev/null is seekable,
    a pipe is not, and the old objects remember)."""
    for name, fd, mode in (("stdin", 0, "rb"), ("stdout", 1, "wb"), ("stderr", 2, "wb")):
        old = getattr(sys, name)
        unbuffered = isinstance(getattr(old, "buffer", None), io.FileIO)
        binary: Any = open(fd, mode, buffering=0 if unbuffered else -1, closefd=False)  # noqa: SIM115
        new = io.TextIOWrapper(
            binary,
            encoding=old.encoding,
            errors=old.errors,
            line_buffering=old.line_buffering,
            write_through=old.write_through,
        )
        setattr(sys, name, new)
        setattr(sys, f"__{name}__", new)


def main(argv: list[str]) -> None:
    """Prepare the server, then serve starts (see the module docs)."""
    listen_fd, emulator, workspace, prepare, serve = argv[1:6]
    sys.argv = argv[6:]  # the server's own, as it would have them
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != int(emulator):  # it died before the line above
        sys.exit(1)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    sys.path[:] = [path for path in sys.path if path not in ("", ".")]
    listener = socket.socket(fileno=int(listen_fd))
    server = ForkServer(listener, workspace, serve)
    exec(prepare, server.namespace)  # noqa: S102 - the emulator's own code
    if threading.active_count() != 1:
        sys.exit("klavis fork server: preparing the server started threads; forking is unsafe")
    expected = {0, 1, 2, listener.fileno(), server.wakeup_r, server.wakeup_w}
    unknown = {int(fd) for fd in os.listdir("/proc/self/fd")} - expected
    opened = [fd for fd in unknown if _is_open(fd)]
    if opened:
        sys.exit(f"klavis fork server: preparing the server left descriptors open: {opened}")
    gc.collect()
    gc.freeze()
    server.run()


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


if __name__ == "__main__":
    main(sys.argv)
