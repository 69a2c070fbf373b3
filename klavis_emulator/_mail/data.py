"""The ``poste_email_toolathlon`` data endpoints on a sandbox's real mail server.

``initialize`` turns the contract's document (``users: {address: {emails: [...]}}``) into
mailboxes: each user becomes an account of the sandbox's
:class:`~klavis_emulator._mail.server.MailServer`
and each message is appended over IMAP (Python's :mod:`imaplib`) to its folder, with
``\\Seen`` for ``is_read`` and ``\\Flagged`` for ``is_important``, built with
:class:`email.message.EmailMessage`. ``dump`` reads every account's folders back over IMAP
and answers them in the same shape, so what the agent did with the MCP server (mail it sent,
read or flagged) shows.

Choices (the contract leaves them open):

- replace: ``initialize`` empties every mailbox of the mail server first (as the stored
  documents of the other servers are replaced whole); the accounts are then the sandbox's
  own, those an ``x-email-config`` header chose, and the users the document names;
- an account the document names that did not exist gets a random password (no other
  tenant can guess it; see :mod:`klavis_emulator._mail.server`); the sandbox's own account
  (``auth_data``) and chosen accounts keep theirs;
- the server assigns ``email_id`` (the message's IMAP UID in its folder; a given one is
  ignored); a header the document leaves out (``date``, ``message_id``...) stays out, as
  in mail the agent sends with the MCP server, so a dump loads back unchanged; an
  attachment has ``size`` zero bytes (the contract carries no content); bodies are stored
  base64-encoded so they come back byte for byte.

Bounds: a document's messages are built one at a time, twice (once to measure them all
before anything is written: each at most :data:`~klavis_emulator._mail.rules.MAX_MESSAGE_BYTES`,
in all at most :data:`~klavis_emulator._mail.rules.MAX_MAIL_BYTES`, else 422; once to append
them), so initialize holds one message at a time, never the document's mail. ``dump``
reads the messages a few bounded pieces at a time (:mod:`klavis_emulator._mail.read`:
Dovecot parses them) and writes the JSON answer to an unlinked temporary file as it goes
(long strings and bodies in slices), which the route then streams: the emulator holds
about one message's worth whatever the mailboxes hold (measured with
``scripts/bench --only hostile``, cases ``mail-dump-*``: at most 51 MiB of growth, the
answer to 76 MiB of mail took 307 MiB before). The file rather than a pipe from a thread:
the mail server's lock is held only while reading (a slow client holds a file, not the
sandbox's reset or release), and a failure of the mail server still answers an error
status, not a cut-off 200. The file weighs what the answer does: up to about six times
the mail read (a body of control characters, each ``\\u00XX`` in JSON; 171 MB for 39 MB
of such mail).

Hand-written on the standard library (:mod:`imaplib`, :mod:`email`): the mail server is
Dovecot, and these are the few IMAP commands a mail client uses (LOGIN, CREATE, APPEND,
LIST, SELECT, UID SEARCH, UID FETCH).
"""

from __future__ import annotations

import email.policy
import email.utils
import imaplib
import re
import tempfile
from collections.abc import Iterator, Mapping
from email.message import EmailMessage
from typing import IO, Any, Final

import pydantic_core

from .read import Imap, Text, check, quoted, read_folder
from .rules import MAX_MAIL_BYTES, MAX_MESSAGE_BYTES
from .server import LOOPBACK, MailServer

__all__ = [
    "MAX_ATTACHMENT_BYTES",
    "MailDocumentError",
    "document_problem",
    "folder_problem",
    "load_mail",
    "spool_mail_dump",
]

MAX_ATTACHMENT_BYTES: Final = MAX_MESSAGE_BYTES * 3 // 4
"""The largest ``size`` an attachment may have: base64-encoded, it fills the largest
message (:data:`~klavis_emulator._mail.rules.MAX_MESSAGE_BYTES`)."""

_STRING_SLICE: Final = 256 * 1024
"""``dump`` writes longer strings to JSON in slices of this many characters (bodies: of
this many bytes)."""

_FOLDER_BAD: Final = re.compile(r'[/\\*%"\x00-\x1f\x7f]')
_LIST_LINE: Final = re.compile(rb'\((?P<flags>[^)]*)\) (?:"[^"]*"|NIL) (?P<name>.+)')
_TIMEOUT: Final = 30.0


def folder_problem(folder: str) -> str | None:
    """Why ``folder`` cannot be a mailbox name (None: it can): empty, ``/``, ``\\``,
    ``..``, IMAP wildcards or quotes, control characters, a leading or trailing dot
    (Dovecot's hierarchy separator) or space, more than 200 characters."""
    if not folder.strip():
        return "a folder name must not be empty"
    if len(folder) > 200:
        return "a folder name has at most 200 characters"
    if ".." in folder or _FOLDER_BAD.search(folder):
        return (
            f"folder {folder!r} is not a mailbox name: no '/', '\\', '..', '*', '%', "
            "quotes or control characters"
        )
    if folder != folder.strip() or folder.startswith(".") or folder.endswith("."):
        return f"folder {folder!r} must not start or end with a dot or a space"
    return None


