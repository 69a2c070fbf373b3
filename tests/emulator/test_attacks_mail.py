"""Attacks on a sandbox's mail server from another tenant (issue 23, defects 3 and 4).

Each sandbox holding ``poste_email_toolathlon`` gets its own mail server on loopback (Dovecot
IMAP + aiosmtpd SMTP, see ``klavis_emulator/_mail/server.py``). Processes of other sandboxes reach
it: playwright's browser and the emails servers share the emulator's network, and the ports
show in ``/proc/net/tcp``. So every test here has two tenants (two API keys, each with a
sandbox of its own, on one emulator) and attacks with Python's own SMTP and IMAP clients on
loopback, where such a process stands. Promised (README, Safety): another tenant can deliver
mail into a sandbox, within the limits, but cannot read it.

A test skips only when Dovecot is missing (the project cannot install it), naming it.
"""

from __future__ import annotations

import base64
import imaplib
import json
import os
import smtplib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from klavis_emulator import EmulatorServer
from klavis_emulator._mail.rules import MAX_MAIL_BYTES, MAX_MESSAGE_BYTES, MAX_RECIPIENTS
from klavis_emulator._mcp.setup import find_tools
from klavis_emulator._schemas import ServerDataDumpResponse
from tests.emulator.mcp_servers import ServerSandbox as Sandbox
from tests.emulator.mcp_servers import host, hosting_emulator, sandbox_maker
from workflows import _mcp as client

SERVER = "poste_email_toolathlon"
MISSING = {SERVER: find_tools().missing_outside(SERVER)}
OWN = "agent@mcp.com"
PUBLISHED = "michelle_60R"
"""A password a public benchmark gives one of its accounts (Toolathlon's data): a harness
sends it in an ``x-email-config`` header, and anyone who read the benchmark knows it."""


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorServer]:
    """An emulator hosting MCP servers (the session's confinement mode); servers start on
    first use."""
    with hosting_emulator("session", mcp_at_acquire=False) as server:
        yield server


@pytest.fixture
def make_sandbox(emulator: EmulatorServer) -> Iterator[Callable[..., Sandbox]]:
    """Acquire sandboxes, each with an API key of its own (a tenant); released after."""
    with sandbox_maker(emulator, MISSING) as make:
        yield make


def _url(box: Sandbox, operation: str) -> str:
    return f"/local-sandbox/{SERVER}/{box.id}/{operation}"


def _auth_data(box: Sandbox) -> dict[str, Any]:
    (item,) = box.http.get(f"/local-sandbox/{box.id}").json()["servers"]
    data: dict[str, Any] = item["auth_data"]
    return data


def _email(subject: str, to: str, **more: Any) -> dict[str, Any]:
    return {"subject": subject, "from_addr": "boss@example.com", "to_addr": to, **more}


def _header(email: str, password: str) -> dict[str, str]:
    account = {"email": email, "password": password, "name": email.split("@")[0]}
    return {"x-email-config": base64.b64encode(json.dumps(account).encode()).decode()}


def _mail_folder(emulator: EmulatorServer, box: Sandbox) -> Path:
    """Where the sandbox's mailboxes are on the host."""
    root: Path = host(emulator).mail.servers[box.id].root
    return root / "mail"


def _du(folder: Path) -> int:
    """Disk taken by a folder's tree, as ``du`` counts it (blocks, folders included)."""
    total = 0
    for parent, folders, files in os.walk(folder):
        for name in [*folders, *files]:
            total += os.lstat(os.path.join(parent, name)).st_blocks * 512
    return total


def _started(box: Sandbox) -> dict[str, Any]:
    """Start the sandbox's mail server (the data endpoints do) and give its auth_data."""
    answer = box.http.get(_url(box, "dump"))
    assert answer.status_code == 200, answer.text
    return _auth_data(box)


