"""Every multi-step operation, written once, without I/O: flows of typed steps.

A flow is a generator that yields *steps* (a call of a generated operation, a signed-URL
transfer, a blocking function to run, an action of the face running it, a pause) and
receives each step's result, or has its exception thrown in: the pattern of httpx's
``Auth.auth_flow`` generators, which yield requests and receive responses. The drivers of
:mod:`workflows._drivers` carry the steps out: the sync one directly, the async one awaiting
them and running blocking work in a thread; both close the flow when they stop, so its
``with`` blocks (temporary files, progress bars) end at once, on cancellation and Ctrl-C too.
So ``LocalSandbox`` and ``AsyncLocalSandbox`` share all of their logic and differ only in
``await``, and the pools' retry rules run on the same drivers (:mod:`workflows._pool`).

A :class:`Call` carries the generated operation itself (its module, imported inside the flow so
``import workflows`` stays fast): go-to-definition from a flow reaches the generated code.
Retry policy is written in the flows: reads, release, reset, signed-URL requests, initialize
(extracting the same archive twice gives the same workspace) and dumps are retried after an
ambiguous failure; acquire and execute never are, they are reconciled instead.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

from . import _ownership, _tracing
from ._config import Settings
from ._dump._archive import ArchiveLimits, read_snapshot
from ._dump._extract import Destination, prepare_destination
from ._dump._read_along import ReadAlong
from ._errors import (
    AcquireAmbiguousError,
    ApiConnectionError,
    ApiError,
    InvalidInputError,
    KlavisError,
    LocalWriteError,
    NotFoundError,
    TransferError,
    retry_backoff,
)
from ._host_limits import HostLimits, acquire_turn
from ._models import (
    AcquireRequest,
    SandboxInfo,
    body_dict,
    info_from,
    sandbox_info_from_dict,
    signed_url_from,
)
from ._ownership import Ledger, LedgerEntry, _reconcile
from ._pack import pack_to_tempfile
from ._paths import check_destination
from ._progress import progress_bar
from ._seed import SourceFile
from ._snapshot import Snapshot
from ._steps import (
    Act,
    Blocking,
    Call,
    Download,
    DownloadSink,
    Flow,
    Operation,
    Sleep,
    Step,
    Upload,
)

__all__ = [
    "Act",
    "ArchiveTarget",
    "Blocking",
    "Call",
    "Download",
    "Flow",
    "Operation",
    "Sleep",
    "Step",
    "Upload",
    "acquire_attempt",
    "check_timeout",
    "download_signed",
    "dump_flow",
    "dump_to_flow",
    "dump_to_target",
    "get_flow",
    "list_flow",
    "release_flow",
    "reset_flow",
    "retry_acquire",
    "seed_flow",
    "signed_transfer",
    "upload_archive",
    "upload_signed",
]

log = logging.getLogger("workflows")
T = TypeVar("T")


# --- signed transfers ---------------------------------------------------------------------------


def signed_transfer(ask: Call, key: str, transfer: Callable[[str], Flow[T]]) -> Flow[T]:
    """Ask the API for a signed URL (``ask``; the answer's ``key``: ``upload_url`` or
    ``download_url``), then run the sub-flow ``transfer(url)``. A URL the store refuses with
    403 (it expired, or was signed for another clock) is asked for again once; the transfer
    itself is retried by the driver. Returns the transfer's result."""
    for fresh in (False, True):
        url = signed_url_from((yield ask), key)
        try:
            return (yield from transfer(url))
        except TransferError as exc:
            if fresh or exc.status_code != 403:
                raise
            shown = key.replace("_url", " URL")  # "the signed upload URL was refused"
            log.info("the signed %s was refused (403); asking for a new one", shown)
    raise AssertionError("unreachable")  # pragma: no cover


def upload_signed(ask: Call, entries: Sequence[SourceFile], progress: bool | None) -> Flow[int]:
    """Pack ``entries`` into a temporary tar.gz and upload it to the signed URL ``ask`` gets
    (see :func:`upload_archive`). Returns the bytes uploaded."""
    total = sum(e.size for e in entries)
    with progress_bar(total=total, desc="packing", progress=progress) as update:
        packed: tuple[IO[bytes], int] = yield Blocking(
            pack_to_tempfile, (entries,), {"progress": update}
        )
    archive, size = packed
    with archive:
        yield from upload_archive(ask, archive, size, progress)
    return size


