"""The emulator's ASGI middleware: API-key authentication, guarded control routes, and
bounded, strictly valid JSON bodies.

Each runs before FastAPI reads the request body, so a refused request costs no memory: an
unauthenticated call answers 401 (never 422), a control call from a stranger 401/403, and a
body over the cap 413 after reading at most the cap.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from typing import Any, Final

import anyio.to_thread
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._exec import peer_is_sandboxed
from ._state import tenant_for_token

__all__ = [
    "API_PREFIX",
    "CONTROL_PREFIX",
    "CONTROL_TOKEN_HEADER",
    "MAX_JSON_BYTES",
    "MAX_JSON_VALUES",
    "BearerAuthMiddleware",
    "ControlAccessMiddleware",
    "StrictJsonMiddleware",
    "is_api_path",
    "is_control_path",
]

API_PREFIX: Final = "/local-sandbox"
CONTROL_PREFIX: Final = "/_emulator"
CONTROL_TOKEN_HEADER: Final = "X-Emulator-Control-Token"  # noqa: S105 - a header name
"""The header that carries the control token (``EmulatorConfig(control_token=...)``).

A header of its own rather than ``Authorization``: one client can then hold both the API key
(``Authorization: Bearer ...``) and the control token, as the tests and benchmarks do.
"""
_CONTROL_TOKEN_HEADER_KEY: Final = CONTROL_TOKEN_HEADER.lower().encode("latin-1")
_PUBLIC_CONTROL_ROUTES: Final = frozenset(
    {("GET", "/_emulator/health"), ("HEAD", "/_emulator/health")}
)

MAX_JSON_BYTES: Final = 1024 * 1024
"""Cap on the body of an API or control request (413 above; nothing past it is read).

The contract's bodies are small (an acquire names a few servers; execution names, faults and
clock moves are a few dozen bytes) except the per-server data documents (google_cloud,
poste_email_toolathlon, canvas), whose schemas set no size. Seed data is a few dozen emails,
courses or buckets, a few KiB to tens of KiB; 1 MiB holds 620 emails with 1.5 KB bodies. (Bigger
files belong in the workspace archive, which streams to disk.) The old cap, 64 MiB, let a 60 MB
body take the emulator from 57 to 851 MiB.
"""
MAX_JSON_VALUES: Final = 20_000
"""Cap on the values (objects, arrays, keys, strings, numbers) of a JSON body (413 above).

Bytes alone do not bound memory: each small value becomes a Python object, and each small
object a pydantic model with its defaults filled in and a stored copy. Measured peak RSS
growth of the emulator for one request (initialize, then dump): 4 MiB of ``{"name": "b"}``
buckets took 484 MiB (120x), 4 MiB of ``[]`` in a free-form ``json_data`` 220 MiB. With both
caps: a 1 MiB string 8 MiB, 620 emails (1 MiB) 10 MiB, 6,656 minimal buckets (20,000 values)
12 MiB, and the worst body refused by this count (1 MiB of ``[]``, parsed once to count it)
28 MiB. 20,000 values are 800 emails of a dozen fields each.
"""


def is_api_path(path: str) -> bool:
    """Whether ``path`` is one of the contract's ``/local-sandbox`` routes."""
    return path == API_PREFIX or path.startswith(API_PREFIX + "/")


def is_control_path(path: str) -> bool:
    """Whether ``path`` is under the emulator's own ``/_emulator`` prefix."""
    return path == CONTROL_PREFIX or path.startswith(CONTROL_PREFIX + "/")


async def send_json(
    send: Send, status: int, content: Any, headers: dict[str, str] | None = None
) -> None:
    """Answer ``content`` as JSON with ``status`` straight from middleware."""
    response = JSONResponse(content, status_code=status, headers=headers)
    await send({"type": "http.response.start", "status": status, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body})


def _header(scope: Scope, name: bytes) -> bytes | None:
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    return next((value for key, value in headers if key == name), None)


