"""Making a hosted server's processes: the command line of one start, its log, its folders.

:class:`ProcessMaker` turns (server, owner, workspace folder) into a
:class:`~.backend.ServerProcess` (not started): the command line from
:func:`~.launch.launch_spec` in the emulator's confinement, a log file for its stderr under
``<data_dir>/mcp-logs``, and, unconfined, a private temporary folder of its own under
``<data_dir>/mcp-tmp`` (confined, ``/tmp`` is a private tmpfs already). Each start gets new
ones: a reset's fresh process does not find the old one's temporary files. A confined Python
server with a fork recipe is started from its fork server (:mod:`.forks`).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from .._exec import Confinement
from .backend import ServerProcess
from .catalog import CATALOG
from .forks import ForkServers
from .launch import LaunchSpec, launch_spec
from .setup import McpToolPaths

__all__ = ["ProcessMaker"]


class ProcessMaker:
    """Makes the server processes of one emulator (see the module docs).

    ``tools`` and ``confinement`` are asked at each start (the host decides confinement
    once, when it starts serving; tests patch where the tools are). ``fork``: start the
    Python servers that can be from fork servers when confined (see :mod:`.forks`).
    """

    def __init__(
        self,
        data_dir: Path,
        tools: Callable[[], McpToolPaths],
        confinement: Callable[[], Confinement],
        command_timeout: int,
        *,
        fork: bool = True,
    ) -> None:
        self._logs = data_dir / "mcp-logs"
        self._tmp = data_dir / "mcp-tmp"
        self._tools = tools
        self._confinement = confinement
        self._command_timeout = command_timeout
        self.forks = ForkServers(self._logs, fork)

    def __repr__(self) -> str:
        return f"ProcessMaker(logs={str(self._logs)!r})"

    def drop_leftovers(self) -> None:
        """Delete the logs and temporary folders a killed emulator left behind."""
        shutil.rmtree(self._logs, ignore_errors=True)
        shutil.rmtree(self._tmp, ignore_errors=True)

    def spec(
        self,
        server: str,
        folder: Path,
        *,
        tmp_dir: Path | None = None,
        mail: Mapping[str, Any] | None = None,
    ) -> LaunchSpec:
        """The command line of ``server`` on the workspace ``folder`` (its fork server's
        client, where it has one)."""
        confinement = self._confinement()
        spec = launch_spec(
            server,
            folder,
            self._tools(),
            bwrap=confinement.bwrap if confinement.enabled else None,
            command_timeout=self._command_timeout,
            tmp_dir=tmp_dir,
            mail=mail,
        )
        return self.forks.wrap(server, spec)

    def prepare_forks(self, servers: Iterable[str], folder: Path) -> None:
        """Start, in the background, the fork servers of those of ``servers`` that have one
        and are not running yet (at acquire: a sandbox's first start of such a server then
        costs a fork, not the fork server's imports). Call it on the host's loop thread, as
        every start: a fork server dies with the thread that started it
        (``PR_SET_PDEATHSIG``), and the loop's thread lives as long as the host."""
        if not self.forks.enabled or not self._confinement().enabled:
            return
        for server in servers:
            if CATALOG[server].fork is not None:
                self.spec(server, folder)

    def close(self) -> None:
        """Stop the fork servers (when the host stops)."""
        self.forks.close()

    def new(
        self, server: str, owner: str, folder: Path, mail: Mapping[str, Any] | None = None
    ) -> ServerProcess:
        """A process of ``server`` on ``folder`` (not started) for ``owner``, a sandbox id or
        ``spare``, which names its log and its temporary folder; ``mail``: the sandbox's mail
        server and account, for a server with a mail server."""
        tmp_dir: Path | None = None
        if not self._confinement().enabled and CATALOG[server].private_tmp:
            tmp_dir = self._tmp / f"{owner}-{server}-{uuid.uuid4().hex[:8]}"
            tmp_dir.mkdir(parents=True)
        spec = self.spec(server, folder, tmp_dir=tmp_dir, mail=mail)
        self._logs.mkdir(parents=True, exist_ok=True)
        log_file = self._logs / f"{owner}-{server}-{uuid.uuid4().hex[:8]}.log"
        return ServerProcess(spec, log_file, folder, tmp_dir)
