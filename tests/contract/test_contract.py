"""The contract (openapi.yaml), the client generated from it, and the emulator's copy of it.

The fact-by-fact comparison with Klavis's public description lives in scripts/check-upstream;
these tests guard the contract's own rules, the generated package, and the JSON copy the
emulator builds its data documents' models from (klavis_emulator/_openapi.json).
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import httpx
import klavis_sandbox_client
import pytest
import yaml
from klavis_sandbox_client import AuthenticatedClient, models
from klavis_sandbox_client.api.local_sandbox import (
    acquire_local_sandbox,
    initialize_canvas_data,
    release_local_sandbox,
)
from klavis_sandbox_client.types import UNSET
from openapi_spec_validator import validate

ROOT = Path(__file__).resolve().parents[2]
SPEC_PATH = ROOT / "openapi.yaml"
REGENERATE = ROOT / "scripts" / "regenerate"
PACKAGE_DIR = ROOT / "generated" / "klavis_sandbox_client"

# The agreed operation ids (method, path) -> operationId.
OPERATIONS = {
    ("get", "/local-sandbox"): "listLocalSandboxes",
    ("post", "/local-sandbox"): "acquireLocalSandbox",
    ("get", "/local-sandbox/{local_sandbox_id}"): "getLocalSandbox",
    ("delete", "/local-sandbox/{local_sandbox_id}"): "releaseLocalSandbox",
    ("post", "/local-sandbox/{local_sandbox_id}/reset"): "resetLocalSandbox",
    ("post", "/local-sandbox/{local_sandbox_id}/upload-url"): "getUploadUrl",
    ("post", "/local-sandbox/{local_sandbox_id}/initialize"): "initializeWorkspace",
    ("get", "/local-sandbox/{local_sandbox_id}/dump"): "dumpWorkspace",
    ("post", "/local-sandbox/{local_sandbox_id}/execution-upload-url"): "getExecutionUploadUrl",
    ("post", "/local-sandbox/{local_sandbox_id}/execute"): "executeScript",
    ("get", "/local-sandbox/{local_sandbox_id}/execution-status"): "getExecutionStatus",
    ("get", "/local-sandbox/{local_sandbox_id}/execution-logs"): "getExecutionLogs",
    ("post", "/local-sandbox/{local_sandbox_id}/export-artifacts"): "exportArtifacts",
    ("post", "/local-sandbox/google_cloud/{sandbox_id}/initialize"): "initializeGoogleCloudData",
    ("get", "/local-sandbox/google_cloud/{sandbox_id}/dump"): "dumpGoogleCloudData",
    ("post", "/local-sandbox/poste_email_toolathlon/{sandbox_id}/initialize"): (
        "initializePosteEmailData"
    ),
    ("get", "/local-sandbox/poste_email_toolathlon/{sandbox_id}/dump"): "dumpPosteEmailData",
    ("post", "/local-sandbox/canvas/{sandbox_id}/initialize"): "initializeCanvasData",
    ("get", "/local-sandbox/canvas/{sandbox_id}/dump"): "dumpCanvasData",
}
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(SPEC_PATH.read_text(encoding="utf-8"))
    return loaded


def snake(operation_id: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation_id).lower()


def operations(spec: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (method, path): operation
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if method in HTTP_METHODS
    }


GENERATOR_PYTHON = (3, 11)  # openapi-python-client 0.29.1's Requires-Python


def run_regenerate(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``scripts/regenerate`` with this interpreter; skip where the generator cannot
    install (Python 3.10: the dev extra leaves it out there). Where it can, a missing
    generator is a failure of the setup, not a skip."""
    if sys.version_info < GENERATOR_PYTHON:
        pytest.skip(
            "openapi-python-client 0.29.1 needs Python 3.11 or newer; this is "
            f"{sys.version.split()[0]} (the generator's checks run on the main venv)"
        )
    return subprocess.run(
        [sys.executable, str(REGENERATE), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# ------------------------------------------------------------------ the contract itself


def test_spec_is_valid_openapi_3_1(spec: dict[str, Any]) -> None:
    assert spec["openapi"].startswith("3.1")
    validate(spec)  # raises on any violation


def test_all_19_operations_present_with_the_agreed_unique_ids(spec: dict[str, Any]) -> None:
    found = {key: operation["operationId"] for key, operation in operations(spec).items()}
    assert found == OPERATIONS
    assert len(set(found.values())) == 19


def test_every_schema_has_a_unique_title(spec: dict[str, Any]) -> None:
    schemas = spec["components"]["schemas"]
    titles = [schema.get("title") for schema in schemas.values()]
    assert None not in titles, [name for name, s in schemas.items() if "title" not in s]
    duplicates = sorted({t for t in titles if titles.count(t) > 1})
    assert duplicates == []


def test_servers_and_bearer_security(spec: dict[str, Any]) -> None:
    urls = [server["url"] for server in spec["servers"]]
    assert urls[0] == "https://api.klavis.ai"
    assert len(urls) == 2
    assert spec["security"] == [{"HTTPBearer": []}]
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_every_operation_documents_401_and_sandbox_operations_404(spec: dict[str, Any]) -> None:
    for (method, path), operation in operations(spec).items():
        responses = operation["responses"]
        assert "401" in responses, (method, path)
        if "{" in path:
            assert "404" in responses, (method, path)


# ------------------------------------------------------------------ the emulator's copy


def test_the_emulators_json_is_openapi_yaml(spec: dict[str, Any]) -> None:
    """On every Python (scripts/regenerate, which writes it, needs 3.11)."""
    copy = ROOT / "klavis_emulator" / "_openapi.json"
    assert json.loads(copy.read_text(encoding="utf-8")) == spec, (
        "klavis_emulator/_openapi.json is not openapi.yaml: run scripts/regenerate"
    )


def test_the_emulators_data_models_are_the_contracts_input_schemas(spec: dict[str, Any]) -> None:
    """Each initialize body's model, and each model it holds, has its schema's properties in
    order, its required ones, and its defaults."""
    from klavis_emulator._server_data import DATA_MODELS

    schemas = spec["components"]["schemas"]
    checked = set()
    for server, model in DATA_MODELS.items():
        body = spec["paths"][f"/local-sandbox/{server}/{{sandbox_id}}/initialize"]["post"]
        wanted = json.dumps(body["requestBody"]["content"]["application/json"]["schema"])
        assert f"/{model.__name__}-Input" in wanted, (server, wanted)
        built = model.model_json_schema()
        for name, schema in {model.__name__: built, **built.get("$defs", {})}.items():
            contract = schemas.get(f"{name}-Input", schemas.get(name))
            assert list(schema["properties"]) == list(contract["properties"]), name
            assert set(schema.get("required", ())) == set(contract.get("required", ())), name
            for prop, facts in contract["properties"].items():
                if "default" in facts:
                    assert schema["properties"][prop]["default"] == facts["default"], (name, prop)
            checked.add(name)
    assert len(checked) == 21


# ------------------------------------------------------------------ the generated package


def test_regenerate_check_passes_on_the_committed_package() -> None:
    result = run_regenerate("--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "up to date" in result.stdout


def test_regenerate_check_detects_drift(tmp_path: Path) -> None:
    copy = tmp_path / "klavis_sandbox_client"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "client.py").open("a", encoding="utf-8") as handle:
        handle.write("# edited by hand\n")
    (copy / "models" / "log_sink.py").unlink()
    (copy / "models" / "stray.py").write_text("", encoding="utf-8")
    before = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()}

    result = run_regenerate("--check", "--out", str(copy))

    assert result.returncode == 1, result.stdout + result.stderr
    assert "changed: client.py" in result.stdout
    assert "added:   models/log_sink.py" in result.stdout
    assert "removed: models/stray.py" in result.stdout
    assert "models/log_entry.py" not in result.stdout  # untouched files are not listed
    after = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    assert after == before  # --check changes nothing


def test_generated_package_is_typed_and_passes_mypy_strict_for_python_3_10(
    tmp_path: Path,
) -> None:
    assert (PACKAGE_DIR / "py.typed").is_file()
    result = subprocess.run(
        [
            sys.executable, "-m", "mypy", "--config-file", "/dev/null", "--strict",
            "--python-version", "3.10", "--cache-dir", str(tmp_path / "cache"), PACKAGE_DIR.name,
        ],
        cwd=PACKAGE_DIR.parent,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_each_operation_has_a_module_with_the_four_functions(spec: dict[str, Any]) -> None:
    for operation in operations(spec).values():
        name = f"klavis_sandbox_client.api.local_sandbox.{snake(operation['operationId'])}"
        module = importlib.import_module(name)
        for function in ("sync", "sync_detailed", "asyncio", "asyncio_detailed"):
            assert callable(getattr(module, function)), (name, function)


def test_every_schema_became_a_model(spec: dict[str, Any]) -> None:
    for name, schema in spec["components"]["schemas"].items():
        assert hasattr(models, schema["title"]), f"{name} ({schema['title']}) has no model"


def test_each_documented_json_response_is_parsed_into_its_model(spec: dict[str, Any]) -> None:
    schemas = spec["components"]["schemas"]
    responses = spec["components"]["responses"]
    for operation in operations(spec).values():
        module = importlib.import_module(
            f"klavis_sandbox_client.api.local_sandbox.{snake(operation['operationId'])}"
        )
        returned = set(typing.get_args(typing.get_type_hints(module.sync)["return"]))
        for status, response in operation["responses"].items():
            if "$ref" in response:
                response = responses[response["$ref"].rsplit("/", 1)[1]]
            ref = response["content"]["application/json"]["schema"]["$ref"]
            model = getattr(models, schemas[ref.rsplit("/", 1)[1]]["title"])
            assert model in returned, (operation["operationId"], status, model)


# --------------------------------------------- behaviour of the project's custom templates


def recording_client(seen: list[httpx.Request], **kwargs: Any) -> AuthenticatedClient:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"message": "released"})

    return AuthenticatedClient(
        base_url="http://sandbox.test",
        httpx_args={"transport": httpx.MockTransport(handler)},
        **kwargs,
    )


