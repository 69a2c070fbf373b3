"""The emulator's core lifecycle over real HTTP: acquire, list, get, upload, initialize, dump,
reset, release, TTL expiry and persistence across a restart."""

from __future__ import annotations

import io
import re
import tarfile
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from klavis_emulator import EmulatorConfig, EmulatorServer, OffsetClock
from klavis_emulator._state import LOCAL_SERVER_NAMES

MakeTarGz = Callable[[Mapping[str, bytes | str]], bytes]

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def acquire(client: httpx.Client, **body: Any) -> dict[str, Any]:
    body.setdefault("server_names", ["filesystem", "git", "terminal"])
    response = client.post("/local-sandbox", json=body)
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()
    return data


def upload(client: httpx.Client, sandbox_id: str, archive: bytes, region: str = "us") -> None:
    response = client.post(f"/local-sandbox/{sandbox_id}/upload-url", params={"region": region})
    assert response.status_code == 200, response.text
    put = httpx.put(
        response.json()["upload_url"],
        content=archive,
        headers={"Content-Type": "application/gzip"},
        timeout=30,
    )
    assert put.status_code == 200, put.text


def initialize(client: httpx.Client, sandbox_id: str, region: str = "us") -> httpx.Response:
    return client.post(f"/local-sandbox/{sandbox_id}/initialize", params={"region": region})


def dump_members(client: httpx.Client, sandbox_id: str) -> dict[str, bytes | None]:
    """Dump the workspace and return member name -> content (None for non-files)."""
    response = client.get(f"/local-sandbox/{sandbox_id}/dump")
    assert response.status_code == 200, response.text
    download = httpx.get(response.json()["download_url"], timeout=30)
    assert download.status_code == 200, download.text
    assert download.headers["content-type"] == "application/gzip"
    members: dict[str, bytes | None] = {}
    with tarfile.open(fileobj=io.BytesIO(download.content), mode="r:gz") as tar:
        for member in tar:
            extracted = tar.extractfile(member) if member.isreg() else None
            members[member.name] = extracted.read() if extracted else None
    return members


def test_acquire_answers_the_real_shape(client: httpx.Client, emulator: EmulatorServer) -> None:
    data = acquire(client, server_names=["filesystem", "git", "terminal"])
    sandbox_id = data["local_sandbox_id"]
    assert UUID_RE.match(sandbox_id)
    assert data["status"] == "occupied"
    assert data["benchmark"] is None
    assert [server["server_name"] for server in data["servers"]] == [
        "filesystem",
        "git",
        "terminal",
    ]
    for server in data["servers"]:
        assert UUID_RE.match(server["id"])
        assert server["mcp_server_url"] == (
            f"{emulator.base_url}/{server['server_name']}/mcp/?local_sandbox_id={sandbox_id}"
        )
        assert server["status"] == "occupied"
        assert server["metadata"] is None
        assert server["auth_data"] is None
        assert server["tags"] is None
        assert datetime.fromisoformat(server["updated_at"]).tzinfo is not None
    assert len({server["id"] for server in data["servers"]}) == 3


def test_acquire_all_and_benchmark(client: httpx.Client) -> None:
    data = acquire(client, server_names="ALL", benchmark="Toolathlon", ttl_seconds=None)
    assert [server["server_name"] for server in data["servers"]] == list(LOCAL_SERVER_NAMES)
    assert len(data["servers"]) == 16
    assert data["benchmark"] == "Toolathlon"
    assert {server["benchmark"] for server in data["servers"]} == {"Toolathlon"}


def test_list_and_get(client: httpx.Client) -> None:
    assert client.get("/local-sandbox").json() == {"local_sandboxes": [], "total_count": 0}
    first = acquire(client, server_names=["git"])
    second = acquire(client, server_names=["excel", "word"])
    listing = client.get("/local-sandbox").json()
    assert listing["total_count"] == 2
    ids = [item["local_sandbox_id"] for item in listing["local_sandboxes"]]
    assert ids == [first["local_sandbox_id"], second["local_sandbox_id"]]
    info = client.get(f"/local-sandbox/{second['local_sandbox_id']}").json()
    assert info["local_sandbox_id"] == second["local_sandbox_id"]
    assert info["status"] == "occupied"
    assert info["servers"] == second["servers"]
    assert datetime.fromisoformat(info["created_at"]).tzinfo is not None


def test_release_answers_the_real_message_and_forgets(client: httpx.Client) -> None:
    sandbox_id = acquire(client)["local_sandbox_id"]
    response = client.delete(f"/local-sandbox/{sandbox_id}")
    assert response.status_code == 200
    assert response.json() == {
        "message": f"Local sandbox release started for {sandbox_id}: "
        "it will be released asynchronously in background."
    }
    assert client.get(f"/local-sandbox/{sandbox_id}").status_code == 404
    assert client.get("/local-sandbox").json()["total_count"] == 0
    again = client.delete(f"/local-sandbox/{sandbox_id}", params={"is_ttl": "true"})
    assert again.status_code == 404
    assert sandbox_id in again.json()["detail"]


