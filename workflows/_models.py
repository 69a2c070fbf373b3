"""Small value types the library returns, the checks of acquire's arguments, and the parsing of
the API's answers into them (no I/O)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, Union, get_args, overload

from ._errors import ApiError, InvalidInputError

if TYPE_CHECKING:
    from klavis_sandbox_client.types import Response

__all__ = [
    "BENCHMARKS",
    "MAX_TTL_SECONDS",
    "MIN_TTL_SECONDS",
    "SERVER_NAMES",
    "Benchmark",
    "ServerName",
    "ServerNames",
    "AcquireRequest",
    "ResultList",
    "SandboxInfo",
    "ServerInfo",
    "body_dict",
    "check_acquire",
    "check_sandbox_id",
    "check_server_name",
    "info_from",
    "sandbox_info_from_dict",
    "signed_url_from",
]

ServerName = Literal[
    "filesystem",
    "git",
    "terminal",
    "desktop-commander",
    "arxiv",
    "excel",
    "word",
    "powerpoint",
    "code-executor",
    "code-runner",
    "pdf-tools",
    "google_cloud",
    "poste_email_toolathlon",
    "canvas",
    "localmemory",
    "playwright",
]
"""The name of an MCP server a local sandbox can host, for type checkers: ``["filesystm"]`` fails
``mypy`` where ``["filesystem"]`` passes (the contract's ``LocalSandboxMCPServer`` enum, written
out so that importing `workflows` does not load the generated models; a test keeps the two
equal). At run time any name is sent as it is, since the service may add servers: a name read
from data (a benchmark's JSON) is typed with ``typing.cast(list[ServerName], names)``."""

SERVER_NAMES: tuple[ServerName, ...] = get_args(ServerName)
"""Every :data:`ServerName`, in the contract's order."""

ServerNames = Union[Sequence[ServerName], Literal["ALL"]]  # noqa: UP007 - a runtime alias on 3.10
"""What ``acquire`` and the pools take: a list of :data:`ServerName`, or ``"ALL"``."""

Benchmark = Literal["MCP_Atlas", "Toolathlon", "MCP_Mark"]
"""A benchmark a sandbox can be configured for (the contract's ``BenchmarkEnum``)."""

BENCHMARKS: tuple[Benchmark, ...] = get_args(Benchmark)
"""Every :data:`Benchmark`."""

MIN_TTL_SECONDS = 60
MAX_TTL_SECONDS = 86_400

# The service's sandbox ids are UUIDs in their canonical text form. Anything else would be
# pasted into a URL path: ".." makes `GET /local-sandbox/..` (that is `GET /`), "a/b" another
# route, so ids are checked before any URL is built.
_SANDBOX_ID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")


def check_sandbox_id(sandbox_id: object) -> str:
    """Return ``sandbox_id`` if it has the form of the service's ids (a UUID), else raise
    :class:`~workflows.InvalidInputError` before anything is sent.

    >>> check_sandbox_id("3f0c2a6e-8d4b-4c1e-9a7f-0b2d5e6f7a8b")
    '3f0c2a6e-8d4b-4c1e-9a7f-0b2d5e6f7a8b'
    >>> check_sandbox_id("..")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    workflows._errors.InvalidInputError: not a sandbox id: '..' (sandbox ids are UUIDs such as ...)
    """
    if isinstance(sandbox_id, str) and _SANDBOX_ID.fullmatch(sandbox_id):
        return sandbox_id
    if isinstance(sandbox_id, str):
        shown = sandbox_id if len(sandbox_id) <= 80 else sandbox_id[:80] + "..."
        raise InvalidInputError(
            f"not a sandbox id: {shown!r} (sandbox ids are UUIDs such as "
            "'3f0c2a6e-8d4b-4c1e-9a7f-0b2d5e6f7a8b')"
        )
    raise InvalidInputError(f"a sandbox id is a string (a UUID), not {type(sandbox_id).__name__}")


@dataclass(frozen=True)
class ServerInfo:
    """One MCP server of a sandbox. ``auth_data`` may hold credentials, so it is not in the repr."""

    name: str
    id: str
    mcp_server_url: str | None = None
    status: str | None = None
    benchmark: str | None = None
    updated_at: str | None = None
    metadata: Mapping[str, Any] | None = field(default=None, repr=False)
    auth_data: Mapping[str, Any] | None = field(default=None, repr=False)
    tags: tuple[str, ...] | None = None


HEALTHY_STATUS = "occupied"
"""The status of an acquired sandbox whose servers answer (what a pool's health check wants)."""


@dataclass(frozen=True)
class SandboxInfo:
    """What the API says about a sandbox: id, status, benchmark, creation time and servers."""

    id: str
    status: str | None
    benchmark: str | None = None
    created_at: str | None = None
    servers: tuple[ServerInfo, ...] = ()
    message: str | None = None

    def server(self, name: str) -> ServerInfo:
        """The server called ``name``; :class:`~workflows.InvalidInputError` naming the ones the
        sandbox has otherwise."""
        for item in self.servers:
            if item.name == name:
                return item
        have = ", ".join(s.name for s in self.servers) or "none"
        raise InvalidInputError(f"this sandbox has no {name!r} server (it has: {have})")


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def sandbox_info_from_dict(data: Mapping[str, Any]) -> SandboxInfo:
    """Build a :class:`SandboxInfo` from an acquire, get or list item body (JSON-like dict)."""
    servers = []
    for raw in data.get("servers") or ():
        tags = raw.get("tags")
        servers.append(
            ServerInfo(
                name=str(raw.get("server_name") or ""),
                id=str(raw.get("id", "")),
                mcp_server_url=_opt_str(raw.get("mcp_server_url")),
                status=_opt_str(raw.get("status")),
                benchmark=_opt_str(raw.get("benchmark")),
                updated_at=_opt_str(raw.get("updated_at")),
                metadata=raw.get("metadata"),
                auth_data=raw.get("auth_data"),
                tags=tuple(str(t) for t in tags) if isinstance(tags, list) else None,
            )
        )
    return SandboxInfo(
        id=str(data["local_sandbox_id"]),
        status=_opt_str(data.get("status")),
        benchmark=_opt_str(data.get("benchmark")),
        created_at=_opt_str(data.get("created_at")),
        servers=tuple(servers),
        message=_opt_str(data.get("message")),
    )


def check_server_name(name: object) -> str:
    """Return ``name`` if it is a known server, else InvalidInputError listing the valid ones."""
    if not isinstance(name, str) or name not in SERVER_NAMES:
        raise InvalidInputError(
            f"unknown MCP server {name!r}; valid names are: {', '.join(SERVER_NAMES)}"
        )
    return name


@dataclass(frozen=True)
class AcquireRequest:
    """Checked arguments of an acquire, ready to send."""

    server_names: tuple[str, ...] | str
    benchmark: Benchmark | None
    ttl_seconds: int | None
    test_account_email: str | None

    def to_body(self) -> dict[str, Any]:
        """The JSON body the API expects."""
        names: list[str] | str = (
            self.server_names if isinstance(self.server_names, str) else list(self.server_names)
        )
        body: dict[str, Any] = {"server_names": names, "ttl_seconds": self.ttl_seconds}
        if self.benchmark is not None:
            body["benchmark"] = self.benchmark
        if self.test_account_email is not None:
            body["test_account_email"] = self.test_account_email
        return body

    def wanted_servers(self) -> frozenset[str]:
        """The server names a matching sandbox holds."""
        if isinstance(self.server_names, str):
            return frozenset(SERVER_NAMES)
        return frozenset(self.server_names)


def check_acquire(
    server_names: Sequence[str] | str,
    *,
    benchmark: str | None = None,
    ttl_seconds: int | None = 7200,
    test_account_email: str | None = None,
) -> AcquireRequest:
    """Check acquire's arguments before anything is sent.

    >>> check_acquire(["git", "filesystem"], ttl_seconds=600).server_names
    ('git', 'filesystem')
    >>> check_acquire([], ttl_seconds=600)
    Traceback (most recent call last):
    ...
    workflows._errors.InvalidInputError: server_names is empty: name at least one server, or "ALL"
    """
    names: tuple[str, ...] | str
    if isinstance(server_names, str):
        if server_names != "ALL":
            raise InvalidInputError(
                f'server_names must be a list of names or the string "ALL", got {server_names!r}'
                + (f' (did you mean ["{server_names}"]?)' if server_names in SERVER_NAMES else "")
            )
        names = "ALL"
    else:
        try:
            items = list(server_names)
        except TypeError:
            raise InvalidInputError(
                f"server_names must be a list of names, got {type(server_names).__name__}"
            ) from None
        if not items:
            raise InvalidInputError('server_names is empty: name at least one server, or "ALL"')
        seen: set[str] = set()
        for item in items:
            check_server_name(item)
            if item in seen:
                raise InvalidInputError(f"server {item!r} is named twice in server_names")
            seen.add(item)
        names = tuple(items)
    if benchmark is not None and benchmark not in BENCHMARKS:
        raise InvalidInputError(
            f"unknown benchmark {benchmark!r}; valid ones are: {', '.join(BENCHMARKS)} (or None)"
        )
    if ttl_seconds is not None:
        if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int):
            raise InvalidInputError(
                f"ttl_seconds must be a whole number of seconds or None, got {ttl_seconds!r}"
            )
        if not MIN_TTL_SECONDS <= ttl_seconds <= MAX_TTL_SECONDS:
            raise InvalidInputError(
                f"ttl_seconds must be between {MIN_TTL_SECONDS} and {MAX_TTL_SECONDS} "
                f"(1 minute to 24 hours), or None to never expire; got {ttl_seconds}"
            )
    if test_account_email is not None and not isinstance(test_account_email, str):
        raise InvalidInputError("test_account_email must be a string or None")
    return AcquireRequest(names, benchmark, ttl_seconds, test_account_email)


