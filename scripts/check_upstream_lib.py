"""Compare the public API description with our ``openapi.yaml`` by facts, not by text.

This module is the logic behind ``scripts/check-upstream``. It is not shipped in the wheel; the
tests import it by path.

How it works
------------
Both documents are reduced to the same *fact model*: for every ``/local-sandbox`` operation
(keyed by method and path, with path parameter names blanked out) a flat, ordered mapping from a
*location* to the facts known about it::

    path[1]                       name, type, ...            (path parameters by position)
    query.region                  required, type, enum, default, bounds, ...
    body                          required, content types, type, nullable, ...
    body.server_names[]           type, enum, ...            ([] = array items)
    response 201.servers[].status type, nullable, required, enum, ...
    body.users{}                  ...                        ({} = values of a map)

Every schema is normalised before its facts are read: ``$ref`` is followed (its siblings merged),
``allOf`` is merged, ``anyOf``/``oneOf`` with a ``null`` branch, ``type: [X, "null"]``,
``nullable: true`` and a ``None`` in ``enum`` all become ``nullable: true``; ``const`` is a
one-value ``enum``; ``86400.0`` equals ``86400``; a union such as ``array | string`` is one node
whose array items live at ``loc[]``. Schema names never matter, so ``X-Input``/``X-Output`` pairs,
merged pairs and renamed schemas compare by shape. Recursion is cut where a schema reaches itself
again and recorded as ``recursive: <location of the ancestor>``. Descriptions, titles,
operationIds, tags, summaries, examples and every ``x-`` extension are never read.

Only success responses (2xx) are compared: error responses we add (401, 404, ...) are not
differences. If each side has exactly one success code the other lacks, they are paired
(``~ success status: 201 -> 200``) and their bodies are compared with each other.

Deliberate deviations
---------------------
A place in *our* document can carry ``x-upstream-deviation`` (on a response object, a parameter,
a request body or any schema)::

    responses:
      "200":
        x-upstream-deviation:
          reason: upstream documents no body; the service answers {"message": "..."}
          upstream: {}          # the schema SOURCE has here, as we last saw it

Differences at or below that place are then listed as known deviations and do not make the
exit status 1, but only while SOURCE still says exactly what ``upstream`` records: if SOURCE
changes there, the marker is reported as stale and the differences count again.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "DEFAULT_SOURCE",
    "DEVIATION_KEY",
    "Difference",
    "DocumentError",
    "OperationFacts",
    "OperationReport",
    "Report",
    "compare",
    "extract",
    "load_document",
    "main",
    "parse_document",
]

_K = TypeVar("_K")

DEFAULT_SOURCE = "https://api.klavis.ai/openapi.json"
DEVIATION_KEY = "x-upstream-deviation"
PATH_PREFIX = "/local-sandbox"
DEFAULT_OURS = Path(__file__).resolve().parent.parent / "openapi.yaml"

EXIT_AGREE = 0
EXIT_DIFFER = 1
EXIT_UNUSABLE = 2

_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_BOUND_KEYS = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
)
# Facts in the order they are reported.
_FACT_ORDER = (
    "name",
    "required",
    "content",
    "type",
    "format",
    "nullable",
    "default",
    "enum",
    *_BOUND_KEYS,
    "closed",
    "deprecated",
    "recursive",
)
# Facts that describe the place a schema sits in, not the schema: a deviation marker covers
# the schema only, never these.
_CONTEXT_FACTS = frozenset({"name", "required", "content"})
_ABSENT = "(none)"


class DocumentError(Exception):
    """A document cannot be read, parsed or understood; ``str()`` says why."""


# --------------------------------------------------------------------------- loading


def load_document(source: str, *, timeout: float = 30.0) -> dict[str, Any]:
    """Read an OpenAPI document from a file path or an ``http(s)://`` URL and parse it.

    Raises :class:`DocumentError` with a one-line reason when it cannot be fetched, decoded or
    parsed, or when it is not an OpenAPI document.
    """
    if source.startswith(("https://", "http://")):
        raw = _fetch(source, timeout=timeout)
    else:
        try:
            raw = Path(source).read_bytes()
        except FileNotFoundError:
            raise DocumentError("no such file") from None
        except OSError as exc:
            raise DocumentError(f"cannot read the file: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"not UTF-8 text (byte {exc.start})") from None
    return parse_document(text)


def _fetch(url: str, *, timeout: float) -> bytes:
    import httpx  # imported lazily: only URLs need it

    headers = {"Accept": "application/json, application/yaml;q=0.9, */*;q=0.1"}
    try:
        response = httpx.get(url, timeout=timeout, follow_redirects=True, headers=headers)
    except httpx.HTTPError as exc:
        raise DocumentError(f"cannot fetch it: {type(exc).__name__}: {exc}") from None
    if not response.is_success:
        raise DocumentError(f"fetching it answered HTTP {response.status_code}")
    return response.content


def parse_document(text: str) -> dict[str, Any]:
    """Parse JSON (when the text starts with ``{``) or YAML, and check it is an OpenAPI document."""
    stripped = text.strip()
    if not stripped:
        raise DocumentError("the document is empty")
    doc: Any
    if stripped.startswith(("{", "[")):
        try:
            doc = json.loads(stripped)
        except json.JSONDecodeError as exc:
            hint = ""
            if exc.pos >= len(stripped) - 1 or exc.msg.startswith("Unterminated string"):
                hint = " (the document ends before it is complete: truncated?)"
            raise DocumentError(
                f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}{hint}"
            ) from None
    else:
        import yaml

        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        try:
            doc = yaml.load(stripped, Loader=loader)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark
            where = "" if mark is None else f" at line {mark.line + 1} column {mark.column + 1}"
            at_end = mark is not None and mark.index >= len(stripped) - 1
            hint = ""
            if at_end or "end of stream" in str(exc.problem):
                hint = " (the document ends before it is complete: truncated?)"
            raise DocumentError(f"invalid YAML: {exc.problem}{where}{hint}") from None
        except yaml.YAMLError as exc:
            raise DocumentError(f"invalid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(doc, dict):
        raise DocumentError(f"not an OpenAPI document: the top level is {_json_kind(doc)}")
    version = doc.get("openapi", doc.get("swagger"))
    if not isinstance(version, str) or not version.startswith("3."):
        raise DocumentError("not an OpenAPI 3 document: no 'openapi: 3.x' key")
    if not isinstance(doc.get("paths"), dict):
        raise DocumentError("not an OpenAPI document: 'paths' is missing or not a mapping")
    return doc


def _json_kind(value: Any) -> str:
    if value is None:
        return "empty"
    if isinstance(value, list):
        return "a list"
    return f"a {type(value).__name__}"


# --------------------------------------------------------------------------- fact model


@dataclass
class _Shape:
    """One schema after normalisation; children are still raw schemas."""

    types: set[str] = field(default_factory=set)  # without "null"; empty = any
    nullable: bool = False
    facts: dict[str, Any] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)
    required: set[str] = field(default_factory=set)
    items: Any = None
    additional: Any = None
    refs: set[str] = field(default_factory=set)
    recursive: str | None = None
    variants: list[_Shape] | None = None
    deviation: Any = None


@dataclass
class _Deviation:
    reason: str
    declared: dict[str, dict[str, Any]]  # facts of the recorded upstream schema, by location


@dataclass
class OperationFacts:
    """The facts of one operation: locations in document order, each with its facts."""

    method: str
    path: str
    locations: dict[str, dict[str, Any]] = field(default_factory=dict)
    parents: dict[str, str | None] = field(default_factory=dict)
    success: list[str] = field(default_factory=list)
    deviations: dict[str, _Deviation] = field(default_factory=dict)

    @property
    def title(self) -> str:
        """``METHOD /path`` as written in the document."""
        return f"{self.method} {self.path}"


def _norm_value(value: Any) -> Any:
    """Make values comparable: 86400.0 == 86400, YAML dates become ISO strings."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _norm_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_norm_value(v) for v in value]
    return value


def _enum_list(values: Iterable[Any]) -> list[Any]:
    unique = {json.dumps(v, sort_keys=True, default=str): v for v in values}
    return [unique[k] for k in sorted(unique)]


def _type_of_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


class _Extractor:
    """Reduces one document to :class:`OperationFacts`."""

    def __init__(self, doc: dict[str, Any], *, read_deviations: bool) -> None:
        self.doc = doc
        self.read_deviations = read_deviations

    # -- references

    def _resolve(self, ref: Any) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise DocumentError(f"unsupported $ref {ref!r}: only local '#/...' references")
        node: Any = self.doc
        for part in ref[1:].split("/")[1:]:
            key = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                raise DocumentError(f"unresolvable $ref {ref!r} (is the document truncated?)")
        return node

    def _deref(self, node: Any) -> Any:
        """Follow ``$ref`` on a non-schema object (parameter, response, request body)."""
        seen: set[str] = set()
        while isinstance(node, dict) and "$ref" in node:
            ref = node["$ref"]
            if ref in seen:
                raise DocumentError(f"$ref cycle through {ref!r}")
            seen.add(str(ref))
            node = self._resolve(ref)
        return node

    # -- operations

    def operations(self) -> dict[tuple[str, str], OperationFacts]:
        result: dict[tuple[str, str], OperationFacts] = {}
        for path, raw_item in self.doc["paths"].items():
            path = str(path)
            if path != PATH_PREFIX and not path.startswith(PATH_PREFIX + "/"):
                continue
            item = self._deref(raw_item)
            if not isinstance(item, dict):
                raise DocumentError(f"path {path!r} is not a mapping (truncated?)")
            shared = item.get("parameters") or []
            for method in _METHODS:
                if method not in item:
                    continue
                op = item[method]
                title = f"{method.upper()} {path}"
                if not isinstance(op, dict) or not isinstance(op.get("responses"), dict):
                    raise DocumentError(f"{title} has no 'responses' mapping (truncated?)")
                key = (method.upper(), re.sub(r"\{[^}]*\}", "{}", path))
                result[key] = self._operation(method.upper(), path, shared, op)
        return result

    def _operation(self, method: str, path: str, shared: Any, op: dict[str, Any]) -> OperationFacts:
        facts = OperationFacts(method=method, path=path)
        if op.get("deprecated") is True:
            facts.locations["operation"] = {"deprecated": True}
            facts.parents["operation"] = None

        params: dict[tuple[str, str], dict[str, Any]] = {}
        for raw in [*(shared or []), *(op.get("parameters") or [])]:
            param = self._deref(raw)
            if not isinstance(param, dict) or "name" not in param or "in" not in param:
                raise DocumentError(f"{method} {path}: a parameter lacks 'name' or 'in'")
            params[(str(param["in"]), str(param["name"]))] = param  # operation overrides
        template = re.findall(r"\{([^}]*)\}", path)
        for index, name in enumerate(template, start=1):
            param = params.pop(("path", name), {})
            context = {"name": name, "required": bool(param.get("required", True))}
            self._parameter(facts, f"path[{index}]", param, context)
        for (where, name), param in params.items():
            if where == "path":
                raise DocumentError(f"{method} {path}: path parameter {name!r} not in the path")
            context = {"required": bool(param.get("required", False))}
            self._parameter(facts, f"{where}.{name}", param, context)

        if "requestBody" in op:
            body = self._deref(op["requestBody"])
            if not isinstance(body, dict):
                raise DocumentError(f"{method} {path}: requestBody is not a mapping")
            context = {"required": bool(body.get("required", False))}
            self._content(facts, "body", body, context)

        for code, raw in op["responses"].items():
            code = str(code)
            if not (code.startswith("2") and len(code) == 3):
                continue
            response = self._deref(raw)
            if not isinstance(response, dict):
                raise DocumentError(f"{method} {path}: response {code} is not a mapping")
            facts.success.append(code)
            self._content(facts, f"response {code}", response, {})
        return facts

    def _parameter(
        self, facts: OperationFacts, loc: str, param: dict[str, Any], context: dict[str, Any]
    ) -> None:
        if param.get("deprecated") is True:
            context["deprecated"] = True
        schema = param.get("schema")
        if schema is None and isinstance(param.get("content"), dict) and param["content"]:
            schema = next(iter(param["content"].values())).get("schema")
        self._note_deviation(facts, loc, param)
        if schema is None:
            facts.locations[loc] = context
            facts.parents[loc] = None
            return
        self._flatten(facts, schema, loc, None, {}, context)

    def _content(
        self, facts: OperationFacts, loc: str, holder: dict[str, Any], context: dict[str, Any]
    ) -> None:
        content = holder.get("content") or {}
        if not isinstance(content, dict):
            raise DocumentError(f"{facts.title}: 'content' of {loc} is not a mapping")
        context = {**context, "content": sorted(str(m) for m in content)}
        self._note_deviation(facts, loc, holder)
        media = [content[m] for m in content if "json" in str(m)] or list(content.values())
        if not media or not isinstance(media[0], dict) or "schema" not in media[0]:
            facts.locations[loc] = context
            facts.parents[loc] = None
            return
        self._flatten(facts, media[0]["schema"], loc, None, {}, context)

    def _note_deviation(self, facts: OperationFacts, loc: str, node: Any) -> None:
        if not self.read_deviations or not isinstance(node, dict) or DEVIATION_KEY not in node:
            return
        value = node[DEVIATION_KEY]
        where = f"{facts.title} {loc}"
        if (
            not isinstance(value, dict)
            or not isinstance(value.get("reason"), str)
            or "upstream" not in value
        ):
            raise DocumentError(
                f"{DEVIATION_KEY} at {where} must be a mapping with 'reason' (text) and "
                "'upstream' (the schema SOURCE has there)"
            )
        declared = OperationFacts(method=facts.method, path=facts.path)
        _Extractor(self.doc, read_deviations=False)._flatten(
            declared, value["upstream"], loc, None, {}, {}
        )
        facts.deviations[loc] = _Deviation(reason=value["reason"], declared=declared.locations)

    # -- schemas

    def _flatten(
        self,
        facts: OperationFacts,
        schema: Any,
        loc: str,
        parent: str | None,
        stack: dict[str, str],
        context: dict[str, Any],
    ) -> None:
        shape = self._shape(schema, stack)
        if shape.deviation is not None:
            self._note_deviation(facts, loc, {DEVIATION_KEY: shape.deviation})
        self._flatten_shape(facts, shape, loc, parent, stack, context)

    def _flatten_shape(
        self,
        facts: OperationFacts,
        shape: _Shape,
        loc: str,
        parent: str | None,
        stack: dict[str, str],
        context: dict[str, Any],
    ) -> None:
        node: dict[str, Any] = dict(context)
        facts.parents[loc] = parent
        if shape.recursive is not None:
            # Name-independent: how many levels up the same schema started.
            levels = 0
            ancestor: str | None = loc
            while ancestor != shape.recursive and ancestor is not None:
                ancestor, levels = facts.parents.get(ancestor), levels + 1
            node["recursive"] = f"{levels} levels up"
            facts.locations[loc] = node
            return
        node["type"] = " | ".join(sorted(shape.types)) or "any"
        node["nullable"] = shape.nullable
        node.update(shape.facts)
        facts.locations[loc] = node
        inner = {**stack, **{ref: loc for ref in shape.refs if ref not in stack}}
        if shape.variants is not None:
            labels: dict[str, int] = {}
            for variant in shape.variants:
                label = " | ".join(sorted(variant.types)) or "any"
                labels[label] = labels.get(label, 0) + 1
                if labels[label] > 1:
                    label = f"{label}#{labels[label]}"
                self._flatten_shape(facts, variant, f"{loc}<{label}>", loc, inner, {})
        for name, sub in shape.properties.items():
            context = {"required": name in shape.required}
            self._flatten(facts, sub, f"{loc}.{name}", loc, inner, context)
        if shape.items is not None:
            self._flatten(facts, shape.items, f"{loc}[]", loc, inner, {})
        if shape.additional is not None:
            self._flatten(facts, shape.additional, f"{loc}{{}}", loc, inner, {})

    def _shape(self, schema: Any, stack: dict[str, str]) -> _Shape:
        """Normalise one schema: follow refs, merge allOf, fold anyOf/oneOf."""
        refs: set[str] = set()
        outer: dict[str, Any] = {}
        node = schema
        while isinstance(node, dict) and "$ref" in node:
            ref = str(node["$ref"])
            if ref in stack:
                return _Shape(recursive=stack[ref])
            if ref in refs:
                raise DocumentError(f"$ref cycle through {ref!r}")
            refs.add(ref)
            outer = {**{k: v for k, v in node.items() if k != "$ref"}, **outer}
            node = self._resolve(ref)
        if node is True or node is None:
            node = {}
        if node is False:
            return _Shape(types={"never"}, refs=refs)
        if not isinstance(node, dict):
            raise DocumentError(f"a schema is {_json_kind(node)}, not a mapping")
        node = {**node, **outer}

        # Refs being expanded right now count as ancestors: a schema that reaches itself
        # through allOf/anyOf/oneOf is cut like any other recursion.
        inner = {**stack, **{ref: "(self)" for ref in refs if ref not in stack}}
        if "allOf" in node:
            merged: dict[str, Any] = {}
            for sub in node["allOf"] or []:
                part = self._shape(sub, inner)  # only to collect refs and catch recursion
                refs |= part.refs
                if part.recursive is not None:
                    continue  # a schema that includes itself adds nothing new
                resolved = self._resolved_dict(sub, stack)
                for key, value in resolved.items():
                    if key == "properties" and isinstance(value, dict):
                        merged["properties"] = {**merged.get("properties", {}), **value}
                    elif key == "required" and isinstance(value, list):
                        merged["required"] = [*merged.get("required", []), *value]
                    else:
                        merged.setdefault(key, value)
            rest = {k: v for k, v in node.items() if k != "allOf"}
            shape = self._shape({**merged, **rest}, inner)
        elif "anyOf" in node or "oneOf" in node:
            shape = self._union(node, inner)
        else:
            shape = self._plain(node)
        shape.refs |= refs
        if self.read_deviations and DEVIATION_KEY in node:
            shape.deviation = node[DEVIATION_KEY]
        return shape

    def _resolved_dict(self, schema: Any, stack: dict[str, str]) -> dict[str, Any]:
        outer: dict[str, Any] = {}
        node = schema
        seen: set[str] = set()
        while isinstance(node, dict) and "$ref" in node and str(node["$ref"]) not in seen:
            seen.add(str(node["$ref"]))
            outer = {**{k: v for k, v in node.items() if k != "$ref"}, **outer}
            node = self._resolve(node["$ref"])
        return {**node, **outer} if isinstance(node, dict) else dict(outer)

    def _union(self, node: dict[str, Any], stack: dict[str, str]) -> _Shape:
        branches = [*(node.get("anyOf") or []), *(node.get("oneOf") or [])]
        variants = [self._shape(branch, stack) for branch in branches]
        rest = {k: v for k, v in node.items() if k not in ("anyOf", "oneOf", "type")}
        own = self._plain(rest)
        non_null = [v for v in variants if v.types != {"null"}]
        nullable = (
            own.nullable or len(non_null) < len(variants) or any(v.nullable for v in non_null)
        )
        if any(not v.types and v.recursive is None for v in non_null) or not non_null:
            shape = _Shape()
            for v in variants:
                shape.refs |= v.refs
        elif len(non_null) == 1:
            shape = non_null[0]
            for v in variants:
                shape.refs |= v.refs
        else:
            shape = self._merge_variants(non_null)
        shape.nullable = nullable
        shape.facts.update(own.facts)
        return shape

    @staticmethod
    def _merge_variants(variants: list[_Shape]) -> _Shape:
        merged = _Shape()
        mergeable = not any(v.recursive is not None or v.variants for v in variants)
        for v in variants:
            merged.types |= v.types
            merged.refs |= v.refs
            if v.properties or v.additional is not None:
                if merged.properties or merged.additional is not None:
                    mergeable = False
                merged.properties, merged.required = v.properties, v.required
                merged.additional = v.additional
            if v.items is not None:
                if merged.items is not None:
                    mergeable = False
                merged.items = v.items
            for key, value in v.facts.items():
                if key in merged.facts and merged.facts[key] != value:
                    mergeable = False
                merged.facts[key] = value
        if mergeable:
            return merged
        fallback = _Shape(variants=variants)
        for v in variants:
            fallback.types |= v.types or {"any"}
            fallback.refs |= v.refs
        return fallback

    @staticmethod
    def _plain(node: dict[str, Any]) -> _Shape:
        shape = _Shape()
        raw_type = node.get("type")
        types = {str(t) for t in raw_type} if isinstance(raw_type, list) else set()
        if isinstance(raw_type, str):
            types = {raw_type}
        facts = shape.facts
        enum: list[Any] | None = None
        if "enum" in node and isinstance(node["enum"], list):
            enum = [_norm_value(v) for v in node["enum"]]
        if "const" in node:
            enum = [_norm_value(node["const"])]
        if enum is not None:
            if None in enum:
                shape.nullable = True
                enum = [v for v in enum if v is not None]
            facts["enum"] = _enum_list(enum)
        if not types:
            if "properties" in node or isinstance(node.get("additionalProperties"), dict):
                types = {"object"}
            elif "items" in node:
                types = {"array"}
            elif enum:
                types = {_type_of_value(v) for v in enum}
        if "null" in types and len(types) > 1:
            types.discard("null")
            shape.nullable = True
        if node.get("nullable") is True:
            shape.nullable = True
        shape.types = types
        if "format" in node:
            facts["format"] = str(node["format"])
        if node.get("default") is not None:
            facts["default"] = _norm_value(node["default"])
        for key in _BOUND_KEYS:
            if key in node:
                facts[key] = _norm_value(node[key])
        # OpenAPI 3.0 spells exclusive bounds as booleans beside minimum/maximum.
        for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if isinstance(facts.get(bound), bool) and facts.pop(bound) and limit in facts:
                facts[bound] = facts.pop(limit)
        if facts.get("uniqueItems") is False:
            del facts["uniqueItems"]
        if node.get("deprecated") is True:
            facts["deprecated"] = True
        if "object" in types or not types:
            props = node.get("properties") or {}
            if isinstance(props, dict):
                shape.properties = {str(k): v for k, v in props.items()}
            shape.required = {str(r) for r in node.get("required") or []}
            extra = node.get("additionalProperties")
            if extra is False:
                facts["closed"] = True
            elif isinstance(extra, dict) and extra:
                shape.additional = extra
        if "array" in types:
            shape.items = node.get("items", {})
        return shape


def extract(
    doc: dict[str, Any], *, read_deviations: bool = False
) -> dict[tuple[str, str], OperationFacts]:
    """Reduce a parsed document to ``{(METHOD, normalised path): OperationFacts}``.

    ``read_deviations`` reads ``x-upstream-deviation`` markers (only done for our document).
    Raises :class:`DocumentError` when the document's structure cannot be understood.
    """
    try:
        return _Extractor(doc, read_deviations=read_deviations).operations()
    except (AttributeError, KeyError, TypeError, ValueError, RecursionError) as exc:
        raise DocumentError(
            f"unexpected structure, not a valid OpenAPI document ({type(exc).__name__}: {exc})"
        ) from None


# --------------------------------------------------------------------------- comparison


@dataclass
class Difference:
    """One fact that differs. ``change`` is ``added`` (only in SOURCE), ``removed`` (only in
    ours) or ``changed``; ``ours``/``source`` hold the values (absent = ``None`` with
    ``fact`` set)."""

    change: str
    location: str
    text: str
    fact: str | None = None
    ours: Any = None
    source: Any = None
    reason: str | None = None
    facts: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The difference as a JSON-ready mapping."""
        data: dict[str, Any] = {"change": self.change, "location": self.location}
        if self.fact is not None:
            data.update(fact=self.fact, ours=self.ours, source=self.source)
        if self.facts is not None:
            data["facts"] = self.facts
        if self.reason is not None:
            data["reason"] = self.reason
        data["text"] = self.text
        return data


@dataclass
class OperationReport:
    """The differences found in one operation."""

    method: str
    path: str
    differences: list[Difference] = field(default_factory=list)
    deviations: list[Difference] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The operation's report as a JSON-ready mapping."""
        return {
            "method": self.method,
            "path": self.path,
            "differences": [d.to_json() for d in self.differences],
            "deviations": [d.to_json() for d in self.deviations],
        }


@dataclass
class Report:
    """The whole comparison: per-operation differences, known deviations and notes."""

    source: str
    ours: str
    operations: list[OperationReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    compared: int = 0

    @property
    def differs(self) -> bool:
        """True when at least one fact differs (known deviations do not count)."""
        return any(op.differences for op in self.operations)

    @property
    def exit_code(self) -> int:
        """0 when the facts agree, 1 when they differ."""
        return EXIT_DIFFER if self.differs else EXIT_AGREE

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON-ready mapping (the ``--json`` output)."""
        return {
            "source": self.source,
            "ours": self.ours,
            "agree": not self.differs,
            "operations_compared": self.compared,
            "differences": sum(len(op.differences) for op in self.operations),
            "operations": [op.to_json() for op in self.operations],
            "notes": list(self.notes),
        }

    def to_text(self) -> str:
        """The report as short, readable text grouped by operation."""
        lines: list[str] = []
        changed = [op for op in self.operations if op.differences]
        if changed:
            count = sum(len(op.differences) for op in changed)
            lines.append(
                f"SOURCE {self.source} differs from {self.ours}: "
                f"{count} difference(s) in {len(changed)} operation(s)"
            )
            lines.append(f"(+ only in SOURCE, - only in {Path(self.ours).name}, ~ ours -> SOURCE)")
            for op in changed:
                lines.append("")
                lines.append(f"{op.method} {op.path}")
                lines.extend(f"  {d.text}" for d in op.differences)
        else:
            lines.append(
                f"{self.ours} agrees with SOURCE {self.source} "
                f"on all {self.compared} {PATH_PREFIX} operations."
            )
        known = [op for op in self.operations if op.deviations]
        if known:
            lines.append("")
            lines.append(f"Known deliberate deviations ({DEVIATION_KEY}, not counted):")
            for op in known:
                reason = None
                for d in op.deviations:
                    if d.reason != reason:
                        reason = d.reason
                        lines.append(f"  {op.method} {op.path}: {reason}")
                    lines.append(f"    {d.text}")
        if self.notes:
            lines.append("")
            lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines) + "\n"


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _summary(facts: dict[str, Any]) -> str:
    parts: list[str] = []
    if "name" in facts:
        parts.append(str(facts["name"]))
    if "recursive" in facts:
        parts.append(f"recursive -> {facts['recursive']}")
    if "type" in facts:
        parts.append(str(facts["type"]))
    if facts.get("nullable"):
        parts.append("nullable")
    if "required" in facts:
        parts.append("required" if facts["required"] else "optional")
    if "default" in facts:
        parts.append(f"default {_show(facts['default'])}")
    return f" ({', '.join(parts)})" if parts else ""


def _under(loc: str, root: str) -> bool:
    return loc == root or (loc.startswith(root) and loc[len(root)] in ".[{<")


def _rename_response(loc: str, old: str, new: str) -> str:
    return new + loc[len(old) :] if _under(loc, old) else loc


def _renamed(facts: OperationFacts, old: str, new: str) -> OperationFacts:
    """A copy of ``facts`` whose ``response <old>`` locations are called ``response <new>``."""
    a, b = f"response {old}", f"response {new}"
    renamed = OperationFacts(method=facts.method, path=facts.path, success=list(facts.success))
    for loc, value in facts.locations.items():
        renamed.locations[_rename_response(loc, a, b)] = value
    for loc, parent in facts.parents.items():
        renamed.parents[_rename_response(loc, a, b)] = (
            None if parent is None else _rename_response(parent, a, b)
        )
    for loc, dev in facts.deviations.items():
        declared = {_rename_response(k, a, b): v for k, v in dev.declared.items()}
        renamed.deviations[_rename_response(loc, a, b)] = _Deviation(dev.reason, declared)
    return renamed


def _ordered(first: Iterable[_K], second: Iterable[_K]) -> Iterator[_K]:
    seen: set[_K] = set()
    for item in [*first, *second]:
        if item not in seen:
            seen.add(item)
            yield item


def _fact_differences(loc: str, ours: dict[str, Any], source: dict[str, Any]) -> list[Difference]:
    diffs: list[Difference] = []
    keys = sorted(
        set(ours) | set(source),
        key=lambda k: _FACT_ORDER.index(k) if k in _FACT_ORDER else len(_FACT_ORDER),
    )
    for key in keys:
        a, b = ours.get(key, _ABSENT), source.get(key, _ABSENT)
        if a == b:
            continue
        if key == "enum" and isinstance(a, list) and isinstance(b, list):
            removed = [v for v in a if v not in b]
            added = [v for v in b if v not in a]
            change = " ".join(
                [*(f"-{_show(v)}" for v in removed), *(f"+{_show(v)}" for v in added)]
            )
            text = f"~ {loc} enum: {change}"
        else:
            shown_a = a if a is _ABSENT else _show(a)
            shown_b = b if b is _ABSENT else _show(b)
            if key == "type":
                shown_a, shown_b = str(a), str(b)
            text = f"~ {loc} {key}: {shown_a} -> {shown_b}"
        diffs.append(
            Difference(
                change="changed",
                location=loc,
                fact=key,
                ours=None if a is _ABSENT else a,
                source=None if b is _ABSENT else b,
                text=text,
            )
        )
    return diffs


def _compare_operation(ours: OperationFacts, source: OperationFacts, report: Report) -> None:
    result = OperationReport(method=source.method, path=source.path)
    diffs: list[Difference] = []
    only_ours = [c for c in ours.success if c not in source.success]
    only_source = [c for c in source.success if c not in ours.success]
    if len(only_ours) == 1 and len(only_source) == 1:
        old, new = only_ours[0], only_source[0]
        diffs.append(
            Difference(
                change="changed",
                location="responses",
                fact="status",
                ours=old,
                source=new,
                text=f"~ success status: {old} -> {new}",
            )
        )
        ours = _renamed(ours, old, new)

    o_locs, s_locs = ours.locations, source.locations

    def collapsed(loc: str, parents: dict[str, str | None], mine: dict[str, Any]) -> bool:
        parent = parents.get(loc)
        while parent is not None:
            if parent in mine and not (parent in o_locs and parent in s_locs):
                return True
            parent = parents.get(parent)
        return False

    for loc in _ordered(s_locs, o_locs):
        if loc in s_locs and loc not in o_locs:
            if not collapsed(loc, source.parents, s_locs):
                text = f"+ {loc}{_summary(s_locs[loc])}"
                diffs.append(Difference("added", loc, text, facts=s_locs[loc]))
        elif loc in o_locs and loc not in s_locs:
            if not collapsed(loc, ours.parents, o_locs):
                text = f"- {loc}{_summary(o_locs[loc])}"
                diffs.append(Difference("removed", loc, text, facts=o_locs[loc]))
        else:
            diffs.extend(_fact_differences(loc, o_locs[loc], s_locs[loc]))

    where = f"{source.method} {source.path}"
    for root, dev in ours.deviations.items():
        actual = {k: v for k, v in s_locs.items() if _under(k, root)}
        declared = dev.declared
        if root in actual:
            actual[root] = {k: v for k, v in actual[root].items() if k not in _CONTEXT_FACTS}
        covered = [
            d
            for d in diffs
            if _under(d.location, root)
            and not (d.location == root and d.fact in _CONTEXT_FACTS)
            and not (d.location == root and d.fact is None)
        ]
        if actual == declared and covered:
            for d in covered:
                diffs.remove(d)
                d.reason = dev.reason
                result.deviations.append(d)
        elif not covered:
            report.notes.append(
                f"{DEVIATION_KEY} at {where} {root} is not needed: SOURCE agrees with ours there"
            )
        else:
            report.notes.append(
                f"{DEVIATION_KEY} at {where} {root} is stale: SOURCE no longer has the recorded "
                "'upstream' schema there, so its differences are reported"
            )
    result.differences = diffs
    if result.differences or result.deviations:
        report.operations.append(result)


def compare(
    ours: dict[tuple[str, str], OperationFacts],
    source: dict[tuple[str, str], OperationFacts],
    *,
    ours_label: str = "openapi.yaml",
    source_label: str = "SOURCE",
) -> Report:
    """Compare the facts of our document with those of SOURCE (as returned by :func:`extract`)."""
    report = Report(source=source_label, ours=ours_label)
    for key in _ordered(source, ours):
        if key in source and key not in ours:
            op = source[key]
            text = f"+ operation (only in SOURCE, {len(op.success)} success status(es))"
            diff = Difference("added", "operation", text)
            report.operations.append(OperationReport(op.method, op.path, [diff]))
        elif key in ours and key not in source:
            op = ours[key]
            diff = Difference("removed", "operation", "- operation (only in ours)")
            report.operations.append(OperationReport(op.method, op.path, [diff]))
        else:
            report.compared += 1
            _compare_operation(ours[key], source[key], report)
    return report


# --------------------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="check-upstream",
        description=(
            "Report how the public API description (SOURCE) differs from our openapi.yaml, by "
            "facts (operations, parameters, request and response fields, success status codes, "
            "enum values, numeric bounds), ignoring descriptions, titles and operationIds."
        ),
        epilog=(
            f"SOURCE defaults to {DEFAULT_SOURCE}. Exit status: 0 the facts agree, 1 they differ, "
            f"2 a document cannot be read or parsed. Mark a deliberate difference in openapi.yaml "
            f"with '{DEVIATION_KEY}: {{reason: ..., upstream: <the schema SOURCE has there>}}'. "
            "Then: edit openapi.yaml -> scripts/regenerate -> scripts/test."
        ),
    )
    parser.add_argument(
        "source",
        nargs="?",
        default=DEFAULT_SOURCE,
        metavar="SOURCE",
        help=f"path or http(s):// URL of the public description, JSON or YAML "
        f"(default: {DEFAULT_SOURCE})",
    )
    parser.add_argument(
        "--ours",
        type=Path,
        default=DEFAULT_OURS,
        metavar="PATH",
        help="our contract (default: openapi.yaml next to scripts/)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--timeout", type=float, default=30.0, metavar="SECONDS", help="HTTP timeout (30)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    ours_label = str(args.ours)
    try:
        ours_doc = load_document(ours_label)
        ours = extract(ours_doc, read_deviations=True)
    except DocumentError as exc:
        print(f"check-upstream: cannot use ours {ours_label}: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    try:
        source = extract(load_document(args.source, timeout=args.timeout))
    except DocumentError as exc:
        print(f"check-upstream: cannot use SOURCE {args.source}: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    report = compare(ours, source, ours_label=ours_label, source_label=args.source)
    if args.json:
        print(json.dumps(report.to_json(), indent=2, default=str))
    else:
        sys.stdout.write(report.to_text())
    return report.exit_code
