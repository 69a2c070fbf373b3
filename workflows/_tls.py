"""One TLS context per HTTP library for every client the library builds.

Building an ``httpx`` (or ``httpx2``) client without one makes a fresh ``ssl.SSLContext`` and
loads the system's certificates into it: about 20 ms of CPU, even for a loopback ``http://``
URL where no TLS is used (measured: 20 ms of a 47 ms one-shot ``list_tools``). The API
clients, the probes of ``reap`` and every one-shot MCP call (``httpx`` under ``mcp`` 1.x,
``httpx2`` under 2.x) build clients, so they share one context, built by the library's own
``create_ssl_context()`` as its default would be. It is built again when ``SSL_CERT_FILE`` or
``SSL_CERT_DIR`` (which that function reads) changes.
"""

from __future__ import annotations

import functools
import importlib
import os
import ssl

__all__ = ["shared_ssl_context"]


def shared_ssl_context(library: str = "httpx") -> ssl.SSLContext:
    """The TLS context shared by the clients of ``library`` (``"httpx"`` or ``"httpx2"``).

    >>> shared_ssl_context() is shared_ssl_context("httpx")
    True
    """
    return _built(library, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.cache
def _built(library: str, cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    del cert_file, cert_dir  # the cache's key only: the library reads them itself
    context: ssl.SSLContext = importlib.import_module(library).create_ssl_context()
    return context
