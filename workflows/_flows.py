"""Every multi-step operation, written once, without I/O (the sans-I/O style of h11).

A flow is a generator that yields *steps* (an API call, a signed-URL transfer, a blocking
function to run) and receives each step's result, or has its exception thrown in. The sync
driver (:meth:`workflows._api.SyncApi.run`) performs steps directly; the async driver awaits
them and runs blocking work in a thread. So ``LocalSandbox`` and ``AsyncLocalSandbox`` share
all of their logic and differ only in ``await``.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from klavis_sandbox_client.types import Response

from . import _reconcile
from ._archive import ArchiveLimits, read_snapshot
from ._common import (
    ArchiveTarget,
    body_dict,
    info_from,
    signed_url_from,
)
from ._config import Settings
from ._errors import (
    AcquireAmbiguousError,
    ApiError,
    InvalidInputError,
    NotFoundError,
    TransferError,
)
from ._extract import Destination, prepare_destination
from ._http import retry_backoff
from ._ledger import Ledger, LedgerEntry
from ._models import AcquireRequest, SandboxInfo, sandbox_info_from_dict
from ._pack import pack_to_tempfile
from ._paths import check_destination
from ._progress import progress_bar
from ._seed_plan import SourceFile
from ._snapshot import Snapshot

__all__ = [
    "Blocking",
    "Call",
    "Download",
    "Flow",
    "Step",
    "Upload",
    "acquire_attempt",
    "check_timeout",
    "dump_to_target",
    "download_flow",
    "dump_flow",
    "dump_to_flow",
    "get_flow",
    "list_flow",
    "release_flow",
    "retry_acquire",
    "simple_call",
    "upload_flow",
]

log = logging.getLogger("workflows")
T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """Call the generated operation ``op`` (a module of ``klavis_sandbox_client.api``)."""

    op: str
    retry: bool
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Upload:
    """PUT ``size`` bytes of ``fileobj`` to a signed URL."""

    url: str
    fileobj: IO[bytes]
    size: int
    progress: Callable[[int], None]


@dataclass(frozen=True)
class Download:
    """GET a signed URL (a tar.gz) into ``sink``.

    The driver refuses a body that does not start like gzip and stops at ``max_bytes`` (None:
    no cap). With ``timeout`` (seconds) the whole transfer, retries included, ends after it;
    with None there is no deadline for the whole transfer, but a download that receives fewer
    than 64 KiB within any window of the settings' timeout (60 s by default) is ended as too
    slow, and each read waits at most the settings' timeout. Both end with
    :class:`~workflows.TransferTimeoutError` (see ``workflows._api._DownloadGuard``).
    """

    url: str
    sink: IO[bytes]
    progress: Callable[[int], None]
    max_bytes: int | None = None
    timeout: float | None = None


@dataclass(frozen=True)
class Blocking:
    """Run ``fn(*args, **kwargs)``: CPU or disk work the async driver moves to a thread."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


Step = Call | Upload | Download | Blocking
Flow = Generator[Step, Any, T]


def simple_call(op: str, *, retry: bool = True, **kwargs: Any) -> Flow[Response[Any]]:
    """A flow of one call."""
    response: Response[Any] = yield Call(op, retry, kwargs)
    return response


def list_flow() -> Flow[list[SandboxInfo]]:
    """Every active sandbox of the key."""
    response = yield Call("list_local_sandboxes", True)
    return [sandbox_info_from_dict(item) for item in body_dict(response)["local_sandboxes"]]


def get_flow(sandbox_id: str) -> Flow[SandboxInfo]:
    """The details of one sandbox."""
    response = yield Call("get_local_sandbox", True, {"local_sandbox_id": sandbox_id})
    return info_from(response)


