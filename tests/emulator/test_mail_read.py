"""The dump's message reader (``klavis_emulator/_mail/read.py``) reads what Python's email
package reads from the whole message, the reader ``dump`` used before, for ordinary mail
of every shape: each message below is stored in a real mail server (Dovecot), dumped, and
compared with :func:`_whole_message`, that reader kept here as the reference.

Skips only when Dovecot is missing (the project cannot install it), naming it.
"""

from __future__ import annotations

import email
import email.policy
import imaplib
from collections.abc import Iterator
from email.message import EmailMessage
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from typing import Any

import pytest

from klavis_emulator import EmulatorServer
from tests.emulator.mcp_servers import hosting_emulator, sandbox_maker

SERVER = "poste_email_toolathlon"


def _whole_message(raw: bytes, uid: str, flags: set[str], folder: str) -> dict[str, Any]:
    """The reader ``dump`` had before: the whole message parsed by :mod:`email`."""
    message = email.message_from_bytes(raw, policy=email.policy.default)

    def header(name: str) -> str | None:
        value = message[name]
        return None if value is None else str(value)

    body_text = body_html = None
    attachments: list[dict[str, Any]] = []
    for part in message.walk():
        if part.is_multipart():
            continue
        payload = part.get_payload(decode=True)
        content = payload if isinstance(payload, bytes) else b""
        if part.is_attachment() or part.get_filename() is not None:
            attachments.append(
                {
                    "filename": part.get_filename() or "",
                    "content_type": part.get_content_type(),
                    "size": len(content),
                }
            )
            continue
        if part.get("Content-Type") is None and not content.strip():
            continue
        charset = part.get_content_charset() or "utf-8"
        try:
            text = content.decode(charset, "replace")
        except LookupError:
            text = content.decode("utf-8", "replace")
        if part.get_content_type() == "text/plain" and body_text is None:
            body_text = text
        elif part.get_content_type() == "text/html" and body_html is None:
            body_html = text
    return {
        "email_id": uid,
        "subject": header("Subject") or "",
        "from_addr": header("From") or "",
        "to_addr": header("To") or "",
        "cc_addr": header("Cc"),
        "bcc_addr": header("Bcc"),
        "date": header("Date"),
        "message_id": header("Message-ID"),
        "body_text": body_text,
        "body_html": body_html,
        "is_read": "\\Seen" in flags,
        "is_important": "\\Flagged" in flags,
        "folder": folder,
        "attachments": attachments or None,
    }


def _corpus() -> list[bytes]:
    messages: list[bytes] = []
    plain = EmailMessage()
    plain["Subject"], plain["From"], plain["To"] = "plain", "a@b.c", "agent@mcp.com"
    plain["Cc"], plain["Date"] = "x@y.z, Ann <ann@example.com>", "Wed, 10 Sep 2025 18:31:19 +0000"
    plain["Message-ID"] = "<p1@example.com>"
    plain.set_content("ascii body\nsecond line\n")
    messages.append(plain.as_bytes())

    utf8 = MIMEText("Grüße, 漢字 😀\r\nline", "plain", "utf-8")  # what the emails server sends
    utf8["Subject"] = "=?utf-8?q?Gr=C3=BC=C3=9Fe?= and more"
    utf8["From"] = '"Jörg Müller" <jorg@example.com>'
    utf8["To"] = "agent@mcp.com"
    messages.append(utf8.as_bytes())

    alternative = EmailMessage()
    alternative["Subject"], alternative["From"], alternative["To"] = "alt", "a@b.c", "d@e.f"
    alternative.set_content("quoted = printable é " + "long " * 40, cte="quoted-printable")
    alternative.add_alternative("<p>html é</p>", subtype="html")
    messages.append(alternative.as_bytes())

    mixed = MIMEMultipart()
    mixed["Subject"], mixed["From"], mixed["To"] = "mixed", "a@b.c", "d@e.f"
    mixed.attach(MIMEText("the text", "plain", "latin-1"))
    pdf = MIMEApplication(b"%PDF-1.4 " + bytes(range(256)) * 3, "pdf")
    pdf.add_header("Content-Disposition", "attachment", filename=("utf-8", "", "résumé.pdf"))
    mixed.attach(pdf)
    notes = MIMEText("note text\n", "plain")
    notes.add_header("Content-Disposition", "inline", filename="notes.txt")
    mixed.attach(notes)
    image = MIMEApplication(b"\x89PNG....", "octet-stream")
    del image["Content-Type"]
    image["Content-Type"] = "image/png"
    mixed.attach(image)  # inline, no file name: not an attachment, not a body
    named = MIMEApplication(b"data", "octet-stream")
    named.set_param("name", "=?utf-8?q?d=C3=A9j=C3=A0.bin?=")
    mixed.attach(named)
    forwarded = EmailMessage()
    forwarded["Subject"], forwarded["From"] = "inner", "z@y.x"
    forwarded.set_content("forwarded body")
    forwarded.add_attachment(b"inner", maintype="application", subtype="zip", filename="i.zip")
    wrapper = EmailMessage()
    wrapper.set_content(forwarded)  # message/rfc822
    del wrapper["MIME-Version"]
    mixed.attach(wrapper)
    messages.append(mixed.as_bytes())

    headers_only = b"Subject: no body\r\nFrom: a@b.c\r\nTo: d@e.f\r\n\r\n"
    messages.append(headers_only)

    odd = (
        b"Subject: odd\r\nFrom: a@b.c\r\nTo: d@e.f\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/mixed; boundary="X"\r\n\r\npreamble\r\n'
        b"--X\r\n\r\n\r\n"  # a part without headers nor body
        b"--X\r\nContent-Type: text/plain; charset=x-unknown\r\n\r\nunknown charset \xe9\r\n"
        b"--X\r\nContent-Type: text/html\r\nContent-Transfer-Encoding: x-custom\r\n\r\n<b>x</b>\r\n"
        b"--X\r\nContent-Type: application/octet-stream; name=raw.bin\r\n"
        b"Content-Transfer-Encoding: 8bit\r\n\r\n\xff\xfe bytes\r\n"
        b"--X--\r\nepilogue\r\n"
    )
    messages.append(odd)

    single_message = (
        b"Subject: a forwarded message alone\r\nFrom: a@b.c\r\nTo: d@e.f\r\n"
        b"Content-Type: message/rfc822\r\n\r\nSubject: inside\r\nFrom: q@r.s\r\n\r\ninner text\r\n"
    )
    messages.append(single_message)
    attached_top = (
        b"Subject: top attachment\r\nFrom: a@b.c\r\nTo: d@e.f\r\n"
        b'Content-Type: text/csv\r\nContent-Disposition: attachment; filename="t.csv"\r\n'
        b"Content-Transfer-Encoding: base64\r\n\r\nYSxiCjEsMgo=\r\n"
    )
    messages.append(attached_top)
    return messages


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorServer]:
    """An emulator hosting MCP servers (the session's confinement mode)."""
    with hosting_emulator("session", mcp_at_acquire=False) as server:
        yield server


