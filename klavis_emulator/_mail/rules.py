"""The rules of a sandbox's mail: its accounts and their passwords, and its limits.

Used by the mail server (:mod:`.server`), its SMTP half (:mod:`.smtp`), the data
endpoints (:mod:`.data`, :mod:`.read`) and the contract's document checks
(:mod:`.._server_data`).

Who can read a sandbox's mail. Its SMTP port takes mail from any loopback process without
a login (the emails server never logs in), and processes of other sandboxes can reach it
(playwright's browser and the emails servers share the emulator's network; ports show in
``/proc/net/tcp``). So every password Dovecot and SMTP AUTH accept is random
(:mod:`secrets`, 144 bits) and nobody but the emulator chooses one:

- the sandbox's own account: made at acquire, given only in the sandbox's ``auth_data``
  (the tenant's API answers) and in its emails server's private configuration;
- an account an ``initialize`` document names: made then, never given out (it was the
  address, which anyone could guess); the data endpoints log in as it, the tenant reads its
  mail with ``dump``;
- an ``x-email-config`` header (Klavis's notebooks: base64 JSON ``email``, ``password``,
  ``name``) naming any account but the sandbox's own: the first such header for an
  address sets the password *that header must carry* (the emulator checks it; the MCP URL
  is the sandbox's capability, so only its holder can send one) and the emails server it
  starts logs in with the account's random password, made then for a new address, the
  seeded one for a named user. A later header with another password gets an emails server
  that logs in with that password, and fails to, as on a real server. A header naming the
  sandbox's own account logs in with the header's password: right only if it is
  ``auth_data``'s.

Rejected: giving Dovecot the first header's password (what the benchmark's own Poste.io
holds: its accounts were made with those passwords). Harnesses send the benchmark's
published passwords (Toolathlon's ``michelle_60R``): every sandbox running the same task
would then have the same password for the same account, and another tenant that knows
the benchmark could log in to this sandbox's IMAP with it. The cost of the choice: a
harness cannot log in to IMAP or SMTP itself with a header's password (it reads mail with
``dump``). Header
accounts and their passwords last as long as the sandbox (a reset keeps them, so that the
emails servers started for them still log in), named users until the next ``initialize``
or reset. The passwd-file holding the passwords is readable by the emulator's user and
Dovecot's only (0600, or 0640 with Dovecot's group when the emulator runs as root).

Limits (a real mail server's, so that a process on loopback cannot fill the host's
temporary folder nor make the emulator read more than it can hold):

- a message: at most :data:`MAX_MESSAGE_BYTES` (10,240,000, Postfix's default
  ``message_size_limit``; Toolathlon's mail is a few KiB a message): the SMTP server
  advertises it (``SIZE``) and answers 552 over it (aiosmtpd's ``data_size_limit``, which
  stops keeping the data past it), Dovecot refuses a larger APPEND
  (``quota_max_mail_size``) and ``initialize`` a larger message (422);
- recipients: at most :data:`MAX_RECIPIENTS` (100) a message, RFC 5321's minimum a server
  must accept (§4.5.3.1.8; Postfix allows 1,000, but every recipient is a copy here: any
  recipient address gets a mailbox); the next RCPT is answered 452 4.5.3 (§4.5.3.1.10);
- the sandbox's mail: at most :data:`MAX_MAIL_BYTES` (51,200,000, Postfix's default
  ``mailbox_size_limit``) of disk, as ``du`` counts it (blocks, every mailbox and index
  included): SMTP answers 552 5.2.2 to a message whose copies would pass it, and keeps
  nothing of it; ``initialize`` refuses a document whose messages pass it (422). An
  account's own IMAP writes (APPEND, COPY: only the sandbox's accounts can log in) are
  bounded by Dovecot's quota, the same size per account. Another tenant can still fill a
  sandbox's mail up to the limit (it can deliver mail, by design): the sandbox then
  refuses mail until a reset or until its agent deletes some.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "DEFAULT_ACCOUNT",
    "MAX_MAIL_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_RECIPIENTS",
    "MailAccount",
    "disk_usage",
    "is_plain_address",
    "new_password",
]

DEFAULT_ACCOUNT: Final = "agent@mcp.com"
"""The account of a sandbox acquired without ``test_account_email`` (Toolathlon's mail
accounts live in the ``mcp.com`` domain)."""

MAX_MESSAGE_BYTES: Final = 10_240_000
"""The largest message the mail server takes, by SMTP, IMAP or ``initialize`` (Postfix's
default ``message_size_limit``; see the module docstring)."""
MAX_RECIPIENTS: Final = 100
"""The most recipients of one SMTP message (RFC 5321's minimum, §4.5.3.1.8)."""
MAX_MAIL_BYTES: Final = 51_200_000
"""The most disk a sandbox's mail may use (Postfix's default ``mailbox_size_limit``), as
:func:`disk_usage` counts it; also Dovecot's quota of each account."""

_ADDRESS: Final = re.compile(r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]{1,253}")
_BAD_CHARS: Final = frozenset(":\r\n\0")


@dataclass(frozen=True)
class MailAccount:
    """The account the MCP server logs in as (IMAP and SMTP)."""

    email: str
    password: str
    name: str

    @classmethod
    def for_sandbox(cls, email: str | None) -> MailAccount:
        """The sandbox's account: ``email`` (its ``test_account_email``) when it is a plain
        address (``name@domain``), else the default; with a fresh random password."""
        address = (email or "").strip().lower()
        if not _ADDRESS.fullmatch(address):
            address = DEFAULT_ACCOUNT
        local = address.split("@", 1)[0]
        name = " ".join(part.capitalize() for part in local.replace("_", ".").split(".") if part)
        return cls(address, new_password(), name or local)

    @classmethod
    def from_header(cls, value: str) -> MailAccount:
        """The account of an ``x-email-config`` header: base64-encoded JSON with ``email``,
        ``password`` and ``name`` (how the service's clients choose the account per request).

        Raises:
            ValueError: the header is not that (the message says what is wrong).
        """
        try:
            data = json.loads(base64.b64decode(value.strip(), validate=True))
        except (ValueError, binascii.Error):
            raise ValueError(
                "x-email-config must be base64-encoded JSON such as "
                '{"email": "...", "password": "...", "name": "..."}'
            ) from None
        if not isinstance(data, dict):
            raise ValueError("x-email-config must hold a JSON object")
        email, password, name = (data.get(key, "") for key in ("email", "password", "name"))
        if not all(isinstance(part, str) for part in (email, password, name)):
            raise ValueError("x-email-config: email, password and name must be strings")
        if not _ADDRESS.fullmatch(email) or not password or _BAD_CHARS & set(password):
            raise ValueError(
                "x-email-config needs an email address (name@domain) and a non-empty password "
                "without ':' or line breaks"
            )
        return cls(email.lower(), password, name or email.split("@", 1)[0])

    def __repr__(self) -> str:
        return f"MailAccount(email={self.email!r})"


def new_password() -> str:
    """A password no one can guess: 144 random bits (24 URL-safe characters)."""
    return secrets.token_urlsafe(18)


def disk_usage(folder: Path) -> int:
    """The bytes of disk ``folder``'s tree takes, as ``du`` counts them (allocated blocks,
    folders included; links not followed); 0 when it does not exist. Maildir files are
    small and many: counting blocks, not sizes, bounds the disk a million tiny messages
    would take."""
    total = 0
    pending = [os.fspath(folder)]
    while pending:
        try:
            entries = os.scandir(pending.pop())
        except (FileNotFoundError, NotADirectoryError):
            continue
        with entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # Dovecot renamed or removed it meanwhile
                    continue
                total += info.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
    with contextlib.suppress(FileNotFoundError):
        total += os.lstat(folder).st_blocks * 512
    return total


def is_plain_address(text: str) -> bool:
    """Whether ``text`` is a plain address (``name@domain``), the only accounts made."""
    return _ADDRESS.fullmatch(text) is not None