def acquire_attempt(
    request: AcquireRequest, settings: Settings, ledger: Ledger | None = None
) -> Flow[tuple[SandboxInfo, str | None]]:
    """One acquire, reconciled by listing when its failure is ambiguous.

    Returns the sandbox and the id of the ledger's ``attempt`` record, which the caller settles
    by recording the sandbox as acquired (``None`` without a ledger). The attempt is recorded
    before the request is sent, so an acquire that ends ambiguously (or a process killed
    mid-request) leaves an open attempt that ``reap`` reconciles by listing.

    Raises :class:`~workflows._reconcile.AcquireDidNotHappen` when the acquire is known not to
    have happened, which the driver retries (see :func:`retry_acquire`). Sandboxes that the
    ledger says other processes hold are never adopted.
    """
    from klavis_sandbox_client.models import AcquireLocalSandboxRequest

    base_url, key = settings.base_url, settings.api_key.fingerprint
    before = {s.id for s in (yield from list_flow())}
    body = AcquireLocalSandboxRequest.from_dict(request.to_body())
    attempt: str | None = None
    if ledger is not None:
        attempt = _reconcile.new_attempt()
        yield Blocking(
            ledger.record_attempt,
            (attempt,),
            {
                "base_url": base_url,
                "key": key,
                "servers": tuple(sorted(request.wanted_servers())),
                "benchmark": request.benchmark,
                "known": frozenset(before),
            },
        )
    try:
        failure: Exception
        try:
            info = info_from((yield Call("acquire_local_sandbox", False, {"body": body})))
        except Exception as exc:
            if not _reconcile.is_ambiguous(exc):
                if retry_backoff(exc) is not False:  # refused before it happened (429, refused)
                    raise _reconcile.AcquireDidNotHappen(exc) from exc
                raise
            failure = exc
        else:
            if _reconcile.claim(base_url, info.id):
                return info, attempt
            failure = ApiError("acquire answered a sandbox already adopted", status_code=500)
        try:
            after = yield from list_flow()
        except Exception as exc:  # noqa: BLE001 - wrapped with its cause
            advice = (
                "run `klavis-sandbox reap` (it finds it by listing) or let its TTL expire"
                if ledger is not None
                else "find it with `klavis-sandbox list` and release it, or let its TTL expire"
            )
            raise AcquireAmbiguousError(
                f"acquire failed ({failure}) and listing sandboxes to reconcile also failed "
                f"({exc}); a sandbox may have been created: {advice}"
            ) from failure
        if ledger is not None:  # other processes of this user record what they hold
            held: list[LedgerEntry] = yield Blocking(ledger.held, (), {"base_url": base_url})
            before |= {entry.sandbox_id for entry in held}
        for candidate in _reconcile.adoptable(request, before, after):
            if _reconcile.claim(base_url, candidate.id):
                log.warning(
                    "acquire failed (%s) but created sandbox %s: adopted it", failure, candidate.id
                )
                return candidate, attempt
        raise _reconcile.AcquireDidNotHappen(failure) from failure
    except (_reconcile.AcquireDidNotHappen, InvalidInputError, ApiError) as exc:
        # known to have created nothing: an API error answered before it took effect (4xx), or
        # a listing that shows no new sandbox. (Ambiguous ends are AcquireAmbiguousError.)
        if ledger is not None and attempt is not None and not _reconcile.is_ambiguous(exc):
            yield Blocking(ledger.settle_attempt, (attempt,), {"base_url": base_url, "key": key})
        raise
    finally:
        if attempt is not None:
            _reconcile.attempt_ended(attempt)


def retry_acquire(exc: Exception) -> bool | float:
    """stamina hook for acquire: retry only what is known not to have happened."""
    if isinstance(exc, _reconcile.AcquireDidNotHappen):
        return retry_backoff(exc.cause) or True
    return False


def upload_flow(sandbox_id: str, entries: Sequence[SourceFile], progress: bool | None) -> Flow[int]:
    """Pack, upload (asking for a fresh URL once if the signed one is refused), initialize."""
    total = sum(e.size for e in entries)
    with progress_bar(total=total, desc="packing", progress=progress) as update:
        packed: tuple[IO[bytes], int] = yield Blocking(
            pack_to_tempfile, (entries,), {"progress": update}
        )
        archive, size = packed
    with archive, progress_bar(total=size, desc="uploading", progress=progress) as update:
        for fresh in (False, True):
            response = yield Call("get_upload_url", True, {"local_sandbox_id": sandbox_id})
            url = signed_url_from(response, "upload_url")
            try:
                yield Upload(url, archive, size, update)
                break
            except TransferError as exc:
                if fresh or exc.status_code != 403:
                    raise
                log.info("the signed upload URL was refused (403); asking for a new one")
    yield Call("initialize_workspace", True, {"local_sandbox_id": sandbox_id})
    log.info("seeded sandbox %s: %d entries, %d bytes packed", sandbox_id, len(entries), size)
    return size


