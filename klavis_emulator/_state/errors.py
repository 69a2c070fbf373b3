"""The state's errors: one tree under :class:`EmulatorError`, each message meant for the caller.

::

    EmulatorError                  400 unless said otherwise (its ``status``)
    ├── SandboxNotFound            404: no such live sandbox for this tenant
    ├── ServerNotInSandbox         400: the sandbox does not hold that MCP server
    ├── NoUploadedArchive          409: initialize/execute before any upload
    ├── ObjectNotFound             404: a signed URL's object is gone
    ├── UploadTooLarge             413: over the upload cap
    ├── OutOfSpace                 507: the emulator's disk is full (or a file size limit)
    ├── InvalidExecutionName       400: not a safe folder/object name
    ├── ExecutionNotFound          404: no execution of that name
    └── ExecutionConflict          409: still running, or not finished yet
"""

from __future__ import annotations

import errno
from typing import ClassVar

__all__ = [
    "EmulatorError",
    "ExecutionConflict",
    "ExecutionNotFound",
    "InvalidExecutionName",
    "NO_SPACE_ERRNOS",
    "NoUploadedArchive",
    "ObjectNotFound",
    "OutOfSpace",
    "SandboxNotFound",
    "ServerNotInSandbox",
    "UploadTooLarge",
]


class EmulatorError(Exception):
    """Base class of the state's errors; the message is meant for the API's caller."""

    status: ClassVar[int] = 400
    """The HTTP status the API answers it with."""


class SandboxNotFound(EmulatorError):
    """No live sandbox with that id belongs to the caller's tenant."""

    status = 404

    def __init__(self, sandbox_id: str) -> None:
        shown = sandbox_id if len(sandbox_id) <= 80 else sandbox_id[:80] + "..."
        super().__init__(
            f"Local sandbox {shown!r} not found: it does not exist, was released, "
            "or belongs to another API key."
        )
        self.sandbox_id = sandbox_id


class ServerNotInSandbox(EmulatorError):
    """The sandbox exists but does not hold the requested MCP server."""


class NoUploadedArchive(EmulatorError):
    """``initialize`` was called before any archive was uploaded (for that region)."""

    status = 409


class ObjectNotFound(EmulatorError):
    """A signed URL names an object that does not exist (any more)."""

    status = 404


class UploadTooLarge(EmulatorError):
    """An upload exceeds the emulator's size cap."""

    status = 413


class OutOfSpace(EmulatorError):
    """The emulator could not write what a request needs: its disk is full, a quota or the
    process's file size limit was reached. Nothing half-written is kept."""

    status = 507

    def __init__(self, doing: str, error: OSError) -> None:
        code = errno.errorcode.get(error.errno or 0, "")
        reason = f"{error.strerror or type(error).__name__}{f' ({code})' if code else ''}"
        super().__init__(
            f"The emulator ran out of disk space {doing}: {reason}. Free space on the "
            "emulator's machine (or raise its limits) and try again."
        )


NO_SPACE_ERRNOS: frozenset[int] = frozenset(
    getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EFBIG") if hasattr(errno, name)
)
"""What writing raises when the disk, a quota or the file size limit is full."""


class InvalidExecutionName(EmulatorError):
    """An execution name that cannot name a folder or an object (path separators, ...)."""


class ExecutionNotFound(EmulatorError):
    """The sandbox has no execution of that name (none was started)."""

    status = 404


class ExecutionConflict(EmulatorError):
    """The execution is in the wrong state: still running, or not finished yet."""

    status = 409
