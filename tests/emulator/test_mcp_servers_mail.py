"""poste_email_toolathlon, end to end: a sandbox's own mail server (Dovecot IMAP + aiosmtpd
SMTP on loopback), named in its ``auth_data``, and the emails MCP server logged in to it.

Each test runs twice: in the session's confinement mode (where bubblewrap is installed, the
server must be confined) and unconfined. A test skips only when something the project
cannot install is missing (Dovecot, a Python 3.12), naming it.
"""

from __future__ import annotations

import base64
import email.parser
import email.policy
import imaplib
import json
import secrets
import smtplib
import sys
import time
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import pytest

from klavis_emulator import EmulatorServer
from klavis_emulator._mail.rules import MailAccount
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
from workflows import KlavisError
from workflows import _mcp as client

SERVER = "poste_email_toolathlon"
MISSING = {SERVER: find_tools().missing_outside(SERVER)}


@pytest.fixture(scope="module", params=MODES)
def emulator(request: pytest.FixtureRequest) -> Iterator[EmulatorServer]:
    """An emulator hosting MCP servers, in the session's confinement mode or unconfined."""
    with hosting_emulator(request.param) as server:
        yield server


@pytest.fixture
def make_sandbox(emulator: EmulatorServer) -> Iterator[Callable[..., Sandbox]]:
    """Acquire sandboxes on the module's emulator; released after the test."""
    with sandbox_maker(emulator, MISSING) as make:
        yield make


def _auth_data(box: Sandbox) -> dict[str, Any]:
    answer = box.http.get(f"/local-sandbox/{box.id}")
    assert answer.status_code == 200, answer.text
    (item,) = answer.json()["servers"]
    data: dict[str, Any] = item["auth_data"]
    return data


