"""Retries and reconciliation under injected faults: work completes, nothing leaks."""

from __future__ import annotations

from typing import Literal

import httpx
import pytest

from klavis_emulator import EmulatorServer
from tests.helpers import Face, listed_sandboxes


def _faults(url: str, **settings: object) -> None:
    httpx.post(f"{url}/_emulator/faults", json=settings, timeout=30).raise_for_status()


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
    assert listed_sandboxes(url, token) == []


def test_bulk_release_under_faults(face: Face, faulty_emulator: EmulatorServer, token: str) -> None:
    url = faulty_emulator.base_url
    conn = {"api_key": token, "base_url": url}
    batch = face.bulk_acquire(["git"], 6, concurrency=3, **conn)
    assert len(batch.sandboxes) == 6
    _faults(url, rate=0.4, mode="mixed", seed=3)
    results = face.bulk_release([s.id for s in batch.sandboxes], concurrency=4, **conn)
    _faults(url, rate=0.0)
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    assert listed_sandboxes(url, token) == []


def test_an_acquire_whose_retries_run_out_raises_the_last_api_error(
    face: Face, emulator: EmulatorServer, token: str
) -> None:
    """Every acquire answered 429 before it reaches the emulator: retried, then the 429 itself
    (not the private signal that asks for another attempt), and nothing was created."""
    from tests.faulty_proxy import faulty_proxy
    from workflows import RateLimitError

    def refuse_acquires(method: str, path: str) -> tuple[Literal["before"], int] | None:
        return ("before", 429) if (method, path) == ("POST", "/local-sandbox") else None

    with faulty_proxy(emulator.base_url, refuse_acquires) as proxy:
        with pytest.raises(RateLimitError):
            face.acquire(["git"], api_key=token, base_url=proxy.base_url)
        refused = [seen for seen in proxy.seen if seen[:2] == ("POST", "/local-sandbox")]
        assert len(refused) > 1  # retried
    assert listed_sandboxes(emulator.base_url, token) == []
