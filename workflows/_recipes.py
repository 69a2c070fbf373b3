"""Recipes on top of the sandboxes: seed from a dict, round-trip dumps, bulk acquire and release.

Each has an async twin named ``async_<name>``, documented in its own words with ``await`` in
its examples. Bulk operations run with bounded concurrency,
return one result per sandbox, and never let one failure abort the batch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from ._acquire import (
    AcquireOptions,
    ReleaseOptions,
    Unpack,
    check_keywords,
    resolve_acquire,
    resolve_connection,
)
from ._async_sandbox import AsyncLocalSandbox
from ._config import Settings
from ._drivers import AsyncDriver, sync_driver_for
from ._errors import InvalidInputError
from ._flows import Act, Blocking, Flow, list_flow, release_flow
from ._models import ResultList, ServerNames, check_sandbox_id
from ._ownership import Ledger, disown, install_exit_handlers, ledger_of
from ._progress import progress_bar
from ._sandbox import LocalSandbox
from ._seed import SourceFile, plan_mapping
from ._snapshot import Snapshot
from ._tracing import id_start, release_end, traced_flow

__all__ = [
    "AcquireResult",
    "AsyncSandboxBatch",
    "ReleaseResult",
    "RoundTripReport",
    "SandboxBatch",
    "async_bulk_acquire",
    "async_bulk_release",
    "async_round_trip_dump",
    "async_seed_from_dict",
    "bulk_acquire",
    "bulk_release",
    "round_trip_dump",
    "seed_from_dict",
]

S = TypeVar("S", LocalSandbox, AsyncLocalSandbox)


@dataclass(frozen=True)
class ReleaseResult:
    """The outcome of releasing one sandbox in a batch.

    ``ok`` is true when the sandbox is no longer held, including when it was already gone
    (``already_released``).
    """

    sandbox_id: str
    ok: bool
    error: Exception | None = None
    already_released: bool = False
    seconds: float = 0.0


@dataclass(frozen=True)
class AcquireResult(Generic[S]):
    """The outcome of one acquire in a batch: the sandbox, or the error."""

    sandbox: S | None
    error: Exception | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the sandbox was acquired."""
        return self.sandbox is not None

    @property
    def sandbox_id(self) -> str | None:
        """The id of the acquired sandbox, None when the acquire failed."""
        return self.sandbox.id if self.sandbox is not None else None


