"""What both sandbox faces know without I/O: identity, servers, state, argument checks.

The flows of the methods are imported by the methods (see :mod:`workflows._sandbox`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._dump._limits import ArchiveLimits
from ._errors import InvalidInputError
from ._handle import handle_of, restore
from ._ownership import disown, own, own_detached, unwind_on_sigterm
from ._tracing import release_end, sandbox_start, traced_flow

if TYPE_CHECKING:
    from pathlib import Path

    from ._config import Settings
    from ._execution_input import ExecutionFiles, Requirements
    from ._handle import SandboxHandle
    from ._models import SandboxInfo, ServerInfo
    from ._ownership import Ledger
    from ._seed import SourceFile
    from ._snapshot import Snapshot
    from ._steps import Flow
    from ._template import SeedTemplate

__all__ = ["SandboxBase", "settle_acquired"]

log = logging.getLogger("workflows")


def settle_acquired(
    info: SandboxInfo,
    settings: Settings,
    ledger: Ledger | None,
    attempt: str | None,
    *,
    detach: bool,
    ttl_seconds: int | None,
) -> None:
    """What acquire does, on either face, once the service granted ``info``: own it here (or,
    with ``detach``, record it to outlive this process, its TTL ``ttl_seconds``), settling
    ``attempt``, and log it with its servers."""
    if detach:
        own_detached(info.id, settings, ledger, ttl_seconds=ttl_seconds, attempt=attempt)
    else:
        own(info.id, settings, ledger, attempt=attempt)
    log.info("acquired sandbox %s (%s)", info.id, ", ".join(s.name for s in info.servers))


class SandboxBase:
    """The state shared by :class:`~workflows.LocalSandbox` and its async twin."""

    def __init__(
        self,
        settings: Settings,
        info: SandboxInfo,
        *,
        owned: bool,
        ledger: Ledger | None,
        progress: bool | None,
        limits: ArchiveLimits | None,
    ) -> None:
        self._settings = settings
        self._info = info
        self._owned = owned
        self._released = False
        self._ledger = ledger
        self.progress = progress
        self.limits = limits or ArchiveLimits()

    @property
    def id(self) -> str:
        """The sandbox id."""
        return self._info.id

    @property
    def status(self) -> str | None:
        """The status when last fetched (``occupied`` while held); see ``refresh()``."""
        return self._info.status

    @property
    def benchmark(self) -> str | None:
        """The benchmark the sandbox was configured for, if any."""
        return self._info.benchmark

    @property
    def servers(self) -> tuple[ServerInfo, ...]:
        """The MCP servers: name, ``mcp_server_url``, status, auth data."""
        return self._info.servers

    @property
    def info(self) -> SandboxInfo:
        """Everything known about the sandbox since the last fetch."""
        return self._info

    def handle(self) -> SandboxHandle:
        """What another process needs to use this sandbox, without the key or credentials
        (:class:`~workflows.SandboxHandle`); pickling the sandbox sends the same.

        >>> handle = sb.handle()  # doctest: +SKIP
        >>> LocalSandbox.from_handle(handle).mcp_url("git")  # doctest: +SKIP
        """
        return handle_of(self)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its :meth:`handle` (never the key): unpickled, a sandbox of the same face
        that is not owned, its key read from the receiving process's environment."""
        return restore, (type(self), self.handle(), self.progress, self.limits)

    @property
    def settings(self) -> Settings:
        """The connection settings (the key inside never shows in a repr)."""
        return self._settings

    @property
    def owned(self) -> bool:
        """Whether leaving the ``with`` block releases the sandbox (False after ``attach``)."""
        return self._owned

    @property
    def released(self) -> bool:
        """Whether ``release()`` has run."""
        return self._released

    def _settle_released(self) -> None:
        """What release does, on either face, once the service released the sandbox: mark it,
        forget it here and in the ledger, and log it."""
        self._released = True
        disown(self.id, self.settings, self._ledger)
        log.info("released sandbox %s", self.id)

    def mcp_url(self, server_name: str) -> str:
        """The MCP Streamable HTTP URL of one of the sandbox's servers."""
        url = self._info.server(server_name).mcp_server_url
        if not url:
            raise InvalidInputError(f"the {server_name!r} server has no MCP URL yet; try refresh()")
        return url

    def __repr__(self) -> str:
        names = [s.name for s in self.servers]
        state = "released" if self._released else self.status
        return (
            f"{type(self).__name__}(id={self.id!r}, status={state!r}, servers={names!r}, "
            f"base_url={self.settings.base_url!r})"
        )

    def _show(self, progress: bool | None) -> bool | None:
        return self.progress if progress is None else progress

    def _check_live(self) -> None:
        if self._released:
            raise InvalidInputError(f"sandbox {self.id} was released; acquire a new one")

    @contextlib.contextmanager
    def _releasing_on_exit(self, *, failed: bool) -> Iterator[None]:
        """Around the release made on leaving ``with``: after an error (``failed``), a release
        that fails too is logged, never raised in place of that error."""
        if not failed:
            yield
            return
        try:
            yield
        except Exception as release_error:  # noqa: BLE001 - never hide the original error
            log.warning(
                "could not release sandbox %s after an error (%s); it stays in the ledger "
                "for `klavis-sandbox reap`",
                self.id,
                release_error,
            )

    # the flows of the faces' methods, after their checks (the faces only run them)
    @traced_flow("klavis.seed", sandbox_start)
    def _seed(self, entries: Sequence[SourceFile], progress: bool | None) -> Flow[int]:
        from ._flows import seed_flow

        self._check_live()
        return seed_flow(self.id, entries, self._show(progress))

    @traced_flow("klavis.seed", sandbox_start)
    def _seed_template(self, template: SeedTemplate, progress: bool | None) -> Flow[int]:
        from ._template import template_seed_flow

        self._check_live()
        return template_seed_flow(self.id, template, self._show(progress))

    @traced_flow("klavis.dump", sandbox_start)
    def _dump(self, progress: bool | None, timeout: object) -> Flow[Snapshot]:
        from ._flows import check_timeout, dump_flow

        seconds = check_timeout(timeout)
        self._check_live()
        return dump_flow(self.id, self.limits, self._show(progress), seconds)

    @traced_flow("klavis.dump_to", sandbox_start)
    def _dump_to(self, path: object, progress: bool | None, timeout: object) -> Flow[Path]:
        from ._flows import check_timeout, dump_to_flow, dump_to_target

        target = dump_to_target(path)
        seconds = check_timeout(timeout)
        self._check_live()
        unwind_on_sigterm()  # its temporary entry is removed on SIGTERM too, as on Ctrl-C
        return dump_to_flow(self.id, target, self.limits, self._show(progress), seconds)

    @traced_flow("klavis.reset", sandbox_start)
    def _reset(self) -> Flow[None]:
        from ._flows import reset_flow

        self._check_live()
        return reset_flow(self.id)

    @traced_flow("klavis.release", sandbox_start, release_end)
    def _release_flow(self) -> Flow[bool]:
        from ._flows import release_flow

        return release_flow(self.id)

    def _start(
        self,
        main: str | os.PathLike[str],
        requirements: Requirements,
        files: ExecutionFiles | None,
        name: str | None,
        progress: bool | None,
    ) -> tuple[Flow[None], str, bool | None]:
        """The flow starting an execution, its name, and whether it shows progress bars."""
        from ._execution_input import execution_files

        entries = execution_files(main, requirements=requirements, files=files)
        return self._start_entries(entries, name, progress)

    def _start_directory(
        self,
        folder: str | os.PathLike[str],
        requirements: Requirements,
        files: ExecutionFiles | None,
        ignore: Sequence[str] | str,
        gitignore: bool,
        name: str | None,
        progress: bool | None,
    ) -> tuple[Flow[None], str, bool | None]:
        """The flow starting a folder's main.py, its name, and whether it shows progress bars."""
        from ._execution_input import directory_execution_files

        entries = directory_execution_files(
            folder, requirements=requirements, files=files, ignore=ignore, gitignore=gitignore
        )
        return self._start_entries(entries, name, progress)

    def _start_entries(
        self, entries: list[SourceFile], name: str | None, progress: bool | None
    ) -> tuple[Flow[None], str, bool | None]:
        from ._execution import check_execution_name, start_flow

        run_name = check_execution_name(name)
        self._check_live()
        show = self._show(progress)
        return start_flow(self.id, run_name, entries, show), run_name, show

    def _data_request(self, server: str, data: Mapping[str, Any] | None) -> Any:
        from ._server_data import server_data_body

        body = server_data_body(server, data)
        if server not in {s.name for s in self.servers}:
            raise InvalidInputError(
                f"this sandbox does not hold the {server!r} server; acquire it with "
                f"server_names including {server!r}"
            )
        self._check_live()
        return body