def _folder(email_data: Mapping[str, Any]) -> str:
    folder = email_data.get("folder") or "INBOX"
    return "INBOX" if folder.upper() == "INBOX" else str(folder)


def _message(data: Mapping[str, Any]) -> EmailMessage:
    """The message of one email of the document."""
    message = EmailMessage()
    message["Subject"] = data["subject"]
    message["From"] = data["from_addr"]
    message["To"] = data["to_addr"]
    for key, header in (
        ("cc_addr", "Cc"),
        ("bcc_addr", "Bcc"),
        ("date", "Date"),
        ("message_id", "Message-ID"),
    ):
        if data.get(key):
            message[header] = data[key]
    bodies = [
        (subtype, data[key])
        for key, subtype in (("body_text", "plain"), ("body_html", "html"))
        if data.get(key) is not None
    ]
    for index, (subtype, text) in enumerate(bodies):
        put = message.set_content if index == 0 else message.add_alternative
        put(
            text.encode("utf-8"),
            maintype="text",
            subtype=subtype,
            cte="base64",
            params={"charset": "utf-8"},
        )
    for attachment in data.get("attachments") or ():
        maintype, _, subtype = (attachment.get("content_type") or "").partition("/")
        if not maintype or not subtype:
            maintype, subtype = "application", "octet-stream"
        message.add_attachment(
            bytes(attachment.get("size") or 0),
            maintype=maintype,
            subtype=subtype,
            filename=attachment["filename"],
        )
    return message


def _login(mail: MailServer, address: str, password: str) -> imaplib.IMAP4:
    imap = Imap(LOOPBACK, mail.imap_port, timeout=_TIMEOUT)
    try:
        imap.login(address, password)
    except BaseException:
        imap.shutdown()
        raise
    return imap


class MailDocumentError(ValueError):
    """A message of the document cannot be made, or the document's mail passes the mail
    server's limits (said before anything is written)."""


def _emails(document: Mapping[str, Any]) -> Iterator[tuple[str, int, Mapping[str, Any]]]:
    """(address, index, email) of each message of a document, users' addresses lower case."""
    users: Mapping[str, Any] = document.get("users") or {}
    for address, user in users.items():
        for index, data in enumerate((user or {}).get("emails") or []):
            yield address.lower(), index, data


