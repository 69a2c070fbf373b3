"""Pydantic models built from the contract's JSON Schemas, at import, so that they follow it.

The emulator checks the data documents (google_cloud, poste_email_toolathlon, canvas) against
models that must agree with ``openapi.yaml``'s ``components/schemas`` field by field: names,
order, types, which are required, defaults. Written by hand they were a second copy of twenty
schemas that nothing compared with the first; built from the contract they cannot drift (the
contract as the emulator carries it: :mod:`klavis_emulator._contract`).

Hand-written, and small, because the schemas use a handful of keywords (``type``,
``properties``, ``required``, ``default``, ``anyOf`` with ``null``, ``items``,
``additionalProperties``, ``$ref``) and a keyword it does not know is an error, not a
silently looser model. Rejected: datamodel-code-generator (writes the same field lists out as
Python source: a third copy to keep current, however generated), and the runtime converters
on PyPI (young, and none takes the emulator's own validators per schema).

A model is named after its schema without FastAPI's ``-Input`` suffix (the names the emulator
serves in its own OpenAPI), documented by the schema's description. A property neither
required nor given a default by the contract defaults to None when it may be null, else to
an empty list or object (what the upstream service fills in).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Final, Optional

from pydantic import BaseModel, Field, create_model
from pydantic.fields import FieldInfo

__all__ = ["build_models"]

_REF_PREFIX: Final = "#/components/schemas/"
_SCALARS: Final[dict[str, type]] = {"string": str, "integer": int, "number": float, "boolean": bool}
_OBJECT_KEYS: Final = frozenset({"title", "description", "type", "required", "properties"})
_PROPERTY_KEYS: Final = frozenset(
    {"description", "type", "default", "anyOf", "items", "additionalProperties", "$ref"}
)
_EMPTY: Final[dict[str, type]] = {"array": list, "object": dict}


def build_models(
    schemas: Mapping[str, Any],
    roots: Iterable[str],
    *,
    base: type[BaseModel],
    validators: Mapping[str, Mapping[str, Any]],
    narrowed: Mapping[tuple[str, str], FieldInfo],
) -> dict[str, type[BaseModel]]:
    """The models of the schemas ``roots`` and of every schema they refer to, by schema name.

    ``base`` is every model's base class (its configuration); ``validators[schema]`` are that
    schema's model's own (``{"_name": field_validator("prop")(check)}``);
    ``narrowed[(schema, property)]`` adds constraints to a property's non-null type
    (``Field(ge=0)``).

    >>> built = build_models(
    ...     {"Pet": {"type": "object", "required": ["name"],
    ...              "properties": {"name": {"type": "string"}}}},
    ...     ["Pet"], base=BaseModel, validators={}, narrowed={},
    ... )
    >>> built["Pet"](name="Rex")
    Pet(name='Rex')
    """
    builder = _Builder(schemas, base, validators, narrowed)
    for root in roots:
        builder.model(root)
    for model in builder.models.values():  # the ones that refer to themselves, now complete
        model.model_rebuild(_types_namespace=builder.by_class_name)
    return dict(builder.models)


class _Builder:
    def __init__(
        self,
        schemas: Mapping[str, Any],
        base: type[BaseModel],
        validators: Mapping[str, Mapping[str, Any]],
        narrowed: Mapping[tuple[str, str], FieldInfo],
    ) -> None:
        self.schemas = schemas
        self.base = base
        self.validators = validators
        self.narrowed = narrowed
        self.models: dict[str, type[BaseModel]] = {}
        self.by_class_name: dict[str, Any] = {}
        self.under_way: set[str] = set()

    def model(self, name: str) -> Any:
        """The model of schema ``name``, or its class name while it is being built (a schema
        that refers to itself: resolved by the rebuild at the end)."""
        if name in self.models:
            return self.models[name]
        class_name = name.removesuffix("-Input")
        if name in self.under_way:
            return class_name
        schema = self.schemas[name]
        _expect(schema, _OBJECT_KEYS, name)
        if schema.get("type") != "object" or "properties" not in schema:
            raise ValueError(f"schema {name}: a model needs an object with properties")
        self.under_way.add(name)
        required = set(schema.get("required", ()))
        fields = {
            prop: self.field(name, prop, spec, required=prop in required)
            for prop, spec in schema["properties"].items()
        }
        model = create_model(
            class_name,
            __base__=self.base,
            __doc__=schema.get("description"),
            __module__=self.base.__module__,
            __validators__=dict(self.validators.get(name, {})),
            **fields,
        )
        self.under_way.discard(name)
        self.models[name] = self.by_class_name[class_name] = model
        return model

    def field(self, name: str, prop: str, spec: Mapping[str, Any], *, required: bool) -> Any:
        """``(annotation, default)`` of property ``prop`` of schema ``name``. The property's
        description is left out: with it the models took 12.5 ms to build instead of 10 (the
        fastest of 40 builds; medians 23 and 17 on a loaded machine), and only the emulator's
        served OpenAPI would show it."""
        where = f"schema {name}, property {prop}"
        _expect(spec, _PROPERTY_KEYS, where)
        options = spec.get("anyOf", [spec])
        values = [option for option in options if option != {"type": "null"}]
        if len(values) != 1:
            raise ValueError(f"{where}: anyOf takes one type and null, not {options!r}")
        value = values[0] if "anyOf" in spec else {k: v for k, v in spec.items() if k in _TYPE}
        annotation = self.annotation(value, where)
        narrowed = self.narrowed.get((name, prop))
        if narrowed is not None:
            annotation = Annotated[annotation, narrowed]
        nullable = len(values) < len(options)
        if nullable:
            annotation = Optional[annotation]  # noqa: UP045 - X | None refuses a class name
        info: Any
        if required:
            info = ...
        elif "default" in spec:
            info = spec["default"]
        elif nullable:
            info = None
        elif value.get("type") in _EMPTY:
            info = Field(default_factory=_EMPTY[value["type"]])
        else:
            raise ValueError(f"{where}: optional, not nullable, and no default to fill in")
        return annotation, info

    def annotation(self, spec: Mapping[str, Any], where: str) -> Any:
        """The Python type of a non-null schema."""
        _expect(spec, _TYPE, where)
        if "$ref" in spec:
            ref: str = spec["$ref"]
            if not ref.startswith(_REF_PREFIX):
                raise ValueError(f"{where}: $ref {ref!r} is not a component schema")
            return self.model(ref.removeprefix(_REF_PREFIX))
        kind = spec.get("type")
        if kind in _SCALARS:
            return _SCALARS[kind]
        if kind == "array":
            return list[self.annotation(spec["items"], where)]  # type: ignore[misc]
        if kind == "object" and "additionalProperties" in spec:
            more = spec["additionalProperties"]
            return dict[str, Any if more is True else self.annotation(more, where)]  # type: ignore[misc]
        raise ValueError(f"{where}: no model for {dict(spec)!r}")


_TYPE: Final = frozenset({"type", "items", "additionalProperties", "$ref"})


def _expect(spec: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    unknown = set(spec) - known
    if unknown:
        raise ValueError(f"{where}: keywords {sorted(unknown)} are not understood here")