def _inbox_subjects(auth: dict[str, Any], folder: str = "INBOX") -> list[str]:
    """The subjects in a folder, read with Python's own IMAP client."""
    with imaplib.IMAP4(auth["imap_server"], auth["imap_port"]) as imap:
        imap.login(auth["email"], auth["password"])
        status, _ = imap.select(folder, readonly=True)
        assert status == "OK"
        _, found = imap.search(None, "ALL")
        subjects = []
        for number in found[0].split():
            _, parts = imap.fetch(number, "(BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
            header = parts[0]
            assert isinstance(header, tuple)
            parsed = email.parser.BytesHeaderParser(policy=email.policy.default).parsebytes(
                header[1]
            )
            subjects.append(str(parsed["Subject"]))
        return subjects


def _wait_gone(pids: tuple[int, ...], timeout: float = 15.0) -> list[int]:
    """The pids still alive once ``timeout`` passed (reaped zombies count as gone)."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _alive(pid)]
        if alive:
            time.sleep(0.05)  # polling a condition with a deadline, not a fixed wait
    return alive


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_emails_server_sends_and_reads_mail_on_the_sandboxes_own_mail_server(
    make_sandbox: Callable[[str], Sandbox], emulator: EmulatorServer, request: pytest.FixtureRequest
) -> None:
    box = make_sandbox(SERVER)
    auth = _auth_data(box)
    assert auth["imap_server"] == auth["smtp_server"] == "127.0.0.1"
    assert auth["imap_port"] != auth["smtp_port"]
    assert auth["email"] == "agent@mcp.com"

    names = {tool.name for tool in client.list_tools(box.url)}
    assert {"send_email", "get_emails", "read_email", "check_connection", "import_emails"} <= (
        names
    )
    assert len(names) == 25
    assert_confinement(emulator, mode_of(request))

    sent = client.call_tool(
        box.url,
        "send_email",
        {"to": auth["email"], "subject": "hello from the sandbox", "body": "first line"},
    )
    assert not sent.is_error, sent.text
    assert "success" in sent.text.lower(), sent.text
    listed = client.call_tool(box.url, "get_emails", {"folder": "INBOX"})
    assert not listed.is_error, listed.text
    assert "hello from the sandbox" in listed.text
    # the mail server is real: Python's own IMAP client sees the message, and a copy in Sent
    assert _inbox_subjects(auth) == ["hello from the sandbox"]
    assert _inbox_subjects(auth, "Sent") == ["hello from the sandbox"]

    # mail sent to the account from outside (its SMTP port; a wrong password is refused)
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = auth["email"], auth["email"], "via smtp"
    message.set_content("second")
    with smtplib.SMTP(auth["smtp_server"], auth["smtp_port"]) as smtp:
        with pytest.raises(smtplib.SMTPAuthenticationError):
            smtp.login(auth["email"], "not the password")
        smtp.login(auth["email"], auth["password"])
        smtp.send_message(message)
    searched = client.call_tool(box.url, "search_emails", {"query": "via smtp"})
    assert not searched.is_error, searched.text
    assert "via smtp" in searched.text

    # the account's password stays out of the workspace (its config is in the private tmp)
    assert not [path for path in box.workspace.rglob("*") if path.name.endswith(".json")]

    pids = host(emulator).mail.pids(box.id)
    assert len(pids) == 2
    assert all(_alive(pid) for pid in pids)
    assert box.http.delete(f"/local-sandbox/{box.id}").status_code == 200  # release
    assert _wait_gone(pids) == []
    assert host(emulator).mail.pids(box.id) == ()


def test_a_reset_empties_the_mailboxes_and_test_account_email_names_the_account(
    emulator: EmulatorServer,
) -> None:
    if MISSING[SERVER]:
        pytest.skip(f"{SERVER}: {MISSING[SERVER]}")
    with httpx.Client(
        base_url=emulator.base_url,
        headers={"Authorization": f"Bearer mail-{secrets.token_hex(8)}"},
        timeout=60,
    ) as http:
        answer = http.post(
            "/local-sandbox",
            json={"server_names": [SERVER], "test_account_email": "Ronald.Kelly@mcp.com"},
        )
        assert answer.status_code == 201, answer.text
        sandbox_id = answer.json()["local_sandbox_id"]
        try:
            auth = answer.json()["servers"][0]["auth_data"]  # in the acquire answer already
            assert auth["email"] == "ronald.kelly@mcp.com"
            assert auth["name"] == "Ronald Kelly"
            host(emulator).wait_warm(sandbox_id)  # the mail server starts with the servers
            with smtplib.SMTP(auth["smtp_server"], auth["smtp_port"]) as smtp:
                smtp.login(auth["email"], auth["password"])
                smtp.sendmail(auth["email"], [auth["email"]], b"Subject: before reset\r\n\r\nx\r\n")
            assert _inbox_subjects(auth) == ["before reset"]
            assert http.post(f"/local-sandbox/{sandbox_id}/reset").status_code == 200
            assert _inbox_subjects(auth) == []
        finally:
            http.delete(f"/local-sandbox/{sandbox_id}")


def test_without_dovecot_the_url_answers_503_naming_the_package(emulator: EmulatorServer) -> None:
    # the server's program is there (any file), Dovecot is not: the piece the project cannot
    # install, named with its Debian package, and no auth_data pointing at nothing
    no_dovecot = McpToolPaths(node=None, programs={SERVER: Path(sys.executable)})
    assert "apt-get install dovecot-imapd" in (no_dovecot.missing_outside(SERVER) or "")
    with (
        mock.patch.object(McpHost, "tools", return_value=no_dovecot),
        httpx.Client(
            base_url=emulator.base_url,
            headers={"Authorization": f"Bearer mail-{secrets.token_hex(8)}"},
            timeout=60,
        ) as http,
    ):
        answer = http.post("/local-sandbox", json={"server_names": [SERVER]})
        assert answer.status_code == 201, answer.text
        (item,) = answer.json()["servers"]
        try:
            assert item["auth_data"] is None
            reply = httpx.post(item["mcp_server_url"], json={}, timeout=60)
            assert reply.status_code == 503
            assert "apt-get install dovecot-imapd" in reply.json()["detail"]
        finally:
            http.delete(f"/local-sandbox/{answer.json()['local_sandbox_id']}")


def _email_config(**account: str) -> dict[str, str]:
    return {"x-email-config": base64.b64encode(json.dumps(account).encode()).decode()}


def test_x_email_config_chooses_the_account_per_request_as_on_the_service(
    make_sandbox: Callable[[str], Sandbox],
) -> None:
    # Klavis's poste notebook: the account (e-mail, password, name) in a base64 JSON header
    box = make_sandbox(SERVER)
    own = _auth_data(box)
    michelle = _email_config(email="micheller@mcp.com", password="michelle_60R", name="Ronald")
    sent = client.call_tool(
        box.url,
        "send_email",
        {"to": own["email"], "subject": "from michelle", "body": "hi"},
        headers=michelle,
    )
    assert not sent.is_error, sent.text
    assert "success" in sent.text.lower(), sent.text
    mine = client.call_tool(box.url, "get_emails", {"folder": "INBOX"})  # no header: own
    assert "from michelle" in mine.text
    assert _inbox_subjects(own) == ["from michelle"]
    # the chosen account's copy is in its own Sent folder; a later header with another
    # password fails to log in (the first header's is checked by the emulator, Dovecot's
    # password is random: tests/emulator/test_attacks_mail.py)
    theirs = client.call_tool(box.url, "get_emails", {"folder": "Sent"}, headers=michelle)
    assert "from michelle" in theirs.text
    wrong = _email_config(email="micheller@mcp.com", password="guessed", name="")
    denied = client.call_tool(box.url, "get_emails", {"folder": "INBOX"}, headers=wrong)
    assert "from michelle" not in denied.text
    assert "fail" in denied.text.lower(), denied.text

    with pytest.raises(KlavisError, match="x-email-config must be base64"):
        client.list_tools(box.url, headers={"x-email-config": "not base64 json"})


def test_only_plain_addresses_become_accounts() -> None:
    # test_account_email is any string on the API: it must not write lines into the passwd-file
    assert MailAccount.for_sandbox("a@b.c:{PLAIN}x\nroot@x").email == "agent@mcp.com"
    assert MailAccount.for_sandbox(None).email == "agent@mcp.com"
    assert MailAccount.for_sandbox(" Jo.Doe@Mcp.com ").email == "jo.doe@mcp.com"
    account = MailAccount.for_sandbox(None)
    assert account.password not in repr(account)
    chosen = base64.b64encode(json.dumps({"email": "x@y.z", "password": "p:q"}).encode())
    with pytest.raises(ValueError, match="without ':'"):
        MailAccount.from_header(chosen.decode())


def test_no_mail_server_is_made_once_the_host_stopped_its_mail_servers() -> None:
    """After the host's shutdown stopped every mail server, a late acquire's provisioning
    must not make one (nothing would ever stop its processes or remove its folder)."""
    missing = MISSING[SERVER]
    if missing is not None:
        pytest.skip(missing)
    with hosting_emulator("unconfined", mcp_at_acquire=False) as server:
        mcp_host = host(server)
        mcp_host.mail.stop_all()  # what the host's shutdown runs
        http = httpx.Client(
            base_url=server.base_url,
            headers={"Authorization": f"Bearer m-{secrets.token_hex(6)}"},
            timeout=30,
        )
        with http:
            acquired = http.post("/local-sandbox", json={"server_names": [SERVER]})
            assert acquired.status_code == 201, acquired.text
            sandbox_id = acquired.json()["local_sandbox_id"]
            assert mcp_host.mail.pids(sandbox_id) == ()
            assert mcp_host.mail.servers == {}
            http.delete(f"/local-sandbox/{sandbox_id}")