def test_release_removes_the_workspace(
    client: httpx.Client, emulator: EmulatorServer, make_tar_gz: MakeTarGz
) -> None:
    sandbox_id = acquire(client)["local_sandbox_id"]
    upload(client, sandbox_id, make_tar_gz({"a.txt": "a"}))
    assert initialize(client, sandbox_id).status_code == 200
    workspace = emulator.state.workspace_path(sandbox_id)
    assert (workspace / "a.txt").read_text() == "a"
    assert client.delete(f"/local-sandbox/{sandbox_id}", params={"is_ttl": True}).status_code == 200
    assert not workspace.exists()


def test_full_workspace_round_trip(client: httpx.Client, make_tar_gz: MakeTarGz) -> None:
    files: dict[str, bytes | str] = {
        "hello.txt": "Hello from Klavis Local Sandbox!",
        "notes.md": "# Notes\n- item 1\n- item 2",
        "config.json": '{"app": "demo", "version": "1.0"}',
        "data/": b"",
        "data/raw.bin": bytes(range(256)) * 10,
    }
    sandbox_id = acquire(client)["local_sandbox_id"]
    upload(client, sandbox_id, make_tar_gz(files))
    response = initialize(client, sandbox_id)
    assert response.status_code == 200
    assert response.json() == {
        "sandbox_id": sandbox_id,
        "status": "occupied",
        "message": "Extracted archive to workspace",
    }
    members = dump_members(client, sandbox_id)
    assert list(members) == [
        ".",
        "./config.json",
        "./data",
        "./data/raw.bin",
        "./hello.txt",
        "./notes.md",
    ]
    assert members["./hello.txt"] == b"Hello from Klavis Local Sandbox!"
    assert members["./data/raw.bin"] == bytes(range(256)) * 10
    assert members["./data"] is None


def test_initialize_merges_into_the_workspace(client: httpx.Client, make_tar_gz: MakeTarGz) -> None:
    sandbox_id = acquire(client)["local_sandbox_id"]
    upload(client, sandbox_id, make_tar_gz({"keep.txt": "1", "change.txt": "old"}))
    assert initialize(client, sandbox_id).status_code == 200
    upload(client, sandbox_id, make_tar_gz({"change.txt": "new", "added.txt": "2"}))
    assert initialize(client, sandbox_id).status_code == 200
    members = dump_members(client, sandbox_id)
    assert members == {
        ".": None,
        "./added.txt": b"2",
        "./change.txt": b"new",
        "./keep.txt": b"1",
    }


def test_regions_keep_separate_uploads(client: httpx.Client, make_tar_gz: MakeTarGz) -> None:
    sandbox_id = acquire(client)["local_sandbox_id"]
    upload(client, sandbox_id, make_tar_gz({"asia.txt": "A"}), region="asia")
    missing = initialize(client, sandbox_id, region="us")
    assert missing.status_code == 409
    assert "region 'us'" in missing.json()["detail"]
    assert initialize(client, sandbox_id, region="asia").status_code == 200
    assert dump_members(client, sandbox_id)["./asia.txt"] == b"A"


def test_initialize_without_upload_is_a_clear_conflict(client: httpx.Client) -> None:
    sandbox_id = acquire(client)["local_sandbox_id"]
    response = initialize(client, sandbox_id)
    assert response.status_code == 409
    assert "upload-url" in response.json()["detail"]


def test_dump_of_an_empty_workspace_holds_only_the_root(client: httpx.Client) -> None:
    sandbox_id = acquire(client)["local_sandbox_id"]
    assert dump_members(client, sandbox_id) == {".": None}


def test_reset_empties_the_workspace_and_keeps_the_sandbox(
    client: httpx.Client, make_tar_gz: MakeTarGz
) -> None:
    acquired = acquire(client)
    sandbox_id = acquired["local_sandbox_id"]
    upload(client, sandbox_id, make_tar_gz({"a.txt": "a", "d/": b"", "d/b.txt": "b"}))
    assert initialize(client, sandbox_id).status_code == 200
    response = client.post(f"/local-sandbox/{sandbox_id}/reset")
    assert response.status_code == 200
    assert isinstance(response.json()["message"], str)
    assert dump_members(client, sandbox_id) == {".": None}
    info = client.get(f"/local-sandbox/{sandbox_id}").json()
    assert [server["id"] for server in info["servers"]] == [
        server["id"] for server in acquired["servers"]
    ]


def test_dump_download_after_release_is_gone(client: httpx.Client) -> None:
    sandbox_id = acquire(client)["local_sandbox_id"]
    url = client.get(f"/local-sandbox/{sandbox_id}/dump").json()["download_url"]
    assert httpx.get(url, timeout=30).status_code == 200
    client.delete(f"/local-sandbox/{sandbox_id}")
    gone = httpx.get(url, timeout=30)
    assert gone.status_code == 404
    assert "released" in gone.json()["detail"]


