"""Bubblewrap (``bwrap``) confinement: the one command builder, the one probe, the one policy.

Executions (:mod:`klavis_emulator._exec.runner`) and hosted MCP servers
(:mod:`klavis_emulator._mcp.launch`) are both confined by :func:`bwrap_args`, and whether
they are confined at all is decided once per emulator by :func:`decide_confinement`.

**What a confined process gets.** New namespaces for everything (the network too, unless
asked), no capabilities, a private ``/tmp``, ``/proc`` and ``/dev`` of its own, the system
folders read-only, the workspace read-write at ``/data``, the emulator's interpreter and
the servers' installs read-only, and a folder of commands (:data:`SANDBOX_BIN`:
``python``, ``node``, ``git``, ``bash``... found on the host, see :func:`sandbox_commands`;
``klavis-emulator check`` names those the host lacks). Mounts are applied in the order
given, so the private ``/tmp`` comes first: binds below ``/tmp`` (a venv in a ``mktemp -d``
checkout) stay visible.

**As root** (:func:`masked_paths`, in :mod:`.root_masks`), a confined process is uid 0
without capabilities: every file of the system folders the host's unprivileged users cannot
read is hidden from it.

**Host paths** (:mod:`.host_paths`, issue 32): the read-only trees are overlays at
``/opt/klavis/installs/N``, linked from their host paths, and a ``/bin/sh`` init is the
sandbox's PID 1 (no ``bwrap`` command line inside), so ``/proc/self/mountinfo``,
``/proc/self/mounts`` and ``/proc/self/cgroup`` name no host folder. The writable binds
(the workspace at ``/data``, an execution's folder) are of the data folder's overlays
(:mod:`.data_overlay`): a folder given as a view path (``/proc/HOLDER/root/...``) makes this
builder start ``bwrap`` under ``nsenter`` in the holder's namespaces, with the folder's own
path; where the overlays cannot be made, they are plain binds whose root names the data
folder. That is information, not access: nothing of the host's tree around the workspace is
mounted. What must not follow a link planted there is the emulator's own walks of the
workspace (relative to open descriptors), not this builder.

**The probe** (:func:`probe`) runs this interpreter through the very same builder, so it
fails exactly when real runs would; once per process and ``bwrap`` binary. Where only the
overlays fail, it tries again without them, and the builder binds the read-only trees at
their own paths for that ``bwrap`` (said once in the log).

**The policy** (:func:`decide_confinement`): ``confine_executions=False``, ``--no-confine``
or ``KLAVIS_EMULATOR_CONFINE=0`` run unconfined on purpose. Otherwise, where ``bwrap`` is
installed, confinement that does not work is a :class:`ConfinementError` when the emulator
starts; where it is not installed, the emulator runs unconfined and says so once
(``KLAVIS_EMULATOR_CONFINE=1`` requires it even there). ``KLAVIS_EMULATOR_MCP_CONFINE``,
the older name, is read when the new one is not set. An unconfined execution (and a
confined one given the network) can do whatever the emulator's user can, including calling
the control routes, which answer loopback clients when no ``--control-token`` is set.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from .data_overlay import enter_args, inside_path
from .host_paths import INSTALLS_DIR, LAYER_OPTIONS, Layer, init_prefix, init_programs, layer_args
from .root_masks import MERGED_DIRS, SYSTEM_READ_ONLY, mask_args, masked_paths

__all__ = [
    "CONFINED_PATH",
    "CONFINED_WORKSPACE",
    "CONFINE_ENV",
    "LEGACY_CONFINE_ENV",
    "PRIVATE_TMP",
    "SANDBOX_BIN",
    "SANDBOX_COMMANDS",
    "Bind",
    "ConfineSetting",
    "Confinement",
    "ConfinementError",
    "bwrap_args",
    "confine_setting_from_env",
    "decide_confinement",
    "detect_confinement",
    "masked_paths",
    "missing_commands",
    "probe",
    "python_roots",
    "read_only_roots",
    "sandbox_commands",
]

logger = logging.getLogger("klavis_emulator")

CONFINE_ENV: Final = "KLAVIS_EMULATOR_CONFINE"
"""``0``: never confine; ``1``: always (an error where bwrap is missing); unset/``auto``."""
LEGACY_CONFINE_ENV: Final = "KLAVIS_EMULATOR_MCP_CONFINE"
"""The older name of :data:`CONFINE_ENV` (it covered MCP servers only); read when unset."""

CONFINED_WORKSPACE: Final = "/data"
"""Where the sandbox's workspace is mounted (the real service's ``AGENT_WORKSPACE``)."""
PRIVATE_TMP: Final = "/tmp"  # noqa: S108 - a fresh tmpfs inside the sandbox, private to it

SANDBOX_BIN: Final = "/opt/klavis/bin"
"""A read-only folder of symbolic links to the commands of :data:`SANDBOX_COMMANDS`, on the
confined ``PATH`` before its system folders."""
SANDBOX_COMMANDS: Final[tuple[str, ...]] = (
    "python",
    "python3",
    "pip",
    "pip3",
    "node",
    "npm",
    "npx",
    "git",
    "bash",
    "sh",
)
"""Commands a confined process finds on ``PATH`` where the host has them (see the module docs)."""

_SYSTEM_PATH: Final[tuple[str, ...]] = (
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
)
CONFINED_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
"""A confined MCP server's ``PATH`` (before :data:`SANDBOX_BIN` is added)."""
_PROBE_TIMEOUT: Final = 30.0
_TURN_OFF_HINT: Final = (
    "To run unconfined on purpose (executions and MCP servers then run as the emulator's "
    "user, with its network and files, and can call the loopback control routes unless "
    "the emulator has a --control-token), start the emulator with --no-confine, pass "
    f"EmulatorConfig(confine_executions=False), or set {CONFINE_ENV}=0."
)

