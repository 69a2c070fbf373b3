"""The catalog: every MCP server of the contract's enum, described once.

For each server name of ``LocalSandboxServerName`` (see ``openapi.yaml``) one
:class:`McpServer` says

- how it is installed: an npm package pinned in the shared lock file
  (:class:`NpmPackage`), a PyPI distribution in its own virtual environment built from a
  fully pinned requirements file (:class:`OwnVenv`), a module importable by the emulator's
  own interpreter (:class:`EmulatorPython`), or why the emulator does not host it
  (:class:`NotHosted`: not feasible offline, or not packaged yet);
- how it is launched: :attr:`McpServer.launch` turns a :class:`LaunchContext` (where its
  program is, the workspace path as the server sees it, its private temporary folder)
  into a :class:`LaunchParts` (argv, environment, extra read-only mounts).
  A server's own quirks are recorded beside its launch function.

:mod:`klavis_emulator._mcp.setup` installs and finds the servers from this table,
:mod:`klavis_emulator._mcp.launch` confines them, :mod:`klavis_emulator._mcp.host` answers
501 (with :attr:`NotHosted.reason`) for the servers it does not host. No I/O here.

Rejected alternative: one ``if/elif`` per server in setup, launch, messages and tests (what
the emulator had for three servers); each new server touched four modules and the reasons for
the missing ones lived only in a 501 message.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

__all__ = [
    "ARXIV_STORAGE",
    "CATALOG",
    "CHROMIUM",
    "DOVECOT",
    "EMAILS_CONFIG",
    "HOSTED_SERVERS",
    "PLAYWRIGHT_OUTPUT",
    "TERMINAL_ALLOWED_COMMANDS",
    "EmulatorPython",
    "Install",
    "LaunchContext",
    "LaunchParts",
    "McpServer",
    "NotHosted",
    "NpmPackage",
    "OwnVenv",
    "SystemProgram",
    "server_entry",
]


# ---------------------------------------------------------------------- install kinds


@dataclass(frozen=True)
class NpmPackage:
    """An npm package pinned in ``mcp_servers/package.json`` + ``package-lock.json``
    (one ``npm ci`` installs them all); run as ``node <package>/<entry>``."""

    package: str
    version: str
    entry: str
    """The script inside the package (its ``bin``), e.g. ``dist/index.js``."""


@dataclass(frozen=True)
class OwnVenv:
    """A PyPI distribution in a virtual environment of its own, built with the emulator's
    interpreter from ``mcp_servers/<requirements>`` (the whole tree pinned, as ``pip
    freeze`` printed it in that venv); run as the console script ``script``."""

    distribution: str
    version: str
    requirements: str
    script: str
    why: str
    """Why it does not share the emulator's environment."""
    min_python: tuple[int, int] = (3, 10)
    """The oldest Python the server runs on. When the emulator's own interpreter is older,
    setup builds the venv with a ``python3.X`` (X at least this) found on the machine, never
    downloaded (see :func:`klavis_emulator._mcp.setup.find_python`); where there is none,
    the server is reported as not installed, naming the Python it needs."""


@dataclass(frozen=True)
class EmulatorPython:
    """A module the emulator's own interpreter imports (a dependency of the emulator extra)."""

    distribution: str
    module: str


@dataclass(frozen=True)
class NotHosted:
    """The emulator does not run this server; ``reason`` is said in its 501 answer."""

    reason: str
    offline_feasible: bool = False
    """True when only the packaging is missing (a candidate package is named)."""


Install = NpmPackage | OwnVenv | EmulatorPython | NotHosted


@dataclass(frozen=True)
class SystemProgram:
    """A program a server needs from the machine, not from a package registry: the
    distribution's package (found on ``PATH``; under ``/usr``, so confined servers see it)."""

    names: tuple[str, ...]
    """Executable names tried in order on ``PATH``; the first is the program's key."""
    apt: str
    """The Debian/Ubuntu package that provides it (named in the "not installed" answer)."""
    why: str
    """What the server does with it."""
    paths: tuple[str, ...] = ()
    """Absolute paths tried, in order, when none of :attr:`names` is on ``PATH``."""

    @property
    def key(self) -> str:
        """The name :attr:`LaunchContext.system` and ``McpToolPaths.system`` use."""
        return self.names[0]


