"""Who may do what: the emulator's control routes, and one tenant against another.

Control routes (``/_emulator/...`` but ``GET /_emulator/health``) move the clock for every
tenant (expiring their sandboxes) and inject faults into everyone's requests. They answer
loopback clients, or anyone with the control token when one is configured; never a stranger.

Every case asserts the specific answer (status and a fragment of ``detail``), that the refused
request changed nothing (the clock, the fault settings, the other tenant's sandbox and
workspace), and that nothing is left acquired (the tenants' lists are empty at the end).
"""

from __future__ import annotations

import contextlib
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from starlette.testclient import TestClient

from klavis_emulator import EmulatorConfig, EmulatorServer, create_app
from tests.crafted import file, tar_gz

HEADER = "X-Emulator-Control-Token"
GZIP = {"Content-Type": "application/gzip"}
# (method, path, JSON body, status when allowed)
CONTROL_ROUTES: list[tuple[str, str, Any, int]] = [
    ("GET", "/_emulator/faults", None, 200),
    ("POST", "/_emulator/faults", {"latency_ms": 0}, 200),
    ("GET", "/_emulator/clock", None, 200),
    ("POST", "/_emulator/clock/advance", {"seconds": 0}, 200),
    ("POST", "/_emulator/health", None, 405),  # only GET (and HEAD) of health is public
    ("GET", "/_emulator/not-a-route", None, 404),
]