@dataclass(frozen=True)
class RoundTripReport:
    """What came back after seeding files and dumping the workspace.

    ``ok`` is true when every seeded file came back byte for byte; files the workspace held
    before (``extra``) do not make it false.
    """

    missing: tuple[str, ...]
    changed: tuple[str, ...]
    extra: tuple[str, ...]
    snapshot: Snapshot = field(repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """True when nothing seeded is missing or different."""
        return not self.missing and not self.changed

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return (
            f"RoundTripReport(ok={self.ok}, missing={self.missing!r}, changed={self.changed!r}, "
            f"extra={self.extra!r})"
        )

    def summary(self) -> str:
        """One line, e.g. ``ok: 3 files came back`` or ``1 missing, 0 changed, 2 extra``."""
        if self.ok:
            came_back = len(self.snapshot) - len(self.extra)
            extra = f", {len(self.extra)} extra" if self.extra else ""
            noun = "file" if came_back == 1 else "files"
            return f"ok: {came_back} {noun} came back{extra}"
        return f"{len(self.missing)} missing, {len(self.changed)} changed, {len(self.extra)} extra"


def compare_round_trip(seeded: Mapping[str, bytes], snapshot: Snapshot) -> RoundTripReport:
    """Compare what was seeded with what the dump holds."""
    expected = Snapshot.from_mapping(seeded)
    diff = expected.diff(snapshot, exact=True)  # a round trip returns every byte
    return RoundTripReport(
        missing=diff.removed, changed=diff.modified, extra=diff.added, snapshot=snapshot
    )


def seed_from_dict(sandbox: LocalSandbox, files: Mapping[str, str | bytes]) -> int:
    """Seed a sandbox's workspace from ``{relative path: text or bytes}``; returns the file count.

    >>> seed_from_dict(sb, {"README.md": "# hi", "data/raw.bin": b"\\x00\\x01"})  # doctest: +SKIP
    2
    """
    return sandbox.seed(files)


async def async_seed_from_dict(sandbox: AsyncLocalSandbox, files: Mapping[str, str | bytes]) -> int:
    """Seed a sandbox's workspace from ``{relative path: text or bytes}``; returns the file count.

    >>> await async_seed_from_dict(sb, {"README.md": "# hi"})  # doctest: +SKIP
    1
    """
    return await sandbox.seed(files)


def _contents(entries: Sequence[SourceFile]) -> dict[str, bytes]:
    return {e.name: e.data for e in entries if e.data is not None and not e.is_dir}


def round_trip_dump(sandbox: LocalSandbox, files: Mapping[str, str | bytes]) -> RoundTripReport:
    """Seed ``files``, dump the workspace, and report what did not come back intact.

    >>> report = round_trip_dump(sb, {"a.txt": "A"})  # doctest: +SKIP
    >>> report.ok, report.missing, report.changed, report.extra  # doctest: +SKIP
    (True, (), (), ())
    """
    entries = plan_mapping(files)  # checked and encoded once, for the seed and the comparison
    sandbox._upload(entries, None)
    return compare_round_trip(_contents(entries), sandbox.dump())


async def async_round_trip_dump(
    sandbox: AsyncLocalSandbox, files: Mapping[str, str | bytes]
) -> RoundTripReport:
    """Seed ``files``, dump the workspace, and report what did not come back intact.

    >>> report = await async_round_trip_dump(sb, {"a.txt": "A"})  # doctest: +SKIP
    >>> report.ok, report.missing, report.changed, report.extra  # doctest: +SKIP
    (True, (), (), ())
    """
    entries = plan_mapping(files)
    await sandbox._upload(entries, None)
    return compare_round_trip(_contents(entries), await sandbox.dump())


def _check_count(count: int, concurrency: int) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidInputError(f"count must be a positive whole number, got {count!r}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise InvalidInputError(f"concurrency must be a positive whole number, got {concurrency!r}")


class _Batch(ResultList[AcquireResult[S]]):
    def __init__(
        self,
        results: Sequence[AcquireResult[S]],
        *,
        concurrency: int = 16,
        progress: bool | None = None,
    ) -> None:
        self._results: list[AcquireResult[S]] = list(results)
        self.concurrency = concurrency
        self.progress = progress

    @property
    def sandboxes(self) -> list[S]:
        """The sandboxes that were acquired."""
        return [r.sandbox for r in self._results if r.sandbox is not None]

    @property
    def failures(self) -> list[AcquireResult[S]]:
        """The acquires that failed, with their errors."""
        return [r for r in self._results if r.sandbox is None]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.sandboxes)} acquired, {len(self.failures)} failed)"


class SandboxBatch(_Batch[LocalSandbox]):
    """The result of :func:`bulk_acquire`: one :class:`AcquireResult` per requested sandbox.

    Use it in ``with`` to release every acquired sandbox at the end.
    """

    def release(
        self, *, concurrency: int = 16, progress: bool | None = None
    ) -> list[ReleaseResult]:
        """Release every acquired sandbox (bounded concurrency); one result each."""
        return bulk_release(self.sandboxes, concurrency=concurrency, progress=progress)

    def __enter__(self) -> SandboxBatch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class AsyncSandboxBatch(_Batch[AsyncLocalSandbox]):
    """The result of :func:`async_bulk_acquire`; ``async with`` releases everything."""

    def __init__(
        self,
        results: Sequence[AcquireResult[AsyncLocalSandbox]],
        *,
        _driver: AsyncDriver | None = None,
        concurrency: int = 16,
        progress: bool | None = None,
    ) -> None:
        """Made by :func:`async_bulk_acquire` (``_driver``, private: the connection pool its
        sandboxes share, closed with the batch)."""
        super().__init__(results, concurrency=concurrency, progress=progress)
        self._driver = _driver

    async def release(
        self, *, concurrency: int | None = None, progress: bool | None = None
    ) -> list[ReleaseResult]:
        """Release every acquired sandbox (bounded concurrency) and close the connection pool
        the batch's sandboxes share; one result each."""
        try:
            return await async_bulk_release(
                self.sandboxes,
                concurrency=concurrency or self.concurrency,
                progress=self.progress if progress is None else progress,
            )
        finally:
            if self._driver is not None:
                await self._driver.aclose()

    async def __aenter__(self) -> AsyncSandboxBatch:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.release()