def upload_archive(ask: Call, archive: IO[bytes], size: int, progress: bool | None) -> Flow[None]:
    """Upload the ``size`` bytes of ``archive`` (open, at 0; left open) to the signed URL
    ``ask`` gets (see :func:`signed_transfer`)."""
    with progress_bar(total=size, desc="uploading", progress=progress) as sent:

        def upload(url: str) -> Flow[None]:
            yield Upload(url, archive, size, sent)

        yield from signed_transfer(ask, "upload_url", upload)


def download_signed(
    ask: Call,
    sink: DownloadSink,
    progress: bool | None,
    *,
    max_bytes: int | None = None,
    timeout: float | None = None,
) -> Flow[int]:
    """Download the tar.gz at the signed URL ``ask`` gets into ``sink`` (see
    :func:`signed_transfer`); ``max_bytes`` and ``timeout`` are the :class:`Download`'s.
    Returns the bytes written."""

    def download(url: str) -> Flow[int]:
        with progress_bar(total=None, desc="downloading", progress=progress) as update:
            written: int = yield Download(url, sink, update, max_bytes, timeout)
        return written

    return (yield from signed_transfer(ask, "download_url", download))


def _written_here(flow: Flow[T], failure: str, path: str, sink: IO[bytes]) -> Flow[T]:
    """Run the sub-flow ``flow``, which writes a download into ``sink`` on this machine, then
    flush ``sink``: an OSError of either (a full disk or quota, EFBIG...) is raised as a
    :class:`~workflows.LocalWriteError` saying ``failure``, the cause, and that nothing was
    written; ``path`` is the error's."""
    try:
        written = yield from flow
        sink.flush()  # what the buffer still holds fails here, named, not at its close
        return written
    except KlavisError:  # LocalWriteError is an OSError too
        raise
    except OSError as exc:
        message = f"{failure}: {exc.strerror or exc}; nothing was written"
        raise LocalWriteError(message, path=path, cause=exc) from exc


@contextlib.contextmanager
def _closed_after(sink: IO[bytes]) -> Iterator[IO[bytes]]:
    """``sink``, closed on the way out. When something failed already, a failing close (its
    buffer's last write meeting the same full disk) must not replace that error."""
    try:
        yield sink
    except BaseException:
        with contextlib.suppress(OSError):
            sink.close()
        raise
    sink.close()


def _temporary_file(failure: str, folder: str) -> IO[bytes]:
    """A temporary file (unnamed: nothing of it outlives the process) in ``folder``."""
    try:
        return tempfile.TemporaryFile(dir=folder)
    except OSError as exc:
        message = f"{failure}: {exc.strerror or exc}; nothing was written"
        raise LocalWriteError(message, path=folder, cause=exc) from exc


# --- sandboxes ----------------------------------------------------------------------------------


def list_flow() -> Flow[list[SandboxInfo]]:
    """Every active sandbox of the key."""
    from klavis_sandbox_client.api.local_sandbox import list_local_sandboxes

    response = yield Call(list_local_sandboxes, True)
    return [sandbox_info_from_dict(item) for item in body_dict(response)["local_sandboxes"]]


def get_flow(sandbox_id: str) -> Flow[SandboxInfo]:
    """The details of one sandbox."""
    from klavis_sandbox_client.api.local_sandbox import get_local_sandbox

    return info_from((yield Call(get_local_sandbox, True, {"local_sandbox_id": sandbox_id})))


