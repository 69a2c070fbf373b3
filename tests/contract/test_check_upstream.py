"""scripts/check-upstream: compares the public API description with openapi.yaml by facts.

Most tests run the script in a subprocess against mutated copies of our own openapi.yaml, because
the exit status is part of its contract. A few in-process tests pin the normalisation rules.
"""

from __future__ import annotations

import copy
import functools
import http.server
import importlib.util
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check-upstream"
OURS = ROOT / "openapi.yaml"
REFERENCE = (
    Path(__file__).resolve().parents[3]
    / "shared"
    / "reference"
    / "klavis-local-sandbox-openapi.json"
)
REASON = "upstream documents no body; the service answers a message"


def _load_lib() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_upstream_lib", ROOT / "scripts" / "check_upstream_lib.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being created
    spec.loader.exec_module(module)
    return module


lib = _load_lib()


# --------------------------------------------------------------------------- helpers


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def run_json(source: Path | str, ours: Path = OURS) -> tuple[int, dict[str, Any]]:
    result = run(source, "--ours", ours, "--json")
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def texts(report: dict[str, Any]) -> list[tuple[str, str]]:
    """(``METHOD /path``, text) of every counted difference."""
    return [
        (f"{op['method']} {op['path']}", d["text"])
        for op in report["operations"]
        for d in op["differences"]
    ]


@functools.cache
def _ours_text() -> str:
    return OURS.read_text(encoding="utf-8")


def ours_doc() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(_ours_text())
    return doc