# ---------------------------------------------------------------------- launching


@dataclass(frozen=True)
class LaunchContext:
    """What a server's command line is built from."""

    program: Path
    """The node entry script, the venv's console script, or the emulator's interpreter."""
    node: Path | None
    """The ``node`` executable (npm servers)."""
    workspace: str
    """The workspace as the server sees it (``/data`` when confined, else the host path)."""
    tmp: str
    """The server's private temporary folder as it sees it (``/tmp`` when confined)."""
    command_timeout: int
    system: Mapping[str, Path] = field(default_factory=dict)
    """The :class:`SystemProgram` s the server needs, by key, where they were found."""
    confined: bool = False
    """Whether the server runs inside the bubblewrap confinement."""
    system_tmp: str = "/tmp"  # noqa: S108 - a path as the server sees it, not made here
    """The system's temporary folder as the server sees it (confined, the private ``/tmp``)."""
    mail: Mapping[str, Any] | None = None
    """For a server with :attr:`McpServer.mail_server`: its sandbox's mail server and
    account (the ``auth_data``, see :meth:`klavis_emulator._mail.server.MailServer.auth_data`)."""


@dataclass(frozen=True)
class LaunchParts:
    """A server's own command line and environment (confinement is added around it)."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    read_only: tuple[Path, ...] = ()
    """Extra folders to mount read-only (beyond the server's own install)."""


@dataclass(frozen=True)
class McpServer:
    """One server of the contract's enum: how it is installed and launched."""

    name: str
    install: Install
    summary: str
    launch: Callable[[LaunchContext], LaunchParts] | None = None
    private_tmp: bool = False
    """Unconfined, give the process ``TMPDIR`` in a per-sandbox folder outside the
    workspace (confined, ``/tmp`` is a private tmpfs anyway)."""
    needs: tuple[SystemProgram, ...] = ()
    """Programs from the distribution it needs (missing: the URL answers 503 naming them)."""
    network: bool = False
    """Confined, share the emulator's network namespace (default: none at all)."""
    mail_server: bool = False
    """The sandbox gets a mail server of its own (IMAP + SMTP on loopback, see
    :mod:`klavis_emulator._mail.server`), named in the server item's ``auth_data``; the launch
    receives it as :attr:`LaunchContext.mail`."""

    @property
    def hosted(self) -> bool:
        """Whether the emulator runs this server for real."""
        return not isinstance(self.install, NotHosted)


# ---------------------------------------------------------------------- the servers

TERMINAL_ALLOWED_COMMANDS: Final[tuple[str, ...]] = (
    # files and folders
    "ls", "cat", "head", "tail", "wc", "pwd", "echo", "printf", "mkdir", "rmdir", "cp", "mv",
    "rm", "touch", "ln", "stat", "file", "du", "df", "tree", "find", "basename", "dirname",
    "realpath", "readlink", "chmod", "test", "true", "false",
    # text
    "grep", "egrep", "fgrep", "sed", "awk", "sort", "uniq", "cut", "tr", "paste", "join",
    "diff", "cmp", "comm", "tee", "xargs", "nl", "fold", "fmt", "column", "rev", "tac",
    "split", "jq", "iconv",
    # archives and checksums
    "tar", "gzip", "gunzip", "zcat", "zip", "unzip", "md5sum", "sha1sum", "sha256sum", "base64",
    # environment
    "env", "date", "whoami", "id", "uname", "which", "sleep", "seq", "yes", "expr",
    # development
    "git", "python", "python3", "pip", "pip3", "node", "npm", "npx", "make", "bash", "sh",
)  # fmt: skip
"""``ALLOWED_COMMANDS`` of the terminal server: everyday shell work in the workspace."""

_GIT_LAUNCHER: Final = (
    # mcp-server-git's own server and confinement (`create_server(repository)`), without
    # the CLI's start-up check that exits when the workspace is not (yet) a repository,
    # and without its walk up to a parent repository, which could leave the workspace.
    "import logging, sys\n"
    "from pathlib import Path\n"
    "import anyio\n"
    "from mcp_server_git.server import create_server\n"
    "logging.basicConfig(level=logging.WARNING, stream=sys.stderr)\n"
    "anyio.run(create_server(Path(sys.argv[1])).run_stdio_async)\n"
)

MEMORY_FILE: Final = "memory/memory.json"
"""Where localmemory keeps its graph, relative to the workspace: the path Toolathlon's
memory server configuration uses (``${agent_workspace}/memory/memory.json``), so a dump
carries the memory like the real service's workspace would. The server writes the file with
a temporary file beside it and does not create its folder: the launch does (``mkdir -p``
inside the confinement, so a symlink planted in the workspace cannot lead it out)."""


_MKDIR_THEN_EXEC: Final = 'mkdir -p -- "$1" && shift && exec "$@"'
"""``sh -c`` script: create the folder ``$1``, then become the command that follows."""


def _node(ctx: LaunchContext, *args: str, env: Mapping[str, str] | None = None) -> LaunchParts:
    assert ctx.node is not None
    return LaunchParts((str(ctx.node), str(ctx.program), *args), dict(env or {}))


def _filesystem(ctx: LaunchContext) -> LaunchParts:
    return _node(ctx, ctx.workspace)


def _git(ctx: LaunchContext) -> LaunchParts:
    return LaunchParts((str(ctx.program), "-c", _GIT_LAUNCHER, ctx.workspace))


def _terminal(ctx: LaunchContext) -> LaunchParts:
    return LaunchParts(
        (str(ctx.program),),
        {
            "ALLOWED_DIR": ctx.workspace,
            "ALLOWED_COMMANDS": ",".join(TERMINAL_ALLOWED_COMMANDS),
            "ALLOWED_FLAGS": "all",
            "ALLOW_SHELL_OPERATORS": "true",
            "MAX_COMMAND_LENGTH": "8192",
            "COMMAND_TIMEOUT": str(ctx.command_timeout),
        },
    )


def _localmemory(ctx: LaunchContext) -> LaunchParts:
    memory = f"{ctx.workspace}/{MEMORY_FILE}"
    assert ctx.node is not None
    return LaunchParts(
        ("/bin/sh", "-c", _MKDIR_THEN_EXEC, "sh", str(Path(memory).parent), str(ctx.node),
         str(ctx.program)),
        {"MEMORY_FILE_PATH": memory},
    )  # fmt: skip


_CONSOLE_TO_STDERR: Final = (
    # mcp-server-code-runner 0.1.8 says "Code Runner MCP Server running on stdio" with
    # console.debug, which Node writes to stdout, the JSON-RPC channel (the MCP client logged
    # a parse error with a traceback on every start): its console goes to stderr instead.
    "data:text/javascript,console.log=console.info=console.debug=console.error"
)


def _code_runner(ctx: LaunchContext) -> LaunchParts:
    # The server writes each snippet to os.tmpdir() and runs it there with the interpreter
    # of its language (node, python3, bash... whatever is on PATH), cwd the process's.
    assert ctx.node is not None
    return LaunchParts(
        (str(ctx.node), "--import", _CONSOLE_TO_STDERR, str(ctx.program)),
        {"TMPDIR": ctx.tmp, "TMP": ctx.tmp, "TEMP": ctx.tmp},
    )


def _excel(ctx: LaunchContext) -> LaunchParts:
    # `excel-mcp-server stdio`; EXCEL_FILES_PATH is its list of allowed folders (the
    # --allow-dir option); without it any .xlsx on the machine could be opened.
    return LaunchParts((str(ctx.program), "stdio"), {"EXCEL_FILES_PATH": ctx.workspace})


_WORD_LAUNCHER: Final = (
    # office-word-mcp-server's own server object and tools (word_document_server.main),
    # without its `run_server`, which prints two lines of chatter ("Starting Word Document MCP
    # Server...") to stdout, the JSON-RPC channel: the MCP client logged a parse error with
    # a traceback for each line, on every start (seen with 1.1.11).
    # Its import prints "Loading configuration from .env file..." to stdout too: the import
    # and the tool registration run with stdout sent to stderr.
    "import contextlib, sys\n"
    "with contextlib.redirect_stdout(sys.stderr):\n"
    "    from word_document_server.main import mcp, register_tools\n"
    "    register_tools()\n"
    "mcp.run(transport='stdio')\n"
)


def _word(ctx: LaunchContext) -> LaunchParts:
    # relative document names resolve against the cwd, which is the workspace
    python = ctx.program.parent / "python"
    return LaunchParts((str(python), "-c", _WORD_LAUNCHER), {"FASTMCP_SHOW_CLI_BANNER": "false"})


def _powerpoint(ctx: LaunchContext) -> LaunchParts:
    # `ppt_mcp_server` (stdio by default) says nothing on stdout at start (2.0.7). Relative
    # file names resolve against the cwd, the workspace; absolute ones are not restricted:
    # confined, /data is the only writable folder anyway.
    return LaunchParts((str(ctx.program),))


ARXIV_STORAGE: Final = "arxiv_local_storage"
"""Where arxiv keeps papers, relative to the workspace: the folder Toolathlon creates in the
agent workspace for its ``arxiv_local`` server (``arxiv_local_storage``), so a dump carries
the papers. The server stores a paper as ``<id>.md`` (its text) beside ``<id>.meta.json``
(title, authors, published) and creates the folder itself."""

_ARXIV_OFFLINE: Final = {
    # Offline, search_papers, download_paper and get_abstract fail with a tool error; these
    # bound how long they try (its defaults: 10 s connect, 30 s read, 2 retries with back-off
    # up to 50 s in all): one try, 5 s to connect, at most 15 s.
    "ARXIV_CONNECT_TIMEOUT": "5",
    "ARXIV_REQUEST_TIMEOUT": "10",
    "ARXIV_MAX_RETRIES": "0",
    "ARXIV_HTTP_406_MAX_RETRIES": "0",
    "ARXIV_MAX_TOTAL_TIME": "15",
}


def _arxiv(ctx: LaunchContext) -> LaunchParts:
    # arxiv-mcp-server reads --storage-path from sys.argv (default ~/.arxiv-mcp-server/papers)
    return LaunchParts(
        (str(ctx.program), "--storage-path", f"{ctx.workspace}/{ARXIV_STORAGE}"),
        _ARXIV_OFFLINE,
    )


def _pdf_tools(ctx: LaunchContext) -> LaunchParts:
    # --workspace_path: its tools refuse paths outside it (and it becomes the cwd);
    # --tempfile_dir: where PDFs given by URL are downloaded (default ~/.pdf_tools_temp),
    # the private temporary folder. Offline, a URL fails with a tool error.
    return LaunchParts(
        (str(ctx.program), "--workspace_path", ctx.workspace, "--tempfile_dir", ctx.tmp)
    )


RIPGREP: Final = SystemProgram(("rg",), "ripgrep", "desktop-commander searches with it")

DESKTOP_COMMANDER_CONFIG: Final = ".claude-server-commander/config.json"
"""Where desktop-commander reads its configuration, relative to ``$HOME`` (its
``os.homedir()``): the launch points ``HOME`` at the sandbox's private temporary folder
(confined, the private ``/tmp``), so no two sandboxes share it and nothing lands in the
emulator user's home."""


def _desktop_commander_config(workspace: str) -> str:
    # Written before each start, so the server never creates its defaults, which allow the
    # whole file system (`allowedDirectories: []`) and send telemetry (`telemetryEnabled`).
    # blockedCommands is empty: its defaults (sudo, mount, shutdown...) are a convenience
    # list, not a boundary; the confinement is the boundary. A tool call may change this
    # config (set_config_value), only for its own sandbox and until the server restarts.
    return json.dumps(
        {
            "allowedDirectories": [workspace],
            "blockedCommands": [],
            "defaultShell": "/bin/bash",
            "telemetryEnabled": False,
            "fileReadLineLimit": 1000,
            "fileWriteLineLimit": 50,
            "pendingWelcomeOnboarding": False,
            "welcomeOnboardingEligible": False,
        }
    )


_WRITE_THEN_EXEC: Final = (
    'mkdir -p -- "$(dirname -- "$1")" && printf %s "$2" > "$1" && shift 2 && exec "$@"'
)
"""``sh -c`` script: write ``$2`` to the file ``$1`` (its folder created), then become the
command that follows."""


def _data_url(source: str) -> str:
    return "data:text/javascript," + urllib.parse.quote(source, safe="")


def _module_alias_hook(specifier: str, module_source: str) -> str:
    """A ``node --import`` argument that makes ``import(specifier)`` load ``module_source``
    (a customization hook registered with ``node:module``'s ``register``, Node >= 18.19)."""
    hooks = (
        "export async function resolve(specifier, context, next) {"
        f" return specifier === {json.dumps(specifier)}"
        f" ? {{ url: {json.dumps(_data_url(module_source))}, shortCircuit: true }}"
        " : next(specifier, context); }"
    )
    return _data_url(
        f"import {{ register }} from 'node:module'; register({json.dumps(_data_url(hooks))});"
    )


def _desktop_commander(ctx: LaunchContext) -> LaunchParts:
    # It finds ripgrep first through @vscode/ripgrep (whose 1.18 takes rg from a per-platform
    # npm package), then `which rg`, then /usr/bin/rg...: there is no variable to name it. The
    # hook answers its `import('@vscode/ripgrep')` with the distribution's rg, so searches use
    # the rg the emulator found (and said missing) rather than a binary from the npm tree.
    # Rejected: `npm ci --omit=optional` (drops sharp's prebuilt libvips too), deleting the
    # platform package after `npm ci` (the install would no longer match the lock).
    assert ctx.node is not None
    config = f"{ctx.tmp}/{DESKTOP_COMMANDER_CONFIG}"
    rg = ctx.system[RIPGREP.key]
    return LaunchParts(
        ("/bin/sh", "-c", _WRITE_THEN_EXEC, "sh", config,
         _desktop_commander_config(ctx.workspace), str(ctx.node), "--import",
         _module_alias_hook("@vscode/ripgrep", f"export const rgPath = {json.dumps(str(rg))};"),
         str(ctx.program), "--no-onboarding"),
        {"HOME": ctx.tmp, "TMPDIR": ctx.tmp, "SHELL": "/bin/bash"},
    )  # fmt: skip


CHROMIUM: Final = SystemProgram(
    ("chromium", "chromium-browser"),
    "chromium",
    "playwright drives it; nothing is downloaded",
    paths=("/usr/bin/chromium", "/usr/lib/chromium/chromium"),
)

PLAYWRIGHT_OUTPUT: Final = ".playwright-mcp"
"""Where playwright saves files it names itself (screenshots, PDFs, snapshots, downloads),
relative to the workspace: the package's own default (``<cwd>/.playwright-mcp``), given
explicitly so it does not depend on the working folder. Files the caller names resolve
against the workspace (the server's working folder: it gets no MCP roots)."""

PLAYWRIGHT_CONFIG: Final = "playwright-mcp.json"
"""Its configuration file, written to the sandbox's private temporary folder at each start."""

CHROMIUM_FLAGS: Final[tuple[str, ...]] = (
    # the machine may be offline, and the browser has no business calling Google's hosts:
    # no background requests (safe browsing, variations, translation...), no component
    # updates, no sync, no first-run tasks; no GPU process (headless, there is none)
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-gpu",
    "--disable-dev-shm-usage",  # a confined /dev/shm is small: shared memory in /tmp
)
"""Chromium flags added to Playwright's own. (Not ``--disable-crashpad-for-testing``, which
would spare the two crash-handler processes: with it Debian's Chromium 156 crashed its network
service at every start, "FD ownership violation", and no page loaded.)"""


def _playwright_config() -> str:
    # browserName chromium with no channel: the default channel ("chrome") would look for
    # Google Chrome and turn Chromium's own sandbox on (see `--no-sandbox` below).
    launch = {"args": list(CHROMIUM_FLAGS)}
    return json.dumps({"browser": {"browserName": "chromium", "launchOptions": launch}})


def _playwright(ctx: LaunchContext) -> LaunchParts:
    # --isolated: the browser profile lives in memory (the rest in the private /tmp).
    # --no-sandbox: Chromium refuses its own sandbox when run as root ("Running as root
    # without --no-sandbox is not supported", measured with Chromium 156 unconfined and in
    # bubblewrap), and needs user namespaces for it otherwise: where they are missing or
    # restricted, which is where an emulator runs unconfined, the browser would not start.
    # The boundary is the confinement around the whole server (bubblewrap: its own mount,
    # PID and IPC namespaces, read-only system, only the workspace writable); unconfined,
    # every hosted server runs with the emulator user's rights anyway.
    # TMPDIR: Playwright and Chromium make Unix sockets under it, and abort when a socket's
    # path passes the 107 bytes a socket name may have ("Socket path too long", "Socket
    # directory path is too long (114 bytes)", seen unconfined with the private folder
    # under the emulator's data folder): the system's temporary folder (they remove what
    # they made there when the browser closes; confined, it is the private /tmp).
    assert ctx.node is not None
    config = f"{ctx.tmp}/{PLAYWRIGHT_CONFIG}"
    return LaunchParts(
        ("/bin/sh", "-c", _WRITE_THEN_EXEC, "sh", config, _playwright_config(),
         str(ctx.node), str(ctx.program), "--config", config,
         "--executable-path", str(ctx.system[CHROMIUM.key]), "--headless", "--isolated",
         "--no-sandbox", "--output-dir", f"{ctx.workspace}/{PLAYWRIGHT_OUTPUT}"),
        {"HOME": ctx.tmp, "TMPDIR": ctx.system_tmp, "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"},
    )  # fmt: skip


DOVECOT: Final = SystemProgram(
    ("dovecot",),
    "dovecot-imapd",
    "the sandbox's mail server serves IMAP with it and delivers with its dovecot-lda",
)

EMAILS_CONFIG: Final = "emails-mcp/config.json"
"""Where the emails server's account configuration is written before each start, relative
to its private temporary folder (it holds the account's password: not in the workspace)."""


def _emails(ctx: LaunchContext) -> LaunchParts:
    # emails-mcp reads one account from --config_file (the auth_data's keys are its keys).
    # The three paths bound what its tools read and write: attachments to send, attachments
    # downloaded and exported mail, all in the workspace, beside the agent's other files.
    # It checks IMAP and SMTP once at start, logging to stderr.
    assert ctx.mail is not None
    config = f"{ctx.tmp}/{EMAILS_CONFIG}"
    return LaunchParts(
        ("/bin/sh", "-c", _WRITE_THEN_EXEC, "sh", config, json.dumps(dict(ctx.mail)),
         str(ctx.program), "--config_file", config,
         "--attachment_upload_path", ctx.workspace,
         "--attachment_download_path", ctx.workspace,
         "--email_export_path", ctx.workspace),
        {"HOME": ctx.tmp},
    )  # fmt: skip


_NOT_PACKAGED: Final = "the emulator does not package it yet (it could run offline: {})"

CATALOG: Final[Mapping[str, McpServer]] = {
    server.name: server
    for server in (
        McpServer(
            "filesystem",
            NpmPackage("@modelcontextprotocol/server-filesystem", "2026.8.31", "dist/index.js"),
            "read, write, search files in the workspace",
            _filesystem,
        ),
        McpServer(
            "git",
            EmulatorPython("mcp-server-git", "mcp_server_git"),
            "git status/diff/commit/log on the workspace repository",
            _git,
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
            _terminal,
        ),
        McpServer(
            "localmemory",
            NpmPackage("@modelcontextprotocol/server-memory", "2026.8.31", "dist/index.js"),
            f"a knowledge graph kept in <workspace>/{MEMORY_FILE}",
            _localmemory,
        ),
        McpServer(
            "code-runner",
            NpmPackage("mcp-server-code-runner", "0.1.8", "dist/cli.js"),
            "runs a code snippet (JavaScript, Python, shell...) and returns its output",
            _code_runner,
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
            _excel,
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
            _word,
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
            _powerpoint,
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
            _arxiv,
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
            _pdf_tools,
            private_tmp=True,
        ),
        McpServer(
            "desktop-commander",
            NpmPackage("@wonderwhy-er/desktop-commander", "0.2.52", "dist/index.js"),
            "terminal sessions, processes, file editing and ripgrep search in the workspace",
            _desktop_commander,
            private_tmp=True,
            needs=(RIPGREP,),
        ),
        McpServer(
            "playwright",
            NpmPackage("@playwright/mcp", "0.0.83", "cli.js"),
            "a headless Chromium: open pages, read them, click, fill forms, save "
            f"screenshots and PDFs (automatically named ones in <workspace>/"
            f"{PLAYWRIGHT_OUTPUT})",
            _playwright,
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
            _emails,
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
