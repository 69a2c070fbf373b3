from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.local_sandbox_mcp_server import LocalSandboxMCPServer
from ..models.sandbox_mcp_server import SandboxMCPServer

if TYPE_CHECKING:
    from ..models.canvas_data_output import CanvasDataOutput


T = TypeVar("T", bound="CanvasDumpResponse")


@_attrs_define
class CanvasDumpResponse:
    """
    Attributes:
        sandbox_id (str): Identifier of the sandbox.
        server_name (LocalSandboxMCPServer | SandboxMCPServer): The server the data comes from (`google_cloud`,
            `poste_email_toolathlon` or `canvas`, which are local-sandbox server names).
        dumped_at (datetime.datetime): When the data was exported.
        data (CanvasDataOutput): Course data exported from a sandbox's canvas server (free-form object).
    """

    sandbox_id: str
    server_name: LocalSandboxMCPServer | SandboxMCPServer
    dumped_at: datetime.datetime
    data: CanvasDataOutput
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        sandbox_id = self.sandbox_id

        server_name: str
        if isinstance(self.server_name, SandboxMCPServer):
            server_name = self.server_name.value
        else:
            server_name = self.server_name.value

        dumped_at = self.dumped_at.isoformat()

        data = self.data.to_dict()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "sandbox_id": sandbox_id,
                "server_name": server_name,
                "dumped_at": dumped_at,
                "data": data,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.canvas_data_output import CanvasDataOutput  # noqa: PLC0415

        d = dict(src_dict)
        sandbox_id = d.pop("sandbox_id")

        def _parse_server_name(
            data: object,
        ) -> LocalSandboxMCPServer | SandboxMCPServer:
            try:
                if not isinstance(data, str):
                    raise TypeError()
                server_name_type_0 = SandboxMCPServer(data)

                return server_name_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            if not isinstance(data, str):
                raise TypeError()
            server_name_type_1 = LocalSandboxMCPServer(data)

            return server_name_type_1

        server_name = _parse_server_name(d.pop("server_name"))

        dumped_at = datetime.datetime.fromisoformat(d.pop("dumped_at"))

        data = CanvasDataOutput.from_dict(d.pop("data"))

        canvas_dump_response = cls(
            sandbox_id=sandbox_id,
            server_name=server_name,
            dumped_at=dumped_at,
            data=data,
        )

        canvas_dump_response.additional_properties = d
        return canvas_dump_response

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
