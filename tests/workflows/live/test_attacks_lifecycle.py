"""Lifecycle faults: nothing stays acquired, whatever fails and wherever the key came from.

Each case ends with the three checks: the specific outcome (an error of the exact class, or
the right result), nothing written outside its folder, and nothing left acquired (the tenant
lists no sandbox, the test's private ledger holds none and has no open acquire attempt).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import stamina

import workflows
from klavis_emulator import EmulatorServer
from tests.faulty_proxy import Decision, faulty_proxy
from tests.helpers import isolate, run_cli
from workflows import AcquireAmbiguousError, LocalSandbox


@pytest.fixture
def no_env_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """:func:`tests.helpers.isolate`, and quick retries."""
    work = isolate(monkeypatch, tmp_path)
    stamina.set_testing(True, attempts=1)
    try:
        yield work
    finally:
        stamina.set_testing(False)


def _assert_nothing_left(client: httpx.Client, work: Path, base_url: str) -> None:
    listed = client.get("/local-sandbox").json()["local_sandboxes"]
    assert listed == [], "sandboxes leaked"
    book = workflows.default_ledger()
    assert book.held() == [], "the ledger still holds sandboxes"
    assert book.open_attempts(base_url=base_url) == [], "an acquire attempt stayed open"
    assert list(work.iterdir()) == [], "something was written in the working folder"


# ------------------------------------------------------------------- defect: batches leak


def test_a_batch_acquired_with_an_argument_key_is_released_on_exit(
    emulator: EmulatorServer, client: httpx.Client, token: str, no_env_key: Path
) -> None:
    with workflows.bulk_acquire(
        ["filesystem"], 3, api_key=token, base_url=emulator.base_url, progress=False
    ) as batch:
        assert len(batch.sandboxes) == 3
        assert len(client.get("/local-sandbox").json()["local_sandboxes"]) == 3
    _assert_nothing_left(client, no_env_key, emulator.base_url)


def test_batch_release_and_bulk_release_of_sandboxes_use_their_own_key(
    emulator: EmulatorServer, client: httpx.Client, token: str, no_env_key: Path
) -> None:
    batch = workflows.bulk_acquire(
        ["filesystem"], 4, api_key=token, base_url=emulator.base_url, progress=False
    )
    first, second = batch.sandboxes[:2], batch.sandboxes[2:]
    results = workflows.bulk_release(first, progress=False)  # no key given, none in the env
    assert [r.ok for r in results] == [True, True]
    assert all(sb.released for sb in first)
    results = batch.release(progress=False)  # the two released ones count as done
    assert [r.ok for r in results] == [True] * 4
    assert all(sb.released for sb in second)
    _assert_nothing_left(client, no_env_key, emulator.base_url)


def test_the_async_batch_does_the_same(
    emulator: EmulatorServer, client: httpx.Client, token: str, no_env_key: Path
) -> None:
    async def run() -> None:
        async with await workflows.async_bulk_acquire(
            ["filesystem"], 3, api_key=token, base_url=emulator.base_url, progress=False
        ) as batch:
            assert len(batch.sandboxes) == 3
            results = await workflows.async_bulk_release(batch.sandboxes[:1], progress=False)
            assert [r.ok for r in results] == [True]

    asyncio.run(run())
    _assert_nothing_left(client, no_env_key, emulator.base_url)


def test_releasing_the_other_face_s_sandboxes_is_refused_before_anything_happens(
    emulator: EmulatorServer, client: httpx.Client, token: str, no_env_key: Path
) -> None:
    with LocalSandbox.acquire(["filesystem"], api_key=token, base_url=emulator.base_url) as sb:
        with pytest.raises(workflows.InvalidInputError, match="AsyncLocalSandbox objects"):
            asyncio.run(workflows.async_bulk_release([sb]))  # type: ignore[list-item]
        assert not sb.released
    _assert_nothing_left(client, no_env_key, emulator.base_url)


# ------------------------------------------------- defect: an ambiguous acquire's orphan


class LoseTheAcquire:
    """Let the first acquire take effect but lose its answer, then fail the listing that
    would reconcile it; everything passes once ``healed`` is set."""

    def __init__(self) -> None:
        self.healed = threading.Event()
        self._posted = False

    def __call__(self, method: str, path: str) -> Decision:
        if self.healed.is_set():
            return None
        if method == "POST" and path == "/local-sandbox":
            self._posted = True
            return ("after", 502)
        if method == "GET" and path == "/local-sandbox" and self._posted:
            return ("before", 503)
        return None


async def _async_acquire(names: list[workflows.ServerName], conn: dict[str, Any]) -> None:
    await workflows.AsyncLocalSandbox.acquire(names, **conn)


@pytest.mark.parametrize("face", ["sync", "async"])
def test_reap_finds_the_sandbox_an_ambiguous_acquire_left(
    face: str, emulator: EmulatorServer, client: httpx.Client, token: str, no_env_key: Path
) -> None:
    script = LoseTheAcquire()
    with faulty_proxy(emulator.base_url, script) as proxy:
        conn: dict[str, Any] = {"api_key": token, "base_url": proxy.base_url}
        with pytest.raises(AcquireAmbiguousError, match="klavis-sandbox reap") as caught:
            if face == "sync":
                LocalSandbox.acquire(["filesystem", "git"], **conn)
            else:
                asyncio.run(_async_acquire(["filesystem", "git"], conn))
        assert token not in str(caught.value)
        assert ("POST", "/local-sandbox", "after 502") in proxy.seen
        # the acquire took effect: an orphan exists that nobody holds by id
        (orphan,) = client.get("/local-sandbox").json()["local_sandboxes"]
        assert workflows.default_ledger().held() == []

        script.healed.set()
        would = workflows.reap(dry_run=True, **conn)
        assert [r.sandbox_id for r in would] == [orphan["local_sandbox_id"]]
        assert client.get("/local-sandbox").json()["local_sandboxes"] != []  # dry: untouched
        if face == "sync":
            results = workflows.reap(progress=False, **conn)
        else:
            results = asyncio.run(workflows.async_reap(progress=False, **conn))
        assert [(r.sandbox_id, r.ok) for r in results] == [(orphan["local_sandbox_id"], True)]
        _assert_nothing_left(client, no_env_key, proxy.base_url)
        assert workflows.reap(**conn) == []  # settled: a second reap finds nothing


def test_reap_never_takes_a_sandbox_that_existed_before_the_attempt(
    emulator: EmulatorServer, client: httpx.Client, token: str, no_env_key: Path
) -> None:
    # one sandbox acquired by hand before (not in the ledger), one orphan after
    before = client.post("/local-sandbox", json={"server_names": ["filesystem", "git"]})
    assert before.status_code == 201
    mine = before.json()["local_sandbox_id"]
    script = LoseTheAcquire()
    with faulty_proxy(emulator.base_url, script) as proxy:
        conn: dict[str, Any] = {"api_key": token, "base_url": proxy.base_url}
        with pytest.raises(AcquireAmbiguousError):
            LocalSandbox.acquire(["filesystem", "git"], **conn)
        script.healed.set()
        results = workflows.reap(progress=False, **conn)
        assert len(results) == 1
        assert results[0].sandbox_id != mine
        listed = client.get("/local-sandbox").json()["local_sandboxes"]
        assert [s["local_sandbox_id"] for s in listed] == [mine]
        assert client.delete(f"/local-sandbox/{mine}").status_code == 200
        _assert_nothing_left(client, no_env_key, proxy.base_url)


def test_reap_in_another_process_releases_an_orphan_while_its_raiser_still_runs(
    emulator: EmulatorServer, client: httpx.Client, token: str, no_env_key: Path
) -> None:
    # the notebook kernel's case: its acquire raised, the kernel lives on (here: this test's
    # process), and `klavis-sandbox reap` runs in a terminal
    script = LoseTheAcquire()
    with faulty_proxy(emulator.base_url, script) as proxy:
        with pytest.raises(AcquireAmbiguousError):
            LocalSandbox.acquire(
                ["filesystem", "git"], ttl_seconds=None, api_key=token, base_url=proxy.base_url
            )
        (orphan,) = client.get("/local-sandbox").json()["local_sandboxes"]
        script.healed.set()
        done = run_cli(
            ["reap", "--json"], env={"KLAVIS_API_KEY": token, "KLAVIS_BASE_URL": proxy.base_url}
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == [
            {"sandbox_id": orphan["local_sandbox_id"], "outcome": "released", "error": None}
        ]
        _assert_nothing_left(client, no_env_key, proxy.base_url)


class HoldTheReconciling:
    """Let the first acquire take effect but lose its answer, then hold the listing that
    reconciles it until ``go`` is set (``holding`` says it is held): an acquire in flight."""

    def __init__(self) -> None:
        self.holding = threading.Event()
        self.go = threading.Event()
        self._state = "before the acquire"
        self._lock = threading.Lock()

    def __call__(self, method: str, path: str) -> Decision:
        if path != "/local-sandbox":
            return None
        with self._lock:
            if method == "POST" and self._state == "before the acquire":
                self._state = "answer lost"
                return ("after", 502)
            hold = method == "GET" and self._state == "answer lost"
            if hold:
                self._state = "held"
        if hold:
            self.holding.set()
            assert self.go.wait(60), "the test never let the listing go"
        return None


_ACQUIRE_AND_PRINT = """
from workflows import LocalSandbox
with LocalSandbox.acquire(["filesystem", "git"], ttl_seconds=None) as sb:
    print(sb.id, flush=True)
