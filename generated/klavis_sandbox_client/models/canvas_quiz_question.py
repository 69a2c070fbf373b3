from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.canvas_quiz_question_answers_type_0_item import (
        CanvasQuizQuestionAnswersType0Item,
    )


T = TypeVar("T", bound="CanvasQuizQuestion")


@_attrs_define
class CanvasQuizQuestion:
    """One quiz question.

    Attributes:
        question_text (str): The question, HTML allowed.
        question_name (None | str | Unset): Short label of the question.
        question_type (str | Unset): Kind of question, such as multiple_choice_question, true_false_question,
            short_answer_question or essay_question. Default: 'multiple_choice_question'.
        points_possible (float | Unset): Score the question is worth. Default: 1.0.
        answers (list[CanvasQuizQuestionAnswersType0Item] | None | Unset): Possible answers; each object has
            `answer_text` and `answer_weight` (100 for right, 0 for wrong).
    """

    question_text: str
    question_name: None | str | Unset = UNSET
    question_type: str | Unset = "multiple_choice_question"
    points_possible: float | Unset = 1.0
    answers: list[CanvasQuizQuestionAnswersType0Item] | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        question_text = self.question_text

        question_name: None | str | Unset
        if isinstance(self.question_name, Unset):
            question_name = UNSET
        else:
            question_name = self.question_name

        question_type = self.question_type

        points_possible = self.points_possible

        answers: list[dict[str, Any]] | None | Unset
        if isinstance(self.answers, Unset):
            answers = UNSET
        elif isinstance(self.answers, list):
            answers = []
            for answers_type_0_item_data in self.answers:
                answers_type_0_item = answers_type_0_item_data.to_dict()
                answers.append(answers_type_0_item)

        else:
            answers = self.answers

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "question_text": question_text,
            }
        )
        if question_name is not UNSET:
            field_dict["question_name"] = question_name
        if question_type is not UNSET:
            field_dict["question_type"] = question_type
        if points_possible is not UNSET:
            field_dict["points_possible"] = points_possible
        if answers is not UNSET:
            field_dict["answers"] = answers

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.canvas_quiz_question_answers_type_0_item import (
            CanvasQuizQuestionAnswersType0Item,  # noqa: PLC0415
        )

        d = dict(src_dict)
        question_text = d.pop("question_text")

        def _parse_question_name(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        question_name = _parse_question_name(d.pop("question_name", UNSET))

        question_type = d.pop("question_type", UNSET)

        points_possible = d.pop("points_possible", UNSET)

        def _parse_answers(
            data: object,
        ) -> list[CanvasQuizQuestionAnswersType0Item] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                answers_type_0 = []
                _answers_type_0 = data
                for answers_type_0_item_data in _answers_type_0:
                    answers_type_0_item = CanvasQuizQuestionAnswersType0Item.from_dict(
                        answers_type_0_item_data
                    )

                    answers_type_0.append(answers_type_0_item)

                return answers_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[CanvasQuizQuestionAnswersType0Item] | None | Unset, data)

        answers = _parse_answers(d.pop("answers", UNSET))

        canvas_quiz_question = cls(
            question_text=question_text,
            question_name=question_name,
            question_type=question_type,
            points_possible=points_possible,
            answers=answers,
        )

        canvas_quiz_question.additional_properties = d
        return canvas_quiz_question

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
