"""Running a script in a sandbox: the archive, the flows, and the `Execution` handles.

``sb.execute(...)`` packs ``main.py`` (plus ``requirements.txt`` and any extra files) into a
tar.gz, uploads it to the execution's signed URL and starts it. The returned handle streams the
logs (following the server's byte cursor, so every byte is seen once), waits for the outcome and
exports the artifacts the script left in its working directory.
"""

from __future__ import annotations

import os
import re
import secrets
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any

from ._drivers import AsyncDriver, SyncDriver
from ._dump._archive import ArchiveLimits, read_snapshot
from ._errors import ApiError, ExecutionTimeoutError, InvalidInputError, NotFoundError
from ._flows import Blocking, Call, Flow, Sleep, download_signed, upload_signed
from ._models import body_dict
from ._ownership import is_ambiguous
from ._seed import SourceFile, plan_mapping
from ._snapshot import Snapshot

__all__ = [
    "TERMINAL_STATUSES",
    "AsyncExecution",
    "Execution",
    "LogFollower",
    "artifacts_flow",
    "check_execution_name",
    "execution_files",
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


def execution_files(
    main: str | os.PathLike[str],
    *,
    requirements: Sequence[str] = (),
    files: Mapping[str, str | bytes] | None = None,
) -> list[SourceFile]:
    """Check and lay out the execution archive: ``main.py``, ``requirements.txt``, extra files.

    ``main`` is the script's text, or a :class:`pathlib.Path` (any ``os.PathLike``) to a file.
    """
    if isinstance(main, os.PathLike):
        path = Path(main)
        if not path.is_file():
            raise InvalidInputError(f"main script {path} does not exist or is not a file")
        source: str | bytes = path.read_bytes()
    elif isinstance(main, str):
        stripped = main.strip()
        if not stripped:
            raise InvalidInputError("main is empty: pass the script's text or a Path to it")
        if "\n" not in stripped and stripped.endswith(".py") and Path(stripped).is_file():
            raise InvalidInputError(
                f"main looks like a file name; pass Path({stripped!r}) to run that file "
                "(a str is taken as the script's text)"
            )
        source = main
    else:
        raise InvalidInputError(
            f"main must be the script's text (str) or a Path, got {type(main).__name__}"
        )
    if isinstance(requirements, str):
        raise InvalidInputError("requirements must be a list of requirement lines, not one str")
    layout: dict[str, str | bytes] = dict(files or {})
    for reserved in ("main.py", "requirements.txt"):
        if reserved in layout:
            raise InvalidInputError(f"files must not contain {reserved!r}; it is built for you")
    layout["main.py"] = source
    lines = [str(r).strip() for r in requirements if str(r).strip()]
    if lines:
        layout["requirements.txt"] = "\n".join(lines) + "\n"
    return plan_mapping(layout)


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


class LogFollower:
    """Where a reader of an execution's logs is: the server's byte cursor (so every byte is seen
    once) and how long the output has been quiet (polls back off up to 2 s)."""

    def __init__(self, sandbox_id: str, name: str, *, follow: bool) -> None:
        self.sandbox_id = sandbox_id
        self.name = name
        self.follow = follow
        self.cursor = 0
        self._idle = 0

    def next_text(self) -> Flow[str | None]:
        """The next piece of output as it arrives; None once no more will come (the execution
        finished, or, without ``follow``, there is nothing new now)."""
        while True:
            status, text, self.cursor = yield from logs_flow(
                self.sandbox_id, self.name, self.cursor
            )
            if text:
                self._idle = 0
                return text
            if status in TERMINAL_STATUSES or not self.follow:
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

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, sandbox_id={self.sandbox_id!r})"

    def _artifacts(self) -> Flow[Snapshot]:
        return artifacts_flow(self.sandbox_id, self.name, self.limits, self.progress)


class Execution(_ExecutionBase):
    """A script running in a sandbox (sync). Get one from ``LocalSandbox.execute``.

    >>> run = sb.execute("print('hi')")  # doctest: +SKIP
    >>> for text in run.logs():  # doctest: +SKIP
    ...     print(text, end="")
    hi
    >>> run.wait()  # doctest: +SKIP
    'completed'
    """

    _driver: SyncDriver

    def status(self) -> str:
        """``pending``, ``running``, ``completed`` or ``failed``."""
        return self._driver.run(status_flow(self.sandbox_id, self.name))

    def logs(self, *, follow: bool = True) -> Iterator[str]:
        """Yield the output as text as it arrives, until the execution has finished.

        With ``follow=False``, yield what is there now and stop.
        """
        follower = LogFollower(self.sandbox_id, self.name, follow=follow)
        while (text := self._driver.run(follower.next_text())) is not None:
            yield text

    def wait(self, timeout: float | None = None) -> str:
        """Block until the execution finishes; returns ``completed`` or ``failed``.

        Raises ExecutionTimeoutError if ``timeout`` seconds pass first.
        """
        return self._driver.run(wait_flow(self.sandbox_id, self.name, timeout))

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

    >>> run = await sb.execute("print('hi')")  # doctest: +SKIP
    >>> async for text in run.logs():  # doctest: +SKIP
    ...     print(text, end="")
    hi
    >>> await run.wait()  # doctest: +SKIP
    'completed'
    """

    _driver: AsyncDriver

    async def status(self) -> str:
        """``pending``, ``running``, ``completed`` or ``failed``."""
        return await self._driver.run(status_flow(self.sandbox_id, self.name))

    async def logs(self, *, follow: bool = True) -> AsyncIterator[str]:
        """Yield the output as text as it arrives, until the execution has finished.

        With ``follow=False``, yield what is there now and stop.
        """
        follower = LogFollower(self.sandbox_id, self.name, follow=follow)
        while (text := await self._driver.run(follower.next_text())) is not None:
            yield text

    async def wait(self, timeout: float | None = None) -> str:
        """Wait until the execution finishes; returns ``completed`` or ``failed``.

        Raises ExecutionTimeoutError if ``timeout`` seconds pass first (the execution keeps
        running).
        """
        return await self._driver.run(wait_flow(self.sandbox_id, self.name, timeout))

    async def export_artifacts(self) -> Snapshot:
        """The files the script left in its working directory, as a Snapshot.

        Links inside that folder are kept in ``snapshot.links``; links leading outside it (a
        venv's ``bin/python -> /usr/bin/python3``, or ``/data/...``: the script's folder is
        not the workspace) are left out with a warning and listed in
        ``snapshot.skipped_links``. The download is bounded like :meth:`AsyncLocalSandbox.dump`'s
        without ``timeout=``.
        """
        return await self._driver.run(self._artifacts())
