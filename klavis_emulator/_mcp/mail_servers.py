"""The mail servers of the sandboxes whose hosted server has one (``poste_email_toolathlon``).

A sandbox holding such a server gets its own :class:`~klavis_emulator._mail.MailServer`:
chosen at acquire (its ports and account go into the server item's ``auth_data``), started
before the MCP server (or by the data endpoints, :meth:`SandboxMail.with_mail`), stopped on
release, emptied on reset. An ``x-email-config`` header picks another account, with an MCP
server process of its own (see :mod:`.host`).
"""

from __future__ import annotations

import dataclasses
import imaplib
import json
import threading
from collections.abc import Callable
from typing import Final, TypeVar

from starlette.types import Scope

from .._mail import MailAccount, MailDocumentError, MailError, MailServer, find_lda, load_mail
from .._state import EmulatorError, EmulatorState, SandboxRecord
from .backend import Refusal, live_record
from .catalog import CATALOG
from .launchers import DOVECOT
from .setup import McpToolPaths

__all__ = ["SandboxMail", "chosen_account"]

_T = TypeVar("_T")
_ACCOUNT_HEADER: Final = b"x-email-config"


class SandboxMail:
    """The sandboxes' mail servers, by sandbox id; safe from any thread.

    ``tools`` says where the programs are (Dovecot); ``stop_sandbox`` is called for a
    sandbox released while its mail server was being made (nothing else would stop it).
    """

    def __init__(
        self,
        state: EmulatorState,
        tools: Callable[[], McpToolPaths],
        stop_sandbox: Callable[[str], None],
    ) -> None:
        self.state = state
        self._tools = tools
        self._stop_sandbox = stop_sandbox
        self.servers: dict[str, MailServer] = {}
        self.lock = threading.Lock()
        self.closed = False  # after shutdown no mail server is made (nothing would stop it)

    def open(self) -> None:
        """Make mail servers again (the host serves anew)."""
        with self.lock:
            self.closed = False

    def pop(self, sandbox_id: str) -> MailServer | None:
        """Forget the sandbox's mail server and return it (to be stopped), if it has one."""
        with self.lock:
            return self.servers.pop(sandbox_id, None)

    def get(self, sandbox_id: str) -> MailServer | None:
        """The sandbox's mail server, if it has one."""
        with self.lock:
            return self.servers.get(sandbox_id)

    def provision(self, sandbox_id: str, *args: object, **kwargs: object) -> None:
        """Choose the mail server of a just-acquired sandbox that holds a server with one
        (its ports and account, in the server item's ``auth_data`` before acquire answers);
        its processes start with the sandbox's servers. Extra arguments are ignored
        (listener hook)."""
        record = live_record(self.state, sandbox_id)
        if record is not None:
            self.for_record(record)

    def for_record(self, record: SandboxRecord) -> MailServer | None:
        """The sandbox's mail server (made if needed, not started), or None when it holds
        no server with one or Dovecot is missing (the request answers 503 then)."""
        servers = [name for name in record.server_names if CATALOG[name].mail_server]
        if not servers:
            return None
        with self.lock:
            if self.closed:
                return None
            mail = self.servers.get(record.id)
            if mail is None:
                dovecot = self._tools().system.get(DOVECOT.key)
                lda = find_lda(dovecot) if dovecot is not None else None
                if dovecot is None or lda is None:
                    return None
                mail = MailServer(MailAccount.for_sandbox(record.test_account_email), dovecot, lda)
                self.servers[record.id] = mail
                made = True
            else:
                made = False
        if made and live_record(self.state, record.id) is None:
            # released after the caller looked: its stop() may have run before this server
            # was registered, so nothing else would ever stop it
            self._stop_sandbox(record.id)
            return None
        for server in servers:
            self.state.set_auth_data(record.id, server, mail.auth_data())
        return mail

    def start(self, sandbox_id: str, server: str, account: str) -> dict[str, object]:
        """Start the sandbox's mail server (blocking); the server's configuration: its
        ``auth_data``, with the ``account`` a request chose (JSON) if any."""
        record = live_record(self.state, sandbox_id)
        if record is None:
            raise Refusal(404, f"Local sandbox {sandbox_id!r} was released.")
        mail = self.for_record(record)
        if mail is None:
            raise Refusal(503, f"The mail server of the {server!r} server is not installed.")
        try:
            mail.start()
            self._load_stored(record, mail)
        except (MailError, MailDocumentError, imaplib.IMAP4.error, OSError) as exc:
            raise Refusal(
                503, f"The mail server of the {server!r} MCP server did not start: {exc}"
            ) from exc
        self.for_record(record)  # the IMAP port may have changed (taken meanwhile)
        config = mail.auth_data()
        if (
            account
        ):  # the header's password is checked, never given to Dovecot (see _mail/server.py)
            chosen = MailAccount(**json.loads(account))
            password = mail.login_password(chosen)
            config.update(email=chosen.email, password=password, name=chosen.name)
        return config

    def with_mail(
        self,
        sandbox_id: str,
        server: str,
        work: Callable[[MailServer], _T],
        *,
        load_stored: bool = True,
    ) -> _T:
        """Run ``work`` (blocking) on the sandbox's mail server, made if needed (``work``
        starts it: the data endpoints need it running even before the sandbox's servers
        started); the server item's ``auth_data`` follows its ports afterwards. First the
        stored document is loaded into mailboxes that do not hold it yet (``load_stored``,
        see :meth:`_load_stored`).

        Raises:
            MailError: Dovecot is missing (the message names its package), the mail server
                did not start, or the sandbox was released meanwhile.
        """
        record = live_record(self.state, sandbox_id)
        if record is None:
            raise MailError(f"Local sandbox {sandbox_id!r} was released.")
        mail = self.for_record(record)
        if mail is None:  # Dovecot missing (or the sandbox released right now)
            raise MailError(
                f"The emulator hosts the {server!r} server's mail server with Dovecot, which "
                f"is not installed: install the distribution's package, e.g. "
                f"`apt-get install {DOVECOT.apt}`."
            )
        try:
            if load_stored:
                self._load_stored(record, mail)
            return work(mail)
        finally:
            if live_record(self.state, sandbox_id) is not None:
                self.for_record(record)  # the IMAP port may have changed (taken meanwhile)

    def _load_stored(self, record: SandboxRecord, mail: MailServer) -> None:
        """Load the sandbox's stored mail document (the last ``initialize``, or its
        benchmark pack's) into mailboxes that do not hold it yet: made by this emulator
        process (mail does not outlive it) or emptied by a reset. Starts the server."""
        with mail.lock:
            if mail.loaded:
                return
            for server in record.server_names:
                if CATALOG[server].mail_server:
                    try:
                        document = self.state.dump_server_data(record.tenant, record.id, server)
                    except EmulatorError:  # released meanwhile
                        return
                    if document is not None:
                        load_mail(mail, document)
            mail.loaded = True

    def pids(self, sandbox_id: str) -> tuple[int, ...]:
        """The process ids of the sandbox's mail server (none when it has none running)."""
        with self.lock:
            mail = self.servers.get(sandbox_id)
        return () if mail is None else mail.pids

    def stop_all(self) -> None:
        with self.lock:
            self.closed = True
            servers = list(self.servers.values())
            self.servers.clear()
        for mail in servers:
            mail.stop()


def chosen_account(scope: Scope) -> str:
    """The account an ``x-email-config`` header chose, as JSON ("" without the header).

    As on the service, a client picks the mail account per request; each account gets its
    own emails server process (its account is fixed when it starts).
    """
    for name, value in scope.get("headers", []):
        if name.lower() == _ACCOUNT_HEADER:
            try:
                chosen = MailAccount.from_header(value.decode("latin-1"))
            except ValueError as exc:
                raise Refusal(400, str(exc)) from None
            return json.dumps(dataclasses.asdict(chosen))
    return ""
