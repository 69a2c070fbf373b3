"""Running a script in a sandbox: the archive, the flows, and the `Execution` handles.

``sb.execute(...)`` packs ``main.py`` (plus ``requirements.txt`` and any extra files, laid out
by :mod:`._execution_input`) into a tar.gz, uploads it to the execution's signed URL and starts
it. The returned handle streams the logs (following the server's byte cursor, so every byte is
seen once), waits for the outcome and exports the artifacts the script left in its working
directory.

The service reports no exit status: an execution's status is ``pending``, ``running``,
``completed`` or ``failed``, nothing more. The emulator knows its process's status and ends
the log with one line saying it (``[emulator] main.py exited with status 3.``, or ``... was
killed by signal 9.``); :class:`ExitScan` reads that last line, so ``exit_code()`` answers on
the emulator and says None on the real service.
"""

from __future__ import annotations

import re
import secrets
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any

from ._dump._archive import ArchiveLimits, read_snapshot
from ._errors import ApiError, ExecutionTimeoutError, InvalidInputError, NotFoundError
from ._exec_streams import LogSplitter, Piece, execution_id
from ._flows import Blocking, Call, Flow, Sleep, download_signed, upload_signed
from ._models import body_dict
from ._ownership import is_ambiguous
from ._seed import SourceFile
from ._snapshot import Snapshot

if TYPE_CHECKING:
    from ._drivers import AsyncDriver, SyncDriver

__all__ = [
    "TERMINAL_STATUSES",
    "AsyncExecution",
    "Execution",
    "LogFollower",
    "artifacts_flow",
    "ExitScan",
    "check_execution_name",
    "exit_code_flow",
    "start_flow",
    "status_flow",
    "wait_flow",
]

TERMINAL_STATUSES = frozenset({"completed", "failed"})
"""Statuses after which an execution's logs no longer grow."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_POLL_MIN, _POLL_MAX = 0.1, 2.0
_START_ATTEMPTS = 5


def check_execution_name(name: str | None) -> str:
    """Return a valid execution name, generating one when ``name`` is None.

    >>> check_execution_name("eval_1")
    'eval_1'
    >>> check_execution_name("../x")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    workflows._errors.InvalidInputError: execution name '../x' must be ...
    """
    if name is None:
        return f"run-{secrets.token_hex(4)}"
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInputError(
            f"execution name {name!r} must be 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def start_flow(
    sandbox_id: str, name: str, entries: Sequence[SourceFile], progress: bool | None
) -> Flow[None]:
    """Upload the execution archive and start it; an ambiguous start is checked, not re-sent."""
    from klavis_sandbox_client.api.local_sandbox import execute_script, get_execution_upload_url
    from klavis_sandbox_client.models import ExecuteRequest, ExecutionUploadUrlRequest

    which: dict[str, Any] = {"local_sandbox_id": sandbox_id}
    body = ExecutionUploadUrlRequest(execution_name=name)
    ask = Call(get_execution_upload_url, True, {**which, "body": body})
    yield from upload_signed(ask, entries, progress)
    for attempt in range(_START_ATTEMPTS):
        try:
            yield Call(execute_script, False, {**which, "body": ExecuteRequest(name)})
            return
        except Exception as exc:
            if not is_ambiguous(exc) or attempt == _START_ATTEMPTS - 1:
                raise
            try:  # did it start anyway?
                yield from status_flow(sandbox_id, name)
                return
            except NotFoundError:
                continue  # it did not: starting again is safe


def status_flow(sandbox_id: str, name: str) -> Flow[str]:
    """The execution's status string."""
    from klavis_sandbox_client.api.local_sandbox import get_execution_status

    response = yield Call(
        get_execution_status, True, {"local_sandbox_id": sandbox_id, "execution_name": name}
    )
    return str(body_dict(response)["status"])


