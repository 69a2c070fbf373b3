from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.sandbox_status import SandboxStatus
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.local_sandbox_server_item import LocalSandboxServerItem


T = TypeVar("T", bound="LocalSandboxInfo")


@_attrs_define
class LocalSandboxInfo:
    """
    Attributes:
        local_sandbox_id (str): Identifier of the sandbox.
        created_at (str): When the sandbox was created.
        servers (list[LocalSandboxServerItem]): The MCP servers in the sandbox.
        status (None | SandboxStatus | Unset): State of the sandbox as a whole.
        benchmark (None | str | Unset): Benchmark the sandbox was prepared for, if any.
    """

    local_sandbox_id: str
    created_at: str
    servers: list[LocalSandboxServerItem]
    status: None | SandboxStatus | Unset = UNSET
    benchmark: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        local_sandbox_id = self.local_sandbox_id

        created_at = self.created_at

        servers = []
        for servers_item_data in self.servers:
            servers_item = servers_item_data.to_dict()
            servers.append(servers_item)

        status: None | str | Unset
        if isinstance(self.status, Unset):
            status = UNSET
        elif isinstance(self.status, SandboxStatus):
            status = self.status.value
        else:
            status = self.status

        benchmark: None | str | Unset
        if isinstance(self.benchmark, Unset):
            benchmark = UNSET
        else:
            benchmark = self.benchmark

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "local_sandbox_id": local_sandbox_id,
                "created_at": created_at,
                "servers": servers,
            }
        )
        if status is not UNSET:
            field_dict["status"] = status
        if benchmark is not UNSET:
            field_dict["benchmark"] = benchmark

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.local_sandbox_server_item import LocalSandboxServerItem  # noqa: PLC0415

        d = dict(src_dict)
        local_sandbox_id = d.pop("local_sandbox_id")

        created_at = d.pop("created_at")

        servers = []
        _servers = d.pop("servers")
        for servers_item_data in _servers:
            servers_item = LocalSandboxServerItem.from_dict(servers_item_data)

            servers.append(servers_item)

        def _parse_status(data: object) -> None | SandboxStatus | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                status_type_0 = SandboxStatus(data)

                return status_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | SandboxStatus | Unset, data)

        status = _parse_status(d.pop("status", UNSET))

        def _parse_benchmark(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        benchmark = _parse_benchmark(d.pop("benchmark", UNSET))

        local_sandbox_info = cls(
            local_sandbox_id=local_sandbox_id,
            created_at=created_at,
            servers=servers,
            status=status,
            benchmark=benchmark,
        )

        local_sandbox_info.additional_properties = d
        return local_sandbox_info

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