def _bearer_token(scope: Scope) -> str | None:
    value = _header(scope, b"authorization")
    if value is None:
        return None
    scheme, _, token = value.decode("latin-1").strip().partition(" ")
    token = token.strip()
    if scheme.lower() == "bearer" and token:
        return token
    return None


class BearerAuthMiddleware:
    """Require ``Authorization: Bearer <token>`` on ``/local-sandbox`` routes.

    The tenant (a hash of the token) is put in ``scope["state"]["tenant"]``. Checked
    before the body is parsed, so an unauthenticated request answers 401, never 422.
    """

    def __init__(self, app: ASGIApp, allowed_tenants: frozenset[str] | None) -> None:
        self.app = app
        self.allowed_tenants = allowed_tenants

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Authenticate API requests; pass everything else through."""
        if scope["type"] == "http" and is_api_path(scope["path"]):
            token = _bearer_token(scope)
            if token is None:
                await _send_401(
                    send,
                    "Missing API key: send the header 'Authorization: Bearer <your API key>'.",
                )
                return
            tenant = tenant_for_token(token)
            if self.allowed_tenants is not None and tenant not in self.allowed_tenants:
                await _send_401(send, "Invalid API key: this emulator does not know it.")
                return
            scope.setdefault("state", {})["tenant"] = tenant
        await self.app(scope, receive, send)


async def _send_401(send: Send, detail: str, scheme: str = "Bearer") -> None:
    await send_json(send, 401, {"detail": detail}, {"WWW-Authenticate": scheme})


def _from_a_sandbox(scope: Scope) -> bool:
    client, server = scope.get("client"), scope.get("server")
    if not client or not server:
        return False
    return peer_is_sandboxed((str(client[0]), int(client[1])), (str(server[0]), int(server[1])))


def _is_loopback(scope: Scope) -> bool:
    client = scope.get("client")
    if not client:
        return False
    try:
        address = ipaddress.ip_address(str(client[0]).split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # a dual-stack socket shows IPv4 peers as ::ffff:a.b.c.d
    return address.is_loopback


class ControlAccessMiddleware:
    """Guard the control routes: everything under ``/_emulator`` except ``GET
    /_emulator/health`` (clock, faults: they change every tenant's world).

    With a control token, every such request must carry ``X-Emulator-Control-Token: <token>``
    (401 without it, 403 with another value; compared in constant time), from any address.
    Without one, only loopback clients (127.0.0.0/8, ::1) are answered and others get 403:
    tests and a local emulator keep working as before, a reachable one is not open to all.

    "Loopback" means every process of this machine that can reach its loopback, except the
    emulator's own sandboxes: a confined ``main.py`` has no network, the networked
    requirements install runs none of the archive's code (wheels only, see
    :mod:`klavis_emulator._exec.runner`; pip's own ``GET``s of the control routes only read), and
    the confined processes that do share the network (the playwright server and its browser,
    poste_email_toolathlon's emails server,
    executions with ``--allow-network``) are recognised by the socket they connect from and
    refused (403, :func:`~klavis_emulator._exec.peers.peer_is_sandboxed`). Unconfined executions
    and servers are opt-outs: they can do whatever the emulator's user can, calling these
    routes included, unless a control token is set, which closes them to every client that
    does not send it.
    """

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = None if token is None else token.encode("ascii")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse a control request that is not allowed; pass everything else through."""
        if (
            scope["type"] == "http"
            and is_control_path(scope["path"])
            and (scope["method"], scope["path"]) not in _PUBLIC_CONTROL_ROUTES
        ):
            refusal = await self._refusal(scope)
            if refusal is not None:
                status, detail = refusal
                if status == 401:
                    await _send_401(send, detail, CONTROL_TOKEN_HEADER)
                else:
                    await send_json(send, status, {"detail": detail})
                return
        await self.app(scope, receive, send)

    async def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        if self.token is None:
            if _is_loopback(scope):
                if await anyio.to_thread.run_sync(_from_a_sandbox, scope):
                    return 403, (
                        "The emulator's control routes (/_emulator/...) do not answer a "
                        "sandbox's own processes (this request comes from inside one)."
                    )
                return None
            return 403, (
                "The emulator's control routes (/_emulator/...) answer only loopback clients: "
                "start the emulator with --control-token <secret> to use them from elsewhere, "
                f"and send the header '{CONTROL_TOKEN_HEADER}: <secret>'."
            )
        given = _header(scope, _CONTROL_TOKEN_HEADER_KEY)
        if not given:
            return 401, (
                f"Missing control token: this emulator was started with a control token; send "
                f"the header '{CONTROL_TOKEN_HEADER}: <control token>'."
            )
        if not hmac.compare_digest(given.strip(), self.token):
            return 403, f"Wrong control token in the header '{CONTROL_TOKEN_HEADER}'."
        return None


class StrictJsonMiddleware:
    """Cap the body of API and control requests, and refuse (422) JSON that Python's parser
    accepts but JSON does not allow.

    A body over ``max_bytes`` answers 413 as soon as its ``Content-Length`` says so, or once
    that many bytes of a chunked body were read: nothing past the cap is ever held. A JSON body
    (a JSON content type, or none: FastAPI then parses JSON too) of more than ``max_values``
    values answers 413 before FastAPI and pydantic build objects from it. ``NaN``,
    ``Infinity`` and lone UTF-16 surrogates (``"\\ud800"``) are not valid JSON data (422);
    letting them through would make the emulator fail later, when it stores or answers them.
    """

    def __init__(
        self, app: ASGIApp, max_bytes: int = MAX_JSON_BYTES, max_values: int = MAX_JSON_VALUES
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_values = max_values

    def _too_large(self) -> dict[str, str]:
        return {
            "detail": f"The request body is larger than the emulator's limit of "
            f"{self.max_bytes:,} bytes for API requests."
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Buffer (up to the cap) and check a body, then hand it on unchanged."""
        path = scope["path"] if scope["type"] == "http" else ""
        if not (is_api_path(path) or is_control_path(path)):
            await self.app(scope, receive, send)
            return
        length = _header(scope, b"content-length")
        if length is not None and length.strip().isdigit() and int(length) > self.max_bytes:
            await send_json(send, 413, self._too_large())
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away; the app will see it too
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await send_json(send, 413, self._too_large())
                return
            if not message.get("more_body", False):
                break
        content_type = (_header(scope, b"content-type") or b"").strip().lower()
        # FastAPI parses a body as JSON when its type says JSON, or when it has no type
        if body and (not content_type or b"json" in content_type):
            problem = _json_problem(body, self.max_values)
            if problem is not None:
                status, reason = problem
                if status == 413:
                    await send_json(send, 413, {"detail": reason})
                else:
                    detail = [{"loc": ["body"], "msg": reason, "type": "json_invalid"}]
                    await send_json(send, 422, {"detail": detail})
                return
        data = bytes(body)
        del body
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": data, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _json_problem(body: bytes | bytearray, max_values: int) -> tuple[int, str] | None:
    """Why ``body`` is not acceptable JSON data, as ``(status, message)``, or ``None`` (also
    when it is not JSON at all: the framework then answers its own 422)."""

    def refuse_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a valid JSON number")

    try:
        value = json.loads(body, parse_constant=refuse_constant)
    except ValueError as exc:
        return (422, str(exc)) if "not a valid JSON number" in str(exc) else None
    except RecursionError:
        return 422, "The JSON body is nested too deeply."
    stack = [value]
    del value
    count = 0
    while stack:
        item = stack.pop()
        count += 1
        if count > max_values:
            return 413, (
                f"The JSON body holds more than {max_values:,} values (objects, arrays, keys, "
                "strings, numbers), the emulator's limit for API requests."
            )
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return 422, "The JSON body holds a string with an unpaired UTF-16 surrogate."
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None