def logs_flow(sandbox_id: str, name: str, cursor: int) -> Flow[tuple[str, str, int]]:
    """One poll of the logs: (status, new text, next cursor)."""
    from klavis_sandbox_client.api.local_sandbox import get_execution_logs

    response = yield Call(
        get_execution_logs,
        True,
        {"local_sandbox_id": sandbox_id, "execution_name": name, "cursor": cursor},
    )
    data = body_dict(response)
    next_cursor = int(data.get("cursor", cursor))
    if next_cursor < cursor:
        raise ApiError("the log cursor went backwards", status_code=int(response.status_code))
    return str(data["status"]), str(data.get("logs") or ""), next_cursor


# The emulator's last line of a run whose main.py ended (klavis_emulator._exec.run_log): the
# whole line, at the very end of the log, so a script cannot print it and have it believed (the
# emulator writes its own line after the script's process has ended, on a line of its own).
_EXIT_LINE = re.compile(
    r"(?:\A|\n)\[emulator\] main\.py "
    r"(?:exited with status (?P<status>\d+)|was killed by signal (?P<signal>\d+))\.\n?\Z"
)
_TAIL_CHARS = 512


class ExitScan:
    """The end of an execution's log as read so far, and the exit status its last line tells.

    Fed with every piece of the log read in order (from cursor 0 on); once the execution has
    finished and the log is read to its end, :attr:`code` is main.py's exit status when the
    last line is the emulator's ``[emulator] main.py exited with status N.`` (``-N`` for
    ``... was killed by signal N.``, as :mod:`subprocess` reports it), else None.
    """

    def __init__(self) -> None:
        self.cursor = 0
        self.done = False
        self.code: int | None = None
        self._tail = ""
        self._whole = True  # the tail is the whole log so far

    def feed(self, start: int, text: str, end: int) -> None:
        """Take the piece of log ``text`` read from byte ``start`` to ``end`` (ignored unless
        it continues what was fed before)."""
        if start != self.cursor or self.done:
            return
        self.cursor = end
        tail = self._tail + text
        if len(tail) > _TAIL_CHARS:
            tail, self._whole = tail[-_TAIL_CHARS:], False
        self._tail = tail

    def finish(self) -> None:
        """The execution has finished and its log was read to the end: read the last line."""
        if self.done:
            return
        self.done = True
        found = _EXIT_LINE.search(self._tail)
        if found is None or (not self._whole and found.start() == 0 and found.group()[0] != "\n"):
            return
        status, signal = found.group("status"), found.group("signal")
        self.code = int(status) if status is not None else -int(signal)


def exit_code_flow(sandbox_id: str, name: str, scan: ExitScan) -> Flow[int | None]:
    """main.py's exit status from the end of the log (read from where ``scan`` stopped); None
    while the execution runs, or when the log's last line does not tell it."""
    while not scan.done:
        start = scan.cursor
        status, text, end = yield from logs_flow(sandbox_id, name, start)
        scan.feed(start, text, end)
        if not text:
            if status not in TERMINAL_STATUSES:
                return None
            scan.finish()
    return scan.code


class LogFollower:
    """Where a reader of an execution's logs is: the server's byte cursor (so every byte is seen
    once) and how long the output has been quiet (polls back off up to 2 s). With ``scan``, what
    it reads also goes to that :class:`ExitScan`."""

    def __init__(
        self, sandbox_id: str, name: str, *, follow: bool, scan: ExitScan | None = None
    ) -> None:
        self.sandbox_id = sandbox_id
        self.name = name
        self.follow = follow
        self.cursor = 0
        self._idle = 0
        self._scan = scan

    def next_text(self) -> Flow[str | None]:
        """The next piece of output as it arrives; None once no more will come (the execution
        finished, or, without ``follow``, there is nothing new now)."""
        while True:
            start = self.cursor
            status, text, self.cursor = yield from logs_flow(self.sandbox_id, self.name, start)
            if self._scan is not None:
                self._scan.feed(start, text, self.cursor)
            if text:
                self._idle = 0
                return text
            if status in TERMINAL_STATUSES:
                if self._scan is not None:
                    self._scan.finish()
                return None
            if not self.follow:
                return None
            yield Sleep(next_delay(self._idle))
            self._idle += 1


