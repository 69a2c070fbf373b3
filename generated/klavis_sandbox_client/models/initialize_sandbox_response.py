from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.sandbox_status import SandboxStatus

T = TypeVar("T", bound="InitializeSandboxResponse")


@_attrs_define
class InitializeSandboxResponse:
    """Outcome of loading data into a sandbox.

    Attributes:
        sandbox_id (str): Identifier of the sandbox.
        status (SandboxStatus): Lifecycle state of a sandbox or of one of its servers.
        message (str): Human-readable outcome.
    """

    sandbox_id: str
    status: SandboxStatus
    message: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        sandbox_id = self.sandbox_id

        status = self.status.value

        message = self.message

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "sandbox_id": sandbox_id,
                "status": status,
                "message": message,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        sandbox_id = d.pop("sandbox_id")

        status = SandboxStatus(d.pop("status"))

        message = d.pop("message")

        initialize_sandbox_response = cls(
            sandbox_id=sandbox_id,
            status=status,
            message=message,
        )

        initialize_sandbox_response.additional_properties = d
        return initialize_sandbox_response

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