"""


def test_reap_in_another_process_keeps_what_a_running_acquire_may_record(
    emulator: EmulatorServer, client: httpx.Client, token: str, no_env_key: Path
) -> None:
    script = HoldTheReconciling()
    with faulty_proxy(emulator.base_url, script) as proxy:
        env = {**os.environ, "KLAVIS_API_KEY": token, "KLAVIS_BASE_URL": proxy.base_url}
        with subprocess.Popen(
            [sys.executable, "-c", _ACQUIRE_AND_PRINT],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        ) as acquirer:
            try:
                assert script.holding.wait(60), "the acquire never reached its reconciling"
                (pending,) = client.get("/local-sandbox").json()["local_sandboxes"]
                conn: dict[str, Any] = {"api_key": token, "base_url": proxy.base_url}
                assert workflows.reap(dry_run=True, **conn) == []
                assert workflows.reap(progress=False, **conn) == []
                listed = client.get("/local-sandbox").json()["local_sandboxes"]
                assert [s["local_sandbox_id"] for s in listed] == [pending["local_sandbox_id"]]
            finally:
                script.go.set()
            out, err = acquirer.communicate(timeout=120)
        assert acquirer.returncode == 0, err
        assert out == f"{pending['local_sandbox_id']}\n"  # the acquire adopted it, unharmed
        _assert_nothing_left(client, no_env_key, proxy.base_url)
