"""poste_email_toolathlon's data endpoints on the sandbox's real mail server: initialize
makes accounts and appends messages over IMAP, the emails MCP server and Python's IMAP client
see them, dump reads every account back (with what the agent sent), reset empties it, bad
documents are refused before anything is written, and no Dovecot answers 503.

The MCP tests run twice (the session's confinement mode and unconfined), as the mail tests
do; a test skips only when something the project cannot install is missing (Dovecot).
"""

from __future__ import annotations

import email.parser
import email.policy
import imaplib
import json
import re
import secrets
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import pytest

from klavis_emulator import EmulatorConfig, EmulatorServer
from klavis_emulator._mcp.host import McpHost
from klavis_emulator._mcp.setup import McpToolPaths, find_tools
from tests.emulator.mcp_servers import (
    MODES,
    assert_confinement,
    host,
    hosting_emulator,
    mode_of,
    sandbox_maker,
)
from tests.emulator.mcp_servers import ServerSandbox as Sandbox
from workflows import _mcp as client

SERVER = "poste_email_toolathlon"
MISSING = {SERVER: find_tools().missing_outside(SERVER)}
OWN = "agent@mcp.com"
DOCUMENT: dict[str, Any] = {
    "users": {
        OWN: {
            "emails": [
                {
                    "subject": "Quarterly report",
                    "from_addr": "Ann Lee <ann@example.com>",
                    "to_addr": OWN,
                    "cc_addr": "boss@example.com",
                    "date": "Wed, 10 Sep 2025 18:31:19 +0000",
                    "message_id": "<q3@example.com>",
                    "body_text": "Numbers inside.\r\nSee the PDF.",
                    "body_html": "<p>Numbers inside.</p>",
                    "is_read": True,
                    "is_important": True,
                    "attachments": [
                        {"filename": "q3.pdf", "content_type": "application/pdf", "size": 7}
                    ],
                },
                {
                    "subject": "Old thread",
                    "from_addr": "bob@example.com",
                    "to_addr": OWN,
                    "folder": "Archive",
                    "body_text": "archived",
                },
            ]
        },
        "Ann@Example.com": {
            "emails": [
                {
                    "subject": "Draft to the agent",
                    "from_addr": "ann@example.com",
                    "to_addr": OWN,
                    "folder": "Drafts",
                    "body_text": "not sent yet",
                }
            ]
        },
    }
}


@pytest.fixture(scope="module", params=MODES)
def emulator(request: pytest.FixtureRequest) -> Iterator[EmulatorServer]:
    """An emulator hosting MCP servers whose servers start on first use (the data
    endpoints must start the mail server themselves)."""
    with hosting_emulator(request.param, mcp_at_acquire=False) as server:
        yield server


@pytest.fixture
def make_sandbox(emulator: EmulatorServer) -> Iterator[Callable[..., Sandbox]]:
    """Acquire sandboxes on the module's emulator; released after the test."""
    with sandbox_maker(emulator, MISSING) as make:
        yield make


def _url(box: Sandbox, operation: str) -> str:
    return f"/local-sandbox/{SERVER}/{box.id}/{operation}"


def _dump(box: Sandbox) -> dict[str, Any]:
    answer = box.http.get(_url(box, "dump"))
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()["data"]
    return data


def _auth_data(box: Sandbox) -> dict[str, Any]:
    (item,) = box.http.get(f"/local-sandbox/{box.id}").json()["servers"]
    data: dict[str, Any] = item["auth_data"]
    return data


