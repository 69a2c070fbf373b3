"""The steps a flow yields (:mod:`workflows._flows`), and what a flow is: the vocabulary shared by
the flows, the drivers that carry steps out (:mod:`workflows._drivers`) and every lower module
that writes a flow step of its own (the host limits' turn, :mod:`workflows._host_limits`; the
spans around a flow, :mod:`workflows._tracing`).

Its own module, below all of them, so that those lower modules need not import the flows (which
import them: the cycle this module removed; ``pyproject.toml``'s import contracts keep it out).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Protocol, TypeVar

from ._progress import Progress

if TYPE_CHECKING:
    from klavis_sandbox_client.types import Response

__all__ = [
    "Act",
    "Blocking",
    "Call",
    "Download",
    "DownloadSink",
    "Flow",
    "Operation",
    "Sleep",
    "Step",
    "Upload",
]

T = TypeVar("T")


class Operation(Protocol):
    """A generated endpoint module (``klavis_sandbox_client.api.local_sandbox.<name>``): what
    every one of them has, so a :class:`Call` can carry the module itself."""

    @property
    def __name__(self) -> str: ...

    @property
    def sync_detailed(self) -> Callable[..., Response[Any]]: ...

    @property
    def asyncio_detailed(self) -> Callable[..., Awaitable[Response[Any]]]: ...


@dataclass(frozen=True)
class Call:
    """Call the generated operation ``op`` (its ``sync_detailed`` or ``asyncio_detailed``) with
    ``kwargs``; retried after an ambiguous failure only when ``retry``."""

    op: Operation
    retry: bool
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The operation's name, e.g. ``release_local_sandbox`` (its operationId)."""
        return self.op.__name__.rpartition(".")[2]


@dataclass(frozen=True)
class Upload:
    """PUT ``size`` bytes of ``fileobj`` to a signed URL."""

    url: str
    fileobj: IO[bytes]
    size: int
    progress: Progress


class DownloadSink(Protocol):
    """Where a :class:`Download` writes: a binary file, or anything that is rewound and emptied
    like one before each attempt (``seek(0)``, ``truncate()``) and then written in order (the
    dump's :class:`~workflows._dump._read_along.ReadAlong`)."""

    def write(self, data: bytes, /) -> int: ...

    def seek(self, offset: int, whence: int = 0, /) -> int: ...

    def truncate(self, size: int | None = None, /) -> int: ...


@dataclass(frozen=True)
class Download:
    """GET a signed URL (a tar.gz) into ``sink``; returns the bytes written.

    The driver refuses a body that does not start like gzip and stops at ``max_bytes`` (None:
    no cap). With ``timeout`` (seconds) the whole transfer, retries included, ends after it;
    with None there is no deadline for the whole transfer, but a download that receives fewer
    than 64 KiB within any window of the settings' timeout (60 s by default) is ended as too
    slow, and each read waits at most the settings' timeout. Both end with
    :class:`~workflows.TransferTimeoutError` (see ``workflows._transfer.DownloadGuard``).
    """

    url: str
    sink: DownloadSink
    progress: Progress
    max_bytes: int | None = None
    timeout: float | None = None


@dataclass(frozen=True)
class Blocking:
    """Run ``fn(*args, **kwargs)``: CPU or disk work the async driver moves to a thread."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Act:
    """Do ``fn(*args)``, an action of the face that runs the flow (a pool's take, attempt,
    reset, retire): the sync driver calls it, the async driver awaits the coroutine it
    returns. Its result is the step's; its exception is thrown into the flow."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Sleep:
    """Wait ``seconds`` (``time.sleep``, or ``asyncio.sleep`` in the async driver)."""

    seconds: float


Step = Call | Upload | Download | Blocking | Act | Sleep
Flow = Generator[Step, Any, T]