def _least_size(data: Mapping[str, Any]) -> int:
    """A lower bound of the bytes the message of ``data`` takes (its base64 parts), known
    before it is built: a document of 1 MiB can ask for gigabytes of attachments."""
    parts = [len((data.get(key) or "").encode("utf-8")) for key in ("body_text", "body_html")]
    parts += [int(item.get("size") or 0) for item in data.get("attachments") or ()]
    return sum(4 * -(-size // 3) for size in parts)


def _built(address: str, index: int, data: Mapping[str, Any]) -> tuple[str, str | None, bytes]:
    """(flags, internal date, bytes) of one message, within the size limit.

    Raises:
        MailDocumentError: it cannot be made, or it is larger than the limit.
    """
    where = f"users.{address}.emails[{index}]"
    if _least_size(data) > MAX_MESSAGE_BYTES:
        raise MailDocumentError(
            f"{where} is larger than the mail server takes ({MAX_MESSAGE_BYTES:,} bytes a "
            "message, bodies and attachments base64-encoded)"
        )
    try:
        raw = _message(data).as_bytes()
        when = _internal_date(data.get("date"))
    except (ValueError, TypeError, LookupError) as exc:
        raise MailDocumentError(f"{where} cannot be made into a message: {exc}") from exc
    if _stored_size(raw) > MAX_MESSAGE_BYTES:
        raise MailDocumentError(
            f"{where} makes a message of {_stored_size(raw):,} bytes, larger than the mail "
            f"server takes ({MAX_MESSAGE_BYTES:,} bytes a message)"
        )
    flags = " ".join(
        flag
        for flag, wanted in (("\\Seen", "is_read"), ("\\Flagged", "is_important"))
        if data.get(wanted)
    )
    return f"({flags})", when, raw


def _stored_size(raw: bytes) -> int:
    """The bytes of a message once stored (IMAP sends lines ending in CRLF)."""
    return len(raw) + raw.count(b"\n") - raw.count(b"\r\n")


def document_problem(document: Mapping[str, Any]) -> str | None:
    """Why the mail server cannot hold ``document`` (None: it can): a message that cannot
    be made or is larger than a message may be, or more mail than a sandbox may hold.
    Builds each message once, one at a time."""
    total = 0
    try:
        for address, index, data in _emails(document):
            total += _stored_size(_built(address, index, data)[2])
            if total > MAX_MAIL_BYTES:
                return (
                    f"the document's messages take more than a sandbox's mail may "
                    f"({MAX_MAIL_BYTES:,} bytes), at users.{address}.emails[{index}]"
                )
    except MailDocumentError as exc:
        return str(exc)
    return None


def load_mail(mail: MailServer, document: Mapping[str, Any]) -> int:
    """Replace the mail server's mailboxes with ``document`` (validated); the number of
    messages appended. Starts the server if it was not running.

    Raises:
        MailDocumentError: a message cannot be built, or the document passes the limits
            (the mailboxes are left as they were).
    """
    problem = document_problem(document)
    if problem is not None:
        raise MailDocumentError(problem)
    users: Mapping[str, Any] = document.get("users") or {}
    with mail.lock:
        passwords = mail.replace(address.lower() for address in users)
        count = 0
        imap: imaplib.IMAP4 | None = None
        known: set[str] = set()
        current = ""
        try:
            for address, index, data in _emails(document):
                if address != current:
                    if imap is not None:
                        imap.logout()
                    imap = _login(mail, address, passwords[address])
                    current = address
                    known = {n.upper() if n.upper() == "INBOX" else n for n in _list(imap)}
                assert imap is not None
                flags, when, raw = _built(address, index, data)
                folder = _folder(data)
                if folder not in known:
                    check(imap.create(quoted(folder)), f"CREATE {folder}")
                    imap.subscribe(quoted(folder))
                    known.add(folder)
                check(imap.append(quoted(folder), flags, when, raw), f"APPEND to {folder}")
                count += 1
        finally:
            if imap is not None:
                imap.logout()
    return count


def _internal_date(date: str | None) -> str | None:
    if not date:
        return None
    parsed = email.utils.parsedate_to_datetime(date)
    if parsed.tzinfo is None:
        return None
    return imaplib.Time2Internaldate(parsed)


def _list(imap: imaplib.IMAP4) -> Iterator[str]:
    """The selectable folders of the logged-in account (names as the server gives them)."""
    typ, lines = imap.list()
    check((typ, lines), "LIST")
    for line in lines:
        if not isinstance(line, bytes):
            continue
        found = _LIST_LINE.match(line)
        if found is None or b"\\noselect" in found["flags"].lower():
            continue
        name = found["name"].decode("utf-8", "replace")
        if name.startswith('"') and name.endswith('"'):
            name = name[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        yield name


def _folder_order(name: str) -> tuple[int, str]:
    return (0 if name == "INBOX" else 1, name)


def spool_mail_dump(mail: MailServer) -> IO[bytes]:
    """Every account's messages, all folders (INBOX first, then by name; by UID within
    one), in the shape ``initialize`` takes, as JSON (pydantic's, as FastAPI writes it) in
    an unlinked temporary file, read from its start. Starts the server if it was not
    running. One batch of messages is in memory at a time (see the module docstring)."""
    spool = tempfile.TemporaryFile()  # noqa: SIM115 - handed to the caller, open
    try:
        with mail.lock:
            mail.start()
            spool.write(b'{"users":{')
            for number, (address, password) in enumerate(mail.accounts().items()):
                spool.write(b"," if number else b"")
                spool.write(pydantic_core.to_json(address) + b':{"emails":[')
                imap = _login(mail, address, password)
                try:
                    first = True
                    for folder in sorted(_list(imap), key=_folder_order):
                        for message in read_folder(imap, folder):
                            spool.write(b"" if first else b",")
                            _write_json(spool, message)
                            first = False
                            del message  # before the next one is read
                finally:
                    imap.logout()
                spool.write(b"]}")
            spool.write(b"}}")
        spool.seek(0)
    except BaseException:
        spool.close()
        raise
    return spool


def _write_json(out: IO[bytes], value: Any) -> None:
    """Write ``value`` (JSON types, and :class:`~klavis_emulator._mail.read.Text` for a
    string) as :func:`pydantic_core.to_json` does, long strings in slices (a body of
    control characters grows sixfold in JSON)."""
    if isinstance(value, Text):
        out.write(b'"')
        for piece in value.decoded(_STRING_SLICE):
            out.write(pydantic_core.to_json(piece)[1:-1])
        out.write(b'"')
    elif isinstance(value, str) and len(value) > _STRING_SLICE:
        out.write(b'"')
        for start in range(0, len(value), _STRING_SLICE):
            out.write(pydantic_core.to_json(value[start : start + _STRING_SLICE])[1:-1])
        out.write(b'"')
    elif isinstance(value, dict):
        out.write(b"{")
        for number, (key, item) in enumerate(value.items()):
            out.write(b"," if number else b"")
            out.write(pydantic_core.to_json(key) + b":")
            _write_json(out, item)
        out.write(b"}")
    elif isinstance(value, list):
        out.write(b"[")
        for number, item in enumerate(value):
            out.write(b"," if number else b"")
            _write_json(out, item)
        out.write(b"]")
    else:
        out.write(pydantic_core.to_json(value))
