"""Routes of the per-server data documents (google_cloud, poste_email_toolathlon, canvas):
``POST .../{server}/{sandbox_id}/initialize`` and ``GET .../{server}/{sandbox_id}/dump``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body

from .._clock import isoformat
from .._schemas import ErrorResponse, InitializeSandboxResponse, ServerDataDumpResponse
from .._server_data import DATA_MODELS, DATA_SERVERS, document_for, empty_document
from ._shared import State, Tenant, api_router

__all__ = ["router"]

router = api_router()


def _add_routes(server_name: str) -> None:
    """The two routes of one server, whose body model is that server's document."""
    prefix = f"/{server_name}/{{sandbox_id}}"
    model = DATA_MODELS[server_name]
    not_held: dict[int | str, dict[str, Any]] = {
        400: {"model": ErrorResponse, "description": f"The sandbox does not hold {server_name}"},
    }

    def initialize_server_data(
        sandbox_id: str,
        tenant: Tenant,
        state: State,
        body: Any = None,
        init_default_data: bool = False,
    ) -> dict[str, Any]:
        document = document_for(server_name, body, default=init_default_data)
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

    def dump_server_data(sandbox_id: str, tenant: Tenant, state: State) -> dict[str, Any]:
        data = state.dump_server_data(tenant, sandbox_id, server_name)
        return {
            "sandbox_id": sandbox_id,
            "server_name": server_name,
            "dumped_at": isoformat(state.now()),
            "data": data if data is not None else empty_document(server_name),
        }

    router.add_api_route(
        prefix + "/initialize",
        initialize_server_data,
        methods=["POST"],
        response_model=InitializeSandboxResponse,
        responses=not_held,
        name=f"initialize_{server_name}_data",
        summary=f"Load {server_name} data (validated, replaces what the server held)",
    )
    router.add_api_route(
        prefix + "/dump",
        dump_server_data,
        methods=["GET"],
        response_model=ServerDataDumpResponse,
        responses=not_held,
        name=f"dump_{server_name}_data",
        summary=f"Export the {server_name} data",
    )


for _server_name in DATA_SERVERS:
    _add_routes(_server_name)
