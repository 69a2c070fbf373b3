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
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

import httpx
import stamina
from klavis_sandbox_client import AuthenticatedClient
from klavis_sandbox_client.types import Response

from ._config import Settings
from ._errors import ApiConnectionError, retry_backoff
from ._ownership import AcquireDidNotHappen
from ._progress import Progress
from ._retry_log import routed
from ._steps import Act, Blocking, Call, Download, DownloadSink, Flow, Sleep, Step, Upload
from ._transfer import (
    IDENTITY,
    DownloadGuard,
    read_chunks,
    transfer_connection_error,
    transfer_error,
    upload_headers,
)
from ._transport import (
    after_retries,
    connection_error,
    make_async_client,
    make_sync_client,
)

__all__ = ["AsyncDriver", "SyncDriver", "sync_driver_for"]

T = TypeVar("T")
C = TypeVar("C", httpx.Client, httpx.AsyncClient)
_PLACEHOLDER_TOKEN = "unused: workflows adds the Authorization header itself"  # noqa: S105


def _request_of(exc: httpx.TransportError) -> httpx.Request | None:
    try:
        return exc.request
    except RuntimeError:
        return None


class _DriverBase(Generic[C]):
    """What the sync and async connections share: settings, the generated client, the API's
    httpx client and the transfer client (``C``: sync or async), retries."""

    def __init__(self, settings: Settings, make_client: Callable[..., C]) -> None:
        self.settings = settings
        self.client = AuthenticatedClient(base_url=settings.base_url, token=_PLACEHOLDER_TOKEN)
        self._make_client: Callable[..., C] = make_client
        self._http: C = make_client(settings)
        self._transfer_client: C | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.settings.base_url!r})"

    @property
    def _transfer(self) -> C:
        """The unauthenticated client for signed URLs, made on first use."""
        if self._transfer_client is None:
            self._transfer_client = self._make_client(self.settings, authenticated=False)
        return self._transfer_client

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


class _Driving:
    """A flow being driven: :meth:`next` gives the step to perform, after the last one's
    ``value`` (or ``error``, thrown in) was fed back; None once the flow returned ``result``.
    Leaving ``with`` closes the flow however the driving ended."""

    def __init__(self, flow: Flow[Any]) -> None:
        self.flow = flow
        self.value: Any = None
        self.error: Exception | None = None
        self.result: Any = None

    def next(self) -> Step | None:
        value, error, self.value, self.error = self.value, self.error, None, None
        try:
            return self.flow.throw(error) if error is not None else self.flow.send(value)
        except StopIteration as stop:
            self.result = stop.value
            return None

    def __enter__(self) -> _Driving:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.flow.close()


def drive(flow: Flow[T], perform: Callable[[Step], Any]) -> T:
    """Drive ``flow`` to its end, each step carried out by ``perform`` (see
    :meth:`SyncDriver.run`); a flow of :class:`Act` steps only (a pool's task flow) needs no
    connection: ``drive(flow, perform_act)``."""
    with _Driving(flow) as driving:
        while (step := driving.next()) is not None:
            try:
                driving.value = perform(step)
            except Exception as exc:  # noqa: BLE001 - handed to the flow, which decides
                driving.error = exc
        return driving.result  # type: ignore[no-any-return]


async def drive_async(flow: Flow[T], perform: Callable[[Step], Awaitable[Any]]) -> T:
    """:func:`drive`, each step awaited (``drive_async(flow, perform_act_async)``)."""
    with _Driving(flow) as driving:
        while (step := driving.next()) is not None:
            try:
                driving.value = await perform(step)
            except Exception as exc:  # noqa: BLE001 - handed to the flow, which decides
                driving.error = exc
        return driving.result  # type: ignore[no-any-return]


def perform_act(step: Step) -> Any:
    """Carry out an :class:`Act` step (the only kind a pool's task flow yields)."""
    if not isinstance(step, Act):
        raise TypeError(f"a flow of Act steps only was given a {type(step).__name__}")
    return step.fn(*step.args)


async def perform_act_async(step: Step) -> Any:
    """:func:`perform_act`, for coroutine hands."""
    if not isinstance(step, Act):
        raise TypeError(f"a flow of Act steps only was given a {type(step).__name__}")
    return await step.fn(*step.args)


