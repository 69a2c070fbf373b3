"""Retries and reconciliation under injected faults: work completes, nothing leaks."""

from __future__ import annotations

import httpx
import pytest

from klavis_emulator import EmulatorServer
from tests.helpers import Face


def _faults(url: str, **settings: object) -> None:
    httpx.post(f"{url}/_emulator/faults", json=settings).raise_for_status()


def _listed(url: str, token: str) -> list[str]:
    response = httpx.get(f"{url}/local-sandbox", headers={"Authorization": f"Bearer {token}"})
    response.raise_for_status()
    return [s["local_sandbox_id"] for s in response.json()["local_sandboxes"]]


@pytest.mark.parametrize("mode", ["before", "after", "mixed"])
def test_lifecycles_complete_under_faults(
    face: Face, faulty_emulator: EmulatorServer, token: str, mode: str
) -> None:
    url = faulty_emulator.base_url
    conn = {"api_key": token, "base_url": url}
    _faults(url, rate=0.3, mode=mode, seed=7)
    files = {f"f{i}.txt": f"content {i}" for i in range(5)}
    for _ in range(4):
        with face.acquire(["filesystem"], ttl_seconds=600, **conn) as sb:
            report = face.round_trip_dump(sb, files)
            assert report.ok, report
    _faults(url, rate=0.0)
    assert _listed(url, token) == []


def test_bulk_release_under_faults(face: Face, faulty_emulator: EmulatorServer, token: str) -> None:
    url = faulty_emulator.base_url
    conn = {"api_key": token, "base_url": url}
    batch = face.bulk_acquire(["git"], 6, concurrency=3, **conn)
    assert len(batch.sandboxes) == 6
    _faults(url, rate=0.4, mode="mixed", seed=3)
    results = face.bulk_release([s.id for s in batch.sandboxes], concurrency=4, **conn)
    _faults(url, rate=0.0)
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    assert _listed(url, token) == []