def test_token_is_sent_but_never_shown_nor_written_into_the_callers_headers() -> None:
    seen: list[httpx.Request] = []
    headers = {"X-Trace": "1"}
    client = recording_client(seen, token="sk-very-secret", headers=headers)

    parsed = release_local_sandbox.sync(local_sandbox_id="abc", client=client)

    assert isinstance(parsed, models.MessageResponse)
    assert parsed.message == "released"
    assert seen[0].headers["Authorization"] == "Bearer sk-very-secret"
    assert seen[0].headers["X-Trace"] == "1"
    assert headers == {"X-Trace": "1"}
    assert "sk-very-secret" not in repr(client)
    assert "sk-very-secret" not in repr(client.with_headers({"X-Other": "2"}))


def test_optional_json_body_is_omitted_when_unset_and_sent_when_given() -> None:
    assert "json" not in initialize_canvas_data._get_kwargs("sbx", body=UNSET)
    assert initialize_canvas_data._get_kwargs("sbx", body=None)["json"] is None
    data = models.CanvasDataInput(courses=[models.CanvasCourse(name="Intro", course_code="CS1")])
    sent = initialize_canvas_data._get_kwargs("sbx", body=data)["json"]
    assert sent["courses"][0]["course_code"] == "CS1"


def test_string_enums_work_without_python_3_11_strenum() -> None:
    body = models.AcquireLocalSandboxRequest(
        server_names=[models.LocalSandboxMCPServer.FILESYSTEM], ttl_seconds=60
    )
    kwargs = acquire_local_sandbox._get_kwargs(body=body)
    assert kwargs["json"] == {"server_names": ["filesystem"], "ttl_seconds": 60}
    assert str(models.GCSRegion.ASIA) == "asia"
    assert models.GCSRegion("us") is models.GCSRegion.US
    assert klavis_sandbox_client.__all__ == ("AuthenticatedClient", "Client")
