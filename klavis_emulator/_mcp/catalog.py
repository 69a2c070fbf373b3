"""The catalog: every MCP server of the contract's enum, described once.

For each server name of ``LocalSandboxServerName`` (see ``openapi.yaml``) one
:class:`McpServer` says

- how it is installed: an npm package pinned in the shared lock file
  (:class:`NpmPackage`), a PyPI distribution in its own virtual environment built from a
  fully pinned requirements file (:class:`OwnVenv`), a module importable by the emulator's
  own interpreter (:class:`EmulatorPython`), or why the emulator does not host it
  (:class:`NotHosted`: not feasible offline, or not packaged yet); these kinds are in
  :mod:`.kinds`;
- how it is launched: its launch function in :mod:`.launchers`, where a server's own
  quirks are recorded beside it.

:mod:`klavis_emulator._mcp.setup` installs and finds the servers from this table,
:mod:`klavis_emulator._mcp.launch` confines them, :mod:`klavis_emulator._mcp.host` answers
501 (with :attr:`NotHosted.reason`) for the servers it does not host. No I/O here.

Rejected alternative: one ``if/elif`` per server in setup, launch, messages and tests (what
the emulator had for three servers); each new server touched four modules and the reasons for
the missing ones lived only in a 501 message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from .kinds import EmulatorPython, McpServer, NotHosted, NpmPackage, OwnVenv
from .launchers import (
    ARXIV_FORK,
    ARXIV_STORAGE,
    CHROMIUM,
    DOVECOT,
    GIT_FORK,
    MEMORY_FILE,
    PLAYWRIGHT_OUTPUT,
    RIPGREP,
    TERMINAL_FORK,
    launch_arxiv,
    launch_code_runner,
    launch_desktop_commander,
    launch_emails,
    launch_excel,
    launch_filesystem,
    launch_git,
    launch_localmemory,
    launch_pdf_tools,
    launch_playwright,
    launch_powerpoint,
    launch_terminal,
    launch_word,
)

__all__ = ["CATALOG", "HOSTED_SERVERS", "server_entry"]


_NOT_PACKAGED: Final = "the emulator does not package it yet (it could run offline: {})"

CATALOG: Final[Mapping[str, McpServer]] = {
    server.name: server
    for server in (
        McpServer(
            "filesystem",
            NpmPackage("@modelcontextprotocol/server-filesystem", "2026.8.31", "dist/index.js"),
            "read, write, search files in the workspace",
            launch_filesystem,
        ),
        McpServer(
            "git",
            EmulatorPython("mcp-server-git", "mcp_server_git"),
            "git status/diff/commit/log on the workspace repository",
            launch_git,
            fork=GIT_FORK,
        ),
        McpServer(
            "terminal",
            OwnVenv(
                "cli-mcp-server",
                "0.2.5",
                "cli-requirements.txt",
                "cli-mcp-server",
                why="it crashes on import under mcp 2.x, so it keeps mcp<2",
            ),
            "allow-listed shell commands in the workspace",
            launch_terminal,
            fork=TERMINAL_FORK,
        ),
        McpServer(
            "localmemory",
            NpmPackage("@modelcontextprotocol/server-memory", "2026.8.31", "dist/index.js"),
            f"a knowledge graph kept in <workspace>/{MEMORY_FILE}",
            launch_localmemory,
        ),
        McpServer(
            "code-runner",
            NpmPackage("mcp-server-code-runner", "0.1.8", "dist/cli.js"),
            "runs a code snippet (JavaScript, Python, shell...) and returns its output",
            launch_code_runner,
            private_tmp=True,
        ),
        McpServer(
            "excel",
            OwnVenv(
                "excel-mcp-server",
                "2.2.2",
                "excel-requirements.txt",
                "excel-mcp-server",
                why="its pins (mcp 2.x, openpyxl) are its own, apart from the emulator's",
            ),
            "read and write .xlsx workbooks in the workspace",
            launch_excel,
        ),
        McpServer(
            "word",
            OwnVenv(
                "office-word-mcp-server",
                "1.1.11",
                "word-requirements.txt",
                "word_mcp_server",
                why="its pins (python-docx, fastmcp) are its own, apart from the emulator's",
            ),
            "create and edit .docx documents in the workspace",
            launch_word,
        ),
        McpServer(
            "powerpoint",
            OwnVenv(
                "office-powerpoint-mcp-server",
                "2.0.7",
                "powerpoint-requirements.txt",
                "ppt_mcp_server",
                why="it is written for mcp 1.x (mcp.server.fastmcp), so it keeps mcp<2",
            ),
            "create and edit .pptx presentations in the workspace",
            launch_powerpoint,
        ),
        McpServer(
            "arxiv",
            OwnVenv(
                "arxiv-mcp-server",
                "0.8.2",
                "arxiv-requirements.txt",
                "arxiv-mcp-server",
                why="it keeps mcp<2 and pymupdf4llm<1 (its PDF-to-markdown converter)",
            ),
            f"papers kept in <workspace>/{ARXIV_STORAGE}: list and read them (search and "
            "download need arxiv.org: offline, a tool error)",
            launch_arxiv,
            fork=ARXIV_FORK,
        ),
        McpServer(
            "pdf-tools",
            OwnVenv(
                "pdf-tools-mcp",
                "0.1.4",
                "pdf-tools-requirements.txt",
                "pdf-tools-mcp",
                why="it needs Python 3.12 or newer and mcp<2",
                min_python=(3, 12),
            ),
            "read, search, merge and split PDF files in the workspace",
            launch_pdf_tools,
            private_tmp=True,
        ),
        McpServer(
            "desktop-commander",
            NpmPackage("@wonderwhy-er/desktop-commander", "0.2.52", "dist/index.js"),
            "terminal sessions, processes, file editing and ripgrep search in the workspace",
            launch_desktop_commander,
            private_tmp=True,
            needs=(RIPGREP,),
        ),
        McpServer(
            "playwright",
            NpmPackage("@playwright/mcp", "0.0.83", "cli.js"),
            "a headless Chromium: open pages, read them, click, fill forms, save "
            f"screenshots and PDFs (automatically named ones in <workspace>/"
            f"{PLAYWRIGHT_OUTPUT})",
            launch_playwright,
            private_tmp=True,
            needs=(CHROMIUM,),
            # Pages on loopback (a site the test or the agent serves) must load: the server
            # shares the emulator's network namespace; the Chromium flags above keep the
            # browser from calling Google's hosts of its own accord.
            network=True,
        ),
        McpServer(
            "code-executor",
            NotHosted(
                "the service's code executor runs code in an execution environment the "
                "service provisions (with package installs from the network); there is no "
                "package to install offline. Run code with POST "
                "/local-sandbox/{id}/execute or the code-runner server instead"
            ),
            "runs code in a provisioned environment",
        ),
        McpServer(
            "google_cloud",
            NotHosted(
                "it calls Google Cloud APIs (BigQuery, Cloud Storage, Logging...), which "
                "need the network and a Google Cloud project with credentials"
            ),
            "Google Cloud project resources",
        ),
        McpServer(
            # The service runs Klavis's fork of Toolathlon's emails server (HTTP, the account
            # given per request in a header), which is in no registry; this is the PyPI release
            # it derives from, with the same 25 tools, over stdio: one process per account
            # (the sandbox's, or one an x-email-config header chose, see _mcp/host.py). Poste.io
            # is replaced by a mail server per sandbox (Dovecot + aiosmtpd, see _mail).
            "poste_email_toolathlon",
            OwnVenv(
                "emails-mcp",
                "0.1.12",
                "emails-requirements.txt",
                "emails-mcp",
                why="it needs Python 3.12 or newer and is written for mcp 1.x",
                min_python=(3, 12),
            ),
            "e-mail (IMAP/SMTP) of the sandbox's account on a mail server of its own",
            launch_emails,
            private_tmp=True,
            needs=(DOVECOT,),
            network=True,
            mail_server=True,
        ),
        McpServer(
            "canvas",
            NotHosted(
                "it calls the REST API of a Canvas LMS instance (with an API token), "
                "which the service deploys and the emulator does not have"
            ),
            "Canvas LMS courses, assignments, users",
        ),
    )
}
"""Every server of the contract's enum, by name (the hosted ones first)."""

HOSTED_SERVERS: Final[tuple[str, ...]] = tuple(
    name for name, server in CATALOG.items() if server.hosted
)
"""The servers the emulator runs for real (the catalog's hosted entries, in order)."""


def server_entry(name: str) -> McpServer:
    """The catalog entry of ``name``.

    Raises:
        ValueError: ``name`` is not a server of the contract's enum.
    """
    try:
        return CATALOG[name]
    except KeyError:
        raise ValueError(f"{name!r} is not an MCP server of the contract") from None