def bulk_acquire(
    server_names: ServerNames,
    count: int,
    *,
    concurrency: int = 16,
    **options: Unpack[AcquireOptions],
) -> SandboxBatch:
    """Acquire ``count`` sandboxes with the same servers, ``concurrency`` at a time.

    The keywords are :meth:`LocalSandbox.acquire`'s (:class:`~workflows.AcquireOptions`),
    checked once, before anything is sent. A failed acquire is reported in its result and
    does not stop the others::

        with bulk_acquire(["filesystem"], 20, ttl_seconds=900) as batch:
            for sb in batch.sandboxes:
                sb.seed({"task.txt": "..."})
        # every acquired sandbox is released here
    """
    wanted = resolve_acquire("bulk_acquire", server_names, options)
    _check_count(count, concurrency)
    each = wanted.options()
    install_exit_handlers()  # the acquires run in worker threads, which cannot install SIGTERM's

    def one(_: int) -> AcquireResult[LocalSandbox]:
        started = time.perf_counter()
        try:
            sandbox = LocalSandbox.acquire(server_names, **each)
        except Exception as exc:  # noqa: BLE001 - reported per item
            return AcquireResult(None, exc, time.perf_counter() - started)
        return AcquireResult(sandbox, None, time.perf_counter() - started)

    progress = wanted.progress
    with progress_bar(total=count, desc="acquiring", unit="sandbox", progress=progress) as update:
        results = []
        with ThreadPoolExecutor(max_workers=min(concurrency, count)) as pool:
            for result in pool.map(one, range(count)):
                update(1)
                results.append(result)
    return SandboxBatch(results, concurrency=concurrency, progress=progress)


async def async_bulk_acquire(
    server_names: ServerNames,
    count: int,
    *,
    concurrency: int = 16,
    **options: Unpack[AcquireOptions],
) -> AsyncSandboxBatch:
    """Acquire ``count`` sandboxes with the same servers, ``concurrency`` at a time; their
    connections are one pool, closed with the batch.

    The keywords are :meth:`AsyncLocalSandbox.acquire`'s (:class:`~workflows.AcquireOptions`),
    checked once, before anything is sent. A failed acquire is reported in its result and
    does not stop the others::

        async with await async_bulk_acquire(["filesystem"], 20, ttl_seconds=900) as batch:
            for sb in batch.sandboxes:
                await sb.seed({"task.txt": "..."})
        # every acquired sandbox is released here
    """
    wanted = resolve_acquire("async_bulk_acquire", server_names, options)
    _check_count(count, concurrency)
    each = wanted.options()
    gate = asyncio.Semaphore(concurrency)
    driver = AsyncDriver(wanted.settings)  # one connection pool for the whole batch

    progress = wanted.progress
    with progress_bar(total=count, desc="acquiring", unit="sandbox", progress=progress) as update:

        async def one() -> AcquireResult[AsyncLocalSandbox]:
            async with gate:
                started = time.perf_counter()
                try:
                    sandbox = await AsyncLocalSandbox.acquire(server_names, _driver=driver, **each)
                except Exception as exc:  # noqa: BLE001 - reported per item
                    result: AcquireResult[AsyncLocalSandbox] = AcquireResult(
                        None, exc, time.perf_counter() - started
                    )
                else:
                    result = AcquireResult(sandbox, None, time.perf_counter() - started)
                update(1)
                return result

        results = await asyncio.gather(*(one() for _ in range(count)))
    return AsyncSandboxBatch(results, _driver=driver, concurrency=concurrency, progress=progress)


def _target_ids(targets: Iterable[Any], face: type[LocalSandbox | AsyncLocalSandbox]) -> list[Any]:
    items = list(targets)
    name = "bulk_release" if face is LocalSandbox else "async_bulk_release"
    for item in items:
        if isinstance(item, str):
            check_sandbox_id(item)
        elif not isinstance(item, face):
            raise InvalidInputError(
                f"{name} takes sandbox ids or {face.__name__} objects, got {type(item).__name__}"
            )
    return items


def _release_settings(targets: list[Any] | None, options: ReleaseOptions) -> Settings | None:
    """The settings for releasing ids (or listing), None when every target is a sandbox.

    A sandbox is released with its own settings, the key it was acquired with: resolving them
    again from the environment would fail (or pick another account) where that key was passed
    as an argument, and leave every sandbox of a batch acquired. Ids without an explicit key
    use the first given sandbox's settings, else the usual resolution.
    """
    if targets is not None and all(not isinstance(t, str) for t in targets):
        return None
    if options.get("api_key") is None and options.get("base_url") is None:
        first = next((t for t in targets or () if not isinstance(t, str)), None)
        if first is not None:
            return cast("Settings", first.settings)
    return resolve_connection("bulk_release", options, ReleaseOptions)


