"""Keeping the host's folder names out of what a confined process can read about itself.

:func:`~klavis_emulator._exec.confinement.bwrap_args` asks this module for two things: the
mounts of the read-only trees (the emulator's Python, the commands' and the servers'
installs, read-only :class:`~klavis_emulator._exec.confinement.Bind`\\ s), and a small
``/bin/sh`` that runs first inside the sandbox as its PID 1 (:func:`init_prefix`).

**What leaked.** ``/proc/self/mountinfo`` gives, for every mount, the root of the mount
inside its file system (its fourth field) and its mount point: a bind of
``~/.cache/klavis-emulator/node/filesystem-...`` at its own path named the tools folder, the
home folder and the interpreter's prefix twice. ``/proc/1/cmdline`` was bubblewrap's own
init, whose command line held every host path of the builder (the workspace's too), and
whose memory a process of the same user could read.

**What is done.**

* Each read-only tree is mounted as a read-only overlayfs (a file system of its own: its
  root inside it is ``/``) at a neutral place, ``/opt/klavis/installs/N`` (or a read-only
  bind's own target, ``/venv``), with its host folder as the only real lower layer, staged
  at ``/.klavis-stage/N``: the overlay's options name that staging path, not the host one.
  The staging binds are then lazily unmounted, so nothing of them is listed. The host path
  of each tree is a symbolic link to its place (installs embed their absolute paths: a
  venv's ``pyvenv.cfg`` and scripts, node's module links), so everything still runs at the
  paths it was installed at, but no mount lists them.
* bubblewrap runs the command as PID 1 (``--as-pid-1``) and that command is this module's
  ``/bin/sh`` init: it mounts the overlays (bubblewrap 0.8 has no overlay option; it keeps
  ``CAP_SYS_ADMIN`` and ``CAP_SETPCAP`` for this step only, inside the sandbox's own user
  and mount namespaces), drops every capability (``setpriv``: effective, permitted,
  inheritable, ambient and bounding sets), then starts the real command as its child and
  waits, reaping orphans as bubblewrap's init did. Its command line holds neutral paths
  only; the sandbox no longer contains a ``bwrap`` process at all. A command killed by
  signal N ends the sandbox with status 128 + N, as bubblewrap's init reported it.
* ``/proc/self/cgroup``: bubblewrap's ``--unshare-all`` already gives a cgroup namespace,
  so every line ends in ``/`` (measured: the host's own says ``memory:/process_api/<id>``).

**Not hidden** (and why):

* the root of each *writable* bind (the workspace at ``/data``, an execution's folder at
  ``/execution``) where the data folder's overlays cannot be made. Where they can (the
  default, see :mod:`.data_overlay`), ``workspaces/`` and ``executions/`` are overlays held
  by one process per data folder, every confined process starts inside its namespaces, and
  those roots read ``/<id>`` on an overlay whose options name relative paths only. Where
  they cannot (no ``nsenter``, no unprivileged user namespaces, an upper file system
  without user extended attributes, a data folder on an overlayfs), the binds are plain, as
  before, and their root names the data folder (and the home folder, where the data folder
  is below it, as by default); the emulator says so once at WARNING.
* absolute paths the installs carry in their own files and a process's own ``argv``,
  ``sys.prefix``, environment: the links at the host paths keep those working. Hiding them
  too means relocating every install (rewriting shebangs, ``pyvenv.cfg``, editable ``.pth``
  files) and every command line.

**Options weighed.**

* overlayfs with the workspace as its upper layer, mounted by each confined process
  (a fresh file system for ``/data``): rejected. Each confined process (every server of a
  sandbox, each execution) would mount its own overlay on the same upper folder, which
  overlayfs calls undefined (the kernel logs "upperdir is in-use ... undefined behavior").
  Measured on 6.18 with two such mounts A and B: A looks up ``new.txt`` (absent), B writes
  it, and A still answers "No such file or directory" to ``cat new.txt`` while its ``ls``
  lists it. Done instead: *one* overlay per tenant folder, mounted once per data folder by
  a holder whose namespaces every confined process enters, and through which the emulator
  itself reads and writes (:mod:`.data_overlay`).
* a per-sandbox staging folder to bind from: the ``mountinfo`` root of a bind is the
  source's path in its file system however it is reached (measured: a bind of a bind, and
  bubblewrap's ``--bind-fd``, both show the original folder), so staging helps only as the
  lower layer of an overlay (as done).
* copies into a tmpfs: right for small things, but the trees are tens to hundreds of MB.
* squashfs or loop images, FUSE (bindfs, fuse-overlayfs): need root, a daemon per sandbox
  or tools the project does not install.
* a file mounted over ``/proc/self/mountinfo``: ``/proc/self`` is each reader's own
  ``/proc/<pid>``; a mount over one process's entry does not cover its children, and
  ``/proc/<pid>/mountinfo`` is always generated from the reader's own mount namespace.
* seccomp: bubblewrap 0.8 loads only a compiled filter, and filtering ``open`` by path is
  not something seccomp can do.

**Cost** (measured on the project's 2-core machine shared with other jobs, the old builder
of ``main`` and this one in one process, samples interleaved, medians): an execution's
confined ``python main.py`` (two overlays) 19.7 -> 24.1 ms at load 3.4 (21 samples of
``python -c pass``), 59 -> 82 ms at load 11-14 (21 samples): the init adds six short
programs (``sh``, ``mount`` per overlay, ``umount``, ``setpriv``, two ``sh``). A server's
start to its answer to ``initialize``, 11 to 21 samples at load 11-19: filesystem (node)
1185 -> 1104 ms, terminal (its venv) 1947 -> 1976 ms, git (the emulator's Python) 4815 ->
5082 ms, within the noise of that load.

**Fallbacks.** A tree overlayfs refuses (a lower file system it cannot stack on, such as
an overlay already two deep) is moved into place as the plain bind it was staged as: it
works and shows its path. Where the init's programs (``mount``, ``umount``, ``setpriv``,
util-linux) are missing from the system folders, or the probe finds that the layers do not
work with a ``bwrap`` (:func:`~klavis_emulator._exec.confinement.probe`), the read-only
trees are bound at their own paths as before, and the emulator says so once in its log.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

__all__ = [
    "INIT_NAME",
    "INSTALLS_DIR",
    "LAYER_OPTIONS",
    "STAGE_DIR",
    "Layer",
    "command_of",
    "init_prefix",
    "init_programs",
    "layer_args",
]

INSTALLS_DIR: Final = "/opt/klavis/installs"
"""Where the read-only trees are mounted (``N`` in the order given); each host path is a
symbolic link to its place here."""
STAGE_DIR: Final = "/.klavis-stage"
"""A tmpfs where the host folders are bound before the init lays an overlay over each one;
unmounted by the init before the command starts (an empty folder is left)."""
INIT_NAME: Final = "klavis-sandbox"
"""The ``$0`` of the init shell (what ``ps`` shows inside the sandbox for PID 1)."""
LAYER_OPTIONS: Final[tuple[str, ...]] = (
    *("--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP"),
    *("--uid", "0", "--gid", "0"),
)
"""What bubblewrap gives the init (after ``--cap-drop ALL``) when it mounts layers: mounting
an overlay needs ``CAP_SYS_ADMIN``, emptying the bounding set ``CAP_SETPCAP``, and util-linux
``mount`` uid 0 (as any other uid it said "must be superuser to use mount", capabilities or
not): an unprivileged emulator's confined processes are uid 0 without capabilities, as a root
emulator's always were (the user's files show as root's; the kernel still checks the host
user)."""

_SYSTEM_PATH: Final = "/usr/sbin:/usr/bin:/sbin:/bin"
_SYSTEM_PREFIXES: Final[tuple[str, ...]] = ("/usr/", "/bin/", "/sbin/")


# The init, run by /bin/sh as PID 1. Arguments: the number N of layers, their N targets, then
# the command. Layer i is staged at STAGE/i; "STAGE/empty" is the second lower layer
# overlayfs wants (measured on 6.18: "at least 2 lowerdir are needed while upperdir
# nonexistent"). "$@"; exit $? keeps this shell as PID 1 (the last command of a -c string
# would be exec'd): a command killing itself by a signal dies as outside a sandbox (PID 1
# ignores it), the shell reaps orphans while it waits and exits 128 + N as bwrap's init did.
# The shell's own stderr is /dev/null and a second shell, its child, takes the real one back
# before it becomes the command: dash told "Terminated" in every log of a command killed by
# SIGTERM (bwrap's init did not), and with "$@" 2>&3 it still did (dash redirects a simple
# command in the parent, and reports the status before it restores its own stderr).
def _run(sh: str) -> str:
    inner = shlex.quote('exec 2>&3 3>&-; exec "$@"')
    return f'exec 3>&2 2>/dev/null; {sh} -c {inner} {INIT_NAME} "$@"; exit $?'


def _layers_script(mount: str, umount: str, setpriv: str, sh: str) -> str:
    stage = STAGE_DIR
    return "\n".join(
        [
            "set -e",
            "n=$1; shift; i=0",
            'while [ "$i" -lt "$n" ]; do',
            f"  {mount} -n -i -t overlay -o"
            f' "ro,nosuid,nodev,lowerdir={stage}/$i:{stage}/empty" overlay "$1" 2>/dev/null'
            f' || {mount} -n --move "{stage}/$i" "$1"',
            "  i=$((i + 1)); shift",
            "done",
            f"{umount} -n -l {stage}",
            f"exec {setpriv} --inh-caps=-all --ambient-caps=-all --bounding-set=-all --"
            f' {sh} -c {shlex.quote(_run(sh))} {INIT_NAME} "$@"',
        ]
    )


@dataclass(frozen=True)
class Layer:
    """A host folder mounted read-only at ``target``; with ``link``, that path (the host
    folder's own) becomes a symbolic link to ``target``."""

    source: str
    target: str
    link: str | None = None


def _system_program(name: str) -> str | None:
    found = shutil.which(name, path=_SYSTEM_PATH)
    if found is None:
        return None
    found = os.path.abspath(found)
    return found if found.startswith(_SYSTEM_PREFIXES) else None


@functools.cache
def init_programs() -> tuple[str, str, str, str] | None:
    """``(sh, mount, umount, setpriv)`` from the system folders (which every sandbox
    mounts), or ``None`` where one is missing (then no layers are made)."""
    found = tuple(_system_program(name) for name in ("sh", "mount", "umount", "setpriv"))
    if any(path is None for path in found):
        return None
    sh, mount, umount, setpriv = (str(path) for path in found)
    return sh, mount, umount, setpriv


def layer_args(layers: Sequence[Layer]) -> list[str]:
    """The bubblewrap options that stage ``layers`` for the init: the staging tmpfs, the
    empty lower layer, a read-only bind of each source, its mount point and its link."""
    if not layers:
        return []
    args = ["--tmpfs", STAGE_DIR, "--dir", f"{STAGE_DIR}/empty"]
    for index, layer in enumerate(layers):
        args += ["--ro-bind", layer.source, f"{STAGE_DIR}/{index}", "--dir", layer.target]
        if layer.link is not None:
            args += ["--symlink", layer.target, layer.link]
    return args


def init_prefix(sh: str, layers: Sequence[Layer]) -> list[str]:
    """The init's command line, to put before the command (after bubblewrap's ``--``):
    with ``layers``, the script that mounts them and drops every capability; without,
    only the shell that keeps PID 1 (bubblewrap then gives it no capability at all)."""
    if not layers:
        return [sh, "-c", _run(sh), INIT_NAME]
    programs = init_programs()
    assert programs is not None  # the builder makes layers only where they are found
    script = _layers_script(programs[1], programs[2], programs[3], sh)
    return [sh, "-c", script, INIT_NAME, str(len(layers)), *(layer.target for layer in layers)]


def command_of(args: Sequence[str]) -> list[str]:
    """The command a ``bwrap_args(...) + command`` line runs, without bubblewrap and the init.

    >>> command_of(["bwrap", "--", *init_prefix("/bin/sh", []), "ls"])
    ['ls']
    """
    rest = list(args[list(args).index("--") + 1 :])
    if len(rest) >= 4 and rest[1] == "-c" and rest[3] == INIT_NAME:
        if rest[2] == _run(rest[0]):
            return rest[4:]
        return rest[5 + int(rest[4]) :]
    return rest
