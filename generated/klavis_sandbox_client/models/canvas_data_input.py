from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.canvas_course import CanvasCourse


T = TypeVar("T", bound="CanvasDataInput")


@_attrs_define
class CanvasDataInput:
    """Courses to add to a sandbox's canvas server. The server already holds a few hundred users and three administrators;
    enrollments refer to those users by email.

        Attributes:
            courses (list[CanvasCourse] | Unset): Courses to create.
    """

    courses: list[CanvasCourse] | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        courses: list[dict[str, Any]] | Unset = UNSET
        if not isinstance(self.courses, Unset):
            courses = []
            for courses_item_data in self.courses:
                courses_item = courses_item_data.to_dict()
                courses.append(courses_item)

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({})
        if courses is not UNSET:
            field_dict["courses"] = courses

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.canvas_course import CanvasCourse  # noqa: PLC0415

        d = dict(src_dict)
        _courses = d.pop("courses", UNSET)
        courses: list[CanvasCourse] | Unset = UNSET
        if _courses is not UNSET:
            courses = []
            for courses_item_data in _courses:
                courses_item = CanvasCourse.from_dict(courses_item_data)

                courses.append(courses_item)

        canvas_data_input = cls(
            courses=courses,
        )

        canvas_data_input.additional_properties = d
        return canvas_data_input

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