def download_flow(
    sandbox_id: str,
    sink: IO[bytes],
    progress: bool | None,
    *,
    max_bytes: int | None = None,
    timeout: float | None = None,
) -> Flow[int]:
    """Ask for a dump and download it into ``sink`` (a fresh URL once if the first is refused).

    ``max_bytes`` and ``timeout`` are the :class:`Download`'s.
    """
    for fresh in (False, True):
        response = yield Call("dump_workspace", True, {"local_sandbox_id": sandbox_id})
        url = signed_url_from(response, "download_url")
        try:
            with progress_bar(total=None, desc="downloading", progress=progress) as update:
                written: int = yield Download(url, sink, update, max_bytes, timeout)
            return written
        except TransferError as exc:
            if fresh or exc.status_code != 403:
                raise
            log.info("the signed download URL was refused (403); asking for a new one")
    raise AssertionError("unreachable")  # pragma: no cover


def dump_to_target(path: object) -> ArchiveTarget:
    """Where ``dump_to(path)`` writes: a ``.tar.gz``/``.tgz`` file kept as is, or a folder.

    Only the path itself is checked here (see :func:`~workflows._paths.check_destination`); the
    disk is checked by :func:`dump_to_flow`'s first step, before anything is asked of the API.

    >>> dump_to_target("out/ws.tar.gz").keep_archive, dump_to_target("out/ws").keep_archive
    (True, False)
    """
    checked = check_destination(path)
    return ArchiveTarget(checked, checked.name.lower().endswith((".tar.gz", ".tgz")))


def check_timeout(timeout: object) -> float | None:
    """A transfer's ``timeout=`` argument: None (no deadline for the whole transfer, see
    :class:`Download`) or a positive number of seconds."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise InvalidInputError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return float(timeout)


def dump_flow(
    sandbox_id: str, limits: ArchiveLimits, progress: bool | None, timeout: float | None = None
) -> Flow[Snapshot]:
    """Download the workspace and read it as a Snapshot (streamed through a temp file).

    Links into the sandbox's ``/data`` are kept; links leading outside it are left out with a
    warning (``Snapshot.skipped_links``): one such link never fails a dump.
    """
    with tempfile.TemporaryFile() as tmp:
        yield from download_flow(
            sandbox_id, tmp, progress, max_bytes=limits.archive_bytes_cap(), timeout=timeout
        )
        snapshot: Snapshot = yield Blocking(
            read_snapshot, (tmp,), {"limits": limits, "workspace_links": True}
        )
        return snapshot


def dump_to_flow(
    sandbox_id: str,
    target: ArchiveTarget,
    limits: ArchiveLimits,
    progress: bool | None,
    timeout: float | None = None,
) -> Flow[Path]:
    """Download the workspace into a folder (extracted safely) or a .tar.gz file (atomically).

    The destination is checked, by making its parents and a temporary entry beside it, before
    anything is asked of the API; a failure anywhere leaves the disk as it was. Links into
    ``/data`` become relative links; links leading outside are left out with a warning.
    """
    destination: Destination = yield Blocking(
        prepare_destination, (target.path,), {"keep_archive": target.keep_archive}
    )
    cap = limits.archive_bytes_cap()
    try:
        if target.keep_archive:
            sink: IO[bytes] = yield Blocking(destination.open_archive)
            with sink:
                yield from download_flow(sandbox_id, sink, progress, max_bytes=cap, timeout=timeout)
            yield Blocking(destination.commit_archive)
        else:
            with tempfile.TemporaryFile() as tmp:
                yield from download_flow(sandbox_id, tmp, progress, max_bytes=cap, timeout=timeout)
                yield Blocking(
                    destination.extract, (tmp,), {"limits": limits, "workspace_links": True}
                )
    except BaseException:
        # cheap here (an empty folder, a file): a failed extraction already removed its tree
        destination.discard()
        raise
    return target.path


def release_flow(sandbox_id: str) -> Flow[bool]:
    """Release; True if this call released it, False if it was already gone (404)."""
    try:
        yield Call("release_local_sandbox", True, {"local_sandbox_id": sandbox_id})
    except NotFoundError:
        return False
    return True
