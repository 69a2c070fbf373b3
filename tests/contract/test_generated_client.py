"""The generated client drives the emulator over real HTTP: the whole lifecycle with the
sync and the asyncio functions, an execution, tenant isolation, 401 without a token, 422 on a
bad TTL."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Mapping
from http import HTTPStatus

import httpx
import pytest
from klavis_sandbox_client import AuthenticatedClient, Client
from klavis_sandbox_client.api.local_sandbox import (
    acquire_local_sandbox,
    dump_workspace,
    execute_script,
    export_artifacts,
    get_execution_logs,
    get_execution_status,
    get_execution_upload_url,
    get_local_sandbox,
    get_upload_url,
    initialize_workspace,
    list_local_sandboxes,
    release_local_sandbox,
    reset_local_sandbox,
)
from klavis_sandbox_client.models import (
    AcquireLocalSandboxRequest,
    AcquireLocalSandboxResponse,
    DumpUrlResponse,
    ErrorResponse,
    ExecuteRequest,
    ExecuteResponse,
    ExecutionLogsResponse,
    ExecutionStatusResponse,
    ExecutionUploadUrlRequest,
    ExecutionUploadUrlResponse,
    ExportArtifactsRequest,
    ExportArtifactsResponse,
    GCSRegion,
    HTTPValidationError,
    InitializeSandboxResponse,
    ListLocalSandboxesResponse,
    LocalSandboxInfo,
    LocalSandboxMCPServer,
    MessageResponse,
    UploadUrlResponse,
)

from klavis_emulator import EmulatorServer
from klavis_emulator._state import tenant_for_token

MakeTarGz = Callable[[Mapping[str, bytes | str]], bytes]
FILES: dict[str, bytes | str] = {
    "hello.txt": "Hello from Klavis Local Sandbox!",
    "notes.md": "# Notes\n- item 1\n- item 2",
    "config.json": '{"app": "demo", "version": "1.0"}',
}
SERVERS = [LocalSandboxMCPServer.FILESYSTEM, LocalSandboxMCPServer.GIT]


def _members(archive: bytes) -> dict[str, bytes | None]:
    result: dict[str, bytes | None] = {}
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for member in tar:
            data = tar.extractfile(member) if member.isreg() else None
            result[member.name] = data.read() if data else None
    return result


EXPECTED_DUMP = {
    ".": None,
    "./config.json": b'{"app": "demo", "version": "1.0"}',
    "./hello.txt": b"Hello from Klavis Local Sandbox!",
    "./notes.md": b"# Notes\n- item 1\n- item 2",
}


@pytest.fixture
def api(emulator: EmulatorServer, token: str) -> AuthenticatedClient:
    return AuthenticatedClient(base_url=emulator.base_url, token=token, timeout=httpx.Timeout(30))


def test_lifecycle_with_sync_functions(api: AuthenticatedClient, make_tar_gz: MakeTarGz) -> None:
    with api:
        acquired = acquire_local_sandbox.sync_detailed(
            client=api, body=AcquireLocalSandboxRequest(server_names=SERVERS, ttl_seconds=600)
        )
        assert acquired.status_code == HTTPStatus.CREATED
        assert isinstance(acquired.parsed, AcquireLocalSandboxResponse)
        sandbox_id = acquired.parsed.local_sandbox_id
        assert [s.server_name for s in acquired.parsed.servers] == ["filesystem", "git"]

        info = get_local_sandbox.sync(sandbox_id, client=api)
        assert isinstance(info, LocalSandboxInfo)
        assert info.local_sandbox_id == sandbox_id

        upload = get_upload_url.sync(sandbox_id, client=api, region=GCSRegion.ASIA)
        assert isinstance(upload, UploadUrlResponse)
        assert upload.expires_in_minutes == 30
        put = httpx.put(
            upload.upload_url,
            content=make_tar_gz(FILES),
            headers={"Content-Type": "application/gzip"},
            timeout=30,
        )
        assert put.status_code == 200

        initialized = initialize_workspace.sync(sandbox_id, client=api, region=GCSRegion.ASIA)
        assert isinstance(initialized, InitializeSandboxResponse)
        assert initialized.sandbox_id == sandbox_id
        assert initialized.status == "occupied"

        dumped = dump_workspace.sync(sandbox_id, client=api)
        assert isinstance(dumped, DumpUrlResponse)
        download = httpx.get(dumped.download_url, timeout=30)
        assert download.status_code == 200
        assert _members(download.content) == EXPECTED_DUMP

        reset = reset_local_sandbox.sync(sandbox_id, client=api)
        assert isinstance(reset, MessageResponse)
        dumped_again = dump_workspace.sync(sandbox_id, client=api)
        assert isinstance(dumped_again, DumpUrlResponse)
        assert _members(httpx.get(dumped_again.download_url, timeout=30).content) == {".": None}

        released = release_local_sandbox.sync(sandbox_id, client=api)
        assert isinstance(released, MessageResponse)
        assert "released asynchronously" in released.message

        listing = list_local_sandboxes.sync(client=api)
        assert isinstance(listing, ListLocalSandboxesResponse)
        assert listing.total_count == 0
        assert listing.local_sandboxes == []
        gone = get_local_sandbox.sync_detailed(sandbox_id, client=api)
        assert gone.status_code == HTTPStatus.NOT_FOUND
        assert isinstance(gone.parsed, ErrorResponse)


@pytest.mark.anyio
async def test_lifecycle_with_asyncio_functions(
    api: AuthenticatedClient, make_tar_gz: MakeTarGz
) -> None:
    async with api, httpx.AsyncClient(timeout=30) as storage:
        acquired = await acquire_local_sandbox.asyncio(
            client=api, body=AcquireLocalSandboxRequest(server_names="ALL")
        )
        assert isinstance(acquired, AcquireLocalSandboxResponse)
        assert len(acquired.servers) == 16
        sandbox_id = acquired.local_sandbox_id

        upload = await get_upload_url.asyncio(sandbox_id, client=api)
        assert isinstance(upload, UploadUrlResponse)
        put = await storage.put(
            upload.upload_url,
            content=make_tar_gz(FILES),
            headers={"Content-Type": "application/gzip"},
        )
        assert put.status_code == 200

        initialized = await initialize_workspace.asyncio_detailed(sandbox_id, client=api)
        assert initialized.status_code == HTTPStatus.OK
        assert isinstance(initialized.parsed, InitializeSandboxResponse)

        dumped = await dump_workspace.asyncio(sandbox_id, client=api, region=GCSRegion.US)
        assert isinstance(dumped, DumpUrlResponse)
        download = await storage.get(dumped.download_url)
        assert _members(download.content) == EXPECTED_DUMP

        reset = await reset_local_sandbox.asyncio_detailed(sandbox_id, client=api)
        assert reset.status_code == HTTPStatus.OK

        released = await release_local_sandbox.asyncio(sandbox_id, client=api, is_ttl=False)
        assert isinstance(released, MessageResponse)
        listing = await list_local_sandboxes.asyncio(client=api)
        assert isinstance(listing, ListLocalSandboxesResponse)
        assert listing.total_count == 0


def test_tenant_isolation(emulator: EmulatorServer, api: AuthenticatedClient, token: str) -> None:
    other = AuthenticatedClient(base_url=emulator.base_url, token=f"{token}-other")
    with api, other:
        acquired = acquire_local_sandbox.sync(
            client=api, body=AcquireLocalSandboxRequest(server_names=SERVERS)
        )
        assert isinstance(acquired, AcquireLocalSandboxResponse)
        sandbox_id = acquired.local_sandbox_id

        theirs = list_local_sandboxes.sync(client=other)
        assert isinstance(theirs, ListLocalSandboxesResponse)
        assert theirs.total_count == 0
        for response in (
            get_local_sandbox.sync_detailed(sandbox_id, client=other),
            reset_local_sandbox.sync_detailed(sandbox_id, client=other),
            get_upload_url.sync_detailed(sandbox_id, client=other),
            dump_workspace.sync_detailed(sandbox_id, client=other),
            release_local_sandbox.sync_detailed(sandbox_id, client=other),
        ):
            assert response.status_code == HTTPStatus.NOT_FOUND
            assert isinstance(response.parsed, ErrorResponse)

        mine = list_local_sandboxes.sync(client=api)
        assert isinstance(mine, ListLocalSandboxesResponse)
        assert [s.local_sandbox_id for s in mine.local_sandboxes] == [sandbox_id]


def test_401_without_a_token(emulator: EmulatorServer) -> None:
    with Client(base_url=emulator.base_url) as anonymous:
        response = list_local_sandboxes.sync_detailed(client=anonymous)
        assert response.status_code == HTTPStatus.UNAUTHORIZED
        assert isinstance(response.parsed, ErrorResponse)
        assert "Bearer" in response.parsed.detail
        acquired = acquire_local_sandbox.sync_detailed(
            client=anonymous, body=AcquireLocalSandboxRequest(server_names=SERVERS)
        )
        assert acquired.status_code == HTTPStatus.UNAUTHORIZED


def test_422_on_a_ttl_of_10(api: AuthenticatedClient) -> None:
    with api:
        response = acquire_local_sandbox.sync_detailed(
            client=api, body=AcquireLocalSandboxRequest(server_names=SERVERS, ttl_seconds=10)
        )
        assert response.status_code == HTTPStatus.UNPROCESSABLE_ENTITY
        assert isinstance(response.parsed, HTTPValidationError)
        assert response.parsed.detail
        error = response.parsed.detail[0]
        assert error.loc == ["body", "ttl_seconds"]
        assert "60" in error.msg
        listing = list_local_sandboxes.sync(client=api)
        assert isinstance(listing, ListLocalSandboxesResponse)
        assert listing.total_count == 0


def test_an_execution_with_the_generated_client(
    api: AuthenticatedClient, emulator: EmulatorServer, token: str, make_tar_gz: MakeTarGz
) -> None:
    with api:
        acquired = acquire_local_sandbox.sync(
            client=api, body=AcquireLocalSandboxRequest(server_names=SERVERS)
        )
        assert isinstance(acquired, AcquireLocalSandboxResponse)
        sandbox_id = acquired.local_sandbox_id
        upload = get_execution_upload_url.sync(
            sandbox_id, client=api, body=ExecutionUploadUrlRequest(execution_name="gen")
        )
        assert isinstance(upload, ExecutionUploadUrlResponse)
        script = "open('result.txt', 'w').write('42')\nprint('ünïcode out')\n"
        put = httpx.put(
            upload.upload_url,
            content=make_tar_gz({"main.py": script}),
            headers={"Content-Type": "application/gzip"},
            timeout=30,
        )
        assert put.status_code == 200
        started = execute_script.sync(
            sandbox_id, client=api, body=ExecuteRequest(execution_name="gen")
        )
        assert isinstance(started, ExecuteResponse)
        assert started.execution_name == "gen"
        emulator.state.wait_for_execution(tenant_for_token(token), sandbox_id, "gen")

        status = get_execution_status.sync(sandbox_id, client=api, execution_name="gen")
        assert isinstance(status, ExecutionStatusResponse)
        assert status.status == "completed"
        logs = get_execution_logs.sync(sandbox_id, client=api, execution_name="gen", cursor=0)
        assert isinstance(logs, ExecutionLogsResponse)
        assert isinstance(logs.logs, str)
        assert isinstance(logs.cursor, int)
        assert "ünïcode out\n" in logs.logs
        tail = get_execution_logs.sync(
            sandbox_id, client=api, execution_name="gen", cursor=logs.cursor
        )
        assert isinstance(tail, ExecutionLogsResponse)
        assert (tail.logs, tail.cursor) == ("", logs.cursor)
        exported = export_artifacts.sync(
            sandbox_id, client=api, body=ExportArtifactsRequest(execution_name="gen")
        )
        assert isinstance(exported, ExportArtifactsResponse)
        assert (
            _members(httpx.get(exported.download_url, timeout=30).content)["./result.txt"] == b"42"
        )

        unknown = get_execution_status.sync_detailed(sandbox_id, client=api, execution_name="x")
        assert unknown.status_code == HTTPStatus.NOT_FOUND
        assert isinstance(unknown.parsed, ErrorResponse)
        bad = get_execution_status.sync_detailed(sandbox_id, client=api, execution_name="a/b")
        assert bad.status_code == HTTPStatus.BAD_REQUEST
        assert isinstance(bad.parsed, ErrorResponse)
