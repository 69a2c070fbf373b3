from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="ExportArtifactsResponse")


@_attrs_define
class ExportArtifactsResponse:
    """
    Attributes:
        download_url (str): Signed URL answering the artifacts archive to a GET.
        expires_in_minutes (int): Minutes the URL stays valid.
    """

    download_url: str
    expires_in_minutes: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        download_url = self.download_url

        expires_in_minutes = self.expires_in_minutes

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "download_url": download_url,
                "expires_in_minutes": expires_in_minutes,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        download_url = d.pop("download_url")

        expires_in_minutes = d.pop("expires_in_minutes")

        export_artifacts_response = cls(
            download_url=download_url,
            expires_in_minutes=expires_in_minutes,
        )

        export_artifacts_response.additional_properties = d
        return export_artifacts_response

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
