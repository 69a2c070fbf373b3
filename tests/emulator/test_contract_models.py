"""klavis_emulator._contract_models: strict pydantic models built from JSON Schemas.

The data documents' models built from the contract are checked against it in
tests/contract/test_contract.py; these tests hold the builder's own rules on small schemas.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from klavis_emulator._contract_models import build_models


class Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


NODE: dict[str, Any] = {
    "title": "Node",
    "description": "A node of a tree.",
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "size": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "extra": {"anyOf": [{"type": "object", "additionalProperties": True}, {"type": "null"}]},
        "kind": {"type": "string", "default": "leaf"},
        "children": {
            "anyOf": [
                {"type": "array", "items": {"$ref": "#/components/schemas/Node-Input"}},
                {"type": "null"},
            ]
        },
    },
}


def build(schemas: dict[str, Any], **options: Any) -> type[BaseModel]:
    options = {"validators": {}, "narrowed": {}, **options}
    return build_models(schemas, ["Node-Input"], base=Strict, **options)["Node-Input"]


def test_a_model_follows_its_schema_and_may_hold_itself() -> None:
    node = build({"Node-Input": NODE})

    assert node.__name__ == "Node"
    assert node.__doc__ == "A node of a tree."
    made = node.model_validate({"name": "root", "children": [{"name": "leaf", "size": 3}]})
    assert made.model_dump() == {
        "name": "root",
        "size": None,
        "tags": [],
        "labels": {},
        "extra": None,
        "kind": "leaf",
        "children": [
            {
                "name": "leaf",
                "size": 3,
                "tags": [],
                "labels": {},
                "extra": None,
                "kind": "leaf",
                "children": None,
            }
        ],
    }
    with pytest.raises(ValidationError) as caught:
        node.model_validate({"children": [{"name": "x", "size": "3", "colour": "red"}]})
    problems = {(e["loc"], e["type"]) for e in caught.value.errors()}
    assert problems == {
        (("name",), "missing"),
        (("children", 0, "size"), "int_type"),  # strict, as the base says
        (("children", 0, "colour"), "extra_forbidden"),
    }


def test_validators_and_narrowed_properties_are_the_callers() -> None:
    def no_spaces(value: str) -> str:
        if " " in value:
            raise ValueError("no spaces")
        return value

    node = build(
        {"Node-Input": NODE},
        validators={"Node-Input": {"_name": field_validator("name")(no_spaces)}},
        narrowed={("Node-Input", "size"): Field(ge=0)},
    )

    with pytest.raises(ValidationError, match="no spaces"):
        node.model_validate({"name": "a b"})
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        node.model_validate({"name": "a", "size": -1})
    assert node.model_validate({"name": "a", "size": None}).model_dump()["size"] is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "date-time"}, r"keywords \['format'\] are not understood"),
        ({"type": "string"}, "optional, not nullable, and no default to fill in"),
        ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, "anyOf takes one type and null"),
        ({"$ref": "other.yaml#/Thing"}, "is not a component schema"),
        ({"type": "object", "properties": {}}, "not understood"),
    ],
)
def test_what_it_cannot_read_exactly_is_an_error(change: dict[str, Any], message: str) -> None:
    """A keyword it does not know would make a looser model than the contract's: refused."""
    schema = {**NODE, "properties": {**NODE["properties"], "odd": change}}
    with pytest.raises(ValueError, match=message) as caught:
        build({"Node-Input": schema})
    assert "schema Node-Input, property odd" in str(caught.value)
