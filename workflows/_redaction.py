"""Signed URLs kept out of logs: :func:`redact_url`, and the filter on httpx's own logger.

A signed URL's query string is a password for one object: httpx logs every request's URL at
INFO (``HTTP Request: GET ...``), so the filter is put on the ``httpx`` logger when `workflows`
is imported, before any client exists. This module does not import httpx: ``import
workflows`` leaves it (and the rest of the HTTP layer, :mod:`workflows._transport`) to the
first request. Both functions here only meet URLs that httpx made or is about to use, so
httpx is already imported when they import it.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

__all__ = ["RedactSignedUrls", "install_log_redaction", "redact_url"]

_SECRET_QUERY = re.compile(r"(signature|sig|token|credential|key)=", re.IGNORECASE)


class RedactSignedUrls(logging.Filter):
    """Removes signed-URL query strings from httpx's own log records (``HTTP Request: ...``).

    Installed on the ``httpx`` logger when `workflows` is imported, so that turning on INFO
    logging never prints a signature that works as a password.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        # a record of the httpx logger comes from httpx's code: it is imported already
        import httpx

        if isinstance(record.args, tuple) and any(
            isinstance(a, httpx.URL) and _SECRET_QUERY.search(str(a.query, "ascii", "replace"))
            for a in record.args
        ):
            record.args = tuple(
                redact_url(a) if isinstance(a, httpx.URL) else a for a in record.args
            )
        return True


def install_log_redaction() -> None:
    """Add :class:`RedactSignedUrls` to the ``httpx`` logger once."""
    target = logging.getLogger("httpx")
    if not any(isinstance(f, RedactSignedUrls) for f in target.filters):
        target.addFilter(RedactSignedUrls())


def redact_url(url: httpx.URL | str) -> str:
    """A URL safe to print: scheme, host and path, with any query string (signatures) removed.

    >>> redact_url("https://storage.example/b/o.tgz?X-Goog-Signature=abc&expires=1")
    'https://storage.example/b/o.tgz?<redacted>'
    """
    import httpx  # the HTTP layer's callers have imported it (see the module's docstring)

    parsed = httpx.URL(str(url))
    base = str(parsed.copy_with(query=None, fragment=None))
    return base + ("?<redacted>" if parsed.query else "")
