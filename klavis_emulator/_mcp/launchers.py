"""Each hosted server's own command line: its launch function, and the quirks it works around.

A launch function turns a :class:`~.kinds.LaunchContext` (where the program is, the
workspace and temporary folder as the server sees them) into a :class:`~.kinds.LaunchParts`
(argv, environment, extra read-only mounts); :mod:`.launch` adds the confinement around it
and :mod:`.catalog` names which function launches which server. No I/O here.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from .kinds import ForkRecipe, LaunchContext, LaunchParts, SystemProgram

__all__ = [
    "ARXIV_STORAGE",
    "CHROMIUM",
    "DESKTOP_COMMANDER_CONFIG",
    "DOVECOT",
    "ARXIV_FORK",
    "EMAILS_CONFIG",
    "GIT_FORK",
    "MEMORY_FILE",
    "NODE_FLAGS",
    "PLAYWRIGHT_OUTPUT",
    "RIPGREP",
    "TERMINAL_ALLOWED_COMMANDS",
    "TERMINAL_FORK",
    "launch_arxiv",
    "launch_code_runner",
    "launch_desktop_commander",
    "launch_emails",
    "launch_excel",
    "launch_filesystem",
    "launch_git",
    "launch_localmemory",
    "launch_pdf_tools",
    "launch_playwright",
    "launch_powerpoint",
    "launch_terminal",
    "launch_word",
]


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

_GIT_SERVER: Final = (
    # mcp-server-git's own server and confinement (`create_server(repository)`), without
    # the CLI's start-up check that exits when the workspace is not (yet) a repository,
    # and without its walk up to a parent repository, which could leave the workspace.
    # Building it touches no file (the repository is checked at each tool call).
    "import logging, sys\n"
    "from pathlib import Path\n"
    "import anyio\n"
    "from mcp_server_git.server import create_server\n"
    "logging.basicConfig(level=logging.WARNING, stream=sys.stderr)\n"
    "server = create_server(Path(sys.argv[1]))\n"
)
_GIT_SERVE: Final = "anyio.run(server.run_stdio_async)\n"
_GIT_LAUNCHER: Final = _GIT_SERVER + _GIT_SERVE

GIT_FORK: Final = ForkRecipe(
    # The server built once (its argv is /data for every sandbox), and its tool list made
    # once in memory: the tools' schemas are built lazily, by the first tools/list. Measured
    # per forked child (private memory after initialize and tools/list): 24 MiB with the
    # imports alone in the fork server, 16 MiB with the server built, 7 MiB warmed.
    prepare=_GIT_SERVER + "from mcp.client.client import Client\n"
    "async def _warm():\n"
    "    async with Client(server) as client:\n"
    "        await client.list_tools()\n"
    "anyio.run(_warm)\n",
    serve=_GIT_SERVE,
)

_MCP1_WARM_UP: Final = (
    # The MCP SDK 1.x's own paths (session, JSON-RPC models, stdio framing helpers) used
    # once in memory, with a server of its own: tools/list and tools/call.
    "import anyio\n"
    "import mcp.types as _types\n"
    "from mcp.server import Server as _Server\n"
    "from mcp.shared.memory import create_connected_server_and_client_session as _connect\n"
    "_warm_server = _Server('klavis-warm-up')\n"
    "@_warm_server.list_tools()\n"
    "async def _tools():\n"
    "    return [_types.Tool(name='t', description='', inputSchema={'type': 'object'})]\n"
    "@_warm_server.call_tool()\n"
    "async def _call(name, arguments):\n"
    "    return [_types.TextContent(type='text', text='')]\n"
    "async def _warm(server):\n"
    "    async with _connect(server) as session:\n"
    "        await session.list_tools()\n"
    "anyio.run(_warm, _warm_server)\n"
)

TERMINAL_FORK: Final = ForkRecipe(
    # cli_mcp_server.server reads its configuration and checks that ALLOWED_DIR exists when
    # it is imported: only inside the sandbox. Its dependencies are imported ahead.
    prepare="import re, shlex, subprocess\n"
    "import mcp.server.stdio\n"
    "from mcp.server.models import InitializationOptions\n" + _MCP1_WARM_UP,
    serve="from cli_mcp_server import main\nsys.exit(main())\n",
)

MEMORY_FILE: Final = "memory/memory.json"
"""Where localmemory keeps its graph, relative to the workspace: the path Toolathlon's
memory server configuration uses (``${agent_workspace}/memory/memory.json``), so a dump
carries the memory like the real service's workspace would. The server writes the file with
a temporary file beside it and does not create its folder: the launch makes it do so before
each write (see :func:`launch_localmemory`)."""

_MEMORY_FOLDER_HOOK: Final = (
    # server-memory 2026.8.31 writes `<folder>/memory.json.<random>.tmp` with fs.promises
    # .writeFile, then renames it over memory.json, and never creates <folder>. Made once at
    # start (as it was, by `mkdir -p` before the server), the folder went with every emptying
    # of the workspace after the start: a seed (initialize) without it, a reset (which
    # empties a workspace whose servers are already up), and every later write failed with
    # ENOENT. The hook creates the folder before a write into it, inside the server's
    # confinement. Rejected: a memory file at the workspace's top (not Toolathlon's path).
    "import { promises as fs } from 'node:fs'; import path from 'node:path';"
    "const folder = path.dirname(process.env.MEMORY_FILE_PATH), write = fs.writeFile;"
    "fs.writeFile = async (file, ...rest) => {"
    " if (typeof file === 'string' && path.dirname(file) === folder)"
    " await fs.mkdir(folder, { recursive: true });"
    " return write(file, ...rest); };"
)


def _data_url(source: str) -> str:
    return "data:text/javascript," + urllib.parse.quote(source, safe="")


NODE_FLAGS: Final[tuple[str, ...]] = (
    "--max-semi-space-size=1",
    "--v8-pool-size=1",
    "--import",
    _data_url("delete process.env.MALLOC_ARENA_MAX"),
)
"""V8 options of every Node.js server. ``--max-semi-space-size=1`` (MB): V8's young generation
grows to two 16 MiB semi-spaces by default (Node 20), which a server's start fills and keeps;
a server answers one client at a time and needs none of it. Measured (PSS of the private
pages, 15 s after ``tools/list``): desktop-commander 75 -> 44 MiB, filesystem 29 -> 21,
code-runner 36 -> 27, localmemory 28 -> 22. ``--v8-pool-size=1``: one V8 worker thread (for
concurrent compiling and marking) instead of one per core, with :data:`NODE_ENV`'s one malloc
arena: measured together (private memory 5 s after ``tools/list``, three of each, load 18):
desktop-commander 53.5 -> 47.6 MiB, code-runner 27.3 -> 25.5, filesystem 21.5 -> 20.8,
localmemory 20.8 -> 19.8, threads 11 -> 8, no slower to start or to answer. The ``--import``
takes :data:`NODE_ENV` out of the server's environment once glibc has read it (before
``main``), so the commands a server runs (code-runner's snippets, desktop-commander's shells)
keep glibc's default arenas. Weighed and left out: ``--jitless`` and
``--lite-mode`` (1 to 2 MiB less; desktop-commander and code-runner fail to start),
``--max-old-space-size`` (a hard cap: a big file read would end the server with "heap out of
memory", for 3 to 5 MiB), ``--single-threaded`` (3 MiB less for desktop-commander, its garbage
collection on the main thread), ``--single-threaded-gc`` (nothing measurable beside the
pool of one), ``--optimize-for-size`` (no smaller once the semi-spaces are), a module hook
(``node:module``'s ``register``: its hooks run on a thread with a V8 isolate of its own, about
10 MiB; see :func:`launch_desktop_commander`)."""

NODE_ENV: Final[Mapping[str, str]] = {"MALLOC_ARENA_MAX": "1"}
"""Environment of every Node.js server: one malloc arena for its threads (glibc makes up to 8
per core, each keeping what its thread freed): the main thread allocates almost everything."""


def _node(ctx: LaunchContext, *args: str, env: Mapping[str, str] | None = None) -> LaunchParts:
    assert ctx.node is not None
    return LaunchParts(
        (str(ctx.node), *NODE_FLAGS, str(ctx.program), *args), {**NODE_ENV, **(env or {})}
    )


def launch_filesystem(ctx: LaunchContext) -> LaunchParts:
    return _node(ctx, ctx.workspace)


def launch_git(ctx: LaunchContext) -> LaunchParts:
    return LaunchParts((str(ctx.program), "-c", _GIT_LAUNCHER, ctx.workspace))


def launch_terminal(ctx: LaunchContext) -> LaunchParts:
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


def launch_localmemory(ctx: LaunchContext) -> LaunchParts:
    assert ctx.node is not None
    return LaunchParts(
        (str(ctx.node), *NODE_FLAGS, "--import", _data_url(_MEMORY_FOLDER_HOOK), str(ctx.program)),
        {**NODE_ENV, "MEMORY_FILE_PATH": f"{ctx.workspace}/{MEMORY_FILE}"},
    )


_CONSOLE_TO_STDERR: Final = (
    # mcp-server-code-runner 0.1.8 says "Code Runner MCP Server running on stdio" with
    # console.debug, which Node writes to stdout, the JSON-RPC channel (the MCP client logged
    # a parse error with a traceback on every start): its console goes to stderr instead.
    "data:text/javascript,console.log=console.info=console.debug=console.error"
)


def launch_code_runner(ctx: LaunchContext) -> LaunchParts:
    # The server writes each snippet to os.tmpdir() and runs it there with the interpreter
    # of its language (node, python3, bash... whatever is on PATH), cwd the process's.
    assert ctx.node is not None
    return LaunchParts(
        (str(ctx.node), *NODE_FLAGS, "--import", _CONSOLE_TO_STDERR, str(ctx.program)),
        {**NODE_ENV, "TMPDIR": ctx.tmp, "TMP": ctx.tmp, "TEMP": ctx.tmp},
    )


def launch_excel(ctx: LaunchContext) -> LaunchParts:
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


def launch_word(ctx: LaunchContext) -> LaunchParts:
    # relative document names resolve against the cwd, which is the workspace
    python = ctx.program.parent / "python"
    return LaunchParts((str(python), "-c", _WORD_LAUNCHER), {"FASTMCP_SHOW_CLI_BANNER": "false"})


def launch_powerpoint(ctx: LaunchContext) -> LaunchParts:
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


ARXIV_FORK: Final = ForkRecipe(
    # Importing the server reads its settings from the environment and sys.argv (the
    # storage path is made when a tool first asks for it, inside the sandbox) and touches no
    # file; its tool list is static.
    prepare=_MCP1_WARM_UP + "import arxiv_mcp_server.server as _arxiv\n"
    "anyio.run(_warm, _arxiv.server)\n",
    serve="from arxiv_mcp_server import main\nsys.exit(main())\n",
)


def launch_arxiv(ctx: LaunchContext) -> LaunchParts:
    # arxiv-mcp-server reads --storage-path from sys.argv (default ~/.arxiv-mcp-server/papers)
    return LaunchParts(
        (str(ctx.program), "--storage-path", f"{ctx.workspace}/{ARXIV_STORAGE}"),
        _ARXIV_OFFLINE,
    )


def launch_pdf_tools(ctx: LaunchContext) -> LaunchParts:
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


_WRITE_THEN_EXEC_ON_PATH: Final = (
    'mkdir -p -- "$(dirname -- "$1")" && printf %s "$2" > "$1"'
    ' && PATH="$3:$PATH" && export PATH && shift 3 && exec "$@"'
)
"""``sh -c`` script: :data:`_WRITE_THEN_EXEC` with the folder ``$3`` first on ``PATH``."""


def _without_npm_ripgrep(node_modules: Path) -> str:
    """A ``node --import`` argument after which ``import('@vscode/ripgrep')`` fails.

    The package's ``lib/index.js`` (1.18) resolves the binary from the package
    ``@vscode/ripgrep-<platform>-<npm_config_arch or process.arch>`` and throws when there is
    none: imported once with ``npm_config_arch=none``, its failure stays in Node's module map,
    which answers the server's own import with it. The variable is gone before the server
    starts, so the commands it runs (an agent's ``npm install``) never see it.
    """
    index = (node_modules / "@vscode" / "ripgrep" / "lib" / "index.js").resolve()
    return _data_url(
        "process.env.npm_config_arch = 'none';"
        f" try {{ await import({json.dumps(index.as_uri())}); }} catch {{}}"
        " finally { delete process.env.npm_config_arch; }"
    )


DESKTOP_COMMANDER_LAZY: Final[tuple[str, ...]] = (
    "exceljs",
    "pizzip",
    "pdf-lib",
    "@opendocsg/pdf2md/lib/util/pdf",
    "@opendocsg/pdf2md/lib/util/transformations",
)
"""The CommonJS modules desktop-commander (0.2.52) loads at start and uses only in a tool call
(Excel, Word and PDF files): :func:`_load_on_first_use` loads them then."""

_LOAD_ON_FIRST_USE: Final = (
    # Module._load is the one function through which both a require() and an ES import of a
    # CommonJS module pass (for an import: the file's path, no parent). For the files named,
    # when the server's own code asks, it answers a stand-in (a Proxy over a function, so
    # `new X()`, `X()`, `X.y` and `const { y } = require(...)` all work) that loads the
    # module at its first use; for an ES import the stand-in goes into the module record
    # Node made (which it reads instead of _load's answer). Each top-level property read
    # before then is a stand-in of its own, loaded at its first use: what the server's code
    # does with these modules (`new ExcelJS.Workbook()`, `new PizZip(buf)`,
    # `PDFDocument.load()`, `parse()`) needs nothing more.
    "import Module, { createRequire } from 'node:module'; import fs from 'node:fs';"
    " import path from 'node:path';"
    " const main = fs.realpathSync(__MAIN__), dist = path.dirname(main) + path.sep;"
    " const require = createRequire(main);"
    " const lazy = new Set(__NAMES__.flatMap((name) => {"
    " try { return [require.resolve(name)]; } catch { return []; } }));"
    " const later = (thunk) => { let got;"
    " const value = () => { if (!value.done) { got = thunk(); value.done = true; } return got; };"
    " value.done = false; return value; };"
    " const forward = (value) => ({ get: (_, key) => Reflect.get(value(), key),"
    " set: (_, key, v) => Reflect.set(value(), key, v), has: (_, key) => Reflect.has(value(), key),"
    " getPrototypeOf: () => Reflect.getPrototypeOf(value()),"
    " apply: (_, self, args) => Reflect.apply(value(), self, args),"
    " construct: (_, args) => Reflect.construct(value(), args) });"
    " const standIn = (exports) => new Proxy(function () {}, { ...forward(exports),"
    " get: (_, key) => exports.done || typeof key === 'symbol' || key === 'then'"
    " ? Reflect.get(exports(), key)"
    " : new Proxy(function () {}, forward(later(() => Reflect.get(exports(), key)))) });"
    " const load = Module._load;"
    " Module._load = function (request, parent, isMain) {"
    " const file = parent == null ? request"
    " : parent.filename?.startsWith(dist) ? Module._resolveFilename(request, parent, isMain)"
    " : null;"
    " if (file === null || !lazy.has(file)) return load.apply(this, arguments);"
    " const args = arguments, self = this, made = Module._cache[file];"
    " const exports = standIn(later(() => {"
    " if (Module._cache[file] === made) delete Module._cache[file];"
    " return load.apply(self, args); }));"
    " if (parent == null && made !== undefined && !made.loaded) made.exports = exports;"
    " return exports; };"
)


def _load_on_first_use(program: Path, names: tuple[str, ...]) -> str:
    """A ``node --import`` argument that defers loading ``names`` (CommonJS modules resolved
    from ``program``, the server's entry script) until the server's code first uses them.

    desktop-commander loads Excel, Word and PDF libraries at start (3,390 module loads, 2,400
    of them for these): measured (three starts each, load 14-40) 1.0-1.3 s of CPU to its
    first ``tools/list`` without this, 0.5-0.7 s with it, and 14-16 MiB less private memory
    5-8 s after. Hand-written because Node 20 offers no other way short of a module hook
    (``node:module``'s ``register``, a second V8 isolate of about 10 MiB, see
    :data:`NODE_FLAGS`); ``Module._load`` is Node's documented-by-use, long-stable CommonJS
    entry (undocumented API: a Node major upgrade is checked by the test that exercises
    the Excel, Word and PDF tools through the real server). Rejected: bundling the server
    (a build step per version), patching its files (the install would no longer match the
    lock). Not used for the other Node servers: they load the MCP SDK (zod, and ajv, whose
    instance the SDK's ``Server`` constructor makes, so it would load at start anyway: 1.3
    MiB of heap and 80 ms measured) and code-runner also express (about 1 MiB). V8's code
    cache (``module.enableCompileCache``, Node >= 22.1) would cut every start's compile
    work; Node 20, this machine's, lacks it.
    """
    source = _LOAD_ON_FIRST_USE.replace("__MAIN__", json.dumps(str(program))).replace(
        "__NAMES__", json.dumps(list(names))
    )
    return _data_url(source)


def launch_desktop_commander(ctx: LaunchContext) -> LaunchParts:
    # It finds ripgrep first through @vscode/ripgrep (whose 1.18 takes rg from a per-platform
    # npm package), then `which rg`, then /usr/bin/rg...: there is no variable to name it.
    # _without_npm_ripgrep makes the first fail, and rg's folder comes first on PATH, so `which rg`
    # finds the rg the emulator found (and said missing) rather than a binary from the npm
    # tree. Rejected: a module hook answering `import('@vscode/ripgrep')` with that rg (what
    # this launch did before; `node:module`'s `register` runs the hooks on a thread with a V8
    # isolate of its own: 9.4-11.3 MiB more private memory per server, measured with 3
    # servers, 5 s after tools/list), `npm ci --omit=optional` (drops sharp's prebuilt libvips
    # too), deleting the platform package after `npm ci` (the install would no longer match
    # the lock).
    assert ctx.node is not None
    config = f"{ctx.tmp}/{DESKTOP_COMMANDER_CONFIG}"
    rg = ctx.system[RIPGREP.key]
    node_modules = next(p for p in ctx.program.parents if p.name == "node_modules")
    return LaunchParts(
        ("/bin/sh", "-c", _WRITE_THEN_EXEC_ON_PATH, "sh", config,
         _desktop_commander_config(ctx.workspace), str(rg.parent), str(ctx.node), *NODE_FLAGS,
         "--import", _without_npm_ripgrep(node_modules),
         "--import", _load_on_first_use(ctx.program, DESKTOP_COMMANDER_LAZY),
         str(ctx.program), "--no-onboarding"),
        {**NODE_ENV, "HOME": ctx.tmp, "TMPDIR": ctx.tmp, "SHELL": "/bin/bash"},
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


def launch_playwright(ctx: LaunchContext) -> LaunchParts:
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
         str(ctx.node), *NODE_FLAGS, str(ctx.program), "--config", config,
         "--executable-path", str(ctx.system[CHROMIUM.key]), "--headless", "--isolated",
         "--no-sandbox", "--output-dir", f"{ctx.workspace}/{PLAYWRIGHT_OUTPUT}"),
        {**NODE_ENV, "HOME": ctx.tmp, "TMPDIR": ctx.system_tmp,
         "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"},
    )  # fmt: skip


DOVECOT: Final = SystemProgram(
    ("dovecot",),
    "dovecot-imapd",
    "the sandbox's mail server serves IMAP with it and delivers with its dovecot-lda",
)

EMAILS_CONFIG: Final = "emails-mcp/config.json"
"""Where the emails server's account configuration is written before each start, relative
to its private temporary folder (it holds the account's password: not in the workspace)."""


def launch_emails(ctx: LaunchContext) -> LaunchParts:
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
