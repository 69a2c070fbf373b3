"""The SMTP half of a sandbox's mail server: ``python -m klavis_emulator._mail.smtp``.

aiosmtpd (aio-libs) serves SMTP on a listening socket the emulator bound (port 0) and hands
over as an inherited file descriptor, so no port is ever guessed. It offers AUTH (PLAIN or
LOGIN; no TLS on loopback), checked against the accounts of the mail server's passwd-file,
which Dovecot's IMAP reads too, but does not require it: emails-mcp 0.1.12 never logs in
(it looks for AUTH among the server's features before its EHLO has listed any), so the
benchmark's Poste.io must take its mail without. It delivers each message to each recipient
with ``dovecot-lda``, Dovecot's local delivery agent: Dovecot itself writes the mailbox,
under the mail user and with its indexes, as a real MTA hands mail to Dovecot. Any recipient
address gets a mailbox (what an agent sends to other people stays in the sandbox's store);
only the accounts of the passwd-file can log in.

Limits (chosen and explained in :mod:`klavis_emulator._mail.server`): a message of at most
``MAX_MESSAGE_BYTES`` (aiosmtpd's ``data_size_limit``: advertised as ``SIZE``, a larger
``MAIL FROM ... SIZE=`` or message answered 552, and the data past the limit not kept), at
most ``MAX_RECIPIENTS`` recipients (the next RCPT answered 452 4.5.3), and no message whose
copies would take the sandbox's mail folder over ``MAX_MAIL_BYTES`` (552 5.2.2; measured
as ``du`` does before each delivery, deliveries one at a time, so two connections cannot
both pass the check). ``dovecot-lda -e`` reports Dovecot's own quota refusal (an account
over its quota, a message over ``quota_max_mail_size``) as exit code 77: 552 5.2.2 too.

Written here rather than configured: Dovecot (2.3) has no SMTP server that stores mail
itself, and the distribution's MTAs (Postfix, Exim) run as system daemons on fixed ports.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from .rules import MAX_MAIL_BYTES, MAX_MESSAGE_BYTES, MAX_RECIPIENTS, disk_usage

__all__ = ["main", "read_passwd"]

_LDA_TIMEOUT = 30.0
_EX_NOPERM = 77
"""dovecot-lda's exit code when it refuses a message (``-e``: quota, size)."""
_BLOCK = 4096
_COPY_OVERHEAD = 2 * _BLOCK
"""What a delivered copy takes beyond its bytes, at most: the headers dovecot-lda adds
(``Return-Path``, ``Delivered-To``), its last block, index records."""


def read_passwd(path: Path) -> dict[str, str]:
    """The accounts of a Dovecot passwd-file written by the emulator (``user:{PLAIN}pw``)."""
    accounts: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        user, _, rest = line.partition(":")
        password = rest.split(":", 1)[0]
        if user and password.startswith("{PLAIN}"):
            accounts[user.lower()] = password.removeprefix("{PLAIN}")
    return accounts


class _Authenticator:
    def __init__(self, passwd: Path) -> None:
        self.passwd = passwd

    def __call__(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
    ) -> AuthResult:
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        login = auth_data.login.decode("utf-8", "replace").lower()
        expected = read_passwd(self.passwd).get(login)
        given = auth_data.password.decode("utf-8", "replace")
        ok = expected is not None and hmac.compare_digest(expected, given)
        return AuthResult(success=ok, handled=False, auth_data=login if ok else None)


class _DeliverWithLda:
    """aiosmtpd handler: at most ``MAX_RECIPIENTS`` recipients, then one
    ``dovecot-lda -d <recipient>`` per recipient while the sandbox's mail has room."""

    def __init__(self, lda: str, config: str, mail: Path) -> None:
        self.lda = lda
        self.config = config
        self.mail = mail
        self._delivering = asyncio.Lock()

    async def handle_RCPT(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        if len(envelope.rcpt_tos) >= MAX_RECIPIENTS:
            return f"452 4.5.3 Error: too many recipients (at most {MAX_RECIPIENTS} a message)"
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        sender = envelope.mail_from or "MAILER-DAEMON"
        copy = -(-len(content) // _BLOCK) * _BLOCK + _COPY_OVERHEAD
        async with self._delivering:
            used = await asyncio.to_thread(disk_usage, self.mail)
            if used + copy * len(envelope.rcpt_tos) > MAX_MAIL_BYTES:
                return (
                    f"552 5.2.2 Error: mailbox full: this sandbox's mail may take "
                    f"{MAX_MAIL_BYTES:,} bytes, it takes {used:,} and this message's "
                    f"{len(envelope.rcpt_tos)} copies about {copy * len(envelope.rcpt_tos):,}"
                )
            for recipient in envelope.rcpt_tos:
                refusal = await self._deliver(recipient, sender, content)
                if refusal is not None:
                    return refusal
        return "250 2.0.0 Message accepted for delivery"

    async def _deliver(self, recipient: str, sender: str, content: bytes) -> str | None:
        """Deliver one copy; None, or the SMTP answer that refuses the message."""
        process = await asyncio.create_subprocess_exec(
            self.lda, "-e", "-c", self.config, "-d", recipient, "-f", sender,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            _, err = await asyncio.wait_for(process.communicate(content), _LDA_TIMEOUT)
        except TimeoutError:
            process.kill()
            await process.wait()
            return f"451 4.3.0 delivery to {recipient} timed out"
        if process.returncode == 0:
            return None
        reason = (err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["?"])[0]
        print(f"dovecot-lda failed for {recipient}: {reason}", file=sys.stderr)
        if process.returncode == _EX_NOPERM:  # Dovecot's quota: the mailbox is full
            return f"552 5.2.2 Error: delivery to {recipient} refused: {reason[:200]}"
        return f"451 4.3.0 delivery to {recipient} failed"


def main(argv: list[str] | None = None) -> None:
    """Serve SMTP on the inherited socket until SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m klavis_emulator._mail.smtp")
    parser.add_argument("--listen-fd", type=int, required=True)
    parser.add_argument("--passwd", type=Path, required=True)
    parser.add_argument("--lda", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--mail", type=Path, required=True, help="the mailboxes' folder")
    args = parser.parse_args(argv)
    listener = socket.socket(fileno=args.listen_fd)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    handler = _DeliverWithLda(args.lda, args.config, args.mail)
    authenticator = _Authenticator(args.passwd)

    def protocol() -> SMTP:
        return SMTP(
            handler,
            hostname="localhost",
            authenticator=authenticator,
            auth_required=False,
            auth_require_tls=False,
            data_size_limit=MAX_MESSAGE_BYTES,
            loop=loop,
        )

    server = loop.run_until_complete(loop.create_server(protocol, sock=listener))
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, loop.stop)
    try:
        loop.run_forever()
    finally:
        server.close()
        loop.close()


if __name__ == "__main__":
    main()
