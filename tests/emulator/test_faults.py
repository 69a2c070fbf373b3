"""Fault injection and latency, for testing clients' retries."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from klavis_emulator import EmulatorConfig, EmulatorServer, FaultSettings


@pytest.fixture
def faulty(tmp_path: Path) -> Iterator[EmulatorServer]:
    """An emulator of this test's own, faults off until the test turns them on."""
    with EmulatorServer(EmulatorConfig(data_dir=tmp_path, fault_seed=1234)) as server:
        yield server


@pytest.fixture
def http(faulty: EmulatorServer, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=faulty.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    ) as client:
        yield client


def _set_faults(http: httpx.Client, **settings: object) -> dict[str, object]:
    response = http.post("/_emulator/faults", json=settings)
    assert response.status_code == 200, response.text
    data: dict[str, object] = response.json()
    return data


def test_before_faults_change_nothing(http: httpx.Client) -> None:
    _set_faults(http, rate=1.0, mode="before")
    statuses = set()
    for _ in range(12):
        response = http.post("/local-sandbox", json={"server_names": ["git"]})
        statuses.add(response.status_code)
        assert response.status_code in (429, 500, 502, 503)
        assert response.headers["x-emulator-fault"] == "before"
        assert "Injected fault" in response.json()["detail"]
        if response.status_code == 429:
            assert response.headers["retry-after"] == "1"
    assert len(statuses) > 1
    _set_faults(http, rate=0.0)
    assert http.get("/local-sandbox").json()["total_count"] == 0


def test_after_faults_happen_after_the_operation(http: httpx.Client) -> None:
    _set_faults(http, rate=1.0, mode="after")
    response = http.post("/local-sandbox", json={"server_names": ["git"]})
    assert response.status_code in (500, 502, 503)
    assert response.headers["x-emulator-fault"] == "after"
    _set_faults(http, rate=0.0)
    listing = http.get("/local-sandbox").json()
    assert listing["total_count"] == 1  # the sandbox was acquired although the answer was lost
    sandbox_id = listing["local_sandboxes"][0]["local_sandbox_id"]

    _set_faults(http, rate=1.0, mode="after")
    assert http.delete(f"/local-sandbox/{sandbox_id}").status_code >= 500
    _set_faults(http, rate=0.0)
    assert http.get(f"/local-sandbox/{sandbox_id}").status_code == 404  # released anyway


def test_mixed_faults_and_control_routes_are_never_faulted(http: httpx.Client) -> None:
    settings = _set_faults(http, rate=1.0, mode="mixed", seed=7, statuses=[502, 429])
    assert settings["mode"] == "mixed"
    whens = set()
    for _ in range(20):
        response = http.get("/local-sandbox")
        assert response.status_code in (429, 502)
        whens.add(response.headers["x-emulator-fault"])
        assert http.get("/_emulator/health").status_code == 200
        assert http.get("/_emulator/faults").status_code == 200
    assert whens == {"before", "after"}
    assert http.get("/_emulator/faults").json()["injected"] == 20


def test_storage_targets_are_faulted_too(http: httpx.Client) -> None:
    sandbox_id = http.post("/local-sandbox", json={"server_names": ["git"]}).json()[
        "local_sandbox_id"
    ]
    url = http.get(f"/local-sandbox/{sandbox_id}/dump").json()["download_url"]
    _set_faults(http, rate=1.0, mode="before")
    assert http.get(url).status_code in (429, 500, 502, 503)
    _set_faults(http, rate=0.0)
    assert http.get(url).status_code == 200


def test_partial_rate_is_deterministic_with_a_seed() -> None:
    def sequence() -> list[tuple[str, int] | None]:
        settings = FaultSettings(rate=0.3, mode="mixed", seed=99)
        return [settings.draw() for _ in range(200)]

    first = sequence()
    assert first == sequence()
    faults = [fate for fate in first if fate is not None]
    assert 30 <= len(faults) <= 90
    assert {when for when, _ in faults} == {"before", "after"}


def test_latency_delays_api_requests_only(http: httpx.Client) -> None:
    _set_faults(http, latency_ms=300)
    started = time.perf_counter()
    assert http.get("/local-sandbox").status_code == 200
    assert time.perf_counter() - started >= 0.3
    assert http.get("/_emulator/faults").json()["latency_ms"] == 300


def test_fault_settings_from_the_constructor(tmp_path: Path, token: str) -> None:
    with EmulatorServer(
        EmulatorConfig(data_dir=tmp_path, fault_rate=1.0, fault_mode="before", fault_seed=3)
    ) as server:
        response = httpx.get(
            f"{server.base_url}/local-sandbox",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert response.status_code in (429, 500, 502, 503)
        assert httpx.get(f"{server.base_url}/_emulator/health", timeout=30).status_code == 200
    with pytest.raises(ValueError, match="fault_mode"):
        EmulatorServer(EmulatorConfig(data_dir=tmp_path, fault_mode="sometimes")).start()