def wait_flow(
    sandbox_id: str,
    name: str,
    timeout: float | None,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> Flow[str]:
    """Poll the status until the execution finishes (``completed`` or ``failed``), backing off;
    :class:`~workflows.ExecutionTimeoutError` when ``timeout`` seconds would pass first."""
    deadline = None if timeout is None else clock() + timeout
    idle = 0
    while True:
        status = yield from status_flow(sandbox_id, name)
        if status in TERMINAL_STATUSES:
            return status
        delay = next_delay(idle)
        if deadline is not None and clock() + delay > deadline:
            raise ExecutionTimeoutError(f"execution {name!r} still {status} after {timeout} s")
        yield Sleep(delay)
        idle += 1


def artifacts_flow(
    sandbox_id: str, name: str, limits: ArchiveLimits, progress: bool | None
) -> Flow[Snapshot]:
    """Export the execution's working directory and read it as a Snapshot.

    Links inside the exported folder are kept (``Snapshot.links``); links leading outside it,
    ``/data/...`` included (the script's folder is not the workspace), are left out with one
    warning and listed in ``Snapshot.skipped_links``.
    """
    from klavis_sandbox_client.api.local_sandbox import export_artifacts
    from klavis_sandbox_client.models import ExportArtifactsRequest

    body = ExportArtifactsRequest(name)
    ask = Call(export_artifacts, True, {"local_sandbox_id": sandbox_id, "body": body})
    with tempfile.TemporaryFile() as tmp:
        yield from download_signed(ask, tmp, progress, max_bytes=limits.archive_bytes_cap())
        # The script ran in its own working directory, not in /data: a link to /data/... leads
        # into the workspace, outside the artifacts, like one to /usr/bin/python3 (a venv the
        # script made). Such links are left out with a warning, never failing the export.
        snapshot: Snapshot = yield Blocking(
            read_snapshot,
            (tmp,),
            {"limits": limits, "skip_links_outside": True, "what": f"export_artifacts of {name!r}"},
        )
        return snapshot


def _known(value: int) -> Flow[int | None]:
    """A flow that answers ``value`` without a request."""
    return value
    yield  # a generator: the drivers run flows


def next_delay(idle_polls: int) -> float:
    """Seconds to wait before the next poll after ``idle_polls`` polls without news."""
    return float(min(_POLL_MAX, _POLL_MIN * (1.5**idle_polls)))


@dataclass(eq=False, repr=False)
class _ExecutionBase:
    """What both handles hold: the connection, the execution's sandbox and name, and how its
    artifacts are downloaded (the sandbox's limits, progress bars or not)."""

    _driver: Any
    sandbox_id: str
    name: str
    _: KW_ONLY
    limits: ArchiveLimits
    progress: bool | None
    _scan: ExitScan = field(default_factory=ExitScan, init=False)
    _launcher_code: int | None = field(default=None, init=False)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, sandbox_id={self.sandbox_id!r})"

    @property
    def id(self) -> str:
        """``SANDBOX_ID/NAME``: how ``klavis-sandbox logs ID`` names this execution."""
        return execution_id(self.sandbox_id, self.name)

    def _pieces(self, split: LogSplitter, text: str | None) -> list[Piece]:
        """The next pieces of the log (``text``), or what was held back once it ended (None);
        the exit status ``klavis-sandbox exec``'s launcher logged is kept once read."""
        pieces = split.end() if text is None else split.feed(text)
        if split.exit_code is not None:
            self._launcher_code = split.exit_code
        return pieces

    def _artifacts(self) -> Flow[Snapshot]:
        return artifacts_flow(self.sandbox_id, self.name, self.limits, self.progress)

    def _follower(self, follow: bool) -> LogFollower:
        return LogFollower(self.sandbox_id, self.name, follow=follow, scan=self._scan)

    def _exit_code(self) -> Flow[int | None]:
        if self._launcher_code is not None:  # the launcher's record: the service's too
            return _known(self._launcher_code)
        return exit_code_flow(self.sandbox_id, self.name, self._scan)


