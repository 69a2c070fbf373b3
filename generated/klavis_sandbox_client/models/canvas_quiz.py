from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.canvas_quiz_question import CanvasQuizQuestion


T = TypeVar("T", bound="CanvasQuiz")


@_attrs_define
class CanvasQuiz:
    """A quiz of a course.

    Attributes:
        title (str): Quiz title.
        description (None | str | Unset): Quiz text, in HTML.
        quiz_type (str | Unset): practice_quiz, assignment, graded_survey or survey. Default: 'assignment'.
        time_limit (int | None | Unset): Time limit in minutes.
        published (bool | Unset): Whether the quiz is published. Default: True.
        due_at (None | str | Unset): Deadline, ISO 8601.
        questions (list[CanvasQuizQuestion] | Unset): Questions of the quiz.
    """

    title: str
    description: None | str | Unset = UNSET
    quiz_type: str | Unset = "assignment"
    time_limit: int | None | Unset = UNSET
    published: bool | Unset = True
    due_at: None | str | Unset = UNSET
    questions: list[CanvasQuizQuestion] | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        title = self.title

        description: None | str | Unset
        if isinstance(self.description, Unset):
            description = UNSET
        else:
            description = self.description

        quiz_type = self.quiz_type

        time_limit: int | None | Unset
        if isinstance(self.time_limit, Unset):
            time_limit = UNSET
        else:
            time_limit = self.time_limit

        published = self.published

        due_at: None | str | Unset
        if isinstance(self.due_at, Unset):
            due_at = UNSET
        else:
            due_at = self.due_at

        questions: list[dict[str, Any]] | Unset = UNSET
        if not isinstance(self.questions, Unset):
            questions = []
            for questions_item_data in self.questions:
                questions_item = questions_item_data.to_dict()
                questions.append(questions_item)

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "title": title,
            }
        )
        if description is not UNSET:
            field_dict["description"] = description
        if quiz_type is not UNSET:
            field_dict["quiz_type"] = quiz_type
        if time_limit is not UNSET:
            field_dict["time_limit"] = time_limit
        if published is not UNSET:
            field_dict["published"] = published
        if due_at is not UNSET:
            field_dict["due_at"] = due_at
        if questions is not UNSET:
            field_dict["questions"] = questions

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.canvas_quiz_question import CanvasQuizQuestion  # noqa: PLC0415

        d = dict(src_dict)
        title = d.pop("title")

        def _parse_description(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        description = _parse_description(d.pop("description", UNSET))

        quiz_type = d.pop("quiz_type", UNSET)

        def _parse_time_limit(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        time_limit = _parse_time_limit(d.pop("time_limit", UNSET))

        published = d.pop("published", UNSET)

        def _parse_due_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        due_at = _parse_due_at(d.pop("due_at", UNSET))

        _questions = d.pop("questions", UNSET)
        questions: list[CanvasQuizQuestion] | Unset = UNSET
        if _questions is not UNSET:
            questions = []
            for questions_item_data in _questions:
                questions_item = CanvasQuizQuestion.from_dict(questions_item_data)

                questions.append(questions_item)

        canvas_quiz = cls(
            title=title,
            description=description,
            quiz_type=quiz_type,
            time_limit=time_limit,
            published=published,
            due_at=due_at,
            questions=questions,
        )

        canvas_quiz.additional_properties = d
        return canvas_quiz

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
