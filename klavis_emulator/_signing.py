"""HMAC-signed URLs for the emulator's own storage targets (``/_storage/...``).

A signature binds the HTTP method, the object key and the expiry time, so a URL signed
for ``PUT`` cannot be used to ``GET``, cannot be pointed at another object, and cannot
have its expiry extended.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from ._clock import Clock

__all__ = ["SignatureError", "SignedUrl", "UrlSigner", "is_valid_object_key"]

# Object keys are built by the emulator itself: path segments of safe characters only.
_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$")
_SIGNATURE_RE = re.compile(r"^[0-9a-f]{64}$")


class SignatureError(Exception):
    """A signed URL was missing its signature, tampered with, or expired."""


@dataclass(frozen=True)
class SignedUrl:
    """A signed URL and the minutes it stays valid."""

    url: str
    expires_at: int
    expires_in_minutes: int


def is_valid_object_key(key: str) -> bool:
    """Whether ``key`` is a well-formed object key (no empty, dot or dot-dot segments)."""
    return len(key) <= 512 and _KEY_RE.fullmatch(key) is not None and ".." not in key


class UrlSigner:
    """Signs and verifies storage URLs with a per-emulator secret (HMAC-SHA256)."""

    def __init__(self, secret: bytes, clock: Clock) -> None:
        if len(secret) < 16:
            raise ValueError("the signing secret must be at least 16 bytes long")
        self._secret = secret
        self._clock = clock

    def __repr__(self) -> str:
        return "UrlSigner(secret=<hidden>)"

    def signature(self, method: str, key: str, expires: int) -> str:
        """Return the hex HMAC-SHA256 of ``method``, ``key`` and ``expires``."""
        message = f"{method.upper()}\n{key}\n{expires}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def sign(self, *, base_url: str, route: str, method: str, key: str, minutes: int) -> SignedUrl:
        """Return ``<base_url><route>/<key>?expires=..&signature=..``, valid for ``minutes``."""
        if not is_valid_object_key(key):
            raise ValueError(f"not a valid object key: {key!r}")
        expires = math.ceil(self._clock.time()) + minutes * 60
        query = urlencode({"expires": expires, "signature": self.signature(method, key, expires)})
        url = f"{base_url.rstrip('/')}{route}/{quote(key)}?{query}"
        return SignedUrl(url=url, expires_at=expires, expires_in_minutes=minutes)

    def verify(self, *, method: str, key: str, expires: str | None, signature: str | None) -> None:
        """Raise :class:`SignatureError` unless the signature is valid and not expired."""
        if not expires or not signature:
            raise SignatureError(
                "This storage URL is not signed: the 'expires' and 'signature' query "
                "parameters are required. Ask the API for a new signed URL."
            )
        if not expires.isdigit() or len(expires) > 12 or not _SIGNATURE_RE.fullmatch(signature):
            raise SignatureError("This storage URL's signature is malformed.")
        if not is_valid_object_key(key):
            raise SignatureError("This storage URL does not name a valid object.")
        expected = self.signature(method, key, int(expires))
        if not hmac.compare_digest(expected, signature):
            raise SignatureError(
                "The signature of this storage URL does not match: the URL was altered, or it "
                "is used with another HTTP method or object than the one it was issued for."
            )
        if int(expires) <= self._clock.time():
            raise SignatureError(
                "This signed storage URL has expired. Ask the API for a new signed URL."
            )