class Execution(_ExecutionBase):
    """A script running in a sandbox (sync). Get one from ``LocalSandbox.execute``.

    The service reports a status (``pending``, ``running``, ``completed``, ``failed``) and no
    exit status: ``failed`` is all it says of ``sys.exit(3)``. :meth:`exit_code` reads the
    status the emulator writes at the end of the log; on the real service it is None.

    >>> run = sb.execute("print('hi')")  # doctest: +SKIP
    >>> for text in run.logs():  # doctest: +SKIP
    ...     print(text, end="")
    hi
    >>> run.wait()  # doctest: +SKIP
    'completed'
    >>> run.exit_code()  # doctest: +SKIP
    0
    """

    _driver: SyncDriver

    def status(self) -> str:
        """``pending``, ``running``, ``completed`` or ``failed``."""
        return self._driver.run(status_flow(self.sandbox_id, self.name))

    def logs(self, *, follow: bool = True) -> Iterator[str]:
        """Yield the output as text as it arrives, until the execution has finished.

        With ``follow=False``, yield what is there now and stop. The log of a script started
        by ``klavis-sandbox exec`` reads as any other: its stdout and stderr in order, the
        records its launcher wrapped them in removed (:meth:`output` tells them apart).
        """
        for _, text in self.output(follow=follow):
            yield text

    def output(self, *, follow: bool = True) -> Iterator[tuple[str, str]]:
        """Yield ``(stream, text)`` pieces of the output as they arrive: ``"stdout"`` and
        ``"stderr"`` for the script's own streams when ``klavis-sandbox exec`` started it
        (its launcher keeps them apart), ``"log"`` for everything else: pip's install lines,
        the service's notes, and the whole output of an execution started by ``execute``.

        >>> run = sb.execution("run-1a2b3c4d")  # started elsewhere  # doctest: +SKIP
        >>> for stream, text in run.output():  # doctest: +SKIP
        ...     print(stream, repr(text))
        log 'Collecting httpx\\n'
        stdout 'value 42\\n'
        """
        follower, split = self._follower(follow), LogSplitter()
        while True:
            text = self._driver.run(follower.next_text())
            yield from self._pieces(split, text)
            if text is None:
                return

    def wait(self, timeout: float | None = None) -> str:
        """Block until the execution finishes; returns ``completed`` or ``failed``.

        That is all the service says: it reports no exit status (``failed`` covers
        ``sys.exit(3)``, an exception and a failed pip install alike). On the emulator,
        :meth:`exit_code` tells main.py's exit status. Raises ExecutionTimeoutError if
        ``timeout`` seconds pass first (the execution keeps running).
        """
        return self._driver.run(wait_flow(self.sandbox_id, self.name, timeout))

    def exit_code(self) -> int | None:
        """main.py's exit status, known only on the emulator; None otherwise.

        The real service reports no exit status, so there this is None, unless
        ``klavis-sandbox exec`` started the script and :meth:`logs` read its launcher's
        last record. The emulator
        ends the log with ``[emulator] main.py exited with status N.`` (or ``... was killed
        by signal N.``, given as ``-N``, as :mod:`subprocess` does), and this reads that last
        line. None too while the execution runs, and when main.py never ended (pip failed,
        the time limit). It reads the log from where :meth:`logs` stopped: after reading the
        logs to the end, at most one request; otherwise the whole log, once.
        """
        return self._driver.run(self._exit_code())

    def export_artifacts(self) -> Snapshot:
        """The files the script left in its working directory, as a Snapshot.

        Links inside that folder are kept in ``snapshot.links``; links leading outside it (a
        venv's ``bin/python -> /usr/bin/python3``, or ``/data/...``: the script's folder is
        not the workspace) are left out with a warning and listed in
        ``snapshot.skipped_links``. The download is bounded like :meth:`LocalSandbox.dump`'s
        without ``timeout=``.
        """
        return self._driver.run(self._artifacts())


