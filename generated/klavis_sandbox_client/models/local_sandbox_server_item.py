from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.sandbox_status import SandboxStatus
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.local_sandbox_server_item_auth_data_type_0 import (
        LocalSandboxServerItemAuthDataType0,
    )
    from ..models.local_sandbox_server_item_metadata_type_0 import (
        LocalSandboxServerItemMetadataType0,
    )


T = TypeVar("T", bound="LocalSandboxServerItem")


@_attrs_define
class LocalSandboxServerItem:
    """
    Attributes:
        id (str): Identifier of this server instance inside the sandbox.
        server_name (None | str | Unset): Which MCP server this is.
        mcp_server_url (None | str | Unset): Streamable-HTTP URL at which an MCP client reaches this server.
        status (None | SandboxStatus | Unset): State of this server.
        benchmark (None | str | Unset): Benchmark this server was prepared for, if any.
        updated_at (None | str | Unset): When this server last changed.
        metadata (LocalSandboxServerItemMetadataType0 | None | Unset): Free-form extra information about the server.
        auth_data (LocalSandboxServerItemAuthDataType0 | None | Unset): Credentials or other authentication data for the
            server, if it has any.
        tags (list[str] | None | Unset): Labels attached to the server.
    """

    id: str
    server_name: None | str | Unset = UNSET
    mcp_server_url: None | str | Unset = UNSET
    status: None | SandboxStatus | Unset = UNSET
    benchmark: None | str | Unset = UNSET
    updated_at: None | str | Unset = UNSET
    metadata: LocalSandboxServerItemMetadataType0 | None | Unset = UNSET
    auth_data: LocalSandboxServerItemAuthDataType0 | None | Unset = UNSET
    tags: list[str] | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.local_sandbox_server_item_auth_data_type_0 import (
            LocalSandboxServerItemAuthDataType0,  # noqa: PLC0415
        )
        from ..models.local_sandbox_server_item_metadata_type_0 import (
            LocalSandboxServerItemMetadataType0,  # noqa: PLC0415
        )

        id = self.id

        server_name: None | str | Unset
        if isinstance(self.server_name, Unset):
            server_name = UNSET
        else:
            server_name = self.server_name

        mcp_server_url: None | str | Unset
        if isinstance(self.mcp_server_url, Unset):
            mcp_server_url = UNSET
        else:
            mcp_server_url = self.mcp_server_url

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

        updated_at: None | str | Unset
        if isinstance(self.updated_at, Unset):
            updated_at = UNSET
        else:
            updated_at = self.updated_at

        metadata: dict[str, Any] | None | Unset
        if isinstance(self.metadata, Unset):
            metadata = UNSET
        elif isinstance(self.metadata, LocalSandboxServerItemMetadataType0):
            metadata = self.metadata.to_dict()
        else:
            metadata = self.metadata

        auth_data: dict[str, Any] | None | Unset
        if isinstance(self.auth_data, Unset):
            auth_data = UNSET
        elif isinstance(self.auth_data, LocalSandboxServerItemAuthDataType0):
            auth_data = self.auth_data.to_dict()
        else:
            auth_data = self.auth_data

        tags: list[str] | None | Unset
        if isinstance(self.tags, Unset):
            tags = UNSET
        elif isinstance(self.tags, list):
            tags = self.tags

        else:
            tags = self.tags

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "id": id,
            }
        )
        if server_name is not UNSET:
            field_dict["server_name"] = server_name
        if mcp_server_url is not UNSET:
            field_dict["mcp_server_url"] = mcp_server_url
        if status is not UNSET:
            field_dict["status"] = status
        if benchmark is not UNSET:
            field_dict["benchmark"] = benchmark
        if updated_at is not UNSET:
            field_dict["updated_at"] = updated_at
        if metadata is not UNSET:
            field_dict["metadata"] = metadata
        if auth_data is not UNSET:
            field_dict["auth_data"] = auth_data
        if tags is not UNSET:
            field_dict["tags"] = tags

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.local_sandbox_server_item_auth_data_type_0 import (
            LocalSandboxServerItemAuthDataType0,  # noqa: PLC0415
        )
        from ..models.local_sandbox_server_item_metadata_type_0 import (
            LocalSandboxServerItemMetadataType0,  # noqa: PLC0415
        )

        d = dict(src_dict)
        id = d.pop("id")

        def _parse_server_name(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        server_name = _parse_server_name(d.pop("server_name", UNSET))

        def _parse_mcp_server_url(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        mcp_server_url = _parse_mcp_server_url(d.pop("mcp_server_url", UNSET))

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

        def _parse_updated_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        updated_at = _parse_updated_at(d.pop("updated_at", UNSET))

        def _parse_metadata(
            data: object,
        ) -> LocalSandboxServerItemMetadataType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                metadata_type_0 = LocalSandboxServerItemMetadataType0.from_dict(data)

                return metadata_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(LocalSandboxServerItemMetadataType0 | None | Unset, data)

        metadata = _parse_metadata(d.pop("metadata", UNSET))

        def _parse_auth_data(
            data: object,
        ) -> LocalSandboxServerItemAuthDataType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                auth_data_type_0 = LocalSandboxServerItemAuthDataType0.from_dict(data)

                return auth_data_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(LocalSandboxServerItemAuthDataType0 | None | Unset, data)

        auth_data = _parse_auth_data(d.pop("auth_data", UNSET))

        def _parse_tags(data: object) -> list[str] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                tags_type_0 = cast(list[str], data)

                return tags_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[str] | None | Unset, data)

        tags = _parse_tags(d.pop("tags", UNSET))

        local_sandbox_server_item = cls(
            id=id,
            server_name=server_name,
            mcp_server_url=mcp_server_url,
            status=status,
            benchmark=benchmark,
            updated_at=updated_at,
            metadata=metadata,
            auth_data=auth_data,
            tags=tags,
        )

        local_sandbox_server_item.additional_properties = d
        return local_sandbox_server_item

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