def _release_plan(
    where: str,
    sandbox_ids: Iterable[Any] | None,
    face: type[LocalSandbox | AsyncLocalSandbox],
    concurrency: int,
    options: ReleaseOptions,
) -> tuple[list[Any] | None, Settings | None, Ledger | None]:
    """A bulk release's arguments, checked: its targets (None: every sandbox listed), the
    settings for ids (None when every target is a sandbox) and the ledger."""
    check_keywords(where, options, ReleaseOptions)
    _check_count(1, concurrency)
    targets = None if sandbox_ids is None else _target_ids(sandbox_ids, face)
    return targets, _release_settings(targets, options), ledger_of(options.get("ledger", True))


@traced_flow("klavis.release", id_start, release_end)
def _release_id(sandbox_id: str) -> Flow[bool]:
    """Release a sandbox known by its id only (its span has no server names)."""
    return release_flow(sandbox_id)


def _release_one(
    target: Any,
    settings: Settings | None,
    ledger: Ledger | None,
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> Flow[ReleaseResult]:
    """Release one sandbox of a bulk release, a sandbox object (its own ``release()``) or an id
    (released, then forgotten by this user's ledger); its failure is its result's."""
    started = clock()
    sandbox_id = target if isinstance(target, str) else target.id
    try:
        if isinstance(target, str):
            assert settings is not None
            gone = not (yield from _release_id(sandbox_id))
            yield Blocking(disown, (sandbox_id, settings, ledger))
        else:
            gone = not (yield Act(target.release))
    except Exception as exc:  # noqa: BLE001 - reported per item
        return ReleaseResult(sandbox_id, False, exc, seconds=clock() - started)
    return ReleaseResult(sandbox_id, True, None, already_released=gone, seconds=clock() - started)


def bulk_release(
    sandbox_ids: Iterable[str | LocalSandbox] | None = None,
    *,
    concurrency: int = 16,
    **options: Unpack[ReleaseOptions],
) -> list[ReleaseResult]:
    """Release many sandboxes, ``concurrency`` at a time; ``None`` releases every sandbox the
    key lists. Returns one :class:`ReleaseResult` per sandbox, in the order given.

    >>> results = bulk_release()  # doctest: +SKIP
    >>> [r.sandbox_id for r in results if not r.ok]  # doctest: +SKIP
    []
    """
    given, settings, book = _release_plan(
        "bulk_release", sandbox_ids, LocalSandbox, concurrency, options
    )
    driver = sync_driver_for(settings) if settings is not None else None
    progress = options.get("progress")
    if given is None:
        assert driver is not None
        targets: list[Any] = [s.id for s in driver.run(list_flow())]
    else:
        targets = given
    if not targets:
        return []

    def one(target: Any) -> ReleaseResult:
        runner = target._driver if isinstance(target, LocalSandbox) else driver
        assert runner is not None  # ids come with settings, hence a driver
        return runner.run(_release_one(target, settings, book))

    with progress_bar(
        total=len(targets), desc="releasing", unit="sandbox", progress=progress
    ) as update:
        results = []
        with ThreadPoolExecutor(max_workers=min(concurrency, len(targets))) as pool:
            for result in pool.map(one, targets):
                update(1)
                results.append(result)
    return results


async def async_bulk_release(
    sandbox_ids: Iterable[str | AsyncLocalSandbox] | None = None,
    *,
    concurrency: int = 16,
    **options: Unpack[ReleaseOptions],
) -> list[ReleaseResult]:
    """Release many sandboxes, ``concurrency`` at a time; ``None`` releases every sandbox the
    key lists. Returns one :class:`ReleaseResult` per sandbox, in the order given.

    >>> results = await async_bulk_release()  # doctest: +SKIP
    >>> [r.sandbox_id for r in results if not r.ok]  # doctest: +SKIP
    []
    """
    targets, settings, book = _release_plan(
        "async_bulk_release", sandbox_ids, AsyncLocalSandbox, concurrency, options
    )
    progress = options.get("progress")
    driver = AsyncDriver(settings) if settings is not None else None
    gate = asyncio.Semaphore(concurrency)
    try:
        if targets is None:
            assert driver is not None
            targets = [s.id for s in await driver.run(list_flow())]
        with progress_bar(
            total=len(targets), desc="releasing", unit="sandbox", progress=progress
        ) as update:

            async def one(target: Any) -> ReleaseResult:
                runner = target._driver if isinstance(target, AsyncLocalSandbox) else driver
                assert runner is not None  # ids come with settings, hence a driver
                async with gate:
                    result: ReleaseResult = await runner.run(_release_one(target, settings, book))
                    update(1)
                    return result

            return list(await asyncio.gather(*(one(t) for t in targets)))
    finally:
        if driver is not None:
            await driver.aclose()