ConfineSetting = Literal["auto", "on", "off"]


class ConfinementError(RuntimeError):
    """Confinement was wanted but does not work here (raised when the emulator starts)."""


@dataclass(frozen=True)
class Confinement:
    """Whether runs are confined with bubblewrap, a sentence saying why (not), and which
    ``bwrap`` (an absolute path) does it."""

    enabled: bool
    reason: str
    bwrap: str | None = None


@dataclass(frozen=True)
class Bind:
    """One more folder to mount: ``source`` (a host path) at ``target`` inside the sandbox."""

    source: Path
    target: str
    writable: bool = False


# ---------------------------------------------------------------------- the builder


def _base_python() -> str:
    """The interpreter the emulator's venv was made from (the emulator's own outside a venv)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return base if os.path.isfile(base) else sys.executable


def _beside(executable: str, names: Sequence[str]) -> str | None:
    """The first of ``names`` in the folder of ``executable`` (as given, then resolved)."""
    for folder in dict.fromkeys(
        [os.path.dirname(executable), os.path.dirname(os.path.realpath(executable))]
    ):
        for name in names:
            candidate = os.path.join(folder, name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    return None


@functools.cache
def sandbox_commands() -> Mapping[str, str]:
    """:data:`SANDBOX_COMMANDS` the host has: name -> the host executable its link names.
    Computed once per process.

    The service's image runs ``python``, and the system folders alone may have none (Debian
    ships ``python3`` only): ``python``/``python3`` are the base interpreter of the
    emulator's venv (no emulator packages; its ``pip`` where it has one), ``node``/``npm``/
    ``npx`` the ``node`` on the emulator's ``PATH`` (the one its npm servers run on) and the
    npm beside it, ``git``, ``bash`` and ``sh`` come from the system folders."""
    python = _base_python()
    found: dict[str, str | None] = {
        "python": python,
        "python3": python,
        "pip": _beside(python, ("pip", "pip3")),
        "pip3": _beside(python, ("pip3", "pip")),
    }
    node = shutil.which("node")
    if node is not None:
        node = os.path.abspath(node)
        found["node"] = node
        found["npm"] = _beside(node, ("npm",))
        found["npx"] = _beside(node, ("npx",))
    system_path = os.pathsep.join(_SYSTEM_PATH)
    for name in ("git", "bash", "sh"):
        found[name] = shutil.which(name, path=system_path)
    return {name: path for name in SANDBOX_COMMANDS if (path := found.get(name)) is not None}


def _command_roots() -> list[str]:
    """Folders the commands' links need mounted: each target's folder, or the npm package
    whose ``bin/`` holds it (``npm`` is a link to ``lib/node_modules/npm/bin/npm-cli.js``).
    Never a whole install prefix: a ``node`` in ``~/bin`` would bring the home folder."""
    roots: list[str] = []
    for target in sandbox_commands().values():
        folder = Path(os.path.realpath(target)).parent
        if folder.name == "bin" and (folder.parent / "package.json").is_file():
            folder = folder.parent
        roots.append(str(folder))
    return roots


def _command_args() -> list[str]:
    """The :data:`SANDBOX_BIN` folder and its links (made read-only by a later remount)."""
    args = ["--tmpfs", SANDBOX_BIN]
    for name, target in sandbox_commands().items():
        args += ["--symlink", target, f"{SANDBOX_BIN}/{name}"]
    return args


def _with_sandbox_bin(path: str) -> str:
    """``PATH`` with :data:`SANDBOX_BIN` before its first system folder (or last)."""
    parts = [part for part in path.split(os.pathsep) if part and part != SANDBOX_BIN]
    at = next((i for i, part in enumerate(parts) if part in _SYSTEM_PATH), len(parts))
    return os.pathsep.join([*parts[:at], SANDBOX_BIN, *parts[at:]])


def _system_args() -> list[str]:
    """``/usr`` and ``/etc`` read-only; ``/bin``, ``/lib``... as on the host (symlinks into
    ``/usr`` on a merged-/usr system, read-only binds otherwise)."""
    args: list[str] = []
    for folder in SYSTEM_READ_ONLY:
        if os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
    for name in MERGED_DIRS:
        host = Path("/", name)
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
    return args


def _covered(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def read_only_roots(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    """Folders to bind read-only at their own path: each given path as written and with
    symlinks resolved, existing folders only, without ``/``, the system folders (already
    mounted) and folders inside another one of the list."""
    candidates: list[str] = []
    for path in paths:
        for variant in (os.path.abspath(path), os.path.realpath(path)):
            if variant not in candidates and os.path.isdir(variant) and variant != "/":
                candidates.append(variant)
    roots: list[str] = []
    for path in sorted(candidates, key=lambda p: (p.count("/"), p)):
        if not _covered(path, (*roots, *SYSTEM_READ_ONLY)):
            roots.append(path)
    return roots


def link_chain(path: str) -> list[str]:
    """``path`` and each file its symbolic links pass through, up to the real file.

    The kernel follows every link of the chain inside the sandbox, so each one must be
    visible there: a venv made with another venv's ``python`` links to that ``python`` on
    Python 3.10 (3.11 and later link to the base interpreter), and where the outer venv sits
    under ``/tmp``, which the sandbox replaces, ``execvp`` found nothing.
    """
    chain = [os.path.abspath(path)]
    while os.path.islink(chain[-1]) and len(chain) <= 40:  # 40: the kernel's own limit
        target = os.path.join(os.path.dirname(chain[-1]), os.readlink(chain[-1]))
        chain.append(os.path.normpath(target))
    return chain


def python_roots(executable: str = sys.executable) -> list[str]:
    """Folders of the emulator's Python a confined process needs: its venv, its base
    install, and the install of every link on the way from one to the other."""
    prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    hops = [*link_chain(executable), os.path.realpath(executable)]
    return read_only_roots([*prefixes, *(os.path.dirname(os.path.dirname(hop)) for hop in hops)])


def bwrap_args(
    bwrap: str,
    *,
    workspace: Path,
    env: Mapping[str, str],
    chdir: str = CONFINED_WORKSPACE,
    read_only: Sequence[str | os.PathLike[str]] = (),
    binds: Sequence[Bind] = (),
    network: bool = False,
) -> list[str]:
    """The ``bwrap ... --`` arguments that confine one process (and the init that runs it,
    see :mod:`.host_paths`); append its command line.

    New namespaces for everything (network too, unless ``network``), no capabilities, the
    process dies with its parent and runs in a new session (no terminal to inject input
    into), an environment of exactly ``env``, but for :data:`SANDBOX_BIN` added to its
    ``PATH`` (when it has one). Mounts, in this order: a private tmpfs at ``/tmp`` (first,
    so that binds below ``/tmp`` survive: see the module docs), ``/proc``, ``/dev``, the
    system folders read-only, the masks over what others may not read there (as root), the
    commands' folder, the emulator's Python, the commands' installs and the folders in
    ``read_only`` read-only (overlays at :data:`~.host_paths.INSTALLS_DIR` linked from their
    own paths), ``workspace`` read-write at ``/data``, then ``binds`` (the read-only ones as
    overlays); last, the masks' folders and the commands' folder are made read-only. Where
    overlays do not work for this ``bwrap`` (see :func:`probe`), or the host lacks the init's
    programs (:func:`~.host_paths.init_programs`), the read-only trees are bound at their own
    paths instead (as before issue 32).
    """
    layered = bwrap not in _UNLAYERED and init_programs() is not None
    # Folders of a data folder with overlays are given as views (/proc/HOLDER/root/...):
    # bubblewrap then runs in the holder's namespaces, where their own paths are the
    # overlays (see .data_overlay).
    args = [*enter_args([workspace, *(bind.source for bind in binds)]), bwrap, "--unshare-all"]
    if network:
        args.append("--share-net")
    # --cap-drop ALL: bubblewrap 0.8.0 started as root left the process nearly every
    # capability (CapEff 000001fffeffffff measured), and with CAP_SYS_ADMIN it remounted a
    # read-only bind writable (a file it wrote appeared in the host's folder). Layered, the
    # init keeps two until its overlays are mounted, then drops all (see .host_paths).
    args += ["--die-with-parent", "--new-session", "--clearenv", "--cap-drop", "ALL"]
    sh = _init_shell()
    if sh is not None:
        args.append("--as-pid-1")  # the init below is PID 1: no bwrap process inside
    # The tmpfs first: a later mount hides what an earlier one put beneath it. Measured with
    # bubblewrap 0.8.0 and a venv at /tmp/x/.venv: "--ro-bind /tmp/x/.venv ... --tmpfs /tmp"
    # ends in "execvp /tmp/x/.venv/bin/python: No such file or directory"; this order runs.
    args += ["--tmpfs", PRIVATE_TMP, "--proc", "/proc", "--dev", "/dev"]
    args += _system_args()
    masks, read_only_masks = mask_args()
    args += masks
    args += _command_args()
    roots = read_only_roots([*python_roots(), *_command_roots(), *read_only])
    layers: list[Layer] = []
    if layered:
        for root in roots:
            layers.append(Layer(root, f"{INSTALLS_DIR}/{len(layers)}", link=root))
    else:
        for root in roots:
            args += ["--ro-bind", root, root]
    args += ["--bind", inside_path(workspace)[1], CONFINED_WORKSPACE]
    for bind in binds:
        source = inside_path(bind.source)[1]
        if layered and not bind.writable and bind.source.is_dir():
            layers.append(Layer(source, bind.target))
        else:
            args += ["--bind" if bind.writable else "--ro-bind", source, bind.target]
    args += layer_args(layers)
    if layers:
        args += LAYER_OPTIONS
    args += [*read_only_masks, "--remount-ro", SANDBOX_BIN]
    args += ["--chdir", chdir]
    for key, value in env.items():
        if key == "PATH":
            value = _with_sandbox_bin(value)
        args += ["--setenv", key, value]
    args.append("--")
    if sh is not None:
        args += init_prefix(sh, layers)
    return args


def _init_shell() -> str | None:
    """The ``sh`` of the system folders that runs as the sandbox's PID 1 (see
    :mod:`.host_paths`); ``None`` where there is none (bubblewrap's own init then)."""
    programs = init_programs()
    if programs is not None:
        return programs[0]
    found = shutil.which("sh", path=os.pathsep.join(_SYSTEM_PATH))
    if found is None or not _covered(os.path.abspath(found), ("/usr", "/bin")):
        return None
    return os.path.abspath(found)


_UNLAYERED: set[str] = set()
"""The ``bwrap`` paths whose probe found the layers not working (see :func:`probe`)."""


# ---------------------------------------------------------------------- the probe

_PROBE_CODE: Final = (
    "import os, sys\n"
    f"sys.exit(0 if os.path.isdir({CONFINED_WORKSPACE!r}) and os.getcwd() == "
    f"{CONFINED_WORKSPACE!r} else 3)\n"
)


def _trial(bwrap: str, code: str) -> tuple[str, str | None]:
    """Run ``code`` with this interpreter through :func:`bwrap_args` with ``bwrap``, as a
    confined MCP server's ``PATH`` has it: ``(stdout, None)`` when it exits with status 0,
    else ``("", a sentence saying what failed)``."""
    with tempfile.TemporaryDirectory(prefix="klavis-bwrap-probe-") as workspace:
        command = bwrap_args(
            bwrap,
            workspace=Path(workspace),
            env={"PATH": CONFINED_PATH, "LANG": "C.UTF-8"},
        )
        try:
            done = subprocess.run(
                [*command, sys.executable, "-c", code],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=_PROBE_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return "", f"a trial run under {bwrap} did not end within {_PROBE_TIMEOUT:g} s"
        except OSError as exc:
            return "", f"{bwrap} could not be started ({exc.strerror or exc})"
    if done.returncode == 0:
        return done.stdout.decode("utf-8", "replace"), None
    lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
    said = f": {lines[-1][:300]}" if lines else " and printed nothing"
    return "", f"a trial run under {bwrap} exited with status {done.returncode}{said}"


@functools.lru_cache(maxsize=8)
def probe(bwrap: str) -> str | None:
    """Run this interpreter once through :func:`bwrap_args` with ``bwrap``: ``None`` when
    that works, else a sentence saying what failed. Cached per ``bwrap`` path (once per
    process; about 20 ms measured)."""
    # Rejected: a probe per consumer (two probes drifted apart: executions ran unconfined
    # where MCP servers were confined); --ro-bind-try for the interpreter (a missing one
    # would only move the failure to the first run).
    problem = _trial(bwrap, _PROBE_CODE)[1]
    if problem is None or bwrap in _UNLAYERED or init_programs() is None:
        return problem
    _UNLAYERED.add(bwrap)  # try again with the read-only trees bound at their own paths
    if _trial(bwrap, _PROBE_CODE)[1] is None:
        logger.warning(
            "confined processes can read the host paths of the emulator's Python and the "
            "servers' installs in /proc/self/mountinfo: mounting them as overlays failed (%s)",
            problem,
        )
        return None
    _UNLAYERED.discard(bwrap)
    return problem


_MISSING_CODE: Final = (
    "import shutil\n"
    f"print(*[name for name in {SANDBOX_COMMANDS!r} if shutil.which(name) is None])\n"
)


def missing_commands(bwrap: str | None) -> list[str]:
    """The commands of :data:`SANDBOX_COMMANDS` a process cannot run by name: inside the
    confinement of ``bwrap`` (asked there, on a confined server's ``PATH``), or, with
    ``None``, unconfined on this process's ``PATH``.

    Raises:
        ConfinementError: the trial run under ``bwrap`` failed (the message says how).
    """
    if bwrap is None:
        return [name for name in SANDBOX_COMMANDS if shutil.which(name) is None]
    said, problem = _trial(bwrap, _MISSING_CODE)
    if problem is not None:
        raise ConfinementError(problem)
    return said.split()


def detect_confinement() -> Confinement:
    """Whether bubblewrap is installed and works here (probed once), without the policy:
    never raises. :func:`decide_confinement` is what the emulator uses."""
    found = shutil.which("bwrap")
    if found is None:
        return Confinement(False, "bubblewrap (bwrap) is not installed")
    found = os.path.abspath(found)
    problem = probe(found)
    if problem is not None:
        return Confinement(False, f"bubblewrap does not work here: {problem}")
    return Confinement(True, f"confined with bubblewrap ({found})", found)


# ---------------------------------------------------------------------- the policy


def _env_name(environ: Mapping[str, str]) -> str:
    """The variable that decides: the new name when set, else the older one."""
    return CONFINE_ENV if environ.get(CONFINE_ENV, "").strip() else LEGACY_CONFINE_ENV


def _env_setting(environ: Mapping[str, str]) -> str:
    """``NAME=value`` of the deciding variable, for messages."""
    name = _env_name(environ)
    return f"{name}={environ.get(name, '').strip()}"


def confine_setting_from_env(environ: Mapping[str, str] | None = None) -> ConfineSetting:
    """``$KLAVIS_EMULATOR_CONFINE`` (or the older ``$KLAVIS_EMULATOR_MCP_CONFINE``):
    ``0``/``false``/``no``/``off``, ``1``/``true``/``yes``/``on``, or ``auto`` (unset).

    Raises:
        ConfinementError: for any other value (a typo must not decide about confinement).
    """
    environ = os.environ if environ is None else environ
    name = _env_name(environ)
    value = environ.get(name, "").strip().lower()
    if value in ("", "auto"):
        return "auto"
    if value in ("0", "false", "no", "off"):
        return "off"
    if value in ("1", "true", "yes", "on"):
        return "on"
    raise ConfinementError(
        f"{name}={environ[name]!r} is not understood: use 0 (never confine), 1 (always "
        "confine) or auto."
    )


def decide_confinement(
    requested: bool = True, *, environ: Mapping[str, str] | None = None
) -> Confinement:
    """Whether this emulator confines executions and MCP servers (see the module docs).

    ``requested=False`` (``--no-confine``, ``confine_executions=False``) or the environment
    variable set to ``0`` turn confinement off. Otherwise bubblewrap is used where it is
    installed, and must work.

    Raises:
        ConfinementError: bwrap is installed but a trial run fails (or the variable is
            ``1`` and bwrap is missing); the message names the reason and the way out.
    """
    environ = os.environ if environ is None else environ
    if not requested:
        return Confinement(False, "confinement was turned off (--no-confine)")
    setting = confine_setting_from_env(environ)
    if setting == "off":
        return Confinement(False, f"confinement turned off by {_env_setting(environ)}")
    found = shutil.which("bwrap")
    if found is None:
        if setting == "on":
            raise ConfinementError(
                f"{_env_setting(environ)} asks for confinement, "
                "but bubblewrap (bwrap) is not installed: install it (e.g. apt-get install "
                f"bubblewrap) or set {CONFINE_ENV}=0."
            )
        return Confinement(False, "bubblewrap (bwrap) is not installed")
    found = os.path.abspath(found)
    problem = probe(found)
    if problem is not None:  # an error, not a warning: a line in every log went unseen
        raise ConfinementError(
            f"bubblewrap is installed but cannot confine executions here: {problem}. "
            "Confinement keeps each execution and MCP server to its own sandbox: make "
            "bubblewrap work (a common cause is that unprivileged user namespaces are turned "
            f"off; try `{found} --unshare-all --ro-bind / / true`). " + _TURN_OFF_HINT
        )
    return Confinement(True, f"confined with bubblewrap ({found})", found)