@_tracing.traced_flow("klavis.acquire", _tracing.acquire_start, _tracing.acquire_end)
def acquire_attempt(
    request: AcquireRequest,
    settings: Settings,
    ledger: Ledger | None = None,
    host_limits: HostLimits | None = None,
) -> Flow[tuple[SandboxInfo, str | None]]:
    """One acquire, reconciled by listing when its failure is ambiguous.

    Returns the sandbox and the id of the ledger's ``attempt`` record, which the caller settles
    by recording the sandbox as acquired (``None`` without a ledger). The attempt is recorded
    before the request is sent, so an acquire that ends ambiguously (or a process killed
    mid-request) leaves an open attempt that ``reap`` reconciles by listing.

    Raises :class:`~workflows._reconcile.AcquireDidNotHappen` when the acquire is known not to
    have happened, which the driver retries (see :func:`retry_acquire`). Sandboxes that the
    ledger says other processes hold are never adopted. Any other end leaves the attempt open
    and records that it ended (``attempt-ended``), so ``reap`` in another process may release
    what it left while this process lives on. On success the attempt stays in flight until
    the caller records the sandbox (:func:`workflows._ownership.own`). Under ``host_limits``
    with a rate, the request waits for its turn, then is recorded and sent.
    """
    from klavis_sandbox_client.api.local_sandbox import acquire_local_sandbox
    from klavis_sandbox_client.models import AcquireLocalSandboxRequest

    base_url, key = settings.base_url, settings.api_key.fingerprint
    try:
        before = {s.id for s in (yield from list_flow())}
    except ApiConnectionError as exc:  # say what the user asked for, not only what failed
        raise type(exc)(
            f"acquire could not reach the API: POST {base_url.rstrip('/')}/local-sandbox was not "
            "sent, because listing the key's sandboxes first (to reconcile an acquire whose "
            f"answer is lost) failed: {exc}",
            method=exc.method,
            path=exc.path,
        ) from exc.__cause__
    body = AcquireLocalSandboxRequest.from_dict(request.to_body())
    # the host's acquire rate, if any: the request leaves after its turn and the attempt's
    # ledger line (an interrupted wait leaves no attempt to reconcile)
    yield from acquire_turn(host_limits, settings)
    attempt = None if ledger is None else _ownership.new_attempt()
    handed_over = False
    try:
        if ledger is not None and attempt is not None:
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
        failure: Exception
        try:
            info = info_from((yield Call(acquire_local_sandbox, False, {"body": body})))
        except Exception as exc:
            if not _reconcile.is_ambiguous(exc):
                if retry_backoff(exc) is not False:  # refused before it happened (429, refused)
                    raise _reconcile.AcquireDidNotHappen(exc) from exc
                raise
            failure = exc
        else:
            if _ownership.claim(base_url, info.id):
                handed_over = True
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
            if _ownership.claim(base_url, candidate.id):
                log.warning(
                    "acquire failed (%s) but created sandbox %s: adopted it", failure, candidate.id
                )
                handed_over = True
                return candidate, attempt
        raise _reconcile.AcquireDidNotHappen(failure) from failure
    except (_reconcile.AcquireDidNotHappen, InvalidInputError, ApiError) as exc:
        # known to have created nothing: an API error answered before it took effect (4xx), or
        # a listing that shows no new sandbox. (Ambiguous ends are AcquireAmbiguousError, below;
        # an ambiguous ApiError cannot come here, and would be ended as they are.)
        if ledger is not None and attempt is not None:
            close = ledger.end_attempt if _reconcile.is_ambiguous(exc) else ledger.settle_attempt
            yield Blocking(close, (attempt,), {"base_url": base_url, "key": key})
        raise
    except Exception:
        # AcquireAmbiguousError above all: a sandbox may exist that this process will never
        # record. The attempt stays open for reap, which need not wait for this process to exit.
        if ledger is not None and attempt is not None:
            yield Blocking(ledger.end_attempt, (attempt,), {"base_url": base_url, "key": key})
        raise
    except BaseException:
        # closed at a step (Ctrl-C, SIGTERM, a cancelled task): a closing flow cannot wait for
        # a step, so this one short append is made here
        if ledger is not None and attempt is not None:
            ledger.end_attempt(attempt, base_url=base_url, key=key)
        raise
    finally:
        if attempt is not None and not handed_over:  # else own() ends it, once recorded
            _ownership.attempt_ended(attempt)


def retry_acquire(exc: Exception) -> bool | float:
    """stamina hook for acquire: retry only what is known not to have happened."""
    if isinstance(exc, _reconcile.AcquireDidNotHappen):
        return retry_backoff(exc.cause) or True
    return False


def seed_flow(sandbox_id: str, entries: Sequence[SourceFile], progress: bool | None) -> Flow[int]:
    """Pack and upload the entries (:func:`upload_signed`), then have the sandbox extract them
    into its workspace. Returns the bytes uploaded."""
    from klavis_sandbox_client.api.local_sandbox import get_upload_url, initialize_workspace

    which = {"local_sandbox_id": sandbox_id}
    size = yield from upload_signed(Call(get_upload_url, True, which), entries, progress)
    yield Call(initialize_workspace, True, which)
    log.info("seeded sandbox %s: %d entries, %d bytes packed", sandbox_id, len(entries), size)
    return size


