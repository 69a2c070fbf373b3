"""The holder of one data folder's overlays: a program run by :mod:`.data_overlay`.

Not imported by the emulator: :mod:`.data_overlay` reads this file and runs it with
``python -I -S -c`` in the emulator's interpreter, so it uses the standard library only and
runs on every supported Python (3.10 to 3.13). Linux only.

What it does, in order: asks for SIGKILL when the thread that started it ends
(``PR_SET_PDEATHSIG``); takes an exclusive ``flock`` of ``.overlay/lock`` in the data
folder (waiting while an earlier holder of the same folder still lives: two overlays on one
upper folder are undefined behaviour); makes a user and a mount namespace of its own (its
user mapped to itself, the host's mounts propagated in, none out); from inside the data
folder, mounts over each named folder an overlay whose upper layer is that very folder,
with options naming relative paths only (``lowerdir=.overlay/empty,upperdir=NAME,
workdir=.overlay/work-NAME``); says ``ready`` on its stdout; then reads its stdin (the life
pipe, whose only writer is the emulator) until it ends, and exits. Its mount namespace,
with the overlays, lives as long as a process is in it or in a namespace made from it.

Arguments: the emulator's process id, the data folder, the names of the folders to lay
overlays on. A failure is said in one line on stderr, with exit status 2.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_REC = 0x4000
_MS_SLAVE = 0x80000
OVERLAY_DIR = ".overlay"


class HolderError(Exception):
    """What stops the holder (said on stderr)."""


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise HolderError(f"{what}: {os.strerror(err)}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


def _own_namespaces(libc: ctypes.CDLL) -> None:
    uid, gid = os.getuid(), os.getgid()
    _check(libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unshare(user, mount)")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_SLAVE, None), "make / a slave mount")


def main(argv: list[str]) -> None:
    """Hold the overlays (see the module docs)."""
    emulator, data_dir, *names = argv[1:]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    _check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    if os.getppid() != int(emulator):  # it died before the line above
        sys.exit(1)
    try:
        os.chdir(data_dir)
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        lock = os.open(f"{OVERLAY_DIR}/lock", flags, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX)  # kept until this process ends
        _own_namespaces(libc)
        for name in names:
            options = (
                f"userxattr,lowerdir={OVERLAY_DIR}/empty,upperdir={name},"
                f"workdir={OVERLAY_DIR}/work-{name}"
            )
            _check(
                libc.mount(
                    b"overlay", name.encode(), b"overlay", _MS_NOSUID | _MS_NODEV, options.encode()
                ),
                f"mount an overlay on {name}",
            )
        os.chdir("/")
    except (HolderError, OSError) as problem:
        print(problem, file=sys.stderr, flush=True)
        sys.exit(2)
    os.write(1, b"ready\n")
    while os.read(0, 4096):  # the emulator never writes: this returns at its end
        pass


if __name__ == "__main__":
    main(sys.argv)
