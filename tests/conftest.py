"""Shared fixtures: one emulator per test session, a fresh tenant per test, tar.gz and
execution helpers."""

from __future__ import annotations

import io
import secrets
import tarfile
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

import httpx
import pytest

from klavis_emulator import EmulatorServer, tenant_for_token

from .helpers import Face, LoopThread

MakeTarGz = Callable[[Mapping[str, bytes | str]], bytes]


@pytest.fixture(scope="session")
def emulator() -> Iterator[EmulatorServer]:
    """An emulator on a free loopback port, with its state in a temporary folder."""
    with EmulatorServer() as server:
        yield server


@pytest.fixture
def token() -> str:
    """A fresh random API key: every test is its own tenant, isolated from the others."""
    return f"test-key-{secrets.token_hex(16)}"


@pytest.fixture
def client(emulator: EmulatorServer, token: str) -> Iterator[httpx.Client]:
    """An httpx client for the session emulator, authenticated with this test's key."""
    with httpx.Client(
        base_url=emulator.base_url,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30.0,
    ) as http:
        yield http


def build_tar_gz(files: Mapping[str, bytes | str]) -> bytes:
    """A tar.gz holding ``files`` (name -> content); names ending in ``/`` become folders."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
                continue
            data = content.encode() if isinstance(content, str) else content
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture(scope="session")
def make_tar_gz() -> MakeTarGz:
    """The :func:`build_tar_gz` helper, as a fixture."""
    return build_tar_gz


class Executions:
    """Helpers to upload, start and await executions on an in-process emulator."""

    def __init__(self, emulator: EmulatorServer, http: httpx.Client, token: str) -> None:
        self.emulator = emulator
        self.http = http
        self.tenant = tenant_for_token(token)

    def acquire(self, servers: str | Collection[str] = ("filesystem",)) -> str:
        """A new sandbox of this test's tenant (``servers``: names, or ``"ALL"``)."""
        names = servers if isinstance(servers, str) else list(servers)
        response = self.http.post("/local-sandbox", json={"server_names": names})
        assert response.status_code == 201, response.text
        sandbox_id: str = response.json()["local_sandbox_id"]
        return sandbox_id

    def upload(
        self,
        sandbox_id: str,
        name: str,
        files: Mapping[str, bytes | str],
        region: str = "us",
    ) -> None:
        """PUT a tar.gz of ``files`` to the execution's signed upload URL."""
        response = self.http.post(
            f"/local-sandbox/{sandbox_id}/execution-upload-url",
            params={"region": region},
            json={"execution_name": name},
        )
        assert response.status_code == 200, response.text
        put = httpx.put(
            response.json()["upload_url"],
            content=build_tar_gz(files),
            headers={"Content-Type": "application/gzip"},
        )
        assert put.status_code == 200, put.text

    def execute(self, sandbox_id: str, name: str) -> httpx.Response:
        """POST execute."""
        return self.http.post(f"/local-sandbox/{sandbox_id}/execute", json={"execution_name": name})

    def start(self, sandbox_id: str, name: str, files: Mapping[str, bytes | str]) -> None:
        """Upload ``files`` and start the execution."""
        self.upload(sandbox_id, name, files)
        response = self.execute(sandbox_id, name)
        assert response.status_code == 200, response.text
        assert response.json()["execution_name"] == name

    def wait(
        self,
        sandbox_id: str,
        name: str,
        statuses: Collection[str] = ("completed", "failed"),
    ) -> str:
        """Block (on the state's condition, no polling) until the status is in ``statuses``."""
        return self.emulator.state.wait_for_execution(
            self.tenant, sandbox_id, name, statuses=statuses, timeout=60
        )

    def run(self, sandbox_id: str, name: str, files: Mapping[str, bytes | str]) -> str:
        """Upload, start and await an execution; its final status."""
        self.start(sandbox_id, name, files)
        return self.wait(sandbox_id, name)

    def logs(self, sandbox_id: str, name: str, cursor: int = 0) -> dict[str, Any]:
        """GET execution-logs."""
        response = self.http.get(
            f"/local-sandbox/{sandbox_id}/execution-logs",
            params={"execution_name": name, "cursor": cursor},
        )
        assert response.status_code == 200, response.text
        data: dict[str, Any] = response.json()
        return data

    def status(self, sandbox_id: str, name: str) -> httpx.Response:
        """GET execution-status."""
        return self.http.get(
            f"/local-sandbox/{sandbox_id}/execution-status", params={"execution_name": name}
        )

    def artifacts(self, sandbox_id: str, name: str) -> dict[str, bytes | None]:
        """Export the artifacts and return member name -> content (None for folders)."""
        response = self.http.post(
            f"/local-sandbox/{sandbox_id}/export-artifacts", json={"execution_name": name}
        )
        assert response.status_code == 200, response.text
        download = httpx.get(response.json()["download_url"])
        assert download.status_code == 200, download.text
        return read_tar_gz(download.content)


def read_tar_gz(archive: bytes) -> dict[str, bytes | None]:
    """Member name -> content (None for non-files) of a tar.gz."""
    members: dict[str, bytes | None] = {}
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for member in tar:
            data = tar.extractfile(member) if member.isreg() else None
            members[member.name] = data.read() if data else None
    return members


@pytest.fixture
def executions(emulator: EmulatorServer, client: httpx.Client, token: str) -> Executions:
    """Execution helpers on the session emulator, as this test's tenant."""
    return Executions(emulator, client, token)


@pytest.fixture(scope="session")
def loop_thread() -> Iterator[LoopThread]:
    loop = LoopThread()
    yield loop
    loop.close()


@pytest.fixture(params=["sync", "async"])
def face(request: pytest.FixtureRequest, loop_thread: LoopThread) -> Face:
    """The library under one of its two faces."""
    return Face(request.param, None if request.param == "sync" else loop_thread)
