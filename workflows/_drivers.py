"""The drivers that carry out flows (:mod:`workflows._flows`): one sync, one async twin.

A driver owns the connections (the generated client over a pooled httpx client, and an
unauthenticated client for signed URLs) and performs each step a flow yields: a :class:`Call`
of a generated ``*_detailed`` function (transport failures translated, safe operations retried
with stamina, honouring ``Retry-After`` within an overall deadline), a signed-URL upload or
download (streamed, bounded, retried), blocking work (in a thread for the async driver), a
pause. :meth:`SyncDriver.run` feeds each result, or exception, back into the flow and closes the
flow however it ends. Status codes >= 400 are turned into our errors by the httpx event hooks of
:mod:`workflows._transport`, before the generated code sees them.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import IO, Any, TypeVar

import httpx
import stamina
from klavis_sandbox_client import AuthenticatedClient
from klavis_sandbox_client.types import Response

from ._config import Settings
from ._errors import ApiConnectionError, TransferError, TransferTimeoutError, UnsafeArchiveError
from ._flows import Blocking, Call, Download, Flow, Sleep, Step, Upload
from ._ownership import AcquireDidNotHappen
from ._progress import Progress
from ._retry_log import routed
from ._transport import (
    after_retries,
    connection_error,
    make_async_client,
    make_sync_client,
    redact_url,
    retry_backoff,
)

__all__ = ["AsyncDriver", "SyncDriver", "sync_driver_for"]

T = TypeVar("T")
CHUNK = 1024 * 1024
_PLACEHOLDER_TOKEN = "unused: workflows adds the Authorization header itself"  # noqa: S105


def _request_of(exc: httpx.TransportError) -> httpx.Request | None:
    try:
        return exc.request
    except RuntimeError:
        return None


def _transfer_error(
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


class _DownloadGuard:
    """What every download checks, once for both drivers (no I/O of its own).

    * With ``timeout`` (a number: the caller's ``timeout=``), the whole transfer ends at a
      deadline ``timeout`` seconds after it began, retries included
      (:class:`TransferTimeoutError`).
    * Without it (None), there is no deadline for the whole transfer, so a big workspace on a
      slow but working link always finishes, but a low-speed guard ends a download that
      received fewer than :data:`LOW_SPEED_BYTES` within any window of ``window`` seconds
      (the settings' timeout: 60 s by default) with :class:`TransferTimeoutError`: a store
      sending one byte every 2 s passed every per-read timeout and once kept ``dump()``
      running past 45 s with a timeout of 5. Windows start when the answer's headers arrive,
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
        return _transfer_connection_error("download from", self.url, exc)


def _transfer_connection_error(action: str, url: str, exc: httpx.TransportError) -> TransferError:
    return TransferError(f"{action} {redact_url(url)} failed: {type(exc).__name__}: {exc}")


_IDENTITY = {"Accept-Encoding": "identity"}


def _read_chunks(fileobj: IO[bytes], progress: Progress) -> Iterator[bytes]:
    while chunk := fileobj.read(CHUNK):
        progress(len(chunk))
        yield chunk


class _DriverBase:
    """What the sync and async connections share: settings, the generated client, retries."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.client = AuthenticatedClient(base_url=settings.base_url, token=_PLACEHOLDER_TOKEN)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.settings.base_url!r})"

    def _retrying(self, on: Callable[[Exception], bool | float]) -> Any:
        """A stamina retry context (sync or async iterable) bounded by the settings' attempts
        and deadline."""
        return routed(
            stamina.retry_context(
                on=on, attempts=self.settings.retry_attempts, timeout=self.settings.retry_deadline
            )
        )


def gave_up(exc: Exception, attempts: int, seconds: float) -> Exception:
    """The error to raise when retries ran out on ``exc``: a connection failure says what was
    tried (:func:`after_retries`), any other error is itself."""
    if isinstance(exc, ApiConnectionError):
        return after_retries(exc, attempts, seconds)
    return exc


def _upload_headers(size: int) -> dict[str, str]:
    return {"Content-Type": "application/gzip", "Content-Length": str(size)}


def _advance(flow: Flow[Any], value: Any, error: Exception | None) -> tuple[bool, Any]:
    """Feed a flow the last step's result (or exception): (False, next step) or (True, result)."""
    try:
        return False, (flow.throw(error) if error is not None else flow.send(value))
    except StopIteration as stop:
        return True, stop.value


class SyncDriver(_DriverBase):
    """A pooled sync connection: the generated client, an API httpx client, a transfer client."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._http = make_sync_client(settings)
        self._transfer_client: httpx.Client | None = None
        self.client.set_httpx_client(self._http)

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()
        if self._transfer_client is not None:
            self._transfer_client.close()

    @property
    def _transfer(self) -> httpx.Client:
        """The unauthenticated client for signed URLs, made on first use."""
        if self._transfer_client is None:
            self._transfer_client = make_sync_client(self.settings, authenticated=False)
        return self._transfer_client

    def _once(self, fn: Callable[..., Response[Any]], kwargs: dict[str, Any]) -> Response[Any]:
        try:
            return fn(client=self.client, **kwargs)
        except httpx.TransportError as exc:
            raise connection_error(exc, _request_of(exc)) from exc

    def call(
        self, fn: Callable[..., Response[Any]], *, retry: bool, **kwargs: Any
    ) -> Response[Any]:
        """Run a generated ``*_detailed`` function; retry it only when ``retry`` says it is safe."""
        started = time.monotonic()
        try:  # the common case, without the cost of a retry context
            return self._once(fn, kwargs)
        except Exception as exc:
            if not retry or retry_backoff(exc) is False:
                raise
            first: Exception | None = exc
        tries = 1
        try:
            for attempt in self._retrying(retry_backoff):
                with attempt:
                    tries = attempt.num
                    if first is not None:  # replay the first failure so stamina backs off from it
                        failure, first = first, None
                        raise failure
                    return self._once(fn, kwargs)
        except ApiConnectionError as exc:
            raise after_retries(exc, tries, time.monotonic() - started) from exc.__cause__
        raise AssertionError("unreachable")  # pragma: no cover

    def perform(self, step: Step) -> Any:
        """Carry out one step of a flow."""
        if isinstance(step, Call):
            return self.call(step.op.sync_detailed, retry=step.retry, **step.kwargs)
        if isinstance(step, Upload):
            return self.upload(step.url, step.fileobj, step.size, step.progress)
        if isinstance(step, Download):
            return self.download(
                step.url, step.sink, step.progress, max_bytes=step.max_bytes, timeout=step.timeout
            )
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            return None
        return step.fn(*step.args, **step.kwargs)

    def run(self, flow: Flow[T]) -> T:
        """Drive a flow to its end, feeding each step's result or exception back into it.

        The flow is closed however this ends: a step interrupted by a ``BaseException``
        (KeyboardInterrupt, SystemExit from SIGTERM) is not handed to the flow, which instead
        gets ``GeneratorExit`` at that step, so its temporary files and progress bars end now,
        not when the garbage collector finds it.
        """
        value: Any = None
        error: Exception | None = None
        try:
            while True:
                done, item = _advance(flow, value, error)
                if done:
                    return item  # type: ignore[no-any-return]
                value, error = None, None
                try:
                    value = self.perform(item)
                except Exception as exc:  # noqa: BLE001 - handed to the flow, which decides
                    error = exc
        finally:
            flow.close()

    def run_retrying(
        self, make_flow: Callable[[], Flow[T]], on: Callable[[Exception], bool | float]
    ) -> T:
        """Run a fresh flow until it succeeds or ``on`` says the failure is final.

        A flow raises :class:`~workflows._reconcile.AcquireDidNotHappen` to be run again; when
        the attempts run out, its cause is raised, saying how many attempts were made.
        """
        started, tries = time.monotonic(), 1
        try:
            for attempt in self._retrying(on):
                with attempt:
                    tries = attempt.num
                    return self.run(make_flow())
        except AcquireDidNotHappen as exc:
            raise gave_up(exc.cause, tries, time.monotonic() - started) from exc.cause.__cause__
        raise AssertionError("unreachable")  # pragma: no cover

    def upload(self, url: str, fileobj: IO[bytes], size: int, progress: Progress) -> None:
        """PUT a file to a signed URL, streamed from disk with a Content-Length; retried."""
        for attempt in self._retrying(retry_backoff):
            with attempt:
                fileobj.seek(0)
                headers = _upload_headers(size)
                try:
                    response = self._transfer.put(
                        url, content=_read_chunks(fileobj, progress), headers=headers
                    )
                except httpx.TransportError as exc:
                    raise _transfer_connection_error("upload to", url, exc) from exc
                if response.status_code >= 400:
                    raise _transfer_error("upload to", url, response)

    def download(
        self,
        url: str,
        sink: IO[bytes],
        progress: Progress,
        *,
        max_bytes: int | None = None,
        timeout: float | None = None,
    ) -> int:
        """GET a signed URL into ``sink`` (streamed, bounded memory); retried from the start.

        ``timeout``, when given, bounds the whole transfer, retries included. Without it there
        is no such deadline, but a download that receives fewer than 64 KiB within any window
        of the settings' timeout is ended (see :class:`_DownloadGuard`, which also has the
        other checks). Each read waits at most the settings' timeout, or, when the deadline
        was nearer as the attempt started, the time left then: this wait is fixed per attempt,
        and the deadline is checked after every read, so one read may end a little past it.
        Both end with :class:`TransferTimeoutError`.
        """
        guard = _DownloadGuard(url, timeout, max_bytes, window=self.settings.timeout)
        for attempt in self._retrying(retry_backoff):
            with attempt:
                sink.seek(0)
                sink.truncate()
                request_timeout = guard.request_timeout(self.settings.timeout)
                try:
                    with self._transfer.stream(
                        "GET", url, headers=_IDENTITY, timeout=request_timeout
                    ) as response:
                        if response.status_code >= 400:
                            body = b""
                            for chunk in response.iter_raw():
                                body += chunk
                                guard.arrived(len(chunk))  # a trickling error page ends too
                                if len(body) >= _ERROR_BODY_BYTES:
                                    break
                            raise _transfer_error("download from", url, response, body)
                        guard.start(response)
                        for chunk in response.iter_raw():
                            guard.feed(chunk)
                            sink.write(chunk)
                            progress(len(chunk))
                except httpx.TransportError as exc:
                    raise guard.transport_error(exc) from exc
                sink.seek(0)
                return guard.written
        raise AssertionError("unreachable")  # pragma: no cover


async def _in_thread(step: Blocking) -> Any:
    """Run a blocking step in a worker thread. A thread cannot be stopped: when the task is
    cancelled meanwhile, wait for the thread to end before passing the cancellation on, so
    that the flow, closed next, never removes a file the thread is still reading or writing."""
    work = asyncio.ensure_future(asyncio.to_thread(step.fn, *step.args, **step.kwargs))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        try:
            await asyncio.wait({work})
        finally:
            if work.done() and not work.cancelled():
                work.exception()  # retrieved: its failure does not matter any more
        raise


class AsyncDriver(_DriverBase):
    """The async twin of :class:`SyncDriver`; owned by one sandbox or one batch, closed with it."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._http = make_async_client(settings)
        self._transfer_client: httpx.AsyncClient | None = None
        self.client.set_async_httpx_client(self._http)

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()
        if self._transfer_client is not None:
            await self._transfer_client.aclose()

    @property
    def _transfer(self) -> httpx.AsyncClient:
        """The unauthenticated client for signed URLs, made on first use."""
        if self._transfer_client is None:
            self._transfer_client = make_async_client(self.settings, authenticated=False)
        return self._transfer_client

    async def _once(
        self, fn: Callable[..., Awaitable[Response[Any]]], kwargs: dict[str, Any]
    ) -> Response[Any]:
        try:
            return await fn(client=self.client, **kwargs)
        except httpx.TransportError as exc:
            raise connection_error(exc, _request_of(exc)) from exc

    async def call(
        self, fn: Callable[..., Awaitable[Response[Any]]], *, retry: bool, **kwargs: Any
    ) -> Response[Any]:
        """Await a generated ``asyncio_detailed`` function; retried only when ``retry`` is safe."""
        started = time.monotonic()
        try:  # the common case, without the cost of a retry context
            return await self._once(fn, kwargs)
        except Exception as exc:
            if not retry or retry_backoff(exc) is False:
                raise
            first: Exception | None = exc
        tries = 1
        try:
            async for attempt in self._retrying(retry_backoff):
                with attempt:
                    tries = attempt.num
                    if first is not None:  # replay the first failure so stamina backs off from it
                        failure, first = first, None
                        raise failure
                    return await self._once(fn, kwargs)
        except ApiConnectionError as exc:
            raise after_retries(exc, tries, time.monotonic() - started) from exc.__cause__
        raise AssertionError("unreachable")  # pragma: no cover

    async def perform(self, step: Step) -> Any:
        """Carry out one step of a flow; blocking work goes to a thread."""
        if isinstance(step, Call):
            return await self.call(step.op.asyncio_detailed, retry=step.retry, **step.kwargs)
        if isinstance(step, Upload):
            return await self.upload(step.url, step.fileobj, step.size, step.progress)
        if isinstance(step, Download):
            return await self.download(
                step.url, step.sink, step.progress, max_bytes=step.max_bytes, timeout=step.timeout
            )
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        return await _in_thread(step)

    async def run(self, flow: Flow[T]) -> T:
        """Drive a flow to its end, feeding each step's result or exception back into it; the
        flow is closed however this ends (cancellation included: see :meth:`SyncDriver.run`)."""
        value: Any = None
        error: Exception | None = None
        try:
            while True:
                done, item = _advance(flow, value, error)
                if done:
                    return item  # type: ignore[no-any-return]
                value, error = None, None
                try:
                    value = await self.perform(item)
                except Exception as exc:  # noqa: BLE001 - handed to the flow, which decides
                    error = exc
        finally:
            flow.close()

    async def run_retrying(
        self, make_flow: Callable[[], Flow[T]], on: Callable[[Exception], bool | float]
    ) -> T:
        """Run a fresh flow until it succeeds or ``on`` says the failure is final.

        A flow raises :class:`~workflows._reconcile.AcquireDidNotHappen` to be run again; when
        the attempts run out, its cause is raised, saying how many attempts were made.
        """
        started, tries = time.monotonic(), 1
        try:
            async for attempt in self._retrying(on):
                with attempt:
                    tries = attempt.num
                    return await self.run(make_flow())
        except AcquireDidNotHappen as exc:
            raise gave_up(exc.cause, tries, time.monotonic() - started) from exc.cause.__cause__
        raise AssertionError("unreachable")  # pragma: no cover

    async def upload(self, url: str, fileobj: IO[bytes], size: int, progress: Progress) -> None:
        """PUT a file to a signed URL, streamed from disk with a Content-Length; retried."""

        async def chunks() -> AsyncIterator[bytes]:
            for chunk in _read_chunks(fileobj, progress):
                yield chunk

        async for attempt in self._retrying(retry_backoff):
            with attempt:
                fileobj.seek(0)
                headers = _upload_headers(size)
                try:
                    response = await self._transfer.put(url, content=chunks(), headers=headers)
                except httpx.TransportError as exc:
                    raise _transfer_connection_error("upload to", url, exc) from exc
                if response.status_code >= 400:
                    raise _transfer_error("upload to", url, response)

    async def download(
        self,
        url: str,
        sink: IO[bytes],
        progress: Progress,
        *,
        max_bytes: int | None = None,
        timeout: float | None = None,
    ) -> int:
        """GET a signed URL into ``sink`` (streamed, bounded memory); retried from the start.

        ``timeout``, when given, bounds the whole transfer, retries included: each attempt is
        cancelled when the deadline comes. Without it, the low-speed guard of
        :class:`_DownloadGuard` applies, and each read waits at most the settings' timeout.
        """
        guard = _DownloadGuard(url, timeout, max_bytes, window=self.settings.timeout)
        async for attempt in self._retrying(retry_backoff):
            with attempt:
                sink.seek(0)
                sink.truncate()
                request_timeout = guard.request_timeout(self.settings.timeout)
                left = guard.remaining()  # None: no deadline, only reads and low speed bound it
                try:
                    await asyncio.wait_for(
                        self._download_once(guard, sink, progress, request_timeout), left
                    )
                except asyncio.TimeoutError:
                    if guard.deadline is None:  # pragma: no cover - wait_for(None) never times out
                        raise
                    raise guard.timed_out() from None
                except httpx.TransportError as exc:
                    raise guard.transport_error(exc) from exc
                sink.seek(0)
                return guard.written
        raise AssertionError("unreachable")  # pragma: no cover

    async def _download_once(
        self,
        guard: _DownloadGuard,
        sink: IO[bytes],
        progress: Progress,
        request_timeout: httpx.Timeout,
    ) -> None:
        url = guard.url
        async with self._transfer.stream(
            "GET", url, headers=_IDENTITY, timeout=request_timeout
        ) as response:
            if response.status_code >= 400:
                body = b""
                async for chunk in response.aiter_raw():
                    body += chunk
                    guard.arrived(len(chunk))  # a trickling error page ends too
                    if len(body) >= _ERROR_BODY_BYTES:
                        break
                raise _transfer_error("download from", url, response, body)
            guard.start(response)
            async for chunk in response.aiter_raw():
                guard.feed(chunk)
                sink.write(chunk)
                progress(len(chunk))


_pool: dict[Settings, SyncDriver] = {}
_pool_lock = threading.Lock()


def sync_driver_for(settings: Settings) -> SyncDriver:
    """The process-wide pooled :class:`SyncDriver` for these settings (thread-safe, reused)."""
    with _pool_lock:
        driver = _pool.get(settings)
        if driver is None:
            driver = _pool[settings] = SyncDriver(settings)
        return driver


def _close_pool() -> None:
    with _pool_lock:
        for driver in _pool.values():
            driver.close()
        _pool.clear()


atexit.register(_close_pool)