def _acquire(http: httpx.Client | TestClient, key: str, ttl: int | None = None) -> str:
    body: dict[str, Any] = {"server_names": ["filesystem"]}
    if ttl is not None:
        body["ttl_seconds"] = ttl
    response = http.post("/local-sandbox", json=body, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 201, response.text
    sandbox_id: str = response.json()["local_sandbox_id"]
    return sandbox_id


def _release_all(http: httpx.Client | TestClient, key: str) -> None:
    auth = {"Authorization": f"Bearer {key}"}
    listed = http.get("/local-sandbox", headers=auth).json()["local_sandboxes"]
    for sandbox in listed:
        http.delete(f"/local-sandbox/{sandbox['local_sandbox_id']}", headers=auth)
    assert http.get("/local-sandbox", headers=auth).json()["total_count"] == 0


# --------------------------------------------------------------------------- no control token


@contextlib.contextmanager
def _app_seen_from(tmp_path: Path, host: str, **options: Any) -> Iterator[TestClient]:
    """The real emulator app, its requests coming from the client address ``host``."""
    app = create_app(EmulatorConfig(data_dir=tmp_path / "data", host_mcp=False, **options))
    try:
        yield TestClient(app, client=(host, 40000))
    finally:
        app.state.emulator.close()


@pytest.mark.parametrize(
    "host",
    ["192.0.2.9", "10.0.0.1", "2001:db8::1", "::ffff:192.0.2.9", "testclient"],
)
def test_strangers_get_403_without_a_control_token(tmp_path: Path, token: str, host: str) -> None:
    with _app_seen_from(tmp_path, host) as remote:
        sandbox_id = _acquire(remote, token, ttl=60)  # API routes need only the API key
        faults_before = remote.app.state.faults.as_dict()  # type: ignore[attr-defined]
        now_before = remote.app.state.emulator.now()  # type: ignore[attr-defined]
        for method, path, body, _ in CONTROL_ROUTES:
            response = remote.request(method, path, json=body)
            assert response.status_code == 403, (method, path, response.text)
            assert "answer only loopback clients" in response.json()["detail"]
            assert "--control-token" in response.json()["detail"]
        # a refused clock move expired nothing, a refused fault setting changed nothing
        for seconds in (3600, 86400):
            moved = remote.post("/_emulator/clock/advance", json={"seconds": seconds})
            assert moved.status_code == 403
        fault = remote.post("/_emulator/faults", json={"rate": 1.0, "mode": "before"})
        assert fault.status_code == 403
        assert remote.app.state.faults.as_dict() == faults_before  # type: ignore[attr-defined]
        assert remote.app.state.emulator.now() - now_before < 60  # type: ignore[attr-defined]
        auth = {"Authorization": f"Bearer {token}"}
        assert remote.get(f"/local-sandbox/{sandbox_id}", headers=auth).status_code == 200
        assert remote.get("/_emulator/health").json() == {"status": "ok"}
        assert remote.head("/_emulator/health").status_code in (200, 405)
        _release_all(remote, token)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"])
def test_loopback_clients_are_answered_without_a_control_token(tmp_path: Path, host: str) -> None:
    with _app_seen_from(tmp_path, host) as local:
        for method, path, body, status in CONTROL_ROUTES:
            response = local.request(method, path, json=body)
            assert response.status_code == status, (method, path, response.text)


def _non_loopback_address() -> str | None:
    """An address of this host that is not loopback (None if it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_a_real_server_refuses_a_non_loopback_client(token: str) -> None:
    """The same, over a real socket: the emulator listens on this host's own non-loopback
    address and is called through it."""
    address = _non_loopback_address()
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    with (
        EmulatorServer(EmulatorConfig(host=address)) as server,
        httpx.Client(base_url=server.base_url, timeout=30) as http,
    ):
        sandbox_id = _acquire(http, token, ttl=60)
        response = http.post("/_emulator/clock/advance", json={"seconds": 3600})
        assert response.status_code == 403, response.text
        assert "--control-token" in response.json()["detail"]
        auth = {"Authorization": f"Bearer {token}"}
        assert http.get(f"/local-sandbox/{sandbox_id}", headers=auth).status_code == 200
        assert http.get("/_emulator/health").status_code == 200
        _release_all(http, token)


def test_the_session_emulator_answers_its_loopback_tests(emulator: EmulatorServer) -> None:
    for method, path, body, status in CONTROL_ROUTES:
        response = httpx.request(method, f"{emulator.base_url}{path}", json=body, timeout=30)
        assert response.status_code == status, (method, path, response.text)


# --------------------------------------------------------------------------- a control token


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[tuple[EmulatorServer, str]]:
    """An emulator (on loopback) started with a control token."""
    secret = f"control-{uuid.uuid4().hex}"
    with EmulatorServer(EmulatorConfig(data_dir=tmp_path / "data", control_token=secret)) as server:
        yield server, secret


def test_a_control_token_is_required_even_from_loopback(
    guarded: tuple[EmulatorServer, str], token: str
) -> None:
    server, secret = guarded
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        sandbox_id = _acquire(http, token, ttl=60)
        now_before = server.state.now()
        refusals: list[tuple[dict[str, str], int, str]] = [
            ({}, 401, f"send the header '{HEADER}: <control token>'"),
            ({HEADER: ""}, 401, "Missing control token"),
            ({HEADER: "wrong"}, 403, "Wrong control token"),
            ({HEADER: secret[:-1]}, 403, "Wrong control token"),
            ({HEADER: secret + "x"}, 403, "Wrong control token"),
            ({"Authorization": f"Bearer {secret}"}, 401, "Missing control token"),
        ]
        for headers, status, fragment in refusals:
            for method, path, body, _ in CONTROL_ROUTES:
                response = http.request(method, path, json=body, headers=headers)
                assert response.status_code == status, (headers, method, path, response.text)
                assert fragment in response.json()["detail"]
                if status == 401:
                    assert response.headers["www-authenticate"] == HEADER
                assert secret not in response.text
        assert server.state.now() - now_before < 60
        assert server.faults.as_dict()["rate"] == 0.0
        auth = {"Authorization": f"Bearer {token}"}
        assert http.get(f"/local-sandbox/{sandbox_id}", headers=auth).status_code == 200

        for method, path, body, status in CONTROL_ROUTES:
            response = http.request(method, path, json=body, headers={HEADER: secret})
            assert response.status_code == status, (method, path, response.text)
        # one client can carry the API key and the control token together
        both = {**auth, HEADER: secret}
        moved = http.post("/_emulator/clock/advance", json={"seconds": 120}, headers=both)
        assert moved.status_code == 200
        assert http.get(f"/local-sandbox/{sandbox_id}", headers=auth).status_code == 404
        assert http.get("/_emulator/health").json() == {"status": "ok"}
        _release_all(http, token)


# main.py of a run with the network: POST the clock 7 s forward (less than a sandbox's TTL)
# on the emulator's loopback port (``PORT = <n>`` is put before it), without a control token.
CLOCK_MOVER = """
import json, urllib.error, urllib.request
request = urllib.request.Request(
    f"http://127.0.0.1:{PORT}/_emulator/clock/advance", data=json.dumps({"seconds": 7}).encode(),
    headers={"Content-Type": "application/json"}, method="POST")
try:
    print("STATUS", urllib.request.urlopen(request, timeout=10).status)
except urllib.error.HTTPError as exc:
    print("STATUS", exc.code)
"""


@pytest.mark.parametrize("with_token", [False, True])
def test_a_run_with_the_network_reaches_the_control_routes_only_unconfined_and_without_a_token(
    tmp_path: Path, with_token: bool
) -> None:
    """``allow_network`` gives ``main.py`` the machine's loopback. Confined, its control
    requests are still refused (the emulator recognises a sandbox's socket); unconfined (the
    opt-out) it can do what the emulator's user can; a control token closes them to both."""
    from tests.helpers import Executions

    secret = f"control-{uuid.uuid4().hex}" if with_token else None
    with EmulatorServer(
        EmulatorConfig(data_dir=tmp_path / "data", allow_network=True, control_token=secret)
    ) as server:
        key = f"net-{uuid.uuid4().hex}"
        with httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as http:
            runs = Executions(server, http, key)
            sandbox_id = runs.acquire()
            port = urlsplit(server.base_url).port
            offset = getattr(server.state.clock, "offset")  # noqa: B009 - an OffsetClock
            main = f"PORT = {port}\n{CLOCK_MOVER}"
            assert runs.run(sandbox_id, "clock", {"main.py": main}) == "completed"
            logs = runs.logs(sandbox_id, "clock")["logs"]
            moved = getattr(server.state.clock, "offset") - offset  # noqa: B009
            if with_token:
                assert "STATUS 401" in logs, logs
                assert moved == 0
            elif server.state.run_settings.confinement.enabled:
                assert "STATUS 403" in logs, logs
                assert moved == 0
            else:
                assert "STATUS 200" in logs, logs
                assert moved == 7
            _release_all(http, key)


@pytest.mark.parametrize("secret", ["", "two words", "tab\there", "new\nline", "clé"])
def test_a_control_token_that_cannot_be_sent_is_refused_at_start(
    tmp_path: Path, secret: str
) -> None:
    with pytest.raises(ValueError, match="control_token must be"):
        create_app(EmulatorConfig(data_dir=tmp_path / "app", host_mcp=False, control_token=secret))
    with pytest.raises(ValueError, match="control_token must be"):
        EmulatorServer(EmulatorConfig(data_dir=tmp_path / "server", control_token=secret)).start()
    assert not (tmp_path / "app").exists()


# --------------------------------------------------------------------------- tenant against tenant


@pytest.fixture
def two_tenants(
    emulator: EmulatorServer, token: str
) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """The owner (this test's key) and an intruder (another key) on the session emulator."""
    with (
        httpx.Client(
            base_url=emulator.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as owner,
        httpx.Client(
            base_url=emulator.base_url,
            headers={"Authorization": f"Bearer intruder-{token}"},
            timeout=30,
        ) as intruder,
    ):
        yield owner, intruder
        for http in (owner, intruder):
            for sandbox in http.get("/local-sandbox").json()["local_sandboxes"]:
                http.delete(f"/local-sandbox/{sandbox['local_sandbox_id']}")
            assert http.get("/local-sandbox").json()["total_count"] == 0


def _seeded(http: httpx.Client) -> str:
    response = http.post("/local-sandbox", json={"server_names": ["filesystem"]})
    assert response.status_code == 201, response.text
    sandbox_id: str = response.json()["local_sandbox_id"]
    url = http.post(f"/local-sandbox/{sandbox_id}/upload-url").json()["upload_url"]
    put = httpx.put(url, content=tar_gz([file("secret.txt", "owner's")]), headers=GZIP, timeout=30)
    assert put.status_code == 200, put.text
    assert http.post(f"/local-sandbox/{sandbox_id}/initialize").status_code == 200
    return sandbox_id


def test_other_spellings_of_a_sandbox_id_reach_nothing(
    emulator: EmulatorServer, two_tenants: tuple[httpx.Client, httpx.Client]
) -> None:
    owner, intruder = two_tenants
    sandbox_id = _seeded(owner)
    workspace = emulator.state.workspace_path(sandbox_id)
    spellings = [
        sandbox_id.upper(),
        "{" + sandbox_id + "}",
        "urn:uuid:" + sandbox_id,
        sandbox_id.replace("-", ""),
        f" {sandbox_id}",
        f"{sandbox_id}%00",
        f"x/../{sandbox_id}",
    ]
    for spelling in spellings:
        for method, suffix in [
            ("GET", ""),
            ("DELETE", ""),
            ("POST", "/reset"),
            ("POST", "/upload-url"),
            ("POST", "/initialize"),
            ("GET", "/dump"),
        ]:
            response = intruder.request(method, f"/local-sandbox/{spelling}{suffix}")
            assert 400 <= response.status_code < 500, (spelling, suffix, response.text)
            assert response.status_code != 409, (spelling, suffix, response.text)
    assert (workspace / "secret.txt").read_text() == "owner's"
    assert owner.get(f"/local-sandbox/{sandbox_id}").status_code == 200
    assert intruder.get("/local-sandbox").json()["total_count"] == 0


def test_signed_urls_cannot_be_pointed_at_another_tenants_objects(
    emulator: EmulatorServer, two_tenants: tuple[httpx.Client, httpx.Client]
) -> None:
    owner, intruder = two_tenants
    victim = _seeded(owner)
    workspace = emulator.state.workspace_path(victim)
    victim_dump = owner.get(f"/local-sandbox/{victim}/dump").json()["download_url"]
    mine = _seeded(intruder)
    upload = intruder.post(f"/local-sandbox/{mine}/upload-url").json()["upload_url"]
    download = intruder.get(f"/local-sandbox/{mine}/dump").json()["download_url"]
    query = "?" + urlsplit(upload).query
    dump_query = "?" + urlsplit(download).query
    base = emulator.base_url

    archive = tar_gz([file("secret.txt", "overwritten")])
    for target in [
        f"{base}{urlsplit(upload).path.replace(mine, victim)}{query}",
        f"{base}/_storage/upload/sandboxes/{mine}/../{victim}/workspace-upload-us.tar.gz{query}",
        f"{base}/_storage/upload/sandboxes/{mine}/%2e%2e/{victim}/workspace-upload-us.tar.gz"
        f"{query}",
    ]:
        response = httpx.put(target, content=archive, headers=GZIP, timeout=30)
        assert response.status_code in (403, 404), (target, response.text)
    for target in [
        f"{base}{urlsplit(victim_dump).path}{dump_query}",
        f"{base}{urlsplit(download).path.replace(mine, victim)}{dump_query}",
    ]:
        response = httpx.get(target, timeout=30)
        assert response.status_code in (403, 404), (target, response.text)
        assert b"owner's" not in response.content
    # nothing reached the owner's sandbox: its initialize finds only its own upload
    assert owner.post(f"/local-sandbox/{victim}/initialize").status_code == 200
    assert (workspace / "secret.txt").read_text() == "owner's"
