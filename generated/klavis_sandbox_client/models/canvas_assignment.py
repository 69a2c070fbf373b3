from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="CanvasAssignment")


@_attrs_define
class CanvasAssignment:
    """An assignment of a course.

    Attributes:
        name (str): Assignment name.
        description (None | str | Unset): Assignment text, in HTML.
        points_possible (float | None | Unset): Highest score.
        due_at (None | str | Unset): Deadline, ISO 8601.
        submission_types (list[str] | Unset): Accepted submission kinds, such as online_text_entry, online_upload or
            online_url.
        published (bool | Unset): Whether the assignment is published. Default: True.
    """

    name: str
    description: None | str | Unset = UNSET
    points_possible: float | None | Unset = UNSET
    due_at: None | str | Unset = UNSET
    submission_types: list[str] | Unset = UNSET
    published: bool | Unset = True
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        description: None | str | Unset
        if isinstance(self.description, Unset):
            description = UNSET
        else:
            description = self.description

        points_possible: float | None | Unset
        if isinstance(self.points_possible, Unset):
            points_possible = UNSET
        else:
            points_possible = self.points_possible

        due_at: None | str | Unset
        if isinstance(self.due_at, Unset):
            due_at = UNSET
        else:
            due_at = self.due_at

        submission_types: list[str] | Unset = UNSET
        if not isinstance(self.submission_types, Unset):
            submission_types = self.submission_types

        published = self.published

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "name": name,
            }
        )
        if description is not UNSET:
            field_dict["description"] = description
        if points_possible is not UNSET:
            field_dict["points_possible"] = points_possible
        if due_at is not UNSET:
            field_dict["due_at"] = due_at
        if submission_types is not UNSET:
            field_dict["submission_types"] = submission_types
        if published is not UNSET:
            field_dict["published"] = published

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        name = d.pop("name")

        def _parse_description(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        description = _parse_description(d.pop("description", UNSET))

        def _parse_points_possible(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        points_possible = _parse_points_possible(d.pop("points_possible", UNSET))

        def _parse_due_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        due_at = _parse_due_at(d.pop("due_at", UNSET))

        submission_types = cast(list[str], d.pop("submission_types", UNSET))

        published = d.pop("published", UNSET)

        canvas_assignment = cls(
            name=name,
            description=description,
            points_possible=points_possible,
            due_at=due_at,
            submission_types=submission_types,
            published=published,
        )

        canvas_assignment.additional_properties = d
        return canvas_assignment

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
