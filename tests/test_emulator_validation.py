"""Bad input answers 422 (HTTPValidationError shape) or another 4xx with a clear message,
never a 500."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from klavis_emulator import LOCAL_SERVER_NAMES


def assert_validation_error(
    response: httpx.Response, loc_prefix: list[Any]
) -> list[dict[str, Any]]:
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, list)
    assert detail
    for error in detail:
        assert set(error) >= {"loc", "msg", "type"}
        assert isinstance(error["msg"], str)
        assert isinstance(error["type"], str)
    assert any(error["loc"][: len(loc_prefix)] == loc_prefix for error in detail), detail
    errors: list[dict[str, Any]] = detail
    return errors


def test_invalid_server_name_lists_the_valid_ones(client: httpx.Client) -> None:
    response = client.post("/local-sandbox", json={"server_names": ["filesystem", "gti"]})
    errors = assert_validation_error(response, ["body", "server_names"])
    message = errors[0]["msg"]
    assert "'gti'" in message
    for name in LOCAL_SERVER_NAMES:
        assert name in message


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"server_names": "all"}, ["body", "server_names"]),
        ({"server_names": []}, ["body", "server_names"]),
        ({"server_names": 5}, ["body", "server_names"]),
        ({"server_names": [5]}, ["body", "server_names"]),
        ({"server_names": None}, ["body", "server_names"]),
        ({}, ["body", "server_names"]),
        ({"server_names": ["git"], "ttl_seconds": 10}, ["body", "ttl_seconds"]),
        ({"server_names": ["git"], "ttl_seconds": 59}, ["body", "ttl_seconds"]),
        ({"server_names": ["git"], "ttl_seconds": 86401}, ["body", "ttl_seconds"]),
        ({"server_names": ["git"], "ttl_seconds": "100"}, ["body", "ttl_seconds"]),
        ({"server_names": ["git"], "ttl_seconds": True}, ["body", "ttl_seconds"]),
        ({"server_names": ["git"], "ttl_seconds": 120.5}, ["body", "ttl_seconds"]),
        ({"server_names": ["git"], "benchmark": "MCP-Atlas"}, ["body", "benchmark"]),
        ({"server_names": ["git"], "test_account_email": 42}, ["body", "test_account_email"]),
    ],
)
def test_bad_acquire_bodies_are_422(client: httpx.Client, body: object, loc: list[Any]) -> None:
    assert_validation_error(client.post("/local-sandbox", json=body), loc)
    assert client.get("/local-sandbox").json()["total_count"] == 0


def test_ttl_bounds_are_inclusive(client: httpx.Client) -> None:
    for ttl in (60, 86400):
        response = client.post("/local-sandbox", json={"server_names": ["git"], "ttl_seconds": ttl})
        assert response.status_code == 201, response.text


def test_server_names_are_deduplicated(client: httpx.Client) -> None:
    response = client.post("/local-sandbox", json={"server_names": ["git", "git", "word"]})
    assert response.status_code == 201
    assert [s["server_name"] for s in response.json()["servers"]] == ["git", "word"]


def test_missing_or_malformed_body_is_422(client: httpx.Client) -> None:
    assert_validation_error(client.post("/local-sandbox"), ["body"])
    malformed = client.post(
        "/local-sandbox",
        content=b'{"server_names": [',
        headers={"Content-Type": "application/json"},
    )
    assert_validation_error(malformed, ["body"])
    assert_validation_error(client.post("/local-sandbox", json=["git"]), ["body"])
    assert_validation_error(client.post("/local-sandbox", json="ALL"), ["body"])


def test_bad_query_parameters_are_422(client: httpx.Client) -> None:
    sandbox_id = client.post("/local-sandbox", json={"server_names": ["git"]}).json()[
        "local_sandbox_id"
    ]
    for method, path, params in [
        ("POST", "upload-url", {"region": "eu"}),
        ("POST", "initialize", {"region": "US"}),
        ("GET", "dump", {"region": ""}),
    ]:
        response = client.request(method, f"/local-sandbox/{sandbox_id}/{path}", params=params)
        assert_validation_error(response, ["query", "region"])
    bad_flag = client.delete(f"/local-sandbox/{sandbox_id}", params={"is_ttl": "maybe"})
    assert_validation_error(bad_flag, ["query", "is_ttl"])
    assert client.get(f"/local-sandbox/{sandbox_id}").status_code == 200
    negative_cursor = client.get(
        f"/local-sandbox/{sandbox_id}/execution-logs",
        params={"execution_name": "x", "cursor": -1},
    )
    assert_validation_error(negative_cursor, ["query", "cursor"])
    missing_name = client.get(f"/local-sandbox/{sandbox_id}/execution-status")
    assert_validation_error(missing_name, ["query", "execution_name"])
    missing_body = client.post(f"/local-sandbox/{sandbox_id}/execute")
    assert_validation_error(missing_body, ["body"])


def test_weird_ids_never_cause_a_server_error(client: httpx.Client) -> None:
    for weird in ["%00", "..", "a" * 5000, "%2e%2e%2f%2e%2e", "null", "😀", "'; DROP TABLE x;--"]:
        for suffix in ["", "/reset", "/dump", "/upload-url"]:
            method = "GET" if suffix in ("", "/dump") else "POST"
            response = client.request(method, f"/local-sandbox/{weird}{suffix}")
            assert 400 <= response.status_code < 500, (weird, suffix, response.text)


def test_control_routes_validate_too(client: httpx.Client, emulator: Any) -> None:
    url = f"{emulator.base_url}/_emulator"
    assert httpx.post(f"{url}/faults", json={"rate": 2}).status_code == 422
    assert httpx.post(f"{url}/faults", json={"mode": "sometimes"}).status_code == 422
    assert httpx.post(f"{url}/faults", json={"bogus": 1}).status_code == 422
    assert httpx.post(f"{url}/clock/advance", json={"seconds": -5}).status_code == 422
    assert httpx.get(f"{url}/faults").json()["rate"] == 0.0


def test_wrong_method_is_405_with_the_allowed_ones(client: httpx.Client) -> None:
    response = client.put("/local-sandbox")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, POST"
    sandbox = client.post("/local-sandbox", json={"server_names": ["git"]}).json()
    response = client.patch(f"/local-sandbox/{sandbox['local_sandbox_id']}")
    assert response.status_code == 405
    assert response.headers["allow"] == "DELETE, GET"
    assert "PATCH" in response.json()["detail"]