class AsyncExecution(_ExecutionBase):
    """A script running in a sandbox (asyncio). Get one from ``AsyncLocalSandbox.execute``.

    The service reports a status (``pending``, ``running``, ``completed``, ``failed``) and no
    exit status: ``failed`` is all it says of ``sys.exit(3)``. :meth:`exit_code` reads the
    status the emulator writes at the end of the log; on the real service it is None.

    >>> run = await sb.execute("print('hi')")  # doctest: +SKIP
    >>> async for text in run.logs():  # doctest: +SKIP
    ...     print(text, end="")
    hi
    >>> await run.wait()  # doctest: +SKIP
    'completed'
    >>> await run.exit_code()  # doctest: +SKIP
    0
    """

    _driver: AsyncDriver

    async def status(self) -> str:
        """``pending``, ``running``, ``completed`` or ``failed``."""
        return await self._driver.run(status_flow(self.sandbox_id, self.name))

    async def logs(self, *, follow: bool = True) -> AsyncIterator[str]:
        """Yield the output as text as it arrives, until the execution has finished.

        With ``follow=False``, yield what is there now and stop. The log of a script started
        by ``klavis-sandbox exec`` reads as any other: its stdout and stderr in order, the
        records its launcher wrapped them in removed (:meth:`output` tells them apart).
        """
        async for _, text in self.output(follow=follow):
            yield text

    async def output(self, *, follow: bool = True) -> AsyncIterator[tuple[str, str]]:
        """Yield ``(stream, text)`` pieces of the output as they arrive: ``"stdout"`` and
        ``"stderr"`` for the script's own streams when ``klavis-sandbox exec`` started it
        (its launcher keeps them apart), ``"log"`` for everything else: pip's install lines,
        the service's notes, and the whole output of an execution started by ``execute``.

        >>> run = sb.execution("run-1a2b3c4d")  # started elsewhere  # doctest: +SKIP
        >>> async for stream, text in run.output():  # doctest: +SKIP
        ...     print(stream, repr(text))
        log 'Collecting httpx\\n'
        stdout 'value 42\\n'
        """
        follower, split = self._follower(follow), LogSplitter()
        while True:
            text = await self._driver.run(follower.next_text())
            for piece in self._pieces(split, text):
                yield piece
            if text is None:
                return

    async def wait(self, timeout: float | None = None) -> str:
        """Wait until the execution finishes; returns ``completed`` or ``failed``.

        That is all the service says: it reports no exit status (``failed`` covers
        ``sys.exit(3)``, an exception and a failed pip install alike). On the emulator,
        :meth:`exit_code` tells main.py's exit status. Raises ExecutionTimeoutError if
        ``timeout`` seconds pass first (the execution keeps running).
        """
        return await self._driver.run(wait_flow(self.sandbox_id, self.name, timeout))

    async def exit_code(self) -> int | None:
        """main.py's exit status, known only on the emulator; None otherwise.

        The real service reports no exit status, so there this is None, unless
        ``klavis-sandbox exec`` started the script and :meth:`logs` read its launcher's
        last record. The emulator
        ends the log with ``[emulator] main.py exited with status N.`` (or ``... was killed
        by signal N.``, given as ``-N``, as :mod:`asyncio.subprocess` does), and this reads
        that last line. None too while the execution runs, and when main.py never ended (pip
        failed, the time limit). It reads the log from where :meth:`logs` stopped: after
        reading the logs to the end, at most one request; otherwise the whole log, once.
        """
        return await self._driver.run(self._exit_code())

    async def export_artifacts(self) -> Snapshot:
        """The files the script left in its working directory, as a Snapshot.

        Links inside that folder are kept in ``snapshot.links``; links leading outside it (a
        venv's ``bin/python -> /usr/bin/python3``, or ``/data/...``: the script's folder is
        not the workspace) are left out with a warning and listed in
        ``snapshot.skipped_links``. The download is bounded like :meth:`AsyncLocalSandbox.dump`'s
        without ``timeout=``.
        """
        return await self._driver.run(self._artifacts())
