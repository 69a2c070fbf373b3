"""`AsyncLocalSandbox`: the asyncio twin of :class:`workflows.LocalSandbox`.

Same names, same checks (shared from the I/O-free modules), awaited. CPU and disk work
(packing, reading archives) runs in a worker thread so the event loop stays responsive.

As in :mod:`workflows._sandbox`, what the methods do (asyncio itself included: the module is
imported by ``import workflows``, which sync code runs too) is imported by the methods that
use it, and the names only annotations need for type checkers alone.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._acquire import (
    AcquireOptions,
    AttachOptions,
    ConnectionOptions,
    Unpack,
    check_keywords,
    resolve_acquire,
    resolve_connection,
)
from ._config import DEFAULT_MCP_TIMEOUT
from ._handle import SandboxHandle, settings_for
from ._models import SandboxInfo, ServerNames, check_sandbox_id
from ._sandbox_base import SandboxBase, settle_acquired
from ._tracing import mcp_start, traced_call

if TYPE_CHECKING:
    from mcp import ClientSession

    from ._drivers import AsyncDriver
    from ._dump._limits import ArchiveLimits
    from ._execution import AsyncExecution
    from ._execution_input import ExecutionFiles, Requirements
    from ._mcp import ToolInfo, ToolResult
    from ._ownership import Ledger
    from ._seed import FolderOptions, SourceFile
    from ._server_data import ServerData
    from ._snapshot import Snapshot
    from ._template import SeedTemplate

__all__ = ["AsyncLocalSandbox", "PendingSandbox", "async_list_sandboxes"]


async def async_list_sandboxes(**options: Unpack[ConnectionOptions]) -> list[SandboxInfo]:
    """Every active sandbox of this API key; the same as :meth:`AsyncLocalSandbox.list`.

    >>> for info in await async_list_sandboxes():  # doctest: +SKIP
    ...     print(info.id, info.status, [s.name for s in info.servers])
    """
    from ._drivers import AsyncDriver
    from ._flows import list_flow

    driver = AsyncDriver(resolve_connection("async_list_sandboxes", options, ConnectionOptions))
    try:
        return await driver.run(list_flow())
    finally:
        await driver.aclose()


class PendingSandbox:
    """What ``AsyncLocalSandbox.acquire`` and ``attach`` return: await it, or ``async with`` it.

    >>> sb = await AsyncLocalSandbox.acquire(["git"])  # doctest: +SKIP
    >>> async with AsyncLocalSandbox.acquire(["git"]) as sb:  # doctest: +SKIP
    ...     await sb.seed({"a.txt": "A"})
    """

    def __init__(self, make: Callable[[], Awaitable[AsyncLocalSandbox]]) -> None:
        self._make = make
        self._sandbox: AsyncLocalSandbox | None = None

    def __await__(self) -> Generator[Any, None, AsyncLocalSandbox]:
        return self._make().__await__()

    async def __aenter__(self) -> AsyncLocalSandbox:
        self._sandbox = await self._make()
        return self._sandbox

    async def __aexit__(self, *exc_info: Any) -> None:
        if self._sandbox is not None:
            await self._sandbox.__aexit__(*exc_info)


class AsyncLocalSandbox(SandboxBase):
    """A Klavis local sandbox for asyncio code: :class:`~workflows.LocalSandbox`, awaited.

    Acquire one in an ``async with`` block so it is released whatever happens::

        async with AsyncLocalSandbox.acquire(["filesystem"], ttl_seconds=600) as sb:
            await sb.seed({"hello.txt": "hi"})
            snap = await sb.dump()

    ``sb = await AsyncLocalSandbox.acquire(...)`` works too; then ``await sb.release()``.
    """

    def __init__(
        self,
        info: SandboxInfo,
        *,
        _driver: AsyncDriver,
        _owns_driver: bool,
        owned: bool,
        ledger: Ledger | None = None,
        progress: bool | None = None,
        limits: ArchiveLimits | None = None,
    ) -> None:
        """Made by :meth:`acquire` and :meth:`attach` (``_driver``, private, is its connection;
        ``_owns_driver``: whether closing the sandbox closes it)."""
        super().__init__(
            _driver.settings, info, owned=owned, ledger=ledger, progress=progress, limits=limits
        )
        self._driver = _driver
        self._owns_driver = _owns_driver

    @classmethod
    def acquire(
        cls,
        server_names: ServerNames,
        *,
        detach: bool = False,
        _driver: AsyncDriver | None = None,
        **options: Unpack[AcquireOptions],
    ) -> PendingSandbox:
        """Acquire a sandbox with these MCP servers (a list of names, or ``"ALL"``): await
        it, or ``async with`` it.

        The keywords are :class:`~workflows.AcquireOptions`' (``benchmark``, ``ttl_seconds``,
        ``test_account_email``, ``api_key``, ``base_url``, ``timeout``, ``progress``,
        ``ledger``, ``limits``), checked before anything is sent. The sandbox is released when
        the ``async with`` block ends, at :meth:`release`, at interpreter exit or on SIGTERM,
        and after ``ttl_seconds`` (60..86400, None = never) by the service itself.
        (``_driver``, private, lets a batch share one connection pool; the sandbox then does
        not close it.)

        ``detach=True`` acquires it to outlive this process, as ``klavis-sandbox acquire``
        does: it is not owned (leaving ``async with``, exit and SIGTERM leave it alone), and
        ``reap`` spares it; its TTL or :meth:`release` (here, or by id elsewhere) ends it.

        >>> async with AsyncLocalSandbox.acquire(["git"], ttl_seconds=600) as sb:  # doctest: +SKIP
        ...     print(sb.id, sb.mcp_url("git"))
        >>> kept = await AsyncLocalSandbox.acquire(["git"], detach=True)  # doctest: +SKIP
        """
        given = None if _driver is None else _driver.settings
        wanted = resolve_acquire("acquire", server_names, options, settings=given)
        settings, request, book = wanted.settings, wanted.request, wanted.ledger
        progress, limits, host_limits = wanted.progress, wanted.limits, wanted.host_limits

        async def make() -> AsyncLocalSandbox:
            from ._drivers import AsyncDriver
            from ._flows import acquire_attempt, retry_acquire
            from ._host_limits import async_host_slot

            driver = _driver or AsyncDriver(settings)
            try:
                async with async_host_slot(host_limits, settings) as slot:  # waits under them
                    info, attempt = await driver.run_retrying(
                        lambda: acquire_attempt(request, settings, book, host_limits),
                        on=retry_acquire,
                    )
                    slot.keep(info.id)
            except BaseException:
                if _driver is None:
                    await driver.aclose()
                raise
            ttl = request.ttl_seconds
            settle_acquired(info, settings, book, attempt, detach=detach, ttl_seconds=ttl)
            return cls(
                info,
                _driver=driver,
                _owns_driver=_driver is None,
                owned=not detach,
                ledger=book,
                progress=progress,
                limits=limits,
            )

        return PendingSandbox(make)

    @classmethod
    async def list(cls, **options: Unpack[ConnectionOptions]) -> builtins.list[SandboxInfo]:
        """Every active sandbox of this API key.

        >>> for info in await AsyncLocalSandbox.list():  # doctest: +SKIP
        ...     print(info.id, info.status, [s.name for s in info.servers])
        """
        return await async_list_sandboxes(**options)

    @classmethod
    def from_handle(
        cls, handle: SandboxHandle, **options: Unpack[AttachOptions]
    ) -> AsyncLocalSandbox:
        """The sandbox another process handed over (:meth:`handle`, or a pickled sandbox), not
        owned, without a request (so not awaited); :meth:`aclose` closes its connections.

        The key is never in a handle: it comes from ``api_key=`` or this process's environment
        (``KLAVIS_API_KEY`` or ``KLAVIS_API_KEY_FILE``; with Ray, the machines'), and must be
        the one that acquired the sandbox (:class:`~workflows.ConfigurationError` otherwise,
        before anything is sent). The servers' ``auth_data`` is not handed over:
        :meth:`refresh` fetches it.

        >>> async with AsyncLocalSandbox.from_handle(handle) as sb:  # doctest: +SKIP
        ...     snap = await sb.dump()
        """
        from ._drivers import AsyncDriver

        settings = settings_for("from_handle", handle, options)
        return cls(
            handle.info,
            _driver=AsyncDriver(settings),
            _owns_driver=True,
            owned=False,
            progress=options.get("progress"),
            limits=options.get("limits"),
        )

    @classmethod
    def attach(cls, local_sandbox_id: str, **options: Unpack[AttachOptions]) -> PendingSandbox:
        """Wrap an existing sandbox without owning it; NotFoundError if it is not there.

        The way to pick up a sandbox acquired elsewhere (``klavis-sandbox acquire``, another
        process); call :meth:`release` to end it. Await it, or use it in ``async with`` (which
        closes the connections but does not release the sandbox)::

            async with AsyncLocalSandbox.attach(sandbox_id) as sb:
                snap = await sb.dump()
        """
        check_keywords("attach", options, AttachOptions)
        check_sandbox_id(local_sandbox_id)
        settings = resolve_connection("attach", options, AttachOptions)
        progress, limits = options.get("progress"), options.get("limits")

        async def make() -> AsyncLocalSandbox:
            from ._drivers import AsyncDriver
            from ._flows import get_flow

            driver = AsyncDriver(settings)
            try:
                info = await driver.run(get_flow(local_sandbox_id))
            except BaseException:
                await driver.aclose()
                raise
            return cls(
                info,
                _driver=driver,
                _owns_driver=True,
                owned=False,
                progress=progress,
                limits=limits,
            )

        return PendingSandbox(make)

    async def refresh(self) -> SandboxInfo:
        """Fetch the sandbox's current details."""
        from ._flows import get_flow

        self._info = await self._driver.run(get_flow(self.id))
        return self._info

    # ----------------------------------------------------------------- workspace
    async def seed(
        self, files: Mapping[str, str | bytes] | SeedTemplate, *, progress: bool | None = None
    ) -> int:
        """Add files to the workspace from a mapping of relative path to text or bytes, or
        from a :class:`~workflows.SeedTemplate` (packed once, for many sandboxes).

        Keys are checked first (no absolute paths, ``..``, NUL or collisions) and nothing is
        sent if one is bad. Existing files of the same name are overwritten; others stay.
        Returns the number of files seeded.

        >>> await sb.seed({"hello.txt": "hi", "data/x.bin": b"\\x00"})  # doctest: +SKIP
        2

        A template's archive is uploaded as it was packed, with no planning and no packing,
        once checked against its digest (:class:`~workflows.SeedTemplateError`, before any
        request, when it is damaged or gone):

        >>> template = SeedTemplate.from_folder("./task")  # doctest: +SKIP
        >>> await sb.seed(template)  # doctest: +SKIP
        2000
        """
        from ._seed import plan_mapping
        from ._template import SeedTemplate

        if isinstance(files, SeedTemplate):
            return await self._driver.run(self._seed_template(files, progress))
        entries = plan_mapping(files)
        await self._upload(entries, progress)
        return sum(1 for e in entries if not e.is_dir)

    async def seed_directory(
        self,
        path: str | os.PathLike[str],
        *,
        progress: bool | None = None,
        **rules: Unpack[FolderOptions],
    ) -> int:
        """Add a local folder's files to the workspace, streamed from disk.

        Follows ``.gitignore`` (when ``gitignore``) and ``.sandboxignore`` files with full
        gitignore syntax, plus ``ignore=`` patterns; never follows a symlink out of the folder;
        a file over ``max_file_size`` raises FileTooLargeError naming it. Returns the file count.

        Files arrive with one fixed modification time (2000-01-01) by default, so the same
        folder always packs to the same bytes (a reproducible archive, cacheable and comparable).
        ``preserve_mtime=True`` sends each file's time from disk instead, for build tools in
        the sandbox (make, ninja, pytest's caches) that compare modification times.
        :meth:`Snapshot.from_directory` reads a folder with the same rules, to compare with a
        dump.

        >>> await sb.seed_directory("./project", ignore=["*.log"])  # doctest: +SKIP
        """
        import asyncio

        from ._seed import FolderRules

        read = FolderRules.of("seed_directory", rules)
        entries = await asyncio.to_thread(read.plan, path)
        await self._upload(entries, progress)
        return sum(1 for e in entries if not e.is_dir)

    async def _upload(self, entries: Sequence[SourceFile], progress: bool | None) -> None:
        await self._driver.run(self._seed(entries, progress))

    async def dump(self, *, progress: bool | None = None, timeout: float | None = None) -> Snapshot:
        """Download the workspace as a read-only :class:`Snapshot` (path -> bytes).

        The archive is streamed to disk and checked member by member (no absolute paths,
        ``..``, devices, sparse files; caps from ``limits``); memory stays flat. Links into the
        sandbox's ``/data`` are kept in ``snapshot.links``; links leading outside the workspace
        are left out with a warning and listed in ``snapshot.skipped_links``.

        ``timeout`` (seconds), when given, bounds the whole download, retries included: past
        it, :class:`~workflows.TransferTimeoutError`. Without it, a big workspace may take as
        long as it needs, but a download that receives fewer than 64 KiB within any window of
        the sandbox's timeout (60 s by default) is ended as too slow (the same error), and each
        read waits at most that timeout.

        >>> snap = await sb.dump()  # doctest: +SKIP
        >>> snap["hello.txt"]  # doctest: +SKIP
        b'hi'
        """
        return await self._driver.run(self._dump(progress, timeout))

    async def dump_to(
        self,
        path: str | os.PathLike[str],
        *,
        progress: bool | None = None,
        timeout: float | None = None,
    ) -> Path:
        """Save the workspace: extracted into a folder, or as is when ``path`` ends in .tar.gz/.tgz.

        The destination is checked (by making its parent folders) before anything is
        downloaded; a folder is filled only once the whole archive passed the safety checks, a
        ``.tar.gz`` file appears atomically, and a failure leaves the disk as it was (a full
        disk or quota, or a file size limit, raises :class:`~workflows.LocalWriteError`), as
        do Ctrl-C and SIGTERM (from the main thread, SIGTERM then raises ``SystemExit``, unless
        the process has a handler of its own). Links into ``/data`` are written as relative
        links; links leading outside are left out with a warning.

        Symlinks on the way to ``path`` are followed; ``path`` itself never is: a ``.tar.gz``
        replaces a symlink of that name (its target is never written), and a folder ``path``
        that is a symlink is refused with :class:`~workflows.InvalidInputError` (extracting
        would write outside the path named: name the folder itself). ``timeout`` is
        :meth:`dump`'s: without it there is no deadline for the whole download, only the
        low-speed guard. Returns the path written.
        """
        return await self._driver.run(self._dump_to(path, progress, timeout))

    async def reset(self) -> None:
        """Reset the sandbox and its servers to their initial state (the workspace is emptied)."""
        await self._driver.run(self._reset())

    # ----------------------------------------------------------------- MCP servers
    def mcp(
        self, server: str, *, timeout: float = DEFAULT_MCP_TIMEOUT
    ) -> AbstractAsyncContextManager[ClientSession]:
        """An initialised ``mcp.ClientSession`` with one of the sandbox's MCP servers::

        async with sb.mcp("filesystem") as session:
            tools = await session.list_tools()
        """
        from ._mcp import open_session

        return open_session(self.mcp_url(server), timeout=timeout)

    @traced_call("klavis.mcp.list_tools", mcp_start)
    async def list_tools(
        self, server: str, *, timeout: float = DEFAULT_MCP_TIMEOUT
    ) -> builtins.list[ToolInfo]:
        """The tools one of the sandbox's MCP servers offers (name, description, schema).

        >>> [t.name for t in await sb.list_tools("git")][:2]  # doctest: +SKIP
        ['git_status', 'git_diff_unstaged']
        """
        from ._mcp import async_list_tools

        return await async_list_tools(self.mcp_url(server), timeout=timeout)

    @traced_call("klavis.mcp.call_tool", mcp_start)
    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float = DEFAULT_MCP_TIMEOUT,
    ) -> ToolResult:
        """Call a tool of one of the sandbox's MCP servers; ``.text`` holds its text output.

        A tool's own failure comes back with ``is_error`` set (``raise_for_error()`` raises).

        >>> (await sb.call_tool("terminal", "run_command", {"command": "ls"})).text
        'hello.txt'
        """
        from ._mcp import async_call_tool

        return await async_call_tool(self.mcp_url(server), tool, arguments, timeout=timeout)

    # ----------------------------------------------------------------- executions, data
    async def execute(
        self,
        main: str | os.PathLike[str],
        *,
        requirements: Requirements = (),
        files: ExecutionFiles | None = None,
        name: str | None = None,
        progress: bool | None = None,
    ) -> AsyncExecution:
        """Run a Python script in the sandbox, in the background; returns its async handle.

        ``main`` is the script's text, or a ``Path`` to a file; it travels as ``main.py``.
        ``requirements`` is installed with pip first: a list of requirement lines
        (``["httpx==0.28.1", "pandas"]``), or a ``Path`` to a requirements file, read as pip
        reads one (nested ``-r`` files relative to it; ``-c`` constraints are refused).
        ``files`` adds files beside ``main.py``: ``{"name": text | bytes | Path}``, where a
        ``Path`` is a file or a folder on disk (a folder's ``.gitignore`` is honoured). The
        script's working directory is exported by ``export_artifacts()``; files it writes under
        ``os.environ["AGENT_WORKSPACE"]`` land in the workspace the MCP servers see. Bad input
        (``main.py`` or ``requirements.txt`` in ``files``, a missing file) raises
        InvalidInputError naming the argument to use, before anything is sent.

        The service reports no exit status, only ``completed`` or ``failed``; the handle's
        ``exit_code()`` reads the one the emulator logs.

        >>> run = await sb.execute(Path("main.py"), requirements=["httpx"])  # doctest: +SKIP
        >>> async for text in run.logs():  # doctest: +SKIP
        ...     print(text, end="")
        >>> await run.wait(), await run.exit_code()  # doctest: +SKIP
        ('completed', 0)
        """
        from ._execution import AsyncExecution

        start, run_name, show = self._start(main, requirements, files, name, progress)
        await self._driver.run(start)
        return AsyncExecution(self._driver, self.id, run_name, limits=self.limits, progress=show)

    async def execute_directory(
        self,
        path: str | os.PathLike[str],
        *,
        requirements: Requirements = (),
        files: ExecutionFiles | None = None,
        ignore: Sequence[str] | str = (),
        gitignore: bool = True,
        name: str | None = None,
        progress: bool | None = None,
    ) -> AsyncExecution:
        """Run a local folder's ``main.py`` with everything beside it; returns its async handle.

        The folder is packed as :meth:`seed_directory` packs one (``.gitignore`` when
        ``gitignore``, ``.sandboxignore`` and ``ignore=`` patterns; no symlink out of it),
        except that ``.git`` folders are left out. Its ``requirements.txt``, if any, is
        installed first; ``requirements=`` gives one instead (both at once are refused).
        ``files`` adds more, as in :meth:`execute`. A folder without ``main.py`` at its top
        raises InvalidInputError before anything is sent.

        >>> run = await sb.execute_directory("./job", ignore=["*.log"])  # doctest: +SKIP
        >>> await run.wait()  # doctest: +SKIP
        'completed'
        """
        from ._execution import AsyncExecution

        start, run_name, show = self._start_directory(
            path, requirements, files, ignore, gitignore, name, progress
        )
        await self._driver.run(start)
        return AsyncExecution(self._driver, self.id, run_name, limits=self.limits, progress=show)

    def execution(self, name: str) -> AsyncExecution:
        """The handle of this sandbox's execution ``name``, started elsewhere (another process,
        ``klavis-sandbox exec``); no request is sent until it is used.

        >>> sb.execution("run-1a2b3c4d").logs()  # doctest: +SKIP
        """
        from ._execution import AsyncExecution, check_execution_name

        run_name = check_execution_name(name)
        return AsyncExecution(self._driver, self.id, run_name, limits=self.limits, progress=False)

    async def initialize_server_data(
        self, server: str, data: Mapping[str, Any] | None = None, *, default: bool = False
    ) -> str:
        """Load a data document into ``google_cloud``, ``poste_email_toolathlon`` or ``canvas``
        (``default=True`` loads the service's built-in document). Returns the service's message.
        """
        from ._server_data import initialize_data_flow

        body = self._data_request(server, data)
        return await self._driver.run(initialize_data_flow(self.id, server, body, default=default))

    async def dump_server_data(self, server: str) -> ServerData:
        """The current data document of google_cloud, poste_email_toolathlon or canvas."""
        from ._server_data import dump_data_flow

        self._data_request(server, None)
        return await self._driver.run(dump_data_flow(self.id, server))

    # ----------------------------------------------------------------- release
    async def release(self) -> bool:
        """Release the sandbox (idempotent): True if this call released it.

        Runs to completion even if the awaiting task is cancelled meanwhile.
        """
        import asyncio

        if self._released:
            return False
        return await asyncio.shield(asyncio.ensure_future(self._release()))

    async def _release(self) -> bool:
        if self._released:
            return False
        result = await self._driver.run(self._release_flow())
        self._settle_released()
        if self._owns_driver:
            await self._driver.aclose()
        return result

    async def aclose(self) -> None:
        """Close the connections of a sandbox you do not release (for :meth:`attach`)."""
        if self._owns_driver:
            await self._driver.aclose()

    async def __aenter__(self) -> AsyncLocalSandbox:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        if not self._owned or self._released:
            await self.aclose()
            return
        with self._releasing_on_exit(failed=exc_type is not None):
            await self.release()