class _Tries:
    """The account of one retried operation: when it started, the attempt under way, and a
    first failure (made before the retry context) to replay so stamina backs off from it."""

    def __init__(self, first: Exception | None = None) -> None:
        self.started = time.monotonic()
        self.first = first
        self.num = 1

    def begin(self, attempt: Any) -> None:
        """An attempt of the retry context begins: replay the first failure, if any."""
        self.num = attempt.num
        if self.first is not None:
            failure, self.first = self.first, None
            raise failure

    def gave_up(self, exc: Exception) -> Exception:
        """The error to raise when retries ran out on ``exc``: a connection failure says what
        was tried (:func:`after_retries`), any other error is itself."""
        return gave_up(exc, self.num, time.monotonic() - self.started)


class SyncDriver(_DriverBase[httpx.Client]):
    """A pooled sync connection: the generated client, an API httpx client, a transfer client."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, make_sync_client)
        self.client.set_httpx_client(self._http)

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()
        if self._transfer_client is not None:
            self._transfer_client.close()

    def _once(self, fn: Callable[..., Response[Any]], kwargs: dict[str, Any]) -> Response[Any]:
        try:
            return fn(client=self.client, **kwargs)
        except httpx.TransportError as exc:
            raise connection_error(exc, _request_of(exc)) from exc

    def call(
        self, fn: Callable[..., Response[Any]], *, retry: bool, **kwargs: Any
    ) -> Response[Any]:
        """Run a generated ``*_detailed`` function; retry it only when ``retry`` says it is safe."""
        try:  # the common case, without the cost of a retry context
            return self._once(fn, kwargs)
        except Exception as exc:
            if not retry or retry_backoff(exc) is False:
                raise
            tries = _Tries(exc)
        try:
            for attempt in self._retrying(retry_backoff):
                with attempt:
                    tries.begin(attempt)
                    return self._once(fn, kwargs)
        except ApiConnectionError as exc:
            raise tries.gave_up(exc) from exc.__cause__
        raise AssertionError("unreachable")  # pragma: no cover

    def perform(self, step: Step) -> Any:
        """Carry out one step of a flow."""
        if isinstance(step, Call):
            return self.call(step.op.sync_detailed, retry=step.retry, **step.kwargs)
        if isinstance(step, Upload):
            return self.upload(step)
        if isinstance(step, Download):
            return self.download(step)
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            return None
        if isinstance(step, Act):
            return step.fn(*step.args)
        return step.fn(*step.args, **step.kwargs)

    def run(self, flow: Flow[T]) -> T:
        """Drive a flow to its end, feeding each step's result or exception back into it.

        The flow is closed however this ends: a step interrupted by a ``BaseException``
        (KeyboardInterrupt, SystemExit from SIGTERM) is not handed to the flow, which instead
        gets ``GeneratorExit`` at that step, so its temporary files and progress bars end now,
        not when the garbage collector finds it.
        """
        return drive(flow, self.perform)

    def run_retrying(
        self, make_flow: Callable[[], Flow[T]], on: Callable[[Exception], bool | float]
    ) -> T:
        """Run a fresh flow until it succeeds or ``on`` says the failure is final.

        A flow raises :class:`~workflows._reconcile.AcquireDidNotHappen` to be run again; when
        the attempts run out, its cause is raised, saying how many attempts were made.
        """
        tries = _Tries()
        try:
            for attempt in self._retrying(on):
                with attempt:
                    tries.begin(attempt)
                    return self.run(make_flow())
        except AcquireDidNotHappen as exc:
            raise tries.gave_up(exc.cause) from exc.cause.__cause__
        raise AssertionError("unreachable")  # pragma: no cover

    def upload(self, step: Upload) -> None:
        """PUT a file to a signed URL, streamed from disk with a Content-Length; retried."""
        url, fileobj, size, progress = step.url, step.fileobj, step.size, step.progress
        for attempt in self._retrying(retry_backoff):
            with attempt:
                fileobj.seek(0)
                headers = upload_headers(size)
                try:
                    response = self._transfer.put(
                        url, content=read_chunks(fileobj, progress), headers=headers
                    )
                except httpx.TransportError as exc:
                    raise transfer_connection_error("upload to", url, exc) from exc
                if response.status_code >= 400:
                    raise transfer_error("upload to", url, response)

    def download(self, step: Download) -> int:
        """GET a signed URL into ``sink`` (streamed, bounded memory); retried from the start.

        ``timeout``, when given, bounds the whole transfer, retries included. Without it there
        is no such deadline, but a download that receives fewer than 64 KiB within any window
        of the settings' timeout is ended (see :class:`DownloadGuard`, which also has the
        other checks). Each read waits at most the settings' timeout, or, when the deadline
        was nearer as the attempt started, the time left then: this wait is fixed per attempt,
        and the deadline is checked after every read, so one read may end a little past it.
        Both end with :class:`TransferTimeoutError`.
        """
        url, sink, progress = step.url, step.sink, step.progress
        guard = DownloadGuard(url, step.timeout, step.max_bytes, window=self.settings.timeout)
        for attempt in self._retrying(retry_backoff):
            with attempt:
                sink.seek(0)
                sink.truncate()
                request_timeout = guard.request_timeout(self.settings.timeout)
                try:
                    with self._transfer.stream(
                        "GET", url, headers=IDENTITY, timeout=request_timeout
                    ) as response:
                        if response.status_code >= 400:
                            for chunk in response.iter_raw():
                                if guard.error_chunk(chunk):
                                    break
                            raise guard.refused(response)
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


class AsyncDriver(_DriverBase[httpx.AsyncClient]):
    """An asyncio connection (generated client, API and transfer httpx clients), owned by one
    sandbox, batch or pool, and closed with it."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, make_async_client)
        self.client.set_async_httpx_client(self._http)

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()
        if self._transfer_client is not None:
            await self._transfer_client.aclose()

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
        try:  # the common case, without the cost of a retry context
            return await self._once(fn, kwargs)
        except Exception as exc:
            if not retry or retry_backoff(exc) is False:
                raise
            tries = _Tries(exc)
        try:
            async for attempt in self._retrying(retry_backoff):
                with attempt:
                    tries.begin(attempt)
                    return await self._once(fn, kwargs)
        except ApiConnectionError as exc:
            raise tries.gave_up(exc) from exc.__cause__
        raise AssertionError("unreachable")  # pragma: no cover

    async def perform(self, step: Step) -> Any:
        """Carry out one step of a flow; blocking work goes to a thread."""
        if isinstance(step, Call):
            return await self.call(step.op.asyncio_detailed, retry=step.retry, **step.kwargs)
        if isinstance(step, Upload):
            return await self.upload(step)
        if isinstance(step, Download):
            return await self.download(step)
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        if isinstance(step, Act):
            return await step.fn(*step.args)
        return await _in_thread(step)

    async def run(self, flow: Flow[T]) -> T:
        """Drive a flow to its end, feeding each step's result or exception back into it; the
        flow is closed however this ends (cancellation included: see :meth:`SyncDriver.run`)."""
        return await drive_async(flow, self.perform)

    async def run_retrying(
        self, make_flow: Callable[[], Flow[T]], on: Callable[[Exception], bool | float]
    ) -> T:
        """:meth:`SyncDriver.run_retrying`, awaited: a fresh flow each time, until it succeeds
        or ``on`` says the failure is final."""
        tries = _Tries()
        try:
            async for attempt in self._retrying(on):
                with attempt:
                    tries.begin(attempt)
                    return await self.run(make_flow())
        except AcquireDidNotHappen as exc:
            raise tries.gave_up(exc.cause) from exc.cause.__cause__
        raise AssertionError("unreachable")  # pragma: no cover

    async def upload(self, step: Upload) -> None:
        """PUT a file to a signed URL, streamed from disk with a Content-Length; retried."""
        url, fileobj, size, progress = step.url, step.fileobj, step.size, step.progress

        async def chunks() -> AsyncIterator[bytes]:
            for chunk in read_chunks(fileobj, progress):
                yield chunk

        async for attempt in self._retrying(retry_backoff):
            with attempt:
                fileobj.seek(0)
                headers = upload_headers(size)
                try:
                    response = await self._transfer.put(url, content=chunks(), headers=headers)
                except httpx.TransportError as exc:
                    raise transfer_connection_error("upload to", url, exc) from exc
                if response.status_code >= 400:
                    raise transfer_error("upload to", url, response)

    async def download(self, step: Download) -> int:
        """GET a signed URL into ``sink`` (streamed, bounded memory); retried from the start.

        ``timeout``, when given, bounds the whole transfer, retries included: each attempt is
        cancelled when the deadline comes. Without it, the low-speed guard of
        :class:`DownloadGuard` applies, and each read waits at most the settings' timeout.
        """
        url, sink, progress = step.url, step.sink, step.progress
        guard = DownloadGuard(url, step.timeout, step.max_bytes, window=self.settings.timeout)
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
        guard: DownloadGuard,
        sink: DownloadSink,
        progress: Progress,
        request_timeout: httpx.Timeout,
    ) -> None:
        url = guard.url
        async with self._transfer.stream(
            "GET", url, headers=IDENTITY, timeout=request_timeout
        ) as response:
            if response.status_code >= 400:
                async for chunk in response.aiter_raw():
                    if guard.error_chunk(chunk):
                        break
                raise guard.refused(response)
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