# --- the API's answers -------------------------------------------------------------------------


def body_dict(response: Response[Any]) -> dict[str, Any]:
    """The parsed body of a 2xx response as a JSON-like dict."""
    parsed = response.parsed
    to_dict = getattr(parsed, "to_dict", None)
    if callable(to_dict):
        data = to_dict()
        if isinstance(data, dict):
            return data
    raise ApiError(
        "the API answered a body the contract does not describe",
        status_code=int(response.status_code),
        body=response.content[:500],
    )


def info_from(response: Response[Any]) -> SandboxInfo:
    """A :class:`SandboxInfo` from an acquire or get response."""
    return sandbox_info_from_dict(body_dict(response))


def signed_url_from(response: Response[Any], key: str) -> str:
    """The signed URL (``upload_url`` or ``download_url``) of a response."""
    data = body_dict(response)
    url = data.get(key)
    if not isinstance(url, str) or not url:
        raise ApiError(f"the API answered no {key}", status_code=int(response.status_code))
    return url


# --- lists of results ----------------------------------------------------------------------------

T = TypeVar("T")


class ResultList(Sequence[T], Generic[T]):
    """A read-only list of per-item results (a pool run's, a batch's), in ``_results``."""

    _results: list[T]

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...
    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        return self._results[index]

    def __len__(self) -> int:
        return len(self._results)

    def __iter__(self) -> Iterator[T]:
        return iter(self._results)
