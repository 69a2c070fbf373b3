"""Data documents of the servers that have them: google_cloud, poste_email_toolathlon, canvas."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._errors import InvalidInputError
from ._models import body_dict
from ._steps import Call, Flow, Operation

__all__ = [
    "DATA_SERVERS",
    "ServerData",
    "dump_data_flow",
    "initialize_data_flow",
    "server_data_body",
]

_MODELS: dict[str, str] = {
    "google_cloud": "GoogleCloudDataInput",
    "poste_email_toolathlon": "PosteEmailDataInput",
    "canvas": "CanvasDataInput",
}
"""The generated request model of each server's document, imported when first needed."""
DATA_SERVERS: tuple[str, ...] = tuple(_MODELS)
"""The servers whose data can be initialized and dumped as documents."""


@dataclass(frozen=True)
class ServerData:
    """A server's data as dumped: the document in ``data``, in the shape ``initialize`` takes."""

    sandbox_id: str
    server_name: str
    dumped_at: str
    data: dict[str, Any] = field(repr=False)


def check_data_server(server: str) -> str:
    """``server`` if it has data documents, else InvalidInputError naming those that do."""
    if server not in _MODELS:
        raise InvalidInputError(
            f"{server!r} has no data documents; these do: {', '.join(DATA_SERVERS)}"
        )
    return server


def server_data_body(server: str, data: Mapping[str, Any] | None) -> Any:
    """The request model for ``data``; InvalidInputError when the document does not fit."""
    check_data_server(server)
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise InvalidInputError(f"{server} data must be a mapping, got {type(data).__name__}")
    from klavis_sandbox_client import models

    model: Any = getattr(models, _MODELS[server])
    try:
        return model.from_dict(dict(data))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidInputError(
            f"the {server} document does not fit the contract: {type(exc).__name__}: {exc}"
        ) from exc


def _operations(server: str) -> tuple[Operation, Operation]:
    """The generated (initialize, dump) operations of a server's data document."""
    from klavis_sandbox_client.api.local_sandbox import (
        dump_canvas_data,
        dump_google_cloud_data,
        dump_poste_email_data,
        initialize_canvas_data,
        initialize_google_cloud_data,
        initialize_poste_email_data,
    )

    return {
        "google_cloud": (initialize_google_cloud_data, dump_google_cloud_data),
        "poste_email_toolathlon": (initialize_poste_email_data, dump_poste_email_data),
        "canvas": (initialize_canvas_data, dump_canvas_data),
    }[server]


def initialize_data_flow(sandbox_id: str, server: str, body: Any, *, default: bool) -> Flow[str]:
    """Initialize a server's data; returns the service's message."""
    kwargs: dict[str, Any] = {"sandbox_id": sandbox_id, "init_default_data": default}
    if body is not None:
        kwargs["body"] = body
    response = yield Call(_operations(server)[0], True, kwargs)
    return str(body_dict(response).get("message", ""))


def dump_data_flow(sandbox_id: str, server: str) -> Flow[ServerData]:
    """Dump a server's data document."""
    response = yield Call(_operations(server)[1], True, {"sandbox_id": sandbox_id})
    data = body_dict(response)
    return ServerData(
        sandbox_id=str(data.get("sandbox_id", sandbox_id)),
        server_name=str(data.get("server_name", server)),
        dumped_at=str(data.get("dumped_at", "")),
        data=dict(data.get("data") or {}),
    )
