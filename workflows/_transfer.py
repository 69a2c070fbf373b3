"""The signed-transfer policy, without I/O: what every upload and download to a signed URL checks.

The drivers (:mod:`workflows._drivers`) perform the transfers; what they accept is decided
here, once for both: the :class:`DownloadGuard` (a deadline for the whole transfer, or a
low-speed guard; the gzip magic; the byte cap; identity encoding), the errors a refused or
failed transfer raises, and the headers and chunks of an upload.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import IO

import httpx

from ._errors import TransferError, TransferTimeoutError, UnsafeArchiveError
from ._progress import Progress
from ._redaction import redact_url

__all__ = [
    "CHUNK",
    "IDENTITY",
    "LOW_SPEED_BYTES",
    "DownloadGuard",
    "read_chunks",
    "transfer_connection_error",
    "transfer_error",
    "upload_headers",
]

CHUNK = 1024 * 1024


def transfer_error(
    action: str, url: str, response: httpx.Response, body: bytes | None = None
) -> TransferError:
    """The error for a refused transfer; ``body``: the start of the answer, when only that was
    read (a download's error body is read 4 KiB at most)."""
    if body is None:
        body = response.content
    detail = body[:300].decode("utf-8", "replace").strip()
    return TransferError(
        f"{action} {redact_url(url)} failed with {response.status_code}"
        + (f": {detail}" if detail else ""),
        status_code=response.status_code,
    )


# Every signed download of this API is a tar.gz: a gzip member starts with these bytes (magic
# 1f 8b, method 8 = deflate). Checking them on arrival refuses an HTML error page, or 512 MiB
# of junk, after its first read instead of after downloading all of it.
_GZIP_MAGIC = b"\x1f\x8b\x08"
# At most this much of a download's error answer is read (for the message).
_ERROR_BODY_BYTES = 4096


# The low-speed guard of a download without ``timeout=`` (as curl's CURLOPT_LOW_SPEED_LIMIT and
# CURLOPT_LOW_SPEED_TIME): fewer than this many bytes within a window of the settings' timeout
# ends it. 64 KiB a minute is far below any working link, far above a trickle.
LOW_SPEED_BYTES = 64 * 1024


class DownloadGuard:
    """What every download checks, once for both drivers (no I/O of its own).

    * With ``timeout`` (a number: the caller's ``timeout=``), the whole transfer ends at a
      deadline ``timeout`` seconds after it began, retries included
      (:class:`TransferTimeoutError`).
    * Without it (None), there is no deadline for the whole transfer, so a big workspace on a
      slow but working link always finishes, but a low-speed guard ends a download that
      received fewer than :data:`LOW_SPEED_BYTES` within any window of ``window`` seconds
      (the settings' timeout: 60 s by default) with :class:`TransferTimeoutError` (a
      trickle passes every per-read timeout). Windows start when the answer's headers arrive,
      and each new one when the last ended; each read also waits at most the settings'
      timeout (a stall), an ordinary read timeout that is retried.
    * The body must start like gzip (:data:`_GZIP_MAGIC`).
    * At most ``max_bytes`` are accepted (a declared ``Content-Length`` over it is refused
      before reading; a body without one is stopped when it reaches it): the derivation of the
      bound from the limits is :meth:`workflows.ArchiveLimits.archive_bytes_cap`.
    * The body is taken as sent: ``Accept-Encoding: identity`` is asked and a
      ``Content-Encoding`` refused, since decoding one (gzip, br, zstd) in httpx would expand
      each read in memory without any bound.

    ``clock`` (seconds, monotonic) is there for tests.
    """

    def __init__(
        self,
        url: str,
        timeout: float | None,
        max_bytes: int | None,
        *,
        window: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.shown = redact_url(url)
        self.timeout = timeout
        self.window = window
        self.max_bytes = max_bytes
        self._clock = clock
        self.deadline = None if timeout is None else clock() + timeout
        self.clamped = False
        self.written = 0
        self._head = b""
        self._window_start = clock()
        self._window_bytes = 0
        self._error_body = b""

    def timed_out(self) -> TransferTimeoutError:
        assert self.timeout is not None
        return TransferTimeoutError(
            f"download from {self.shown} did not finish within timeout={self.timeout:g} s (it "
            "bounds the whole transfer; pass a larger timeout=, or none, for a big workspace)",
            timeout=self.timeout,
        )

    def too_slow(self) -> TransferTimeoutError:
        return TransferTimeoutError(
            f"download from {self.shown} received fewer than {LOW_SPEED_BYTES:,} bytes in "
            f"{self.window:g} s (the settings' timeout) after {self.written:,} bytes; stopped "
            "as too slow (pass timeout= to bound the whole transfer instead)",
            timeout=self.window,
        )

    def remaining(self) -> float | None:
        """Seconds left before the deadline (None: there is none);
        :class:`TransferTimeoutError` once none are."""
        if self.deadline is None:
            return None
        left = self.deadline - self._clock()
        if left <= 0:
            raise self.timed_out()
        return left

    def request_timeout(self, per_read: float) -> httpx.Timeout:
        """The timeout of one attempt's request, fixed when the attempt starts: each wait at
        most ``per_read``, or the time left before the deadline then, if less.

        When it is the deadline that limits it (``clamped``), an httpx timeout means the
        deadline passed; otherwise it is an ordinary read timeout, which is retried.
        """
        self._error_body = b""  # an attempt starts
        left = self.remaining()
        self.clamped = left is not None and left <= per_read
        each = per_read if left is None else min(per_read, left)
        return httpx.Timeout(each, connect=min(each, 15.0))

    def start(self, response: httpx.Response) -> None:
        """Check the answer's headers before reading its body."""
        self.written = 0
        self._head = b""
        self._window_start = self._clock()
        self._window_bytes = 0
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise TransferError(
                f"download from {self.shown} came with Content-Encoding: {encoding}, though the "
                "archive was asked for as is (identity); refused"
            )
        declared = response.headers.get("content-length", "")
        if self.max_bytes is not None and declared.isdigit() and int(declared) > self.max_bytes:
            raise UnsafeArchiveError(
                f"the download from {self.shown} declares {int(declared):,} bytes, over the "
                f"{self.max_bytes:,} an archive within the ArchiveLimits can take "
                "(ArchiveLimits.archive_bytes_cap); refused before reading it"
            )

    def arrived(self, n: int) -> None:
        """``n`` more bytes arrived (of the body, or of an error answer): end the transfer past
        its deadline, or when too slow."""
        now = self._clock()
        if self.deadline is not None:
            if now > self.deadline:
                raise self.timed_out()
            return
        self._window_bytes += n
        if now - self._window_start >= self.window:
            if self._window_bytes < LOW_SPEED_BYTES:
                raise self.too_slow()
            self._window_start = now
            self._window_bytes = 0

    def error_chunk(self, chunk: bytes) -> bool:
        """Keep the next bytes of an error answer (for :meth:`refused`'s message); True once
        enough are kept to stop reading."""
        self._error_body += chunk
        self.arrived(len(chunk))  # a trickling error page ends too
        return len(self._error_body) >= _ERROR_BODY_BYTES

    def refused(self, response: httpx.Response) -> TransferError:
        """The error for an answer >= 400, with the start of its body (see :meth:`error_chunk`)."""
        return transfer_error("download from", self.url, response, self._error_body)

    def feed(self, chunk: bytes) -> None:
        """Check the next bytes of the body (before they are written anywhere)."""
        self.arrived(len(chunk))
        if len(self._head) < len(_GZIP_MAGIC):
            self._head = (self._head + chunk[: len(_GZIP_MAGIC)])[: len(_GZIP_MAGIC)]
            if not _GZIP_MAGIC.startswith(self._head):
                raise UnsafeArchiveError(
                    f"the download from {self.shown} is not a tar.gz archive: it starts with "
                    f"{chunk[:16]!r}, not gzip's {_GZIP_MAGIC!r}; refused after its first "
                    f"{self.written + len(chunk):,} bytes"
                )
        self.written += len(chunk)
        if self.max_bytes is not None and self.written > self.max_bytes:
            raise UnsafeArchiveError(
                f"the download from {self.shown} is larger than {self.max_bytes:,} bytes, the "
                "most an archive within the ArchiveLimits can take "
                "(ArchiveLimits.archive_bytes_cap); stopped there"
            )

    def transport_error(self, exc: httpx.TransportError) -> TransferError:
        """Our error for an httpx failure of one attempt."""
        if (
            isinstance(exc, httpx.TimeoutException)
            and self.deadline is not None
            and (self.clamped or self._clock() >= self.deadline)
        ):
            return self.timed_out()
        return transfer_connection_error("download from", self.url, exc)


def transfer_connection_error(action: str, url: str, exc: httpx.TransportError) -> TransferError:
    return TransferError(f"{action} {redact_url(url)} failed: {type(exc).__name__}: {exc}")


IDENTITY = {"Accept-Encoding": "identity"}


def read_chunks(fileobj: IO[bytes], progress: Progress) -> Iterator[bytes]:
    while chunk := fileobj.read(CHUNK):
        progress(len(chunk))
        yield chunk


def upload_headers(size: int) -> dict[str, str]:
    """The headers of an upload of ``size`` bytes (the store needs its Content-Length)."""
    return {"Content-Type": "application/gzip", "Content-Length": str(size)}
