"""The real MCP servers the emulator hosts at each sandbox's ``mcp_server_url``.

================  ===================================================================
``catalog``       every server of the contract's enum, described once
``kinds``         what a catalog entry is made of: install kinds, launch context, parts
``launchers``     each hosted server's own command line, and the quirks it works around
``setup``         installing and finding the servers (``klavis-emulator setup``)
``launch``        a hosted server's full command line: environment and confinement
``host``          the ASGI app serving each sandbox's servers, and their lifecycle
``backend``       one server of one sandbox behind its proxy; how a request reaches it
``relay``         the transport a proxy talks through, swapped to a fresh process by a reset
``processes``     making a server's processes: command line, log, temporary folder
``resets``        how a reset reaches a sandbox's servers: held, killed, fresh ones in
``spares``        server sets started ahead that a reset swaps in, and what that costs
``loop``          the host's event loop, reached from any thread
``mail_servers``  the sandboxes' mail servers (for ``poste_email_toolathlon``)
``mount``         the host on the emulator's app: mount, lifespan, the state's hooks
================  ===================================================================
"""

from __future__ import annotations

from .catalog import CATALOG, HOSTED_SERVERS
from .host import McpHost
from .kinds import NotHosted
from .mount import install_mcp
from .setup import (
    McpSetupError,
    McpToolPaths,
    default_tools_dir,
    find_tools,
    installed_version,
    missing_python,
    setup_mcp_servers,
)

__all__ = [
    "CATALOG",
    "HOSTED_SERVERS",
    "McpHost",
    "McpSetupError",
    "McpToolPaths",
    "NotHosted",
    "default_tools_dir",
    "find_tools",
    "install_mcp",
    "installed_version",
    "missing_python",
    "setup_mcp_servers",
]