def write(tmp_path: Path, doc: dict[str, Any], name: str = "source.yaml") -> Path:
    path = tmp_path / name
    if name.endswith(".json"):
        path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def deref(doc: dict[str, Any], node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        target: Any = doc
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        node = target
    return node


def find(doc: dict[str, Any], node: Any, match: Callable[[dict[str, Any]], bool]) -> Any:
    """The first mapping under ``node`` (following $refs) for which ``match`` is true."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        current = deref(doc, stack.pop(0))
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, dict):
            if match(current):
                return current
            stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)
    raise AssertionError("nothing in openapi.yaml matches")


def operation(doc: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    op: dict[str, Any] = doc["paths"][path][method]
    return op


def body_schema(doc: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    body = deref(doc, operation(doc, method, path)["requestBody"])
    schema: dict[str, Any] = deref(doc, body["content"]["application/json"]["schema"])
    return schema


def response_schema(doc: dict[str, Any], method: str, path: str, code: str) -> dict[str, Any]:
    response = deref(doc, operation(doc, method, path)["responses"][code])
    schema: dict[str, Any] = deref(doc, response["content"]["application/json"]["schema"])
    return schema


def parameter(doc: dict[str, Any], method: str, path: str, name: str) -> dict[str, Any]:
    for raw in operation(doc, method, path).get("parameters", []):
        param: dict[str, Any] = deref(doc, raw)
        if param["name"] == name:
            return param
    raise AssertionError(f"no parameter {name} on {method} {path}")


# --------------------------------------------------------------------------- mutations

SANDBOX = "/local-sandbox/{local_sandbox_id}"


def add_field(doc: dict[str, Any]) -> None:
    body_schema(doc, "post", "/local-sandbox")["properties"]["priority"] = {"type": "integer"}


def remove_field(doc: dict[str, Any]) -> None:
    del body_schema(doc, "post", "/local-sandbox")["properties"]["test_account_email"]


def make_required(doc: dict[str, Any]) -> None:
    parameter(doc, "get", f"{SANDBOX}/execution-logs", "cursor")["required"] = True


def remove_enum_value(doc: dict[str, Any]) -> None:
    benchmark = body_schema(doc, "post", "/local-sandbox")["properties"]["benchmark"]
    holder = find(doc, benchmark, lambda n: "MCP_Mark" in n.get("enum", []))
    holder["enum"].remove("MCP_Mark")


def drop_operation(doc: dict[str, Any]) -> None:
    del doc["paths"][f"{SANDBOX}/execution-status"]["get"]


def change_status(doc: dict[str, Any]) -> None:
    responses = operation(doc, "post", "/local-sandbox")["responses"]
    responses["200"] = responses.pop("201")


def change_type(doc: dict[str, Any]) -> None:
    schema = response_schema(doc, "post", f"{SANDBOX}/upload-url", "200")
    expires = find(doc, schema["properties"]["expires_in_minutes"], lambda n: "type" in n)
    expires["type"] = "string"


def change_bound(doc: dict[str, Any]) -> None:
    ttl = body_schema(doc, "post", "/local-sandbox")["properties"]["ttl_seconds"]
    find(doc, ttl, lambda n: "maximum" in n)["maximum"] = 3600


def change_default(doc: dict[str, Any]) -> None:
    parameter(doc, "delete", SANDBOX, "is_ttl")["schema"]["default"] = True


def rename_path_parameter(doc: dict[str, Any]) -> None:
    old = f"{SANDBOX}/execution-status"
    item = doc["paths"].pop(old)
    for op in item.values():
        params = [copy.deepcopy(deref(doc, p)) for p in op.get("parameters", [])]
        for param in params:
            if param["in"] == "path":
                param["name"] = "id"
        op["parameters"] = params
    doc["paths"]["/local-sandbox/{id}/execution-status"] = item


ACQUIRE = "POST /local-sandbox"
MUTATIONS = {
    "field added": (add_field, [(ACQUIRE, "+ body.priority (integer, optional)")]),
    "field removed": (
        remove_field,
        [(ACQUIRE, "- body.test_account_email (string, nullable, optional)")],
    ),
    "parameter made required": (
        make_required,
        [(f"GET {SANDBOX}/execution-logs", "~ query.cursor required: false -> true")],
    ),
    "enum value removed": (
        remove_enum_value,
        [(ACQUIRE, '~ body.benchmark enum: -"MCP_Mark"')],
    ),
    "operation dropped": (
        drop_operation,
        [(f"GET {SANDBOX}/execution-status", "- operation (only in ours)")],
    ),
    "status code changed": (
        change_status,
        [(ACQUIRE, "~ success status: 201 -> 200")],
    ),
    "type changed": (
        change_type,
        [
            (
                f"POST {SANDBOX}/upload-url",
                "~ response 200.expires_in_minutes type: integer -> string",
            )
        ],
    ),
    "bound changed": (
        change_bound,
        [(ACQUIRE, "~ body.ttl_seconds maximum: 86400 -> 3600")],
    ),
    "default changed": (
        change_default,
        [(f"DELETE {SANDBOX}", "~ query.is_ttl default: false -> true")],
    ),
    "path parameter renamed": (
        rename_path_parameter,
        [
            (
                "GET /local-sandbox/{id}/execution-status",
                '~ path[1] name: "local_sandbox_id" -> "id"',
            )
        ],
    ),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_each_mutation_is_reported_precisely_with_exit_1(tmp_path: Path, name: str) -> None:
    mutate, expected = MUTATIONS[name]
    doc = ours_doc()
    mutate(doc)
    source = write(tmp_path, doc)

    code, report = run_json(source)

    assert code == 1
    assert report["agree"] is False
    assert texts(report) == expected


def test_text_report_is_grouped_by_operation(tmp_path: Path) -> None:
    doc = ours_doc()
    add_field(doc)
    change_bound(doc)
    make_required(doc)
    source = write(tmp_path, doc)

    result = run(source, "--ours", OURS)

    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    acquire = lines.index("POST /local-sandbox")
    assert lines[acquire + 1 : acquire + 3] == [
        "  ~ body.ttl_seconds maximum: 86400 -> 3600",
        "  + body.priority (integer, optional)",
    ]
    logs = lines.index(f"GET {SANDBOX}/execution-logs")
    assert lines[logs + 1] == "  ~ query.cursor required: false -> true"
    assert "3 difference(s) in 2 operation(s)" in lines[0]


def _rewrite_words(node: Any, counter: list[int], field_names: bool = False) -> Any:
    """Rewrite every description, summary, title and operationId; drop tags and examples.

    Keys of a ``properties`` mapping are field names (there are fields called ``description``,
    ``title`` and ``tags``): they are kept as they are.
    """
    if isinstance(node, list):
        return [_rewrite_words(item, counter) for item in node]
    if not isinstance(node, dict):
        return node
    if field_names:
        return {key: _rewrite_words(value, counter) for key, value in node.items()}
    result: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties" and isinstance(value, dict):
            result[key] = _rewrite_words(value, counter, field_names=True)
        elif key in ("description", "summary", "title") and isinstance(value, str):
            counter[0] += 1
            result[key] = f"reworded {counter[0]}"
        elif key == "operationId":
            counter[0] += 1
            result[key] = f"renamedOperation{counter[0]}"
        elif key in ("tags", "examples", "example"):
            continue
        else:
            result[key] = _rewrite_words(value, counter)
    return result


def test_reworded_copy_with_new_operation_ids_agrees(tmp_path: Path) -> None:
    doc = _rewrite_words(ours_doc(), [0])
    assert doc != ours_doc()
    source = write(tmp_path, doc, "source.json")  # JSON, while ours is YAML

    code, report = run_json(source)

    assert code == 0
    assert report["agree"] is True
    assert texts(report) == []
    assert report["operations_compared"] == 19

    result = run(source, "--ours", OURS)
    assert result.returncode == 0
    assert "agrees with SOURCE" in result.stdout


def test_truncated_source_exits_2_with_a_clear_message(tmp_path: Path) -> None:
    text = _ours_text()
    source = tmp_path / "truncated.yaml"
    source.write_text(text[: len(text) // 2], encoding="utf-8")

    result = run(source, "--ours", OURS)

    assert result.returncode == 2
    assert result.stdout == ""
    assert f"cannot use SOURCE {source}" in result.stderr
    assert "truncated" in result.stderr


def test_truncated_json_source_exits_2_naming_the_position(tmp_path: Path) -> None:
    text = json.dumps(ours_doc(), indent=1)
    source = tmp_path / "truncated.json"
    source.write_text(text[: len(text) * 2 // 3], encoding="utf-8")

    result = run(source, "--ours", OURS)

    assert result.returncode == 2
    assert "invalid JSON" in result.stderr
    assert "line " in result.stderr
    assert "truncated" in result.stderr


def test_missing_source_exits_2(tmp_path: Path) -> None:
    result = run(tmp_path / "nowhere.json", "--ours", OURS)

    assert result.returncode == 2
    assert "nowhere.json: no such file" in result.stderr


def test_missing_ours_exits_2(tmp_path: Path) -> None:
    result = run(OURS, "--ours", tmp_path / "nowhere.yaml")

    assert result.returncode == 2
    assert "cannot use ours" in result.stderr
    assert "no such file" in result.stderr


def test_not_an_openapi_document_exits_2(tmp_path: Path) -> None:
    source = tmp_path / "list.yaml"
    source.write_text("- just\n- a list\n", encoding="utf-8")

    result = run(source, "--ours", OURS)

    assert result.returncode == 2
    assert "not an OpenAPI document" in result.stderr


def test_dangling_ref_exits_2(tmp_path: Path) -> None:
    doc = ours_doc()
    body = deref(doc, operation(doc, "post", "/local-sandbox")["requestBody"])
    body["content"]["application/json"]["schema"] = {"$ref": "#/components/schemas/Gone"}
    source = write(tmp_path, doc)

    result = run(source, "--ours", OURS)

    assert result.returncode == 2
    assert "unresolvable $ref '#/components/schemas/Gone'" in result.stderr


def test_malformed_structure_exits_2_without_a_traceback(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": 5}
    response = {"description": "ok", "content": {"application/json": {"schema": schema}}}
    doc = {
        "openapi": "3.1.0",
        "paths": {"/local-sandbox": {"get": {"responses": {"200": response}}}},
    }
    source = write(tmp_path, doc, "odd.json")

    result = run(source, "--ours", OURS)

    assert result.returncode == 2
    assert "unexpected structure" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_documents_the_default_url() -> None:
    result = run("--help")

    assert result.returncode == 0
    assert "https://api.klavis.ai/openapi.json" in " ".join(result.stdout.split())


# --------------------------------------------------------------------------- over HTTP


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """A loopback HTTP server on port 0 serving tmp_path; yields its base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_source_can_be_a_url(tmp_path: Path, served: str) -> None:
    doc = ours_doc()
    change_bound(doc)
    write(tmp_path, doc, "openapi.json")

    code, report = run_json(f"{served}/openapi.json")

    assert code == 1
    assert texts(report) == [(ACQUIRE, "~ body.ttl_seconds maximum: 86400 -> 3600")]


def test_url_answering_404_exits_2(served: str) -> None:
    result = run(f"{served}/missing.json", "--ours", OURS)

    assert result.returncode == 2
    assert "HTTP 404" in result.stderr


# --------------------------------------------------------------------------- deviations


def _mark_release(doc: dict[str, Any], upstream: Any) -> None:
    response = operation(doc, "delete", SANDBOX)["responses"]["200"]
    response["x-upstream-deviation"] = {"reason": REASON, "upstream": upstream}


def _unspecified_release_body(doc: dict[str, Any]) -> None:
    response = deref(doc, operation(doc, "delete", SANDBOX)["responses"]["200"])
    response["content"]["application/json"]["schema"] = {}


def test_marked_deviation_is_listed_but_not_counted(tmp_path: Path) -> None:
    ours = ours_doc()
    _mark_release(ours, {})
    source = ours_doc()
    _unspecified_release_body(source)

    code, report = run_json(write(tmp_path, source), write(tmp_path, ours, "ours.yaml"))

    assert code == 0
    assert texts(report) == []
    [release] = [op for op in report["operations"] if op["method"] == "DELETE"]
    assert [d["text"] for d in release["deviations"]] == [
        "~ response 200 type: object -> any",
        "- response 200.message (string, required)",
    ]
    assert {d["reason"] for d in release["deviations"]} == {REASON}


def test_unmarked_tightening_is_a_difference(tmp_path: Path) -> None:
    ours = ours_doc()
    response = operation(ours, "delete", SANDBOX)["responses"]["200"]
    response.pop("x-upstream-deviation", None)
    source = ours_doc()
    _unspecified_release_body(source)

    code, report = run_json(write(tmp_path, source), write(tmp_path, ours, "ours.yaml"))

    assert code == 1
    assert texts(report) == [
        (f"DELETE {SANDBOX}", "~ response 200 type: object -> any"),
        (f"DELETE {SANDBOX}", "- response 200.message (string, required)"),
    ]


def test_stale_deviation_counts_again(tmp_path: Path) -> None:
    ours = ours_doc()
    _mark_release(ours, {})
    source = ours_doc()
    response = deref(source, operation(source, "delete", SANDBOX)["responses"]["200"])
    response["content"]["application/json"]["schema"] = {
        "type": "object",
        "properties": {"status": {"type": "string"}},
    }

    code, report = run_json(write(tmp_path, source), write(tmp_path, ours, "ours.yaml"))

    assert code == 1
    assert texts(report) == [
        (f"DELETE {SANDBOX}", "+ response 200.status (string, optional)"),
        (f"DELETE {SANDBOX}", "- response 200.message (string, required)"),
    ]
    assert any("is stale" in note for note in report["notes"])


def test_malformed_deviation_marker_exits_2(tmp_path: Path) -> None:
    ours = ours_doc()
    operation(ours, "delete", SANDBOX)["responses"]["200"]["x-upstream-deviation"] = "because"

    result = run(OURS, "--ours", write(tmp_path, ours, "ours.yaml"))

    assert result.returncode == 2
    assert "x-upstream-deviation" in result.stderr
    assert "'reason'" in result.stderr


# --------------------------------------------------------------------------- the real contract


def test_openapi_yaml_agrees_with_the_public_description() -> None:
    if not REFERENCE.is_file():
        pytest.skip(f"public description not found at {REFERENCE} (CI has it beside the repo)")

    result = run(REFERENCE, "--ours", OURS)

    assert result.returncode == 0, result.stdout + result.stderr


# --------------------------------------------------------------------------- normalisation


def _doc(schema: dict[str, Any], components: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "paths": {
            "/local-sandbox": {
                "post": {
                    "requestBody": {"content": {"application/json": {"schema": schema}}},
                    "responses": {"200": {"description": "ok"}},
                }
            }
        },
        "components": {"schemas": components or {}},
    }


def _facts(schema: dict[str, Any], components: dict[str, Any] | None = None) -> Any:
    return lib.extract(_doc(schema, components))[("POST", "/local-sandbox")].locations


@pytest.mark.parametrize(
    "spelling",
    [
        {"anyOf": [{"type": "integer", "maximum": 86400.0}, {"type": "null"}]},
        {"type": ["integer", "null"], "maximum": 86400},
        {"type": "integer", "nullable": True, "maximum": 86400},
        {"oneOf": [{"$ref": "#/components/schemas/Ttl"}, {"type": "null"}]},
        {"allOf": [{"$ref": "#/components/schemas/Ttl"}], "nullable": True},
    ],
)
def test_nullable_spellings_give_the_same_facts(spelling: dict[str, Any]) -> None:
    components = {"Ttl": {"type": "integer", "maximum": 86400, "title": "Whatever"}}
    schema = {"type": "object", "properties": {"ttl": spelling}}

    facts = _facts(schema, components)

    assert facts["body.ttl"] == {
        "required": False,
        "type": "integer",
        "nullable": True,
        "maximum": 86400,
    }


def test_const_enum_and_null_in_enum_are_normalised() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "string", "const": "ALL"},
            "b": {"enum": ["y", "x", None]},
        },
    }

    facts = _facts(schema)

    assert facts["body.a"]["enum"] == ["ALL"]
    assert facts["body.b"] == {
        "required": False,
        "type": "string",
        "nullable": True,
        "enum": ["x", "y"],
    }


