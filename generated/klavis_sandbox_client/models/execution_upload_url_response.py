from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="ExecutionUploadUrlResponse")


@_attrs_define
class ExecutionUploadUrlResponse:
    """
    Attributes:
        upload_url (str): Signed URL accepting a PUT of the execution's `tar.gz` archive.
        expires_in_minutes (int): Minutes the URL stays valid.
    """

    upload_url: str
    expires_in_minutes: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        upload_url = self.upload_url

        expires_in_minutes = self.expires_in_minutes

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "upload_url": upload_url,
                "expires_in_minutes": expires_in_minutes,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        upload_url = d.pop("upload_url")

        expires_in_minutes = d.pop("expires_in_minutes")

        execution_upload_url_response = cls(
            upload_url=upload_url,
            expires_in_minutes=expires_in_minutes,
        )

        execution_upload_url_response.additional_properties = d
        return execution_upload_url_response

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
