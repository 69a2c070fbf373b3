"""Bearer-token auth and tenant isolation on every operation."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import httpx
import pytest

from klavis_emulator import EmulatorConfig, EmulatorServer

# Every operation of the contract: (method, path template, JSON body).
OPERATIONS: list[tuple[str, str, object]] = [
    ("GET", "/local-sandbox/{id}", None),
    ("DELETE", "/local-sandbox/{id}", None),
    ("POST", "/local-sandbox/{id}/reset", None),
    ("POST", "/local-sandbox/{id}/upload-url", None),
    ("POST", "/local-sandbox/{id}/initialize", None),
    ("GET", "/local-sandbox/{id}/dump", None),
    ("POST", "/local-sandbox/{id}/execution-upload-url", {"execution_name": "run1"}),
    ("POST", "/local-sandbox/{id}/execute", {"execution_name": "run1"}),
    ("GET", "/local-sandbox/{id}/execution-status?execution_name=run1", None),
    ("GET", "/local-sandbox/{id}/execution-logs?execution_name=run1&cursor=0", None),
    ("POST", "/local-sandbox/{id}/export-artifacts", {"execution_name": "run1"}),
    ("POST", "/local-sandbox/google_cloud/{id}/initialize", None),
    ("GET", "/local-sandbox/google_cloud/{id}/dump", None),
    ("POST", "/local-sandbox/poste_email_toolathlon/{id}/initialize", None),
    ("GET", "/local-sandbox/poste_email_toolathlon/{id}/dump", None),
    ("POST", "/local-sandbox/canvas/{id}/initialize", None),
    ("GET", "/local-sandbox/canvas/{id}/dump", None),
]
SERVER_DATA = [op for op in OPERATIONS if op[1].count("/") == 4]


def _acquire_all(client: httpx.Client) -> str:
    response = client.post("/local-sandbox", json={"server_names": "ALL"})
    assert response.status_code == 201, response.text
    sandbox_id: str = response.json()["local_sandbox_id"]
    return sandbox_id


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": ""},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "some-key-without-scheme"},
    ],
    ids=["none", "empty", "scheme-only", "basic", "no-scheme"],
)
def test_missing_or_empty_token_is_401(emulator: EmulatorServer, headers: dict[str, str]) -> None:
    sandbox = str(uuid.uuid4())
    with httpx.Client(base_url=emulator.base_url, headers=headers, timeout=30) as anonymous:
        for method, path, body in [
            ("GET", "/local-sandbox", None),
            ("POST", "/local-sandbox", {"server_names": ["git"]}),
            *OPERATIONS,
        ]:
            response = anonymous.request(method, path.format(id=sandbox), json=body)
            assert response.status_code == 401, (method, path, response.text)
            assert response.headers["www-authenticate"] == "Bearer"
            assert "Authorization: Bearer" in response.json()["detail"]


def test_401_comes_before_validation(emulator: EmulatorServer) -> None:
    response = httpx.post(
        f"{emulator.base_url}/local-sandbox",
        json={"server_names": ["nope"], "ttl_seconds": 1},
        timeout=30,
    )
    assert response.status_code == 401


def test_bearer_scheme_is_case_insensitive(emulator: EmulatorServer, token: str) -> None:
    response = httpx.get(
        f"{emulator.base_url}/local-sandbox",
        headers={"Authorization": f"bearer {token}"},
        timeout=30,
    )
    assert response.status_code == 200


def test_another_tenant_sees_nothing(
    emulator: EmulatorServer, client: httpx.Client, token: str
) -> None:
    sandbox_id = _acquire_all(client)
    with httpx.Client(
        base_url=emulator.base_url, headers={"Authorization": f"Bearer other-{token}"}, timeout=30
    ) as intruder:
        assert intruder.get("/local-sandbox").json() == {"local_sandboxes": [], "total_count": 0}
        for method, path, body in OPERATIONS:
            response = intruder.request(method, path.format(id=sandbox_id), json=body)
            assert response.status_code == 404, (method, path, response.text)
            assert "not found" in response.json()["detail"]
    # The owner still has it, untouched by the intruder's release and reset attempts.
    assert client.get(f"/local-sandbox/{sandbox_id}").status_code == 200
    assert client.get("/local-sandbox").json()["total_count"] == 1


def test_server_data_of_a_server_the_sandbox_lacks_is_400(client: httpx.Client) -> None:
    response = client.post("/local-sandbox", json={"server_names": ["git"]})
    sandbox_id = response.json()["local_sandbox_id"]
    for method, path, body in SERVER_DATA:
        response = client.request(method, path.format(id=sandbox_id), json=body)
        assert response.status_code == 400, (method, path, response.text)
        assert "does not hold" in response.json()["detail"]


def test_api_keys_restrict_access(tmp_path: Path) -> None:
    with EmulatorServer(
        EmulatorConfig(data_dir=tmp_path, api_keys=["key-one", "key-two"])
    ) as server:
        url = f"{server.base_url}/local-sandbox"
        for key in ("key-one", "key-two"):
            response = httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
            assert response.status_code == 200
        rejected = httpx.get(url, headers={"Authorization": "Bearer key-three"}, timeout=30)
        assert rejected.status_code == 401
        assert "key-three" not in rejected.text
        assert httpx.get(f"{server.base_url}/_emulator/health", timeout=30).status_code == 200


def test_tokens_are_never_stored(tmp_path: Path) -> None:
    secret = "sk-very-secret-token-4242"
    with EmulatorServer(EmulatorConfig(data_dir=tmp_path)) as server:
        response = httpx.post(
            f"{server.base_url}/local-sandbox",
            json={"server_names": ["git"]},
            headers={"Authorization": f"Bearer {secret}"},
            timeout=30,
        )
        assert response.status_code == 201
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    with sqlite3.connect(tmp_path / "emulator.sqlite3") as db:
        tenants = [row[0] for row in db.execute("SELECT tenant FROM sandboxes")]
    assert len(tenants) == 1
    assert len(tenants[0]) == 64
    assert secret not in tenants[0]
