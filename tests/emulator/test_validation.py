"""Bad input answers 422 (HTTPValidationError shape) or another 4xx with a clear message,
never a 500."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from klavis_emulator._middleware import MAX_JSON_BYTES, MAX_JSON_VALUES
from klavis_emulator._state import LOCAL_SERVER_NAMES

JSON = {"Content-Type": "application/json"}


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
    assert httpx.post(f"{url}/faults", json={"rate": 2}, timeout=30).status_code == 422
    assert httpx.post(f"{url}/faults", json={"mode": "sometimes"}, timeout=30).status_code == 422
    assert httpx.post(f"{url}/faults", json={"bogus": 1}, timeout=30).status_code == 422
    assert httpx.post(f"{url}/clock/advance", json={"seconds": -5}, timeout=30).status_code == 422
    assert httpx.get(f"{url}/faults", timeout=30).json()["rate"] == 0.0


def test_wrong_method_is_405_with_the_allowed_ones(client: httpx.Client) -> None:
    response = client.put("/local-sandbox")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, POST"
    sandbox = client.post("/local-sandbox", json={"server_names": ["git"]}).json()
    response = client.patch(f"/local-sandbox/{sandbox['local_sandbox_id']}")
    assert response.status_code == 405
    assert response.headers["allow"] == "DELETE, GET"
    assert "PATCH" in response.json()["detail"]


# ------------------------------------------------------------------ bounded request bodies


def _google_cloud_sandbox(client: httpx.Client) -> str:
    response = client.post("/local-sandbox", json={"server_names": ["google_cloud"]})
    assert response.status_code == 201, response.text
    sandbox_id: str = response.json()["local_sandbox_id"]
    return sandbox_id


_HEAD = b'{"objects": [{"bucket": "b", "name": "o", "content": "'
_TAIL = b'"}]}'


def _objects_document(size: int) -> bytes:
    """A google_cloud document of exactly ``size`` bytes (one object with a long content)."""
    return _HEAD + b"a" * (size - len(_HEAD) - len(_TAIL)) + _TAIL


def test_a_body_at_the_cap_is_accepted(client: httpx.Client) -> None:
    sandbox_id = _google_cloud_sandbox(client)
    path = f"/local-sandbox/google_cloud/{sandbox_id}"
    body = _objects_document(MAX_JSON_BYTES)
    response = client.post(f"{path}/initialize", content=body, headers=JSON)
    assert response.status_code == 200, response.text
    dumped = client.get(f"{path}/dump").json()["data"]["objects"][0]["content"]
    assert len(dumped) == MAX_JSON_BYTES - len(_HEAD) - len(_TAIL)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_over_the_cap_is_413(client: httpx.Client, chunked: bool) -> None:
    """The 60 MB body of the issue (it took the emulator from 57 to 851 MiB): refused after
    reading at most the cap, with or without a Content-Length."""
    sandbox_id = _google_cloud_sandbox(client)
    body = _objects_document(60_000_000)

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(body), 1 << 20):
            yield body[start : start + (1 << 20)]

    content: bytes | Iterator[bytes] = chunks() if chunked else body
    response = client.post(
        f"/local-sandbox/google_cloud/{sandbox_id}/initialize", content=content, headers=JSON
    )
    assert response.status_code == 413, response.text
    assert f"limit of {MAX_JSON_BYTES:,} bytes" in response.json()["detail"]
    dumped = client.get(f"/local-sandbox/google_cloud/{sandbox_id}/dump").json()["data"]
    assert dumped["objects"] == []
    # the connection is still good for the next request
    assert client.get("/local-sandbox").status_code == 200


def test_an_acquire_body_over_the_cap_acquires_nothing(client: httpx.Client) -> None:
    padding = "x" * MAX_JSON_BYTES
    response = client.post("/local-sandbox", json={"server_names": ["git"], "benchmark": padding})
    assert response.status_code == 413, response.text
    assert client.get("/local-sandbox").json()["total_count"] == 0


@pytest.mark.parametrize(
    "content_type", ["application/json", None], ids=["json", "no-content-type"]
)
def test_too_many_json_values_are_413(client: httpx.Client, content_type: str | None) -> None:
    """Small bodies of many tiny values cost far more memory than their bytes (4 MiB of
    minimal buckets took 484 MiB); they are counted before FastAPI builds objects."""
    sandbox_id = _google_cloud_sandbox(client)
    many = ",".join(["[]"] * MAX_JSON_VALUES)
    body = f'{{"log_entries": [{{"log_name": "l", "json_data": {{"k": [{many}]}}}}]}}'.encode()
    headers = {"Content-Type": content_type} if content_type else {}
    response = client.post(
        f"/local-sandbox/google_cloud/{sandbox_id}/initialize", content=body, headers=headers
    )
    assert response.status_code == 413, response.text
    assert f"more than {MAX_JSON_VALUES:,} values" in response.json()["detail"]
    fewer = ",".join(["[]"] * (MAX_JSON_VALUES - 10))
    body = f'{{"log_entries": [{{"log_name": "l", "json_data": {{"k": [{fewer}]}}}}]}}'.encode()
    response = client.post(
        f"/local-sandbox/google_cloud/{sandbox_id}/initialize", content=body, headers=JSON
    )
    assert response.status_code == 200, response.text


def test_a_control_body_over_the_cap_is_413(emulator: Any) -> None:
    response = httpx.post(
        f"{emulator.base_url}/_emulator/faults",
        content=b'{"rate": 0, "x": "' + b"a" * MAX_JSON_BYTES + b'"}',
        headers=JSON,
        timeout=30,
    )
    assert response.status_code == 413, response.text
    assert httpx.get(f"{emulator.base_url}/_emulator/faults", timeout=30).json()["rate"] == 0.0