def test_openapi_30_exclusive_bounds_equal_31_ones() -> None:
    old = _facts({"type": "integer", "minimum": 0, "exclusiveMinimum": True})
    new = _facts({"type": "integer", "exclusiveMinimum": 0})

    assert old["body"] == new["body"]
    assert new["body"]["exclusiveMinimum"] == 0


def test_recursion_is_cut_by_shape_not_by_name() -> None:
    def tree(name: str) -> dict[str, Any]:
        return {
            name: {
                "type": "object",
                "properties": {
                    "children": {"type": "array", "items": {"$ref": f"#/components/schemas/{name}"}}
                },
            }
        }

    a = _facts({"$ref": "#/components/schemas/Node-Input"}, tree("Node-Input"))
    b = _facts({"$ref": "#/components/schemas/TreeNode"}, tree("TreeNode"))

    assert a == b
    assert a["body.children[]"] == {"recursive": "2 levels up"}


def test_union_of_array_and_string_keeps_both_sides() -> None:
    schema = {
        "anyOf": [
            {"type": "array", "items": {"type": "string", "enum": ["git", "filesystem"]}},
            {"type": "string", "const": "ALL"},
        ]
    }

    facts = _facts(schema)

    assert facts["body"]["type"] == "array | string"
    assert facts["body"]["enum"] == ["ALL"]
    assert facts["body[]"]["enum"] == ["filesystem", "git"]


def test_deviation_marker_on_a_property_schema() -> None:
    upstream = {"type": "integer", "maximum": 86400}
    ours_ttl = {
        "type": "integer",
        "maximum": 3600,
        "x-upstream-deviation": {"reason": "we cap it lower", "upstream": upstream},
    }
    ours = _doc({"type": "object", "properties": {"ttl": ours_ttl}})
    source = _doc({"type": "object", "properties": {"ttl": upstream}})

    report = lib.compare(lib.extract(ours, read_deviations=True), lib.extract(source))

    assert report.exit_code == 0
    [op] = report.operations
    assert [(d.text, d.reason) for d in op.deviations] == [
        ("~ body.ttl maximum: 3600 -> 86400", "we cap it lower")
    ]

    source_moved = _doc({"type": "object", "properties": {"ttl": {"type": "integer"}}})
    stale = lib.compare(lib.extract(ours, read_deviations=True), lib.extract(source_moved))
    assert stale.exit_code == 1
    assert [d.text for d in stale.operations[0].differences] == [
        "~ body.ttl maximum: 3600 -> (none)"
    ]
    assert any("is stale" in note for note in stale.notes)