def test_unknown_sandbox_is_404_everywhere(client: httpx.Client) -> None:
    unknown = str(uuid.uuid4())
    calls = [
        ("GET", f"/local-sandbox/{unknown}", None),
        ("DELETE", f"/local-sandbox/{unknown}", None),
        ("POST", f"/local-sandbox/{unknown}/reset", None),
        ("POST", f"/local-sandbox/{unknown}/upload-url", None),
        ("POST", f"/local-sandbox/{unknown}/initialize", None),
        ("GET", f"/local-sandbox/{unknown}/dump", None),
        ("GET", "/local-sandbox/not-even-a-uuid", None),
    ]
    for method, path, body in calls:
        response = client.request(method, path, json=body)
        assert response.status_code == 404, (method, path, response.text)
        assert "not found" in response.json()["detail"]


def test_health_needs_no_key(emulator: EmulatorServer) -> None:
    response = httpx.get(f"{emulator.base_url}/_emulator/health", timeout=30)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_ttl_expiry_follows_the_emulator_clock(tmp_path: Path, token: str) -> None:
    clock = OffsetClock()
    with (
        EmulatorServer(EmulatorConfig(data_dir=tmp_path, clock=clock)) as server,
        httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as http,
    ):
        short = acquire(http, server_names=["git"], ttl_seconds=60)["local_sandbox_id"]
        forever = acquire(http, server_names=["git"], ttl_seconds=None)["local_sandbox_id"]
        default = acquire(http, server_names=["git"])["local_sandbox_id"]
        assert http.get("/local-sandbox").json()["total_count"] == 3

        moved = http.post("/_emulator/clock/advance", json={"seconds": 61})
        assert moved.status_code == 200
        assert http.get(f"/local-sandbox/{short}").status_code == 404
        assert not server.state.workspace_path(short).exists()
        ids = {
            item["local_sandbox_id"]
            for item in http.get("/local-sandbox").json()["local_sandboxes"]
        }
        assert ids == {forever, default}

        clock.advance(7200)
        ids = {
            item["local_sandbox_id"]
            for item in http.get("/local-sandbox").json()["local_sandboxes"]
        }
        assert ids == {forever}


def test_state_survives_a_restart(tmp_path: Path, token: str, make_tar_gz: MakeTarGz) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    with (
        EmulatorServer(EmulatorConfig(data_dir=tmp_path)) as server,
        httpx.Client(base_url=server.base_url, headers=headers, timeout=30) as http,
    ):
        acquired = acquire(http, server_names=["filesystem"], benchmark="MCP_Mark")
        sandbox_id = acquired["local_sandbox_id"]
        upload(http, sandbox_id, make_tar_gz({"kept.txt": "still here"}))
        assert initialize(http, sandbox_id).status_code == 200
        released = acquire(http, server_names=["git"])["local_sandbox_id"]
        http.delete(f"/local-sandbox/{released}")

    assert (tmp_path / "emulator.sqlite3").is_file()
    with (
        EmulatorServer(EmulatorConfig(data_dir=tmp_path)) as server,
        httpx.Client(base_url=server.base_url, headers=headers, timeout=30) as http,
    ):
        listing = http.get("/local-sandbox").json()
        assert [item["local_sandbox_id"] for item in listing["local_sandboxes"]] == [sandbox_id]
        info = listing["local_sandboxes"][0]
        assert info["benchmark"] == "MCP_Mark"
        assert info["servers"][0]["id"] == acquired["servers"][0]["id"]
        # MCP URLs follow the server's current address.
        assert info["servers"][0]["mcp_server_url"].startswith(server.base_url + "/")
        assert dump_members(http, sandbox_id)["./kept.txt"] == b"still here"
        # The upload is kept too: initializing again works without a new PUT.
        assert initialize(http, sandbox_id).status_code == 200


def test_emulator_server_removes_its_temporary_data_dir() -> None:
    with EmulatorServer() as server:
        data_dir = server.data_dir
        assert (data_dir / "emulator.sqlite3").is_file()
        assert httpx.get(f"{server.base_url}/_emulator/health", timeout=30).status_code == 200
    assert not data_dir.exists()
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.base_url


def test_emulator_server_start_stop_and_restart(tmp_path: Path) -> None:
    server = EmulatorServer(EmulatorConfig(data_dir=tmp_path))
    server.start()
    try:
        url = server.base_url
        assert httpx.get(f"{url}/_emulator/health", timeout=30).status_code == 200
    finally:
        server.stop()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/_emulator/health", timeout=5)
    server.start()
    try:
        assert httpx.get(f"{server.base_url}/_emulator/health", timeout=30).status_code == 200
    finally:
        server.stop()
    server.stop()  # idempotent
    assert tmp_path.is_dir()
