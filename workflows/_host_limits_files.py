"""The host limits' folder and files, opened without following anyone's links.

``host-limits/<digest>/`` of the state folder and its files (the slots' lock files, the rate's
turns) are opened as :mod:`workflows._state_files` opens every file of the state folder:
relative to descriptors, with ``O_NOFOLLOW`` and ``O_NONBLOCK``, owner, mode and links checked
(the first version opened them by path: another user's link in a shared state folder had a root
harness truncate a 0600 file of root's; a FIFO in a slot's place hung an acquire past its pool's
close). Anything refused, and any ``OSError`` there, is a :class:`~workflows.ConfigurationError`
naming the path: limits asked for and not kept would be exceeded silently.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from ._errors import ConfigurationError
from ._state_files import (
    UnsafeStateFile,
    open_private_file,
    open_private_folder,
    open_state_folder,
)

__all__ = ["LimitsFolder", "cannot_keep_limits"]

_WAY_OUT = "point $KLAVIS_SANDBOX_STATE_DIR at a folder of your own that only you can write"


@contextlib.contextmanager
def cannot_keep_limits(where: Path) -> Iterator[None]:
    """An OSError in the limits' folder as a ConfigurationError naming it, and a refusal of
    :mod:`workflows._state_files` as one naming the path and why: limits asked for and not
    kept would be exceeded silently."""
    try:
        yield
    except UnsafeStateFile as exc:
        raise ConfigurationError(
            f"cannot keep the host limits in {exc.where}: {exc.why}; {_WAY_OUT}"
        ) from None
    except OSError as exc:
        raise ConfigurationError(
            f"cannot keep the host limits in {where} ({exc.strerror or exc}); make the state "
            f"folder writable or point $KLAVIS_SANDBOX_STATE_DIR at one that is"
        ) from exc


class LimitsFolder:
    """The open ``host-limits/<digest>/`` folder of one base URL and key; a context manager
    that closes it. :meth:`open_file` opens one of its files."""

    def __init__(self, state: Path, digest: str) -> None:
        self.path = state / "host-limits" / digest
        with cannot_keep_limits(state):
            top = open_state_folder(state)
        try:
            with cannot_keep_limits(state / "host-limits"):
                limits = open_private_folder(top, "host-limits", state / "host-limits")
            try:
                with cannot_keep_limits(self.path):
                    self.fd = open_private_folder(limits, digest, self.path)
            finally:
                os.close(limits)
        finally:
            os.close(top)

    def __repr__(self) -> str:
        return f"LimitsFolder({str(self.path)!r})"

    def open_file(self, name: str) -> int:
        """Open (make, 0600) the file ``name`` of this folder for reading and writing, never
        through a link, never blocking: ConfigurationError naming it unless it is a regular
        file of this user's with one link, which no one else can write."""
        where = self.path / name
        with cannot_keep_limits(where):
            return open_private_file(self.fd, name, where, os.O_RDWR | os.O_CREAT)

    def close(self) -> None:
        """Close the folder (idempotent)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> LimitsFolder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
