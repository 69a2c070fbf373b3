from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.canvas_assignment import CanvasAssignment
    from ..models.canvas_course_announcements_type_0_item import (
        CanvasCourseAnnouncementsType0Item,
    )
    from ..models.canvas_enrollment import CanvasEnrollment
    from ..models.canvas_quiz import CanvasQuiz


T = TypeVar("T", bound="CanvasCourse")


@_attrs_define
class CanvasCourse:
    """A course with its assignments, quizzes, enrollments and announcements.

    Attributes:
        name (str): Course name.
        course_code (str): Short course code, such as CS101.
        published (bool | Unset): Whether the course is published. Default: True.
        assignments (list[CanvasAssignment] | Unset): Assignments of the course.
        quizzes (list[CanvasQuiz] | Unset): Quizzes of the course.
        enrollments (list[CanvasEnrollment] | Unset): Users enrolled in the course.
        announcements (list[CanvasCourseAnnouncementsType0Item] | None | Unset): Announcements; each object has a
            `title` and an HTML `message`.
    """

    name: str
    course_code: str
    published: bool | Unset = True
    assignments: list[CanvasAssignment] | Unset = UNSET
    quizzes: list[CanvasQuiz] | Unset = UNSET
    enrollments: list[CanvasEnrollment] | Unset = UNSET
    announcements: list[CanvasCourseAnnouncementsType0Item] | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        course_code = self.course_code

        published = self.published

        assignments: list[dict[str, Any]] | Unset = UNSET
        if not isinstance(self.assignments, Unset):
            assignments = []
            for assignments_item_data in self.assignments:
                assignments_item = assignments_item_data.to_dict()
                assignments.append(assignments_item)

        quizzes: list[dict[str, Any]] | Unset = UNSET
        if not isinstance(self.quizzes, Unset):
            quizzes = []
            for quizzes_item_data in self.quizzes:
                quizzes_item = quizzes_item_data.to_dict()
                quizzes.append(quizzes_item)

        enrollments: list[dict[str, Any]] | Unset = UNSET
        if not isinstance(self.enrollments, Unset):
            enrollments = []
            for enrollments_item_data in self.enrollments:
                enrollments_item = enrollments_item_data.to_dict()
                enrollments.append(enrollments_item)

        announcements: list[dict[str, Any]] | None | Unset
        if isinstance(self.announcements, Unset):
            announcements = UNSET
        elif isinstance(self.announcements, list):
            announcements = []
            for announcements_type_0_item_data in self.announcements:
                announcements_type_0_item = announcements_type_0_item_data.to_dict()
                announcements.append(announcements_type_0_item)

        else:
            announcements = self.announcements

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "name": name,
                "course_code": course_code,
            }
        )
        if published is not UNSET:
            field_dict["published"] = published
        if assignments is not UNSET:
            field_dict["assignments"] = assignments
        if quizzes is not UNSET:
            field_dict["quizzes"] = quizzes
        if enrollments is not UNSET:
            field_dict["enrollments"] = enrollments
        if announcements is not UNSET:
            field_dict["announcements"] = announcements

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.canvas_assignment import CanvasAssignment  # noqa: PLC0415
        from ..models.canvas_course_announcements_type_0_item import (
            CanvasCourseAnnouncementsType0Item,  # noqa: PLC0415
        )
        from ..models.canvas_enrollment import CanvasEnrollment  # noqa: PLC0415
        from ..models.canvas_quiz import CanvasQuiz  # noqa: PLC0415

        d = dict(src_dict)
        name = d.pop("name")

        course_code = d.pop("course_code")

        published = d.pop("published", UNSET)

        _assignments = d.pop("assignments", UNSET)
        assignments: list[CanvasAssignment] | Unset = UNSET
        if _assignments is not UNSET:
            assignments = []
            for assignments_item_data in _assignments:
                assignments_item = CanvasAssignment.from_dict(assignments_item_data)

                assignments.append(assignments_item)

        _quizzes = d.pop("quizzes", UNSET)
        quizzes: list[CanvasQuiz] | Unset = UNSET
        if _quizzes is not UNSET:
            quizzes = []
            for quizzes_item_data in _quizzes:
                quizzes_item = CanvasQuiz.from_dict(quizzes_item_data)

                quizzes.append(quizzes_item)

        _enrollments = d.pop("enrollments", UNSET)
        enrollments: list[CanvasEnrollment] | Unset = UNSET
        if _enrollments is not UNSET:
            enrollments = []
            for enrollments_item_data in _enrollments:
                enrollments_item = CanvasEnrollment.from_dict(enrollments_item_data)

                enrollments.append(enrollments_item)

        def _parse_announcements(
            data: object,
        ) -> list[CanvasCourseAnnouncementsType0Item] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                announcements_type_0 = []
                _announcements_type_0 = data
                for announcements_type_0_item_data in _announcements_type_0:
                    announcements_type_0_item = (
                        CanvasCourseAnnouncementsType0Item.from_dict(
                            announcements_type_0_item_data
                        )
                    )

                    announcements_type_0.append(announcements_type_0_item)

                return announcements_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[CanvasCourseAnnouncementsType0Item] | None | Unset, data)

        announcements = _parse_announcements(d.pop("announcements", UNSET))

        canvas_course = cls(
            name=name,
            course_code=course_code,
            published=published,
            assignments=assignments,
            quizzes=quizzes,
            enrollments=enrollments,
            announcements=announcements,
        )

        canvas_course.additional_properties = d
        return canvas_course

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