def _folder(auth: dict[str, Any], user: str, password: str, folder: str) -> list[tuple[str, str]]:
    """(subject, flags) of each message of a folder, read with Python's own IMAP client."""
    with imaplib.IMAP4(auth["imap_server"], auth["imap_port"]) as imap:
        imap.login(user, password)
        assert imap.select(folder, readonly=True)[0] == "OK"
        _, answer = imap.fetch("1:*", "(FLAGS BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
        found = []
        for item in answer:
            if isinstance(item, tuple):
                flags = re.search(rb"FLAGS \(([^)]*)\)", item[0])
                header = email.parser.BytesHeaderParser(policy=email.policy.default)
                subject = str(header.parsebytes(item[1])["Subject"])
                found.append((subject, flags[1].decode() if flags else ""))
        return found


def _subjects(data: dict[str, Any], user: str, folder: str) -> list[str]:
    return [m["subject"] for m in data["users"][user]["emails"] if m["folder"] == folder]


def test_initialized_mail_is_on_the_mail_server_and_dump_shows_what_the_agent_sent(
    make_sandbox: Callable[[str], Sandbox], emulator: EmulatorServer, request: pytest.FixtureRequest
) -> None:
    box = make_sandbox(SERVER)
    loaded = box.http.post(_url(box, "initialize"), json=DOCUMENT)  # servers not started yet
    assert loaded.status_code == 200, loaded.text
    auth = _auth_data(box)
    assert auth["email"] == OWN

    # the emails MCP server reads them, in their folders
    inbox = client.call_tool(box.url, "get_emails", {"folder": "INBOX"})
    assert not inbox.is_error, inbox.text
    assert "Quarterly report" in inbox.text
    assert "Old thread" not in inbox.text
    assert_confinement(emulator, mode_of(request))
    archive = client.call_tool(
        box.url, "search_emails", {"query": "Old thread", "folder": "Archive"}
    )
    assert "Old thread" in archive.text, archive.text
    # ... so does Python's IMAP client, with the flags; a named user has a random password
    # (only the emulator knows it; tests/emulator/test_attacks_mail.py tries to guess it)
    ((subject, flags),) = _folder(auth, OWN, auth["password"], "INBOX")
    assert subject == "Quarterly report"
    assert {"\\Seen", "\\Flagged"} <= set(flags.split())
    ann = host(emulator).mail.servers[box.id].accounts()["ann@example.com"]
    assert len(ann) >= 24
    ((subject, flags),) = _folder(auth, "ann@example.com", ann, "Drafts")
    assert subject == "Draft to the agent"
    assert "\\Seen" not in flags
    assert "\\Flagged" not in flags

    # the agent sends mail with the MCP tool: the dump shows it, sent and received
    sent = client.call_tool(
        box.url,
        "send_email",
        {"to": "ann@example.com", "subject": "Re: Draft", "body": "Thanks, Ann."},
    )
    assert not sent.is_error, sent.text
    assert "success" in sent.text.lower(), sent.text
    dumped = _dump(box)
    assert set(dumped["users"]) == {OWN, "ann@example.com"}
    assert _subjects(dumped, OWN, "Sent") == ["Re: Draft"]
    assert _subjects(dumped, "ann@example.com", "INBOX") == ["Re: Draft"]
    (report,) = [m for m in dumped["users"][OWN]["emails"] if m["folder"] == "INBOX"]
    given = DOCUMENT["users"][OWN]["emails"][0]
    assert {key: report[key] for key in given} == given  # every field given, as given
    assert report["email_id"]
    assert report["bcc_addr"] is None

    # round trip: initialize with the dump, the dump is the same
    again = box.http.post(_url(box, "initialize"), json=dumped)
    assert again.status_code == 200, again.text
    assert _dump(box) == dumped
    inbox = client.call_tool(box.url, "get_emails", {"folder": "INBOX"})  # on the new server
    assert "Quarterly report" in inbox.text, inbox.text

    # initialize replaces; reset empties every mailbox and forgets the named accounts
    assert box.http.post(_url(box, "initialize"), json={"users": {}}).status_code == 200
    assert _dump(box) == {"users": {OWN: {"emails": []}}}
    box.http.post(_url(box, "initialize"), json=DOCUMENT)
    assert box.http.post(f"/local-sandbox/{box.id}/reset").status_code == 200
    assert _dump(box) == {"users": {OWN: {"emails": []}}}


def _with(**changes: Any) -> dict[str, Any]:
    message = {"subject": "s", "from_addr": "a@b.c", "to_addr": OWN, **changes}
    return {"users": {OWN: {"emails": [message]}}}


@pytest.mark.parametrize("emulator", MODES[:1], indirect=True)
@pytest.mark.parametrize(
    ("document", "message"),
    [
        (_with(folder="Sent/../../etc"), "is not a mailbox name"),
        (_with(folder=".."), "is not a mailbox name"),
        (_with(folder=".hidden"), "must not start or end with a dot"),
        ({"users": {"not an address": {"emails": []}}}, "is not an email address"),
        ({"users": {"a@b.c": {}, "A@B.C": {}}}, "named twice"),
        (_with(subject="hi\r\nBcc: everyone@example.com"), "line breaks"),
        (_with(date="yesterday"), "is not an RFC 2822 date"),
        (_with(attachments=[{"filename": "f", "size": -1}]), "greater than or equal to 0"),
        (_with(attachments=[{"filename": "f", "content_type": "pdf"}]), "not a MIME type"),
    ],
)
def test_bad_documents_are_422_before_anything_is_written(
    make_sandbox: Callable[[str], Sandbox], document: dict[str, Any], message: str
) -> None:
    box = make_sandbox(SERVER)
    kept = _with(subject="kept")
    assert box.http.post(_url(box, "initialize"), json=kept).status_code == 200
    answer = box.http.post(_url(box, "initialize"), json=document)
    assert answer.status_code == 422, answer.text
    assert message in str(answer.json()["detail"])
    assert _subjects(_dump(box), OWN, "INBOX") == ["kept"]


@pytest.mark.parametrize("emulator", MODES[:1], indirect=True)
def test_without_dovecot_the_data_endpoints_answer_503_naming_the_package(
    emulator: EmulatorServer,
) -> None:
    no_dovecot = McpToolPaths(node=None, programs={SERVER: Path(sys.executable)})
    with (
        mock.patch.object(McpHost, "tools", return_value=no_dovecot),
        httpx.Client(
            base_url=emulator.base_url,
            headers={"Authorization": f"Bearer mail-{secrets.token_hex(8)}"},
            timeout=60,
        ) as http,
    ):
        sandbox_id = http.post("/local-sandbox", json={"server_names": [SERVER]}).json()[
            "local_sandbox_id"
        ]
        try:
            for answer in (
                http.post(f"/local-sandbox/{SERVER}/{sandbox_id}/initialize", json=DOCUMENT),
                http.get(f"/local-sandbox/{SERVER}/{sandbox_id}/dump"),
            ):
                assert answer.status_code == 503, answer.text
                assert "apt-get install dovecot-imapd" in answer.json()["detail"]
        finally:
            http.delete(f"/local-sandbox/{sandbox_id}")


@pytest.mark.parametrize("emulator", MODES[:1], indirect=True)
def test_default_data_loads_the_built_in_mailboxes_before_the_given_ones(
    make_sandbox: Callable[[str], Sandbox],
) -> None:
    box = make_sandbox(SERVER)
    answer = box.http.post(
        _url(box, "initialize"), params={"init_default_data": "true"}, json=_with(subject="mine")
    )
    assert answer.status_code == 200, answer.text
    assert "default data and the given data" in answer.json()["message"]
    dumped = _dump(box)
    assert set(dumped["users"]) == {OWN, "alice@example.com", "bob@example.com"}
    assert _subjects(dumped, "alice@example.com", "INBOX") == ["Welcome"]
    assert _subjects(dumped, OWN, "INBOX") == ["mine"]


def test_the_last_initialized_mail_is_loaded_again_after_an_emulator_restart(
    tmp_path: Path,
) -> None:
    # mail lives in the mail server's processes; the document initialize stored is loaded
    # into the fresh mailboxes (so is a benchmark pack's: the same stored document)
    if MISSING[SERVER]:
        pytest.skip(f"{SERVER}: {MISSING[SERVER]}")
    config = EmulatorConfig(data_dir=tmp_path / "data", mcp_at_acquire=False)
    headers = {"Authorization": f"Bearer mail-{secrets.token_hex(8)}"}
    with (
        EmulatorServer(config) as server,
        httpx.Client(base_url=server.base_url, headers=headers, timeout=60) as http,
    ):
        answer = http.post("/local-sandbox", json={"server_names": [SERVER]})
        sandbox_id = answer.json()["local_sandbox_id"]
        url = f"/local-sandbox/{SERVER}/{sandbox_id}"
        assert http.post(f"{url}/initialize", json=DOCUMENT).status_code == 200
        before = http.get(f"{url}/dump").json()["data"]
    with (
        EmulatorServer(config) as server,
        httpx.Client(base_url=server.base_url, headers=headers, timeout=60) as http,
    ):
        after = http.get(f"{url}/dump").json()["data"]
        assert after == before
        assert _subjects(after, "ann@example.com", "Drafts") == ["Draft to the agent"]
        assert http.post(f"/local-sandbox/{sandbox_id}/reset").status_code == 200
        assert http.get(f"{url}/dump").json()["data"] == {"users": {OWN: {"emails": []}}}
        http.delete(f"/local-sandbox/{sandbox_id}")


def test_a_benchmark_packs_mail_is_in_the_mailboxes_and_back_after_a_reset(
    tmp_path: Path,
) -> None:
    if MISSING[SERVER]:
        pytest.skip(f"{SERVER}: {MISSING[SERVER]}")
    pack = tmp_path / "pack"
    (pack / ".server-data").mkdir(parents=True)
    (pack / ".server-data" / f"{SERVER}.json").write_text(json.dumps(DOCUMENT))
    config = EmulatorConfig(
        data_dir=tmp_path / "data", benchmark_data={"Toolathlon": pack}, mcp_at_acquire=False
    )
    headers = {"Authorization": f"Bearer mail-{secrets.token_hex(8)}"}
    with (
        EmulatorServer(config) as server,
        httpx.Client(base_url=server.base_url, headers=headers, timeout=60) as http,
    ):
        body = {"server_names": [SERVER], "benchmark": "Toolathlon"}
        sandbox_id = http.post("/local-sandbox", json=body).json()["local_sandbox_id"]
        url = f"/local-sandbox/{SERVER}/{sandbox_id}"
        packed = http.get(f"{url}/dump").json()["data"]
        assert _subjects(packed, OWN, "INBOX") == ["Quarterly report"]
        assert http.post(f"{url}/initialize", json={"users": {}}).status_code == 200
        assert http.get(f"{url}/dump").json()["data"] == {"users": {OWN: {"emails": []}}}
        assert http.post(f"/local-sandbox/{sandbox_id}/reset").status_code == 200
        assert http.get(f"{url}/dump").json()["data"] == packed
        http.delete(f"/local-sandbox/{sandbox_id}")
