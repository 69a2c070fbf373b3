"""Routes of the per-server data documents (google_cloud, poste_email_toolathlon, canvas):
``POST .../{server}/{sandbox_id}/initialize`` and ``GET .../{server}/{sandbox_id}/dump``.

Where the emulator hosts the MCP servers, ``poste_email_toolathlon``'s data is the
sandbox's real mail server (:mod:`klavis_emulator._mail.data`), started on demand; 503 when
Dovecot is missing. Its document is stored too, and loaded into mailboxes that start empty
(an emulator restart; a benchmark pack's). Its dump is streamed from the file the mail
server's messages were written to one batch at a time (the JSON FastAPI would write; see
:func:`~klavis_emulator._mail.data.spool_mail_dump`): a sandbox's mail may weigh more than
the emulator should hold. Otherwise, and for the other servers, dump answers the stored
document.
"""

from __future__ import annotations

import imaplib
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Annotated, Any, Final

import pydantic_core
from fastapi import Body, HTTPException, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel

from .._clock import isoformat
from .._mail import MailDocumentError, MailError, load_mail, spool_mail_dump
from .._mcp import CATALOG
from .._schemas import ErrorResponse, InitializeSandboxResponse, ServerDataDumpResponse
from .._server_data import DATA_MODELS, DATA_SERVERS, document_for, empty_document
from ._shared import State, Tenant, api_router

if TYPE_CHECKING:
    from .._mcp import McpHost

__all__ = ["router"]

router = api_router()

_CHUNK: Final = 256 * 1024
_MAIL_ERRORS: Final = (MailError, MailDocumentError, imaplib.IMAP4.error, OSError)


def _mail_host(request: Request, server_name: str) -> McpHost | None:
    """The MCP host when ``server_name`` has a mail server and the emulator hosts it."""
    if not CATALOG[server_name].mail_server:
        return None
    host: McpHost | None = getattr(request.app.state, "mcp", None)
    return host


def _on_mail_server(exc: Exception) -> HTTPException:
    if isinstance(exc, MailDocumentError):
        return HTTPException(422, str(exc))
    if isinstance(exc, MailError):
        return HTTPException(503, str(exc))
    return HTTPException(502, f"The sandbox's mail server refused: {exc}")


def _streamed(head: bytes, spool: IO[bytes], tail: bytes) -> Response:
    """A JSON answer made of ``head``, the spool file's bytes and ``tail``, with its
    length; the file is closed once sent (or once the client went away)."""
    size = spool.seek(0, 2)
    spool.seek(0)

    def chunks() -> Iterator[bytes]:
        with spool:
            yield head
            while chunk := spool.read(_CHUNK):
                yield chunk
            yield tail

    return StreamingResponse(
        chunks(),
        media_type="application/json",
        headers={"Content-Length": str(len(head) + size + len(tail))},
    )


def _add_routes(server_name: str) -> None:
    """The two routes of one server, whose body model is that server's document."""
    prefix = f"/{server_name}/{{sandbox_id}}"
    model = DATA_MODELS[server_name]
    not_held: dict[int | str, dict[str, Any]] = {
        400: {"model": ErrorResponse, "description": f"The sandbox does not hold {server_name}"},
    }
    responses = dict(not_held)
    if CATALOG[server_name].mail_server:
        responses[503] = {
            "model": ErrorResponse,
            "description": "The sandbox's mail server is not installed (Dovecot) or did not start",
        }

    def initialize_server_data(
        sandbox_id: str,
        tenant: Tenant,
        state: State,
        request: Request,
        body: Any = None,
        init_default_data: bool = False,
    ) -> dict[str, Any]:
        document = document_for(server_name, body, default=init_default_data)
        host = _mail_host(request, server_name)
        if host is None:
            state.initialize_server_data(tenant, sandbox_id, server_name, document)
        else:
            state.require_server(tenant, sandbox_id, server_name)
            try:
                host.mail.with_mail(
                    sandbox_id,
                    server_name,
                    lambda mail: load_mail(mail, document),
                    load_stored=False,
                )
            except _MAIL_ERRORS as exc:
                raise _on_mail_server(exc) from exc
            # kept too: loaded again into fresh mailboxes (after an emulator restart)
            state.initialize_server_data(tenant, sandbox_id, server_name, document)
        what = "default data" if init_default_data and body is None else "data"
        if init_default_data and body is not None:
            what = "default data and the given data"
        return {
            "sandbox_id": sandbox_id,
            "status": "occupied",
            "message": f"Loaded {what} into the {server_name} server.",
        }

    # The body's model differs per server: give FastAPI the real type, not a string.
    initialize_server_data.__annotations__["body"] = Annotated[model | None, Body()]

    def dump_server_data(
        sandbox_id: str, tenant: Tenant, state: State, request: Request
    ) -> dict[str, Any] | Response:
        host = _mail_host(request, server_name)
        if host is not None:
            state.require_server(tenant, sandbox_id, server_name)
            try:
                spool = host.mail.with_mail(sandbox_id, server_name, spool_mail_dump)
            except _MAIL_ERRORS as exc:
                raise _on_mail_server(exc) from exc
            head = {
                "sandbox_id": sandbox_id,
                "server_name": server_name,
                "dumped_at": isoformat(state.now()),
            }
            return _streamed(pydantic_core.to_json(head)[:-1] + b',"data":', spool, b"}")
        data = state.dump_server_data(tenant, sandbox_id, server_name)
        return {
            "sandbox_id": sandbox_id,
            "server_name": server_name,
            "dumped_at": isoformat(state.now()),
            "data": data if data is not None else empty_document(server_name),
        }

    routes: tuple[tuple[str, str, Callable[..., Any], type[BaseModel], str], ...] = (
        (
            "initialize",
            "POST",
            initialize_server_data,
            InitializeSandboxResponse,
            f"Load {server_name} data (validated, replaces what the server held)",
        ),
        ("dump", "GET", dump_server_data, ServerDataDumpResponse, f"Export the {server_name} data"),
    )
    for verb, method, endpoint, answer, summary in routes:
        router.add_api_route(
            f"{prefix}/{verb}",
            endpoint,
            methods=[method],
            response_model=answer,
            responses=responses,
            name=f"{verb}_{server_name}_data",
            summary=summary,
        )


for _server_name in DATA_SERVERS:
    _add_routes(_server_name)
