"""Installing a hosted server when it is first needed (a sandbox holding it is acquired, or
its URL is called) rather than ahead with ``klavis-emulator setup``.

:class:`OnDemandInstaller` runs :func:`~klavis_emulator._mcp.setup.setup_mcp_servers` for
just that server in a worker thread, once however many sandboxes ask at the same time (a
lock per server here; across processes, setup's lock per server), and logs what it does. A
failed install is remembered and not tried again by this emulator: the server's URL answers
503 naming ``klavis-emulator setup --only NAME``, which shows the whole error and retries.
Turned off (``enabled=False``, ``$KLAVIS_EMULATOR_INSTALL_SERVERS=0``) nothing is installed
and a missing server answers that 503 at once: strict, as CI may want.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable
from typing import Final

import anyio
import anyio.to_thread

from .catalog import CATALOG
from .kinds import NpmPackage, OwnVenv
from .setup import McpSetupError, McpToolPaths, setup_fix, setup_mcp_servers

__all__ = ["INSTALL_ENV", "OnDemandInstaller"]

logger = logging.getLogger("klavis_emulator.mcp")

INSTALL_ENV: Final = "KLAVIS_EMULATOR_INSTALL_SERVERS"
"""``0``: never install a missing server on first need."""


class OnDemandInstaller:
    """Installs a missing server's parts on first need; see the module docstring.

    Args:
        tools: reads where the servers are now (:func:`~.setup.find_tools`).
        tools_dir: where to install (default: the per-user tools folder).
        enabled: False installs nothing.
    """

    def __init__(
        self,
        tools: Callable[[], McpToolPaths],
        tools_dir: str | os.PathLike[str] | None,
        *,
        enabled: bool,
    ) -> None:
        self._tools = tools
        self._tools_dir = tools_dir
        self.enabled = enabled
        self._locks: dict[str, anyio.Lock] = {}
        self.failed: dict[str, str] = {}
        """Server -> why its install failed (said in its 503; not tried again)."""
        self.installed: list[str] = []
        """The servers this installer installed, in order (for logs and tests)."""

    def installable(self, server: str, tools: McpToolPaths) -> bool:
        """Whether ``server`` lacks only what setup installs (and installing is on)."""
        install = CATALOG[server].install
        return (
            self.enabled
            and isinstance(install, (NpmPackage, OwnVenv))
            and server not in tools.programs
            and tools.missing_outside(server) is None
        )

    async def install(self, server: str) -> McpToolPaths:
        """Install ``server``'s parts (once: concurrent callers wait for the first) and
        return where the servers are now; a failure is recorded in :attr:`failed`."""
        async with self._locks.setdefault(server, anyio.Lock()):
            tools = self._tools()
            if server in tools.programs or server in self.failed:
                return tools
            logger.warning(
                "installing the %r MCP server on first use (`klavis-emulator setup --only %s` "
                "installs it ahead)",
                server,
                server,
            )
            started = time.monotonic()
            work = functools.partial(
                setup_mcp_servers,
                tools_dir=self._tools_dir,
                only=[server],
                log=lambda line: logger.info("setup: %s", line),
            )
            try:
                await anyio.to_thread.run_sync(work)
            except (McpSetupError, OSError) as exc:
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                self.failed[server] = (
                    f"installing it failed ({first}); {setup_fix(server)} to see why and retry"
                )
                logger.error("installing the %r MCP server failed: %s", server, exc)
                return self._tools()
            self.installed.append(server)
            logger.warning(
                "the %r MCP server is installed (%.1f s)", server, time.monotonic() - started
            )
            return self._tools()
