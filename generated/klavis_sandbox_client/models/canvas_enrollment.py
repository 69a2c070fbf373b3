from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="CanvasEnrollment")


@_attrs_define
class CanvasEnrollment:
    """Enrolls an existing user in a course.

    Attributes:
        user_email (str): Email of a user that exists on the canvas server.
        role (str | Unset): StudentEnrollment, TeacherEnrollment or TaEnrollment. Default: 'StudentEnrollment'.
    """

    user_email: str
    role: str | Unset = "StudentEnrollment"
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        user_email = self.user_email

        role = self.role

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "user_email": user_email,
            }
        )
        if role is not UNSET:
            field_dict["role"] = role

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        user_email = d.pop("user_email")

        role = d.pop("role", UNSET)

        canvas_enrollment = cls(
            user_email=user_email,
            role=role,
        )

        canvas_enrollment.additional_properties = d
        return canvas_enrollment

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