def test_the_dump_reads_each_message_as_the_whole_message_parse_did(
    emulator: EmulatorServer,
) -> None:
    from klavis_emulator._mcp.setup import find_tools

    missing = find_tools().missing_outside(SERVER)
    with sandbox_maker(emulator, {SERVER: missing}) as make:
        box = make(SERVER)
        url = f"/local-sandbox/{SERVER}/{box.id}/dump"
        assert box.http.get(url).status_code == 200  # starts the mail server
        (item,) = box.http.get(f"/local-sandbox/{box.id}").json()["servers"]
        auth = item["auth_data"]
        corpus = _corpus()
        expected = []
        with imaplib.IMAP4(auth["imap_server"], auth["imap_port"]) as imap:
            imap.login(auth["email"], auth["password"])
            for number, raw in enumerate(corpus):
                flags = "(\\Seen)" if number % 2 else "()"
                assert imap.append("INBOX", flags, None, raw)[0] == "OK"
            imap.select("INBOX", readonly=True)
            for uid in range(1, len(corpus) + 1):
                _, answer = imap.uid("FETCH", str(uid), "(BODY.PEEK[])")
                raw = answer[0][1]
                seen = {"\\Seen"} if (uid - 1) % 2 else set()
                expected.append(_whole_message(raw, str(uid), seen, "INBOX"))
        dumped = box.http.get(url).json()["data"]["users"][auth["email"]]["emails"]
        assert len(dumped) == len(expected)
        for got, want in zip(dumped, expected, strict=True):
            assert got == want, want["subject"]


def test_bodies_decoded_in_slices_are_decoded_as_a_whole() -> None:
    # dump writes a body in slices (never the whole text in memory): the same text as
    # bytes.decode(charset, "replace") for every text codec of the standard library, bytes
    # that are not of the charset and sequences cut between slices included
    import encodings.aliases
    import random

    from klavis_emulator._mail.read import Text, _known_charset

    chance = random.Random(23)
    samples = [
        "é漢字😀 text \x01".encode() * 30 + b"\xff\xfe\xc3",
        bytes(chance.randrange(256) for _ in range(3000)),
        b"\xff\xfeh\x00i\x00",
    ]
    codecs_checked = 0
    for name in sorted(set(encodings.aliases.aliases.values())):
        if not _known_charset(name):
            assert name.endswith("_codec") or name in ("rot_13", "mbcs"), name
            continue
        codecs_checked += 1
        for data in samples:
            for size in (1, 5, 64):
                whole = data.decode(name, "replace")
                assert "".join(Text(data, name).decoded(size)) == whole, (name, size)
    assert codecs_checked > 80
    assert not _known_charset("x-unknown")
    assert not _known_charset("hex")  # bytes to bytes: not a charset
