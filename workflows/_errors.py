"""The errors `workflows` raises, all under one root.

Every error the library raises on purpose derives from :class:`KlavisError`::

    KlavisError
    ├── ConfigurationError          no API key, a malformed base URL, a bad .env file
    │   ├── MissingExtraError           an optional dependency is not installed (names the extra)
    │   └── EmulatorStartError      EmulatorProcess found no klavis-emulator, or it did not listen
    ├── InvalidInputError (ValueError)   bad input caught before anything is sent
    │   ├── InvalidSeedPathError         a seed key that is absolute, has "..", NUL, or collides
    │   ├── FileTooLargeError            a file over ``max_file_size`` while seeding a folder
    │   ├── SourceChangedError           a planned file changed before it was packed (a link swap)
    │   └── SeedTemplateError            a seed template's archive is gone or not its digest's
    ├── UnsafeArchiveError (ValueError)  an archive that would escape its folder, or is too big
    ├── ApiConnectionError          the API could not be reached (DNS, refused, reset)
    │   └── ApiTimeoutError         the API did not answer in time
    ├── ApiError                    the API answered with an error status
    │   ├── BadRequestError             400
    │   ├── AuthenticationError         401, 403
    │   ├── NotFoundError               404 (unknown, released, or another key's sandbox)
    │   ├── ConflictError               409
    │   ├── RequestValidationError      422, with the field messages in ``errors``
    │   ├── RateLimitError              429, with ``retry_after``
    │   └── ServerError                 5xx
    ├── TransferError               a signed-URL upload or download failed
    │   └── TransferTimeoutError        a download did not finish within its timeout
    ├── AcquireAmbiguousError       an acquire failed in a way that could not be reconciled
    ├── LocalWriteError (OSError)   writing on this machine failed: disk or quota full, EFBIG
    ├── McpError                    an MCP server answered an error, or a tool failed
    ├── ExecutionTimeoutError (TimeoutError)   ``Execution.wait(timeout=...)`` ran out
    ├── TaskTimeoutError (TimeoutError)        a pool's task ran past ``map(timeout=...)``
    ├── WorkerDiedError             the process running a pool's task died (a Ray worker, a node)
    ├── LeaseExpiredError           the Ray broker ended a lease its holder still used (says why)
    └── BrokerUnavailableError      the Ray broker died and no other came back in time

Messages never contain the API key or a signed URL's query string. A message that quotes a
tool's output or an MCP server's answer carries, for OpenTelemetry spans, one without the quote
(:func:`span_message`). The public ones are listed
once, in ``workflows.__all__``; this module has no ``__all__`` to repeat them.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar


class KlavisError(Exception):
    """The root of every error raised by `workflows`."""

    _span_message: str | None = None
    """What a span records as the message (:func:`span_message`), where the message itself
    quotes a tool's output or an MCP server's answer; None: the message is the library's own."""

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its attributes, never by calling ``__init__`` again: ``Exception``'s
        own pickling calls ``cls(*args)``, which the errors with keyword-only arguments
        (``ServerError(message, status_code=503)``) refuse, so such an error raised in a Ray or
        process-pool worker did not reach the pool at all, nor its failure kind."""
        state = dict(self.__dict__)
        if isinstance(self, OSError):  # kept by OSError itself, not in __dict__
            state.update(errno=self.errno, strerror=self.strerror, filename=self.filename)
        return (_unpickle_error, (type(self), self.args, state))


def _unpickle_error(
    cls: type[KlavisError], args: tuple[Any, ...], state: dict[str, Any]
) -> KlavisError:
    """A :class:`KlavisError` made again from its pickle: its class, ``args`` and attributes,
    without running its ``__init__``."""
    error = cls.__new__(cls, *args)
    error.args = args  # an OSError whose class has an __init__ of its own leaves them to it
    for name, value in state.items():
        setattr(error, name, value)
    return error


_E = TypeVar("_E", bound=KlavisError)


def for_spans(error: _E, message: str) -> _E:
    """``error``, whose message quotes what a tool or an MCP server said, with ``message`` (the
    library's own words, without the quote) as what spans record of it."""
    error._span_message = message
    return error


def span_message(error: KlavisError) -> str:
    """What a span may record of ``error``'s message: never a tool's output or arguments.

    >>> span_message(for_spans(McpError("tool 'grep' failed: secret"), "tool 'grep' failed"))
    "tool 'grep' failed"
    """
    return str(error) if error._span_message is None else error._span_message


class ConfigurationError(KlavisError):
    """The library is not configured well enough to talk to the API (for example, no key)."""


class MissingExtraError(ConfigurationError):
    """A feature needs an extra that is not installed; the message says how to install it.

    >>> str(MissingExtraError("talking to MCP servers", extra="mcp"))
    "talking to MCP servers needs the mcp extra: pip install 'klavis-sandbox[mcp]'"
    """

    def __init__(self, feature: str, *, extra: str, detail: str = "") -> None:
        install = f"pip install 'klavis-sandbox[{extra}]'"
        if extra == "emulator" and (pinned := _pinned_mcp()) is not None:
            install = (
                f"not with {install} here, which would replace this environment's mcp "
                f"{pinned} with mcp 2.x; install the emulator as a tool of its own, uv tool "
                "install 'klavis-sandbox[emulator]' (or pipx install "
                "'klavis-sandbox[emulator]'), and start it from here with "
                "workflows.EmulatorProcess()"
            )
        super().__init__(f"{feature} needs the {extra} extra{detail}: {install}")
        self.extra = extra


def _pinned_mcp() -> str | None:
    """The ``mcp`` installed here when it is 1.x (a harness's pin, which the emulator extra's
    ``mcp>=2.3`` would replace); else None. The emulator's own hint
    (``klavis_emulator._extra.pinned_mcp``) asks the same: the two packages share no code."""
    import importlib.metadata

    try:
        version = importlib.metadata.version("mcp")
    except importlib.metadata.PackageNotFoundError:
        return None
    return version if version.split(".", 1)[0] in ("0", "1") else None


class EmulatorStartError(ConfigurationError):
    """:class:`~workflows.EmulatorProcess` found no ``klavis-emulator`` that can serve, or it
    stopped (or printed no URL in time) before it listened; the message says which, with the
    command and its last lines of output."""


class InvalidInputError(KlavisError, ValueError):
    """An argument is wrong; raised before any request is sent."""


class InvalidSeedPathError(InvalidInputError):
    """A path given for seeding is unsafe or ambiguous (absolute, ``..``, NUL, or a collision)."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class FileTooLargeError(InvalidInputError):
    """A file is larger than the ``max_file_size`` allowed while seeding a folder."""

    def __init__(self, path: str, *, size: int, limit: int) -> None:
        super().__init__(
            f"{path!r} is {size:,} bytes, over the max_file_size of {limit:,} bytes; "
            "raise max_file_size or add it to ignore="
        )
        self.path = path
        self.size = size
        self.limit = limit


class SourceChangedError(InvalidInputError):
    """A file of a folder being packed (seeded, executed, read into a snapshot or a template)
    changed between planning and packing: it disappeared, was put in another file's place or
    swapped for a symbolic link, or a folder on its path was. ``path`` names the entry on
    disk; ``reason`` says how it changed. Nothing of what replaced it was read, and nothing was
    sent: run the operation again once the folder stops changing.

    >>> print(SourceChangedError("a.txt", "it was replaced by a link"))  # doctest: +ELLIPSIS
    'a.txt' changed after it was planned: it was replaced by a link; nothing was sent...
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(
            f"{path!r} changed after it was planned: {reason}; nothing was sent (try again "
            "once the folder stops changing)"
        )
        self.path = path
        self.reason = reason


class SeedTemplateError(InvalidInputError):
    """A :class:`~workflows.SeedTemplate`'s archive cannot be used: it is no longer in the
    cache (removed, or evicted to keep the cache under its size), or it is not the archive its
    digest names (a cached file damaged or changed on disk, bytes damaged on their way from
    another process). It is never uploaded. ``digest`` is the template's; make the template
    again from its source."""

    def __init__(self, message: str, *, digest: str) -> None:
        super().__init__(message)
        self.digest = digest


class UnsafeArchiveError(KlavisError, ValueError):
    """An archive holds a member that could escape its folder, or exceeds the configured caps."""

    def __init__(self, message: str, *, member: str | None = None) -> None:
        super().__init__(message)
        self.member = member


class _RequestFailed(KlavisError):
    """A request to the API that failed, reached or not: ``method`` and ``path`` (without query
    string) say which. Not drawn in the tree above: only its two kinds are raised."""

    def __init__(self, message: str, *, method: str | None = None, path: str | None = None) -> None:
        super().__init__(message)
        self.method = method
        self.path = path


class ApiConnectionError(_RequestFailed):
    """The API could not be reached."""


class ApiTimeoutError(ApiConnectionError):
    """The API did not answer within the timeout."""


class ApiError(_RequestFailed):
    """The API answered with an error status.

    Attributes:
        status_code: the HTTP status.
        message: the API's own explanation (its ``detail``), or a summary of the body.
        sandbox_id: the sandbox the request was about, when there was one.
        method, path: the request, without query string.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        sandbox_id: str | None = None,
        method: str | None = None,
        path: str | None = None,
        body: Any = None,
    ) -> None:
        where = f" ({method} {path})" if method and path else ""
        super().__init__(f"{status_code}{where}: {message}", method=method, path=path)
        self.message = message
        self.status_code = status_code
        self.sandbox_id = sandbox_id
        self.body = body


class BadRequestError(ApiError):
    """400: the API refused the request as malformed (for example, an archive that is not gzip)."""


class AuthenticationError(ApiError):
    """401 or 403: the API key is missing, unknown, or not allowed to do this."""


class NotFoundError(ApiError):
    """404: the sandbox does not exist, was released, or belongs to another API key."""


class ConflictError(ApiError):
    """409: the request does not fit the sandbox's state (for example, initialize before upload)."""


class RequestValidationError(ApiError):
    """422: the API rejected fields of the request; ``errors`` lists ``(location, message)``."""

    def __init__(
        self, message: str, *, errors: Sequence[tuple[str, str]] = (), **kwargs: Any
    ) -> None:
        super().__init__(message, **kwargs)
        self.errors = list(errors)


class RateLimitError(ApiError):
    """429: too many requests; ``retry_after`` is the server's advice in seconds, if any."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class ServerError(ApiError):
    """5xx: the API failed; safe operations are retried before this is raised."""


class TransferError(KlavisError):
    """An upload to, or a download from, a signed URL failed.

    ``status_code`` is the storage's answer (None when it could not be reached). The signed URL's
    query string, which works as a password, is never part of the message.
    """

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class TransferTimeoutError(TransferError):
    """A download from a signed URL did not finish within the ``timeout=`` given (which bounds
    the whole transfer, retries included), or, without one, received fewer than 64 KiB within a
    window of the settings' timeout: a store that trickles bytes cannot hold the call for ever.
    ``timeout`` is that bound or that window. Never retried: the time is spent.
    """

    def __init__(self, message: str, *, timeout: float) -> None:
        super().__init__(message)
        self.timeout = timeout


class AcquireAmbiguousError(KlavisError):
    """Acquire failed in a way that left it unknown whether a sandbox was created.

    Raised only when reconciling (listing the key's sandboxes) also failed; ``cause`` holds the
    original error. Run ``klavis-sandbox reap`` to release anything the ledger still holds.
    """


class LocalWriteError(KlavisError, OSError):
    """Writing a dump on this machine failed: the disk or the user's quota is full
    (ENOSPC, EDQUOT), a file size limit was reached (EFBIG: ``ulimit -f``, a file system's
    largest file), or the device failed (EIO). Nothing partial is left at the destination.

    An :class:`OSError` too (what such failures were before), with the ``errno`` and
    ``strerror`` of its ``cause``; ``filename`` and ``path`` are the destination named by the
    caller (or the temporary folder, when that is what filled up).

    >>> import errno, os
    >>> cause = OSError(errno.EFBIG, os.strerror(errno.EFBIG))
    >>> err = LocalWriteError("cannot dump to 'out': File too large", path="out", cause=cause)
    >>> err.errno == errno.EFBIG, str(err)
    (True, "cannot dump to 'out': File too large")
    """

    def __init__(self, message: str, *, path: str, cause: OSError | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.filename = path
        if cause is not None:
            self.errno = cause.errno
            self.strerror = cause.strerror

    def __str__(self) -> str:  # OSError's own would show "[Errno 27] ..." without the message
        return str(self.args[0])


class McpError(KlavisError):
    """An MCP server answered a request with an error, or a tool reported a failure.

    Attributes:
        code: the JSON-RPC error code (None for a tool's own failure, see ``result``).
        tool: the tool called, when there was one.
        result: the failed :class:`~workflows.ToolResult` (from ``ToolResult.raise_for_error``).
        connection_lost: true when the session, not the server's answer, failed: it ended
            during the call or before it (closed by the other side, not by the caller), or the
            SDK's own request timed out (JSON-RPC ``CONNECTION_CLOSED`` / ``REQUEST_TIMEOUT``).
            A pool counts such a failure as ``"infrastructure"``, any other as ``"task"``.
    """

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        tool: str | None = None,
        result: ToolResult | None = None,
        connection_lost: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.tool = tool
        self.result = result
        self.connection_lost = connection_lost


# Here, beside the McpError that holds a failed one, not in workflows._mcp: each names the other,
# and the MCP client (which re-exports this class, as does `workflows`) builds on this module, so
# a ToolResult there made the import cycle pyproject.toml's import contracts now keep out.
@dataclass(frozen=True)
class ToolResult:
    """What a tool call returned.

    Attributes:
        tool: the tool called.
        text: the text of every text content block, joined with newlines.
        is_error: whether the tool reported a failure (then ``text`` says why).
        structured: the structured content, when the tool returns one (else None).
        content: the raw content blocks (``mcp`` types: text, image, resource...).
    """

    tool: str
    text: str
    is_error: bool = False
    structured: Any = None
    content: tuple[Any, ...] = field(default=(), repr=False)

    def __str__(self) -> str:
        return self.text

    def raise_for_error(self) -> ToolResult:
        """Raise :class:`McpError` if the tool failed; return the result otherwise."""
        if self.is_error:
            summary = self.text.strip()[:500] or "no explanation"
            error = McpError(f"tool {self.tool!r} failed: {summary}", tool=self.tool, result=self)
            raise for_spans(error, f"tool {self.tool!r} failed")
        return self


class ExecutionTimeoutError(KlavisError, TimeoutError):
    """``wait(timeout=...)`` ran out before the execution finished (it keeps running)."""


class TaskTimeoutError(KlavisError, TimeoutError):
    """A pool's task ran past its ``timeout``: it was abandoned and its sandbox replaced (only
    recorded in the task's result, never raised out of ``map``)."""


class WorkerDiedError(KlavisError):
    """The process that ran a pool's task died under it (a Ray worker killed, its node lost,
    its task cancelled by someone else): an ``"infrastructure"`` failure, retried when the
    run's ``retries`` allow. Only recorded in the task's result, never raised out of ``map``.
    The message names what the engine reported (for Ray, the ``ray.exceptions`` class)."""


def _detail_text(body: Any) -> tuple[str, list[tuple[str, str]]]:
    """Extract a readable message and the field errors from an error body."""
    if isinstance(body, Mapping):
        detail = body.get("detail", body.get("message"))
        if isinstance(detail, str):
            return detail, []
        if isinstance(detail, list):
            errors: list[tuple[str, str]] = []
            for item in detail:
                if isinstance(item, Mapping):
                    loc = item.get("loc", ())
                    where = ".".join(str(p) for p in loc) if isinstance(loc, list | tuple) else ""
                    errors.append((where, str(item.get("msg", item))))
                else:
                    errors.append(("", str(item)))
            text = "; ".join(f"{w}: {m}" if w else m for w, m in errors)
            return text or "validation failed", errors
    if isinstance(body, str) and body.strip():
        return body.strip()[:500], []
    return "", []


_REASONS = {
    400: "bad request",
    401: "not authenticated: check KLAVIS_API_KEY",
    403: "forbidden",
    404: "not found",
    409: "conflict",
    422: "validation failed",
    429: "rate limited",
}


def error_from_status(
    status_code: int,
    body: Any,
    *,
    sandbox_id: str | None = None,
    method: str | None = None,
    path: str | None = None,
    retry_after: float | None = None,
) -> ApiError:
    """Map an error status and its decoded body to the matching :class:`ApiError` subclass.

    >>> err = error_from_status(404, {"detail": "Local sandbox x not found"}, sandbox_id="x")
    >>> type(err).__name__, err.message
    ('NotFoundError', 'Local sandbox x not found')
    """
    message, errors = _detail_text(body)
    if not message:
        message = _REASONS.get(status_code, "server error" if status_code >= 500 else "error")
    common: dict[str, Any] = {
        "status_code": status_code,
        "sandbox_id": sandbox_id,
        "method": method,
        "path": path,
        "body": body,
    }
    if status_code == 422:
        return RequestValidationError(message, errors=errors, **common)
    if status_code == 429:
        return RateLimitError(message, retry_after=retry_after, **common)
    cls: type[ApiError]
    if status_code == 400:
        cls = BadRequestError
    elif status_code in (401, 403):
        cls = AuthenticationError
    elif status_code == 404:
        cls = NotFoundError
    elif status_code == 409:
        cls = ConflictError
    elif status_code >= 500:
        cls = ServerError
    else:
        cls = ApiError
    return cls(message, **common)


RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})


def retry_backoff(exc: Exception) -> bool | float:
    """stamina backoff hook: which failures of a *safe* operation are worth another try.

    Returns False (give up), True (default backoff) or the seconds the server asked for. Here,
    beside the tree it reads, and not with the HTTP plumbing (:mod:`workflows._transport`): the
    flows ask it too, and they are imported with ``workflows``, where httpx is not.

    >>> retry_backoff(ServerError("x", status_code=503)), retry_backoff(ValueError("x"))
    (True, False)
    """
    if isinstance(exc, RateLimitError):
        return exc.retry_after if exc.retry_after is not None else True
    if isinstance(exc, ServerError):
        return exc.status_code in RETRYABLE_STATUSES
    if isinstance(exc, ApiError):
        return False
    if isinstance(exc, ApiConnectionError):
        return True
    if isinstance(exc, TransferTimeoutError):  # its deadline covers the retries: it is spent
        return False
    if isinstance(exc, TransferError):
        return exc.status_code is None or exc.status_code in RETRYABLE_STATUSES
    return False


#: The errors of a write that the destination could not hold: a full disk, a full quota, a file
#: size limit (``ulimit -f``, or a file system's largest file), a failing disk.
NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


def write_error(message: str, path: str, exc: OSError, *, then: str = "") -> KlavisError:
    """The error for a failed write at ``path``: ``message`` (which names the path and says
    what failed), the cause's text, and ``then``; a :class:`~workflows.LocalWriteError` when
    the cause is one of :data:`NO_ROOM`, else an :class:`~workflows.InvalidInputError`.

    >>> import errno, os
    >>> full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    >>> err = write_error("cannot write 'a.bin' under 'out'", "out", full, then="; none was")
    >>> type(err).__name__, str(err)
    ('LocalWriteError', "cannot write 'a.bin' under 'out': No space left on device; none was")
    """
    text = f"{message}: {exc.strerror or exc}{then}"
    err: KlavisError
    if exc.errno in NO_ROOM:
        err = LocalWriteError(text, path=path, cause=exc)
    else:
        err = InvalidInputError(text)
    err.__cause__ = exc
    return err


class LeaseExpiredError(KlavisError):
    """A sandbox leased from the cluster's broker (:mod:`workflows.ray`) is no longer this
    holder's: the broker ended the lease while the holder still used it or waited for it. The
    message says when and why (no heartbeat for ``lease_timeout`` seconds, its holder
    reported dead, ``reap(everything=True)``, the broker restarted and the holder did not come
    back); ``reason`` holds the broker's words, ``lease_id`` and ``sandbox_id`` which lease.
    An infrastructure failure (:func:`~workflows.failure_kind`): the episode did nothing wrong.
    """

    def __init__(
        self, message: str, *, lease_id: str, sandbox_id: str | None = None, reason: str = ""
    ) -> None:
        super().__init__(message)
        self.lease_id = lease_id
        self.sandbox_id = sandbox_id
        self.reason = reason


class BrokerUnavailableError(KlavisError):
    """The cluster's sandbox broker (:mod:`workflows.ray`) died, and no broker of its name
    answered again within the wait the message names (Ray restarts it; ``connect()`` starts a
    new one, which adopts what the dead one leased). An infrastructure failure
    (:func:`~workflows.failure_kind`). A sandbox already held stays usable: only leasing,
    renewing and releasing go through the broker."""
