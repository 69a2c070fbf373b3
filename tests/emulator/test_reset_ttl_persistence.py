"""Reset, TTL expiry on the controllable clock (and its reaper), the listener hooks other
modules subscribe to, and persistence of everything across a restart."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from starlette.responses import PlainTextResponse
from starlette.testclient import TestClient
from starlette.types import Receive, Scope, Send

from klavis_emulator import EmulatorConfig, EmulatorServer, EmulatorState, ManualClock, create_app
from tests.helpers import Executions, build_tar_gz

WAIT_FOR_GO = """
import os, pathlib, time
print("started", flush=True)
go = pathlib.Path(os.environ["AGENT_WORKSPACE"]) / "go"
deadline = time.monotonic() + 60
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.02)
"""


def _initialize(http: httpx.Client, sandbox_id: str, files: dict[str, bytes | str]) -> None:
    url = http.post(f"/local-sandbox/{sandbox_id}/upload-url").json()["upload_url"]
    put = httpx.put(
        url, content=build_tar_gz(files), headers={"Content-Type": "application/gzip"}, timeout=30
    )
    assert put.status_code == 200
    assert http.post(f"/local-sandbox/{sandbox_id}/initialize").status_code == 200


def test_reset_empties_everything_but_keeps_id_servers_and_the_workspace_folder(
    executions: Executions, emulator: EmulatorServer
) -> None:
    http = executions.http
    sandbox_id = executions.acquire(["filesystem", "canvas"])
    before = http.get(f"/local-sandbox/{sandbox_id}").json()
    workspace = emulator.state.workspace_path(sandbox_id)
    inode = workspace.stat().st_ino
    _initialize(http, sandbox_id, {"seed.txt": "seed", "dir/nested.txt": "n"})
    assert workspace.stat().st_ino == inode  # initialize swaps contents, not the folder
    http.post(
        f"/local-sandbox/canvas/{sandbox_id}/initialize", params={"init_default_data": "true"}
    )
    assert executions.run(sandbox_id, "job", {"main.py": "print(1)"}) == "completed"

    response = http.post(f"/local-sandbox/{sandbox_id}/reset")
    assert response.status_code == 200
    assert "reset" in response.json()["message"]
    after = http.get(f"/local-sandbox/{sandbox_id}").json()
    assert after["local_sandbox_id"] == sandbox_id
    assert [(s["id"], s["server_name"]) for s in after["servers"]] == [
        (s["id"], s["server_name"]) for s in before["servers"]
    ]
    assert list(workspace.iterdir()) == []
    assert workspace.stat().st_ino == inode
    assert http.get(f"/local-sandbox/canvas/{sandbox_id}/dump").json()["data"] == {"courses": []}
    assert executions.status(sandbox_id, "job").status_code == 404
    # Uploaded archives are kept (like objects in the storage bucket): run them again.
    assert http.post(f"/local-sandbox/{sandbox_id}/initialize").status_code == 200
    assert (workspace / "seed.txt").read_text() == "seed"
    assert executions.execute(sandbox_id, "job").status_code == 200


def test_the_clock_route_expires_at_once_and_listeners_hear_it(tmp_path: Path, token: str) -> None:
    with (
        EmulatorServer(EmulatorConfig(data_dir=tmp_path)) as server,
        httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as http,
    ):
        gone: list[str] = []
        reset: list[str] = []
        remove = server.state.add_listener(on_gone=gone.append, on_reset=reset.append)

        def broken(sandbox_id: str) -> None:
            raise RuntimeError("a listener that fails must not break the API")

        server.state.add_listener(on_gone=broken, on_reset=broken)
        ids = [
            http.post("/local-sandbox", json={"server_names": ["git"], "ttl_seconds": ttl}).json()[
                "local_sandbox_id"
            ]
            for ttl in (60, 120, None)
        ]
        assert http.post(f"/local-sandbox/{ids[2]}/reset").status_code == 200
        assert reset == [ids[2]]
        moved = http.post("/_emulator/clock/advance", json={"seconds": 61})
        assert moved.status_code == 200
        assert gone == [ids[0]]  # released during the advance call, before any listing
        assert http.delete(f"/local-sandbox/{ids[2]}").status_code == 200
        assert gone == [ids[0], ids[2]]
        remove()
        http.post("/_emulator/clock/advance", json={"seconds": 60})
        assert http.get("/local-sandbox").json()["total_count"] == 0
        assert gone == [ids[0], ids[2]]  # unsubscribed


def test_the_reaper_releases_expired_sandboxes_without_any_request(tmp_path: Path) -> None:
    clock = ManualClock()
    state = EmulatorState(EmulatorConfig(data_dir=tmp_path, clock=clock, reaper_interval=0.05))
    try:
        released = threading.Event()
        state.add_listener(on_gone=lambda sandbox_id: released.set())
        record = state.acquire("tenant", ["git"], ttl_seconds=60)
        clock.advance(61)
        assert released.wait(10)
        assert not state.workspace_path(record.id).exists()
    finally:
        state.close()


def test_the_clock_offset_survives_a_restart(tmp_path: Path, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    with (
        EmulatorServer(EmulatorConfig(data_dir=tmp_path)) as server,
        httpx.Client(base_url=server.base_url, headers=headers, timeout=30) as http,
    ):
        sandbox_id = http.post(
            "/local-sandbox", json={"server_names": ["git"], "ttl_seconds": 3600}
        ).json()["local_sandbox_id"]
        moved = http.post("/_emulator/clock/advance", json={"seconds": 3000}).json()["time"]
    with (
        EmulatorServer(EmulatorConfig(data_dir=tmp_path)) as server,
        httpx.Client(base_url=server.base_url, headers=headers, timeout=30) as http,
    ):
        # Time did not run backwards: the sandbox is 3000 s older, 600 s from its end.
        assert http.get("/_emulator/clock").json()["time"] >= moved
        assert http.get(f"/local-sandbox/{sandbox_id}").status_code == 200
        http.post("/_emulator/clock/advance", json={"seconds": 601})
        assert http.get(f"/local-sandbox/{sandbox_id}").status_code == 404


def test_create_app_exposes_the_state_and_accepts_mounted_apps(tmp_path: Path) -> None:
    app = create_app(EmulatorConfig(data_dir=tmp_path))
    state = app.state.emulator
    assert isinstance(state, EmulatorState)

    async def extra(scope: Scope, receive: Receive, send: Send) -> None:
        await PlainTextResponse(f"mounted at {scope['root_path']}")(scope, receive, send)

    app.mount("/extra", extra)
    with TestClient(app) as test_client:
        assert test_client.get("/extra/anything").text == "mounted at /extra"
        response = test_client.get("/local-sandbox", headers={"Authorization": "Bearer k"})
        assert response.json()["total_count"] == 0
    with pytest.raises(RuntimeError, match="closed"):
        state.list_sandboxes("k")  # the app's lifespan closed the state


def test_everything_survives_a_restart_and_running_executions_fail(
    tmp_path: Path, token: str
) -> None:
    restartable = tmp_path / "data"
    headers = {"Authorization": f"Bearer {token}"}
    with (
        EmulatorServer(EmulatorConfig(data_dir=restartable)) as server,
        httpx.Client(base_url=server.base_url, headers=headers, timeout=30) as http,
    ):
        executions = Executions(server, http, token)
        sandbox_id = executions.acquire(["filesystem", "canvas"])
        _initialize(http, sandbox_id, {"kept.txt": "kept"})
        # a stored data document (mail after a restart: tests/emulator/test_mail_data.py)
        data: dict[str, object] = {"courses": [{"name": "Kept", "course_code": "K1"}]}
        http.post(f"/local-sandbox/canvas/{sandbox_id}/initialize", json=data)
        assert executions.run(sandbox_id, "finished", {"main.py": "print('done once')"}) == (
            "completed"
        )
        executions.start(sandbox_id, "interrupted", {"main.py": WAIT_FOR_GO})
        executions.wait(sandbox_id, "interrupted", {"running"})
    with (
        EmulatorServer(EmulatorConfig(data_dir=restartable)) as server,
        httpx.Client(base_url=server.base_url, headers=headers, timeout=30) as http,
    ):
        executions = Executions(server, http, token)
        assert (server.state.workspace_path(sandbox_id) / "kept.txt").read_text() == "kept"
        dumped = http.get(f"/local-sandbox/canvas/{sandbox_id}/dump").json()
        assert [course["course_code"] for course in dumped["data"]["courses"]] == ["K1"]
        assert executions.status(sandbox_id, "finished").json() == {"status": "completed"}
        assert "done once" in executions.logs(sandbox_id, "finished")["logs"]
        assert "./main.py" in executions.artifacts(sandbox_id, "finished")
        assert executions.status(sandbox_id, "interrupted").json() == {"status": "failed"}
        logs = executions.logs(sandbox_id, "interrupted")["logs"]
        assert "started" in logs
        assert "[emulator] The emulator restarted while this execution was running" in logs
        # The interrupted execution can simply be run again.
        assert executions.execute(sandbox_id, "interrupted").status_code == 200