def _lines(size: int) -> bytes:
    """A message body of ``size`` bytes in lines SMTP accepts (at most 1,000 bytes each)."""
    line = b"x" * 998 + b"\r\n"
    return line * (size // len(line)) + b"y" * (size % len(line))


def _open_own_inbox(auth: dict[str, Any]) -> None:
    """Log in to the sandbox's IMAP with its own account, which has one message."""
    with imaplib.IMAP4(auth["imap_server"], auth["imap_port"]) as imap:
        imap.login(auth["email"], auth["password"])
        assert imap.select("INBOX", readonly=True) == ("OK", [b"1"])


def _refused(auth: dict[str, Any], guesses: list[tuple[str, str]], over_imap: int) -> None:
    """Each (user, password) fails to log in to the sandbox's SMTP, and the first
    ``over_imap`` to its IMAP, while its own account (``auth``) opens its inbox before and
    after each IMAP guess: the test is not vacuous. (Dovecot makes each failure from an
    address wait longer, 2, 4, 8, 15 s, until a success: 6 s a guess so.)"""
    for user, password in guesses:
        with (
            smtplib.SMTP(auth["smtp_server"], auth["smtp_port"]) as smtp,
            pytest.raises(smtplib.SMTPAuthenticationError),
        ):
            smtp.login(user, password)
    _open_own_inbox(auth)
    for user, password in guesses[:over_imap]:
        with (
            imaplib.IMAP4(auth["imap_server"], auth["imap_port"]) as imap,
            pytest.raises(imaplib.IMAP4.error, match="AUTHENTICATIONFAILED"),
        ):
            imap.login(user, password)
        _open_own_inbox(auth)


# ---------------------------------------------------------------------- defect 3: reading


def test_another_tenant_cannot_log_in_to_a_sandboxs_accounts(
    make_sandbox: Callable[[str], Sandbox], emulator: EmulatorServer
) -> None:
    victim = make_sandbox(SERVER)
    document = {
        "users": {
            OWN: {"emails": [_email("for the agent", OWN)]},
            "ann@example.com": {"emails": [_email("for ann", "ann@example.com")]},
            "michelle@mcp.com": {"emails": [_email("for michelle", "michelle@mcp.com")]},
        }
    }
    assert victim.http.post(_url(victim, "initialize"), json=document).status_code == 200
    mine = _auth_data(victim)
    attacker = make_sandbox(SERVER)  # another tenant, with its own mail server and account
    theirs = _started(attacker)
    assert theirs["imap_port"] != mine["imap_port"]
    _refused(
        mine,
        [
            ("ann@example.com", "ann@example.com"),  # a named user's address (main's password)
            (OWN, theirs["password"]),  # the attacker's own account's password
            (OWN, OWN),
            ("ann@example.com", theirs["password"]),
        ],
        over_imap=2,
    )

    # the victim's harness picks a named account with the benchmark's published password,
    # as Klavis's notebooks do: its emails server reads that account's mail; a later header
    # with another password fails to log in, as on a real server
    as_michelle = _header("michelle@mcp.com", PUBLISHED)
    read = client.call_tool(victim.url, "get_emails", {"folder": "INBOX"}, headers=as_michelle)
    assert not read.is_error, read.text
    assert "for michelle" in read.text, read.text
    wrong = client.call_tool(
        victim.url, "get_emails", {"folder": "INBOX"}, headers=_header("michelle@mcp.com", "x")
    )
    assert "for michelle" not in wrong.text
    assert "fail" in wrong.text.lower(), wrong.text
    # the published password is no use to another tenant: it never became Dovecot's
    _refused(
        mine,
        [("michelle@mcp.com", PUBLISHED), ("michelle@mcp.com", "michelle@mcp.com")],
        over_imap=1,
    )

    # the passwords are in no file another user of the machine can read
    passwd = _mail_folder(emulator, victim).parent / "passwd"
    assert passwd.stat().st_mode & 0o007 == 0, oct(passwd.stat().st_mode)
    # and the victim's dump has every account's mail
    dumped = victim.http.get(_url(victim, "dump")).json()["data"]["users"]
    assert {user: [m["subject"] for m in dumped[user]["emails"]] for user in dumped} == {
        OWN: ["for the agent"],
        "ann@example.com": ["for ann"],
        "michelle@mcp.com": ["for michelle"],
    }


# ---------------------------------------------------------------------- defect 4: floods


def test_smtp_refuses_the_recipient_past_the_limit(make_sandbox: Callable[[str], Sandbox]) -> None:
    victim = make_sandbox(SERVER)
    mine = _started(victim)
    with smtplib.SMTP(mine["smtp_server"], mine["smtp_port"]) as smtp:  # no login
        smtp.ehlo()
        assert smtp.mail("attacker@example.com")[0] == 250
        for number in range(MAX_RECIPIENTS):
            assert smtp.rcpt(f"r{number}@example.com")[0] == 250
        code, message = smtp.rcpt("one-more@example.com")
        assert code == 452, message
        assert b"4.5.3" in message


def test_smtp_and_imap_refuse_a_message_past_the_size_limit(
    make_sandbox: Callable[[str], Sandbox], emulator: EmulatorServer
) -> None:
    victim = make_sandbox(SERVER)
    mine = _started(victim)
    before = _du(_mail_folder(emulator, victim))
    body = b"Subject: big\r\n\r\n" + _lines(MAX_MESSAGE_BYTES)  # just over the limit
    with smtplib.SMTP(mine["smtp_server"], mine["smtp_port"]) as smtp:
        smtp.ehlo()
        assert smtp.esmtp_features["size"] == str(MAX_MESSAGE_BYTES)  # advertised
        # a client that says the size is refused before it sends the message ...
        with pytest.raises(smtplib.SMTPSenderRefused) as said:
            smtp.sendmail("attacker@example.com", [OWN], body)
        assert said.value.smtp_code == 552
        # ... and one that does not, once the message is in (aiosmtpd kept none of it)
        smtp.rset()
        assert smtp.mail("attacker@example.com")[0] == 250
        assert smtp.rcpt(OWN)[0] == 250
        code, message = smtp.data(body)
        assert code == 552, message
    # the account's own IMAP cannot store one either (Dovecot's quota_max_mail_size)
    with imaplib.IMAP4(mine["imap_server"], mine["imap_port"]) as imap:
        imap.login(OWN, mine["password"])
        typ, answer = imap.append("INBOX", None, None, body)
        assert typ == "NO", answer
    assert _du(_mail_folder(emulator, victim)) - before < 1024 * 1024


def test_smtp_refuses_mail_past_the_sandboxs_total(
    make_sandbox: Callable[[str], Sandbox], emulator: EmulatorServer
) -> None:
    victim = make_sandbox(SERVER)
    mine = _started(victim)
    folder = _mail_folder(emulator, victim)
    before = _du(folder)
    megabyte = b"Subject: flood\r\n\r\n" + _lines(1024 * 1024)
    with smtplib.SMTP(mine["smtp_server"], mine["smtp_port"]) as smtp:  # no login
        # the attack: 1 MiB to 60 recipients, 61 MiB of copies; nothing is kept
        with pytest.raises(smtplib.SMTPDataError) as refused:
            smtp.sendmail(
                "attacker@example.com", [OWN, *(f"r{n}@x.org" for n in range(59))], megabyte
            )
        assert refused.value.smtp_code == 552
        assert b"5.2.2" in refused.value.smtp_error
        assert _du(folder) - before < 1024 * 1024
        # messages of the largest size, one recipient each, until the sandbox's mail is full
        big = b"Subject: big\r\n\r\n" + _lines(MAX_MESSAGE_BYTES - 100)
        for _ in range(MAX_MAIL_BYTES // MAX_MESSAGE_BYTES - 1):  # the folder holds some
            smtp.sendmail("attacker@example.com", [OWN], big)
        with pytest.raises(smtplib.SMTPDataError) as full:
            smtp.sendmail("attacker@example.com", [OWN], big)
        assert full.value.smtp_code == 552
    assert _du(folder) <= MAX_MAIL_BYTES


def _attachment(size: int) -> dict[str, Any]:
    return {"filename": "f.bin", "content_type": "application/octet-stream", "size": size}


@pytest.mark.parametrize(
    ("emails", "message"),
    [
        # one attachment whose base64 passes the largest message
        ([_email("one", OWN, attachments=[_attachment(MAX_MESSAGE_BYTES * 3 // 4)])], "larger"),
        # two that pass it together (refused before the message is made)
        ([_email("two", OWN, attachments=[_attachment(7_000_000)] * 2)], "larger"),
        # messages that each fit, but not all of them in one sandbox's mail
        ([_email(f"m{n}", OWN, attachments=[_attachment(7_000_000)]) for n in range(7)], "more"),
    ],
)
def test_initialize_refuses_a_document_past_the_mail_limits(
    make_sandbox: Callable[[str], Sandbox], emails: list[dict[str, Any]], message: str
) -> None:
    box = make_sandbox(SERVER)
    kept = {"users": {OWN: {"emails": [_email("kept", OWN)]}}}
    assert box.http.post(_url(box, "initialize"), json=kept).status_code == 200
    answer = box.http.post(_url(box, "initialize"), json={"users": {OWN: {"emails": emails}}})
    assert answer.status_code == 422, answer.text[:300]
    assert message in str(answer.json()["detail"])
    dumped = box.http.get(_url(box, "dump")).json()["data"]["users"][OWN]["emails"]
    assert [m["subject"] for m in dumped] == ["kept"]


def test_the_streamed_dump_is_the_json_the_api_always_answered(
    make_sandbox: Callable[[str], Sandbox],
) -> None:
    # dump streams its answer (the mail may weigh more than the emulator should hold): it
    # must be byte for byte what FastAPI writes for the response model, long bodies,
    # escapes and non-ASCII text included
    box = make_sandbox(SERVER)
    odd = 'tab\there, nul-free \x01\x1f control, quote " backslash \\ é 漢字 😀 \u2028'
    long_body = (odd + "\n") * 12_000  # over the writer's 256 Ki-character slices
    document = {
        "users": {
            OWN: {
                "emails": [
                    _email("Ünïcode 😀 subject", OWN, body_text=long_body, is_read=True),
                    _email("html", OWN, body_html="<p>" + odd + "</p>", folder="Archive"),
                ]
            },
            "ann@example.com": {"emails": []},
        }
    }
    assert box.http.post(_url(box, "initialize"), json=document).status_code == 200
    answer = box.http.get(_url(box, "dump"))
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert int(answer.headers["content-length"]) == len(answer.content)
    model = ServerDataDumpResponse.model_validate_json(answer.content)
    assert model.model_dump_json().encode() == answer.content
    (first, second) = model.data["users"][OWN]["emails"]
    assert first["body_text"] == long_body
    assert second["body_html"] == "<p>" + odd + "</p>"
