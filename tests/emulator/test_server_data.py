"""Per-server data documents (google_cloud, poste_email_toolathlon, canvas): validated
initialize, default data, dump in the same shape, reset, and the generated client.

poste_email_toolathlon's data is the sandbox's real mail server here (the session emulator
hosts the MCP servers; tests/emulator/test_mail_data.py has its own tests): its cases skip
where Dovecot is missing, naming it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx
import pytest
from klavis_sandbox_client import AuthenticatedClient
from klavis_sandbox_client.api.local_sandbox import (
    dump_canvas_data,
    dump_google_cloud_data,
    dump_poste_email_data,
    initialize_google_cloud_data,
)
from klavis_sandbox_client.models import (
    BigQueryDataset,
    CanvasDumpResponse,
    GoogleCloudDataInput,
    GoogleCloudDumpResponse,
    InitializeSandboxResponse,
    LocalSandboxMCPServer,
    PosteEmailDumpResponse,
)

from klavis_emulator import EmulatorServer
from klavis_emulator._mcp.setup import find_tools
from klavis_emulator._server_data import DATA_SERVERS

SERVERS = ["google_cloud", "poste_email_toolathlon", "canvas", "filesystem"]
GOOGLE = {
    "datasets": [{"id": "analytics", "description": "events"}],
    "tables": [
        {
            "dataset_id": "analytics",
            "id": "events",
            "fields": [
                {"name": "payload", "type": "RECORD", "fields": [{"name": "k", "type": "STRING"}]}
            ],
        }
    ],
    "buckets": [{"name": "b1", "lifecycle_rules": [{"action": "Delete", "age_days": 30}]}],
    "log_entries": [{"log_name": "app", "json_data": {"nested": [1, 2.5, None]}}],
}
MAIL = {
    "users": {
        "ann@example.com": {
            "emails": [
                {
                    "subject": "Hi",
                    "from_addr": "Bob <bob@example.com>",
                    "to_addr": "ann@example.com",
                    "attachments": [{"filename": "a.pdf", "size": 10}],
                }
            ]
        }
    }
}
CANVAS = {
    "courses": [
        {
            "name": "Algebra",
            "course_code": "MATH1",
            "assignments": [{"name": "HW1", "points_possible": 5}],
            "quizzes": [{"title": "Q1", "questions": [{"question_text": "1+1?"}]}],
            "enrollments": [{"user_email": "s@example.com", "role": "TaEnrollment"}],
        }
    ]
}
GOOGLE_KEYS = (
    "datasets",
    "tables",
    "buckets",
    "objects",
    "log_entries",
    "log_sinks",
    "log_buckets",
    "instances",
)
EMPTY: dict[str, dict[str, Any]] = {
    "google_cloud": {key: [] for key in GOOGLE_KEYS},
    "poste_email_toolathlon": {"users": {"agent@mcp.com": {"emails": []}}},  # its own account
    "canvas": {"courses": []},
}
NO_MAIL_SERVER = find_tools().missing_outside("poste_email_toolathlon")
DOCUMENTS = {"google_cloud": GOOGLE, "poste_email_toolathlon": MAIL, "canvas": CANVAS}


def _skip_without_mail_server(server: str) -> None:
    if server == "poste_email_toolathlon" and NO_MAIL_SERVER:
        pytest.skip(f"{server}'s mail server: {NO_MAIL_SERVER}")


def _acquire(client: httpx.Client, servers: list[str] = SERVERS) -> str:
    response = client.post("/local-sandbox", json={"server_names": servers})
    assert response.status_code == 201, response.text
    sandbox_id: str = response.json()["local_sandbox_id"]
    return sandbox_id


def _dump(client: httpx.Client, server: str, sandbox_id: str) -> dict[str, Any]:
    response = client.get(f"/local-sandbox/{server}/{sandbox_id}/dump")
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


@pytest.mark.parametrize("server", DATA_SERVERS)
def test_initialize_then_dump_round_trips(client: httpx.Client, server: str) -> None:
    _skip_without_mail_server(server)
    sandbox_id = _acquire(client)
    empty = _dump(client, server, sandbox_id)
    assert empty["data"] == EMPTY[server]
    response = client.post(
        f"/local-sandbox/{server}/{sandbox_id}/initialize", json=DOCUMENTS[server]
    )
    assert response.status_code == 200, response.text
    assert response.json()["sandbox_id"] == sandbox_id
    assert response.json()["status"] == "occupied"
    dumped = _dump(client, server, sandbox_id)
    assert dumped["sandbox_id"] == sandbox_id
    assert dumped["server_name"] == server
    assert datetime.fromisoformat(dumped["dumped_at"]).tzinfo is not None
    # The same shape initialize takes, with the contract's defaults filled in: feeding it
    # back in gives the same document.
    again = client.post(f"/local-sandbox/{server}/{sandbox_id}/initialize", json=dumped["data"])
    assert again.status_code == 200
    assert _dump(client, server, sandbox_id)["data"] == dumped["data"]


def test_dump_fills_in_the_contract_defaults(client: httpx.Client) -> None:
    sandbox_id = _acquire(client)
    client.post(f"/local-sandbox/google_cloud/{sandbox_id}/initialize", json=GOOGLE)
    data = _dump(client, "google_cloud", sandbox_id)["data"]
    assert data["datasets"] == [
        {
            "id": "analytics",
            "description": "events",
            "location": "US",
            "created_at": None,
            "updated_at": None,
        }
    ]
    assert data["buckets"][0]["storage_class"] == "STANDARD"
    assert data["tables"][0]["fields"][0]["fields"][0]["mode"] == "NULLABLE"
    assert data["log_entries"][0]["json_data"] == {"nested": [1, 2.5, None]}


def test_initialize_replaces_and_default_data_loads(client: httpx.Client) -> None:
    sandbox_id = _acquire(client)
    url = f"/local-sandbox/canvas/{sandbox_id}/initialize"
    assert client.post(url, json=CANVAS).status_code == 200
    assert client.post(url, json={"courses": []}).status_code == 200
    assert _dump(client, "canvas", sandbox_id)["data"] == {"courses": []}
    default = client.post(url, params={"init_default_data": "true"})
    assert default.status_code == 200
    assert "default data" in default.json()["message"]
    courses = _dump(client, "canvas", sandbox_id)["data"]["courses"]
    assert [course["course_code"] for course in courses] == ["CS101"]
    # Default data and a body: the body's items come after the default ones.
    both = client.post(url, params={"init_default_data": "true"}, json=CANVAS)
    assert both.status_code == 200
    courses = _dump(client, "canvas", sandbox_id)["data"]["courses"]
    assert [course["course_code"] for course in courses] == ["CS101", "MATH1"]
    # No body and no default: the server is emptied.
    assert client.post(url).status_code == 200
    assert _dump(client, "canvas", sandbox_id)["data"] == {"courses": []}


@pytest.mark.parametrize(
    ("server", "body", "loc"),
    [
        ("google_cloud", {"datasets": [{"description": "no id"}]}, ["body", "datasets", 0, "id"]),
        ("google_cloud", {"datasets": "sales"}, ["body", "datasets"]),
        ("google_cloud", {"buckets": [{"name": "b", "versioning_enabled": "yes"}]}, None),
        ("google_cloud", {"log_buckets": [{"name": "b", "retention_days": "30"}]}, None),
        ("poste_email_toolathlon", {"users": {"a@b.c": {"emails": [{"subject": "x"}]}}}, None),
        ("poste_email_toolathlon", {"users": ["a@b.c"]}, ["body", "users"]),
        ("canvas", {"courses": [{"name": "no code"}]}, ["body", "courses", 0, "course_code"]),
        ("canvas", {"courses": [{"name": "n", "course_code": "c", "published": "true"}]}, None),
        ("canvas", ["not", "an", "object"], ["body"]),
        ("google_cloud", {"bigquery_datasets": []}, ["body", "bigquery_datasets"]),
        ("canvas", {"courses": [{"name": "n", "course_code": "c", "x": 1}]}, None),
    ],
)
def test_documents_of_the_wrong_shape_are_422(
    client: httpx.Client, server: str, body: object, loc: list[Any] | None
) -> None:
    _skip_without_mail_server(server)
    sandbox_id = _acquire(client)
    response = client.post(f"/local-sandbox/{server}/{sandbox_id}/initialize", json=body)
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert all(isinstance(error["msg"], str) and error["loc"][0] == "body" for error in errors)
    if loc is not None:
        assert any(error["loc"] == loc for error in errors), errors
    # Nothing was stored.
    assert _dump(client, server, sandbox_id)["data"] == EMPTY[server]


def test_non_json_numbers_and_lone_surrogates_are_422(client: httpx.Client) -> None:
    sandbox_id = _acquire(client)
    url = f"/local-sandbox/google_cloud/{sandbox_id}/initialize"
    json_header = {"Content-Type": "application/json"}
    for raw in (
        b'{"log_entries": [{"log_name": "a", "json_data": {"x": NaN}}]}',
        b'{"log_entries": [{"log_name": "a", "json_data": {"x": -Infinity}}]}',
        b'{"datasets": [{"id": "\\ud800"}]}',
    ):
        response = client.post(url, content=raw, headers=json_header)
        assert response.status_code == 422, (raw, response.text)
        assert response.json()["detail"][0]["loc"] == ["body"]
    acquire = client.post(
        "/local-sandbox",
        content=b'{"server_names": ["git"], "test_account_email": "\\udfff"}',
        headers=json_header,
    )
    assert acquire.status_code == 422


def test_reset_empties_server_data(client: httpx.Client) -> None:
    sandbox_id = _acquire(client)
    servers = [s for s in DOCUMENTS if not (s == "poste_email_toolathlon" and NO_MAIL_SERVER)]
    for server in servers:
        initialized = client.post(
            f"/local-sandbox/{server}/{sandbox_id}/initialize", json=DOCUMENTS[server]
        )
        assert initialized.status_code == 200, initialized.text
    assert client.post(f"/local-sandbox/{sandbox_id}/reset").status_code == 200
    for server in servers:
        assert _dump(client, server, sandbox_id)["data"] == EMPTY[server]
    assert _dump(client, "google_cloud", sandbox_id)["data"] == EMPTY["google_cloud"]


def test_server_data_belongs_to_its_tenant(
    client: httpx.Client, emulator: EmulatorServer, token: str
) -> None:
    sandbox_id = _acquire(client)
    client.post(f"/local-sandbox/canvas/{sandbox_id}/initialize", json=CANVAS)
    with httpx.Client(
        base_url=emulator.base_url, headers={"Authorization": f"Bearer other-{token}"}, timeout=30
    ) as intruder:
        for response in (
            intruder.get(f"/local-sandbox/canvas/{sandbox_id}/dump"),
            intruder.post(f"/local-sandbox/canvas/{sandbox_id}/initialize", json={"courses": []}),
        ):
            assert response.status_code == 404
            assert "Algebra" not in response.text
    assert _dump(client, "canvas", sandbox_id)["data"]["courses"][0]["name"] == "Algebra"


def test_the_generated_client_reads_the_dumps(emulator: EmulatorServer, token: str) -> None:
    with (
        AuthenticatedClient(base_url=emulator.base_url, token=token) as api,
        httpx.Client(
            base_url=emulator.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as http,
    ):
        sandbox_id = _acquire(http)
        loaded = initialize_google_cloud_data.sync_detailed(
            sandbox_id,
            client=api,
            body=GoogleCloudDataInput(datasets=[BigQueryDataset(id="d1")]),
        )
        assert isinstance(loaded.parsed, InitializeSandboxResponse)
        google = dump_google_cloud_data.sync(sandbox_id, client=api)
        assert isinstance(google, GoogleCloudDumpResponse)
        assert google.server_name == LocalSandboxMCPServer.GOOGLE_CLOUD
        assert isinstance(google.data.datasets, list)
        assert google.data.datasets[0].id == "d1"
        if not NO_MAIL_SERVER:
            mail = dump_poste_email_data.sync(sandbox_id, client=api)
            assert isinstance(mail, PosteEmailDumpResponse)
            assert mail.server_name == LocalSandboxMCPServer.POSTE_EMAIL_TOOLATHLON
        canvas = dump_canvas_data.sync(sandbox_id, client=api)
        assert isinstance(canvas, CanvasDumpResponse)
        assert canvas.server_name == LocalSandboxMCPServer.CANVAS
