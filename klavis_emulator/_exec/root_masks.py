"""What a confined process must not see of the system folders when the emulator runs as root.

A confined process of a root emulator is uid 0 without capabilities, so the owner bits of
root's files would let it read them: the builder (:mod:`.confinement`) hides from its system
view every file the host's unprivileged users cannot read (covered by ``/dev/null``) and
every folder they cannot list or enter (an empty tmpfs of mode 0111). "Others" bits are the
rule; ACLs and group bits are not consulted; links are not followed. The emulator's own
installs are not walked. (Moved here from :mod:`.confinement` to keep it under 600 lines.)
"""

from __future__ import annotations

import functools
import os
import stat
from pathlib import Path
from typing import Final

__all__ = ["MERGED_DIRS", "SYSTEM_READ_ONLY", "mask_args", "masked_paths", "system_folders"]

SYSTEM_READ_ONLY: Final[tuple[str, ...]] = ("/usr", "/etc")
"""The system folders every sandbox gets read-only."""
MERGED_DIRS: Final[tuple[str, ...]] = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
"""Top-level folders that are links into ``/usr`` on a merged-/usr system (else folders)."""
_MASK_FILE_SOURCE: Final = "/dev/null"
_MASK_FOLDER_MODE: Final = "0111"


def system_folders() -> list[str]:
    """The host folders :func:`_system_args` binds read-only (``/usr``, ``/etc``, and
    ``/bin``... where they are folders rather than links into ``/usr``)."""
    folders = [folder for folder in SYSTEM_READ_ONLY if os.path.isdir(folder)]
    for name in MERGED_DIRS:
        host = Path("/", name)
        if not host.is_symlink() and host.is_dir():
            folders.append(str(host))
    return folders


def _hidden_from_others(root: str) -> tuple[list[str], list[str]]:
    """Below ``root``, the files others may not read and the folders they may not list or
    enter (not descended into), symbolic links skipped: ``(files, folders)``.

    ``os.scandir`` by hand rather than ``os.walk``: the mode of every entry is needed, and
    scandir's own type answers spare a ``stat`` for each symbolic link."""
    files: list[str] = []
    folders: list[str] = []
    pending = [root]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:  # vanished, or not listable even by root: hide it rather than guess
            if folder != root:
                folders.append(folder)
            continue
        for entry in entries:
            try:
                if entry.is_symlink():
                    continue
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                if mode & (stat.S_IROTH | stat.S_IXOTH) != stat.S_IROTH | stat.S_IXOTH:
                    folders.append(entry.path)
                else:
                    pending.append(entry.path)
            elif not mode & stat.S_IROTH:
                files.append(entry.path)
    return files, folders


@functools.cache
def masked_paths() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What a confined process must not see of the system folders: ``(files, folders)``
    the host's unprivileged users cannot read, when this process runs as root; nothing
    otherwise (a confined process then runs as this unprivileged user). Computed once per
    process: measured on a 2-core machine shared with other jobs, 2-9 ms for ``/etc``
    (1,268 entries) and 0.45-1.0 s for ``/usr`` (141,279 entries) with a warm cache, 2.1 s
    on the first walk after boot (``find`` takes about as long, a thread per subfolder
    longer)."""
    # Rejected: running bwrap itself as another host user (setpriv --reuid): the workspace
    # the emulator writes as root would then not be the sandbox's.
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return (), ()
    files: list[str] = []
    folders: list[str] = []
    for root in system_folders():
        found_files, found_folders = _hidden_from_others(root)
        files += found_files
        folders += found_folders
    return tuple(sorted(files)), tuple(sorted(folders))


def mask_args() -> tuple[list[str], list[str]]:
    """The mounts that hide :func:`masked_paths`, and the remounts that make its folders
    read-only (given last: a read-only folder takes no mount point for a later bind)."""
    files, folders = masked_paths()
    args: list[str] = []
    for path in files:
        args += ["--ro-bind", _MASK_FILE_SOURCE, path]
    for path in folders:
        args += ["--perms", _MASK_FOLDER_MODE, "--tmpfs", path]
    return args, [arg for path in folders for arg in ("--remount-ro", path)]
