"""Whether a service the ledger recorded still answers, asked without the API key.

``reap`` talks with the key only to the service it is pointed at. Entries the ledger recorded
for another base URL (an emulator restarted on another port, the README's ``--port 0`` tip) are
only probed: one plain ``GET`` of the base URL, no ``Authorization`` header, no retries, so a
URL read from the ledger file never receives the key.

Only two answers prove a service gone, and only they let ``reap --forget`` drop its entries:

* the connection was **refused** (a host answered: nothing listens on that port), and
* the host name **does not exist** (``EAI_NONAME``/``EAI_NODATA``; a failed lookup on a machine
  that is offline is ``EAI_AGAIN``, which proves nothing).

Anything else (a timeout, an unreachable network, a TLS failure) says nothing about the service
and keeps its entries; so does any probe sent through a proxy (``HTTPS_PROXY`` and friends),
where a refusal is the proxy's. Any HTTP answer, an error status included, means it answers.
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from workflows._tls import shared_ssl_context

PROBE_SECONDS = 5.0
"""How long one probe may take (connect and answer)."""

_GONE_LOOKUPS = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


@dataclass(frozen=True)
class Reach:
    """What a probe of one base URL found."""

    answered: bool
    reason: str
    """``answers (HTTP 200)``, ``connection refused``, ``no such host``, or what failed."""
    gone: bool = False
    """The failure proves the service gone (refused, or no such host): entries may be forgotten."""


def _proxied(url: httpx.URL) -> bool:
    """Whether httpx would send a request for ``url`` through a proxy of the environment."""
    proxies = urllib.request.getproxies()
    if url.scheme not in proxies and "all" not in proxies:
        return False
    return not urllib.request.proxy_bypass(url.host)


def _cause(exc: BaseException) -> OSError | None:
    """The operating system's error under an httpx one (httpx chains httpcore's, which chains
    the socket's)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def probe(base_url: str, *, timeout: float = PROBE_SECONDS) -> Reach:
    """Whether ``base_url`` answers a plain ``GET`` (no key, no retries).

    >>> probe("http://127.0.0.1:9")  # doctest: +SKIP
    Reach(answered=False, reason='connection refused', gone=True)
    """
    try:
        url = httpx.URL(base_url)
        with httpx.Client(
            timeout=timeout,
            verify=shared_ssl_context(),
            headers={"User-Agent": "klavis-sandbox-workflows"},
        ) as client:
            response = client.get(url)
    except httpx.ConnectError as exc:
        os_error = _cause(exc)
        proxied = _proxied(url)
        if isinstance(os_error, ConnectionRefusedError):
            return Reach(False, "connection refused", gone=not proxied)
        if isinstance(os_error, socket.gaierror) and os_error.errno in _GONE_LOOKUPS:
            return Reach(False, "no such host", gone=not proxied)
        return Reach(False, f"{type(exc).__name__}: {exc}")
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
        return Reach(False, f"{type(exc).__name__}: {exc}")
    return Reach(True, f"answers (HTTP {response.status_code})")


def probe_all(base_urls: Iterable[str]) -> dict[str, Reach]:
    """:func:`probe` of each URL, at the same time."""
    urls = list(dict.fromkeys(base_urls))
    if not urls:
        return {}
    with ThreadPoolExecutor(max_workers=min(8, len(urls))) as pool:
        return dict(zip(urls, pool.map(probe, urls), strict=True))