def _download_dump(
    sandbox_id: str,
    sink: DownloadSink,
    progress: bool | None,
    *,
    max_bytes: int | None,
    timeout: float | None,
) -> Flow[int]:
    """Ask for a dump of the workspace and download it into ``sink``."""
    from klavis_sandbox_client.api.local_sandbox import dump_workspace

    ask = Call(dump_workspace, True, {"local_sandbox_id": sandbox_id})
    return (yield from download_signed(ask, sink, progress, max_bytes=max_bytes, timeout=timeout))


@dataclass(frozen=True)
class ArchiveTarget:
    """Where ``dump_to`` writes: a folder to extract into, or a ``.tar.gz`` file to keep as is."""

    path: Path
    keep_archive: bool


def dump_to_target(path: object) -> ArchiveTarget:
    """Where ``dump_to(path)`` writes: a ``.tar.gz``/``.tgz`` file kept as is, or a folder.

    Only the path itself is checked here (see
    :func:`~workflows._paths.check_destination`); the disk is checked by
    :func:`dump_to_flow`'s first step, before anything is asked of the API.

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
    """Download the workspace and read it as a Snapshot while it arrives (see
    :class:`~workflows._dump._read_along.ReadAlong`: bounded memory, read again from its start
    when the download is retried).

    Links into the sandbox's ``/data`` are kept; links leading outside it are left out with a
    warning (``Snapshot.skipped_links``): one such link never fails a dump.
    """
    read = functools.partial(read_snapshot, limits=limits, workspace_links=True)
    with ReadAlong(read, discard=Snapshot.close) as sink:
        yield from _download_dump(
            sandbox_id, sink, progress, max_bytes=limits.archive_bytes_cap(), timeout=timeout
        )
        snapshot: Snapshot = yield Blocking(sink.finish)
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
    ``/data`` become relative links; links leading outside are left out with a warning. A write
    that fails here (a full disk, EFBIG) raises :class:`~workflows.LocalWriteError`.
    """
    destination: Destination = yield Blocking(
        prepare_destination, (target.path,), {"keep_archive": target.keep_archive}
    )
    cap = limits.archive_bytes_cap()
    try:
        if target.keep_archive:
            sink: IO[bytes] = yield Blocking(destination.open_archive)
            with _closed_after(sink):
                yield from _written_here(
                    _download_dump(sandbox_id, sink, progress, max_bytes=cap, timeout=timeout),
                    f"cannot save the dump of sandbox {sandbox_id} as {destination.shown}",
                    destination.path,
                    sink,
                )
            yield Blocking(destination.commit_archive)
        else:
            # the archive waits in the temporary folder (unnamed, so no kill leaves it behind)
            folder = tempfile.gettempdir()
            failure = (
                f"cannot dump sandbox {sandbox_id} into {destination.shown}: writing the download "
                f"in the temporary folder {folder!r} failed"
            )
            with _closed_after(_temporary_file(failure, folder)) as tmp:
                yield from _written_here(
                    _download_dump(sandbox_id, tmp, progress, max_bytes=cap, timeout=timeout),
                    failure,
                    folder,
                    tmp,
                )
                yield Blocking(
                    destination.extract, (tmp,), {"limits": limits, "workspace_links": True}
                )
    except BaseException:
        # cheap here (an empty folder, a file): a failed extraction already removed its tree
        destination.discard()
        raise
    return target.path


def reset_flow(sandbox_id: str) -> Flow[None]:
    """Reset the sandbox and its servers to their initial state."""
    from klavis_sandbox_client.api.local_sandbox import reset_local_sandbox

    yield Call(reset_local_sandbox, True, {"local_sandbox_id": sandbox_id})


def release_flow(sandbox_id: str) -> Flow[bool]:
    """Release; True if this call released it, False if it was already gone (404)."""
    from klavis_sandbox_client.api.local_sandbox import release_local_sandbox

    try:
        yield Call(release_local_sandbox, True, {"local_sandbox_id": sandbox_id})
    except NotFoundError:
        return False
    return True
