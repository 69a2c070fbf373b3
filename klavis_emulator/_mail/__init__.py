"""A real mail server per sandbox, for the ``poste_email_toolathlon`` MCP server.

==========  =========================================================================
``server``  the mail server of one sandbox: Dovecot (IMAP) and the SMTP half, its lifecycle
``smtp``    the SMTP half (aiosmtpd), run as ``python -m klavis_emulator._mail.smtp``
``rules``   its accounts, passwords and limits (who can read a sandbox's mail)
``data``    the data endpoints: a document into mailboxes (``initialize``) and back (``dump``)
``read``    reading a mailbox over IMAP in bounded memory
==========  =========================================================================

``smtp`` is not imported here: it is a program of its own.
"""

from __future__ import annotations

from .data import (
    MAX_ATTACHMENT_BYTES,
    MailDocumentError,
    document_problem,
    folder_problem,
    load_mail,
    spool_mail_dump,
)
from .rules import MAX_MAIL_BYTES, MAX_MESSAGE_BYTES, MailAccount, is_plain_address
from .server import MailError, MailServer, find_lda

__all__ = [
    "MAX_ATTACHMENT_BYTES",
    "MAX_MAIL_BYTES",
    "MAX_MESSAGE_BYTES",
    "MailAccount",
    "MailDocumentError",
    "MailError",
    "MailServer",
    "document_problem",
    "find_lda",
    "folder_problem",
    "is_plain_address",
    "load_mail",
    "spool_mail_dump",
]
