from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.local_sandbox_info import LocalSandboxInfo


T = TypeVar("T", bound="ListLocalSandboxesResponse")


@_attrs_define
class ListLocalSandboxesResponse:
    """
    Attributes:
        local_sandboxes (list[LocalSandboxInfo]): The caller's sandboxes.
        total_count (int): How many sandboxes the list holds.
    """

    local_sandboxes: list[LocalSandboxInfo]
    total_count: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        local_sandboxes = []
        for local_sandboxes_item_data in self.local_sandboxes:
            local_sandboxes_item = local_sandboxes_item_data.to_dict()
            local_sandboxes.append(local_sandboxes_item)

        total_count = self.total_count

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "local_sandboxes": local_sandboxes,
                "total_count": total_count,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.local_sandbox_info import LocalSandboxInfo  # noqa: PLC0415

        d = dict(src_dict)
        local_sandboxes = []
        _local_sandboxes = d.pop("local_sandboxes")
        for local_sandboxes_item_data in _local_sandboxes:
            local_sandboxes_item = LocalSandboxInfo.from_dict(local_sandboxes_item_data)

            local_sandboxes.append(local_sandboxes_item)

        total_count = d.pop("total_count")

        list_local_sandboxes_response = cls(
            local_sandboxes=local_sandboxes,
            total_count=total_count,
        )

        list_local_sandboxes_response.additional_properties = d
        return list_local_sandboxes_response

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
