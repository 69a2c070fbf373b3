from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="ExecutionLogsResponse")


@_attrs_define
class ExecutionLogsResponse:
    """
    Attributes:
        status (str): One of `pending`, `running`, `completed`, `failed`.
        logs (str | Unset): Log text written since the cursor that was sent. Default: ''.
        cursor (int | Unset): Byte offset to send as `cursor` on the next poll. Default: 0.
    """

    status: str
    logs: str | Unset = ""
    cursor: int | Unset = 0
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        status = self.status

        logs = self.logs

        cursor = self.cursor

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "status": status,
            }
        )
        if logs is not UNSET:
            field_dict["logs"] = logs
        if cursor is not UNSET:
            field_dict["cursor"] = cursor

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        status = d.pop("status")

        logs = d.pop("logs", UNSET)

        cursor = d.pop("cursor", UNSET)

        execution_logs_response = cls(
            status=status,
            logs=logs,
            cursor=cursor,
        )

        execution_logs_response.additional_properties = d
        return execution_logs_response

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
