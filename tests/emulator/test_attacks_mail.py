"""Attacks on a sandbox's mail server from another tenant (issue 23, defect 3).

Each sandbox holding ``poste_email_toolathlon`` gets its own mail server on loopback (Dovecot
IMAP + aiosmtpd SMTP, see ``klavis_emulator/_mail.py``). Processes of other sandboxes reach
it: playwright's browser and the emails servers share the emulator's network, and the ports
show in ``/proc/net/tcp``. So every test here has two tenants (two API keys, each with a
sandbox of its own, on one emulator) and attacks with Python's own SMTP and IMAP clients on
loopback, where such a process stands. Promised (README, Safety): another tenant can deliver
mail into a sandbox but cannot read it.

A test skips only when Dovecot is missing (the project cannot install it), naming it.
"""

from __future__ import annotations

import base64
import imaplib
import json
import smtplib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from klavis_emulator import EmulatorServer
from klavis_emulator._mcp_setup import find_tools
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
    root: Path = host(emulator)._mail[box.id].root
    return root / "mail"


def _started(box: Sandbox) -> dict[str, Any]:
    """Start the sandbox's mail server (the data endpoints do) and give its auth_data."""
    answer = box.http.get(_url(box, "dump"))
    assert answer.status_code == 200, answer.text
    return _auth_data(box)


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
