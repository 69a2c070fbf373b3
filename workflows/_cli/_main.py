"""``klavis-sandbox``: the command line face of `workflows`, made to be scripted.

Conventions (those of gh and kubectl):

- stdout carries only the data asked for (``acquire`` prints the id alone, so
  ``ID=$(klavis-sandbox acquire filesystem)`` works); messages, hints and progress go to stderr,
  and ``-q``/``--quiet`` silences the messages (never the errors);
- ``--json`` prints the same data as JSON wherever a command prints data;
- exit status: 0 ok, 1 error, 2 usage, 130 interrupted, 141 stdout closed early, 143
  terminated (see :data:`EXIT_CODES`);
- nothing is overwritten without ``--force``.

A closed stdout (``klavis-sandbox list | head -1``) ends the command quietly with 141, the status
of any program killed by SIGPIPE (``yes | head -1``), rather than 0: the output was cut short, and
``set -o pipefail`` scripts should see that as they do for other tools. The recipe is the Python
documentation's (signal "SIGPIPE" notes): catch :class:`BrokenPipeError`, point stdout at
``/dev/null`` so the interpreter's final flush stays silent, exit. ``acquire`` whose id cannot be
written releases the sandbox it acquired: nobody could know its id.

SIGTERM (``timeout``, ``docker stop``, a cancelled CI job) ends a command as Ctrl-C does: it
raises in the main thread (:func:`workflows._ownership.unwind_on_sigterm`), so what the command
was writing (``dump``'s temporary folder beside the destination) is removed, then it says
``terminated`` and exits 143 (128 + 15, what a shell reports for a process SIGTERM ended).

The API key comes from ``KLAVIS_API_KEY`` (or a ``.env`` file), never from an argument, so it
does not show in the process list or the shell history.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import secrets
import shutil
import stat
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from workflows._config import API_KEY_ENV, BASE_URL_ENV, resolve_settings
from workflows._errors import (
    ConfigurationError,
    InvalidInputError,
    KlavisError,
    LocalWriteError,
    MissingExtraError,
)
from workflows._models import SERVER_NAMES, SandboxInfo
from workflows._ownership import Terminated, default_ledger, unwind_on_sigterm
from workflows._ownership._reap import reap
from workflows._paths import check_destination, shown_path
from workflows._recipes import ReleaseResult, bulk_acquire, bulk_release, round_trip_dump
from workflows._sandbox import LocalSandbox, list_sandboxes
from workflows._staging import make_staging

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
EXIT_TERMINATED = 143

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_ERROR: "error (stderr says which: unknown sandbox, refused path, failed release...)",
    EXIT_USAGE: "usage error (unknown command, bad or missing argument)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
    EXIT_BROKEN_PIPE: "stdout was closed before all of the output was written "
    "(`klavis-sandbox list | head -1`), as for any program killed by SIGPIPE",
    EXIT_TERMINATED: "terminated by SIGTERM (timeout, docker stop, a cancelled CI job), "
    "after removing what it was writing",
}
"""Every exit status of the CLI and what it means (also printed by ``--help``)."""

CAPABILITY_NOTE = (
    "MCP URLs are capabilities: anyone who has one can use that server, with no key, "
    "until the sandbox is released; share them as you would a password"
)

# Archive formats a user may reasonably ask for and that `dump -o` does not write: refused by
# name before anything is sent rather than written as a folder called "x.zip". A .zip is not
# offered: it would be a re-encoding of every member (not the service's archive), and zip has no
# portable way to keep the workspace's symbolic links and modes.
_REFUSED_SUFFIXES = (".zip", ".7z", ".rar", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst")


class _UsageError(Exception):
    """Arguments that parse but do not make sense together: exit 2, like argparse's own."""


class _Output:
    """Where a command writes: data to ``out``, messages to ``err`` (unless quiet)."""

    def __init__(self, out: TextIO, err: TextIO, *, quiet: bool) -> None:
        self.out = out
        self.err = err
        self.quiet = quiet

    def data(self, text: str) -> None:
        self.out.write(text)

    def json(self, value: Any) -> None:
        json.dump(value, self.out, indent=2)
        self.out.write("\n")

    def note(self, text: str) -> None:
        if not self.quiet:
            self.err.write(f"{text}\n")

    def problem(self, text: str) -> None:
        """Always shown: something failed."""
        self.err.write(f"klavis-sandbox: {text}\n")


def _seconds(text: str) -> float:
    """argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text!r}")
    return value


def _info_json(info: SandboxInfo) -> dict[str, Any]:
    data = asdict(info)
    for server in data["servers"]:
        server.pop("auth_data", None)  # may hold credentials; `get --json` is for reading
    return data


def _print_table(rows: Sequence[Sequence[str]], out: _Output) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        line = "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        out.data(line + "\n")


def _progress(args: argparse.Namespace) -> bool | None:
    """``--progress``/``--no-progress`` as given; ``-q`` turns bars off unless asked for."""
    chosen: bool | None = getattr(args, "progress", None)
    return False if chosen is None and args.quiet else chosen


# --------------------------------------------------------------------------- acquire, list, get


def _cmd_acquire(args: argparse.Namespace, ui: _Output) -> int:
    names: list[str] | str = "ALL" if args.servers == ["ALL"] else list(args.servers)
    sb = LocalSandbox.acquire(
        names,
        ttl_seconds=None if args.ttl == 0 else args.ttl,
        benchmark=args.benchmark,
        base_url=args.base_url,
        progress=False,
    )
    try:
        if args.json:
            ui.json(_info_json(sb.info))
        else:
            ui.data(f"{sb.id}\n")
        ui.out.flush()  # a closed stdout shows here, while the sandbox can still be released
    except BrokenPipeError:
        sb.release()
        ui.problem(f"stdout was closed before the sandbox id was read; released {sb.id}")
        raise
    # the sandbox outlives this command: hand it over to the ledger and to `release`
    from workflows._ownership import forget

    forget(sb.id, sb.settings)
    ttl = "no TTL" if args.ttl == 0 else f"TTL {args.ttl} s"
    ui.note(
        f"acquired {sb.id} ({', '.join(s.name for s in sb.servers)}; {ttl}); "
        f"release it with: klavis-sandbox release {sb.id}"
    )
    return EXIT_OK


def _cmd_list(args: argparse.Namespace, ui: _Output) -> int:
    infos = list_sandboxes(base_url=args.base_url)
    if args.json:
        ui.json([_info_json(i) for i in infos])
        return EXIT_OK
    if not infos:
        ui.note("no active sandboxes")
        return EXIT_OK
    rows = [("ID", "STATUS", "CREATED", "SERVERS")]
    rows += [
        (i.id, i.status or "", i.created_at or "", ",".join(s.name for s in i.servers))
        for i in infos
    ]
    _print_table(rows, ui)
    return EXIT_OK


def _cmd_get(args: argparse.Namespace, ui: _Output) -> int:
    sb = LocalSandbox.attach(args.id, base_url=args.base_url)
    if args.json:
        ui.json(_info_json(sb.info))
        return EXIT_OK
    ui.data(f"id:        {sb.id}\nstatus:    {sb.status}\n")
    ui.data(f"created:   {sb.info.created_at}\nbenchmark: {sb.benchmark}\n")
    for server in sb.servers:
        ui.data(f"  {server.name:<24} {server.mcp_server_url or ''}\n")
    ui.note(f"note: {CAPABILITY_NOTE}")
    return EXIT_OK


# --------------------------------------------------------------------------- seed, dump


def _cmd_seed(args: argparse.Namespace, ui: _Output) -> int:
    sb = LocalSandbox.attach(args.id, base_url=args.base_url, progress=_progress(args))
    count = sb.seed_directory(
        args.path,
        ignore=args.ignore,
        gitignore=not args.no_gitignore,
        preserve_mtime=args.preserve_mtime,
    )
    if args.json:
        ui.json({"sandbox_id": sb.id, "files": count})
    ui.note(f"seeded {count} files into {sb.id}")
    return EXIT_OK


@dataclass(frozen=True)
class _DumpTarget:
    path: Path
    format: str  # "folder", "tar.gz" or "tar"
    replace: bool  # something is there and --force says to replace it


def _dump_target(output: str, force: bool) -> _DumpTarget:
    """What ``dump -o`` writes, checked before anything is sent."""
    path = check_destination(output, what="dump -o")
    lowered = path.name.lower()
    refused = next((s for s in _REFUSED_SUFFIXES if lowered.endswith(s)), None)
    if refused is not None:
        raise InvalidInputError(
            f"dump -o {output!r}: {refused} archives are not written; name a folder, a .tar.gz "
            "(or .tgz) file, or a .tar file"
        )
    if lowered.endswith((".tar.gz", ".tgz")):
        kind = "tar.gz"
    elif lowered.endswith(".tar"):
        kind = "tar"
    else:
        kind = "folder"
    if not os.path.lexists(path):
        return _DumpTarget(path, kind, replace=False)
    empty_folder = kind == "folder" and path.is_dir() and not path.is_symlink()
    if empty_folder and not any(path.iterdir()):
        return _DumpTarget(path, kind, replace=False)  # nothing there to lose
    if not force:
        if path.is_symlink():
            what = "a symlink"
        elif path.is_dir():
            what = "a folder that is not empty"
        else:
            what = "a file"
        raise InvalidInputError(
            f"dump -o {output!r}: it already exists ({what}); pass --force to replace it "
            "(its current contents are deleted, not merged), or name a new path"
        )
    here = Path.cwd().resolve()
    if not path.is_symlink() and (path.resolve() == here or path.resolve() in here.parents):
        raise InvalidInputError(
            f"dump -o {output!r} --force would replace the current folder (or one holding it); "
            "name a folder inside it, or run the command from elsewhere"
        )
    return _DumpTarget(path, kind, replace=True)


def _gunzip(source: Path, destination: Path, shown: Path) -> None:
    """Decompress ``source`` into ``destination``; a failed write (a full disk, EFBIG) raises
    LocalWriteError naming ``shown``."""
    from workflows._archive import igzip_file

    with igzip_file(source, "rb") as gz:
        try:
            with destination.open("xb") as out:
                shutil.copyfileobj(gz, out, 1024 * 1024)
        except OSError as exc:
            if exc.errno is None:  # BadGzipFile: the archive is damaged, not the disk full
                raise
            path = os.fspath(shown)
            message = f"cannot write {shown_path(path)}: {exc.strerror or exc}; nothing was written"
            raise LocalWriteError(message, path=path, cause=exc) from exc


def _dump(sb: LocalSandbox, target: _DumpTarget, args: argparse.Namespace) -> None:
    progress = _progress(args)
    if target.format != "tar" and not target.replace:
        sb.dump_to(target.path, progress=progress, timeout=args.timeout)
        return
    # Written beside the destination, then renamed into place: the same file system, and a
    # failure anywhere leaves the destination as it was. The staging folder is dump_to's kind
    # (named for this process, locked): a later dump removes it if a kill left it behind.
    parent = target.path.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    staged_in = make_staging(os.fspath(parent), folder=True)
    staging = Path(staged_in.path)
    try:
        staged = staging / ("dump" if target.format == "folder" else "dump.tar.gz")
        try:
            sb.dump_to(staged, progress=progress, timeout=args.timeout)
        except LocalWriteError as exc:  # it names the staging path: name the user's instead
            shown = shown_path(os.fspath(target.path))
            message = str(exc).replace(shown_path(os.fspath(staged)), shown)
            raise LocalWriteError(message, path=os.fspath(target.path), cause=exc) from exc
        if target.format == "tar":
            _gunzip(staged, staging / "dump.tar", target.path)
            staged = staging / "dump.tar"
        replaced = staging / "replaced"
        if os.path.lexists(target.path):
            os.replace(target.path, replaced)  # a link is moved, never followed
        try:
            os.replace(staged, target.path)
        except BaseException:
            if os.path.lexists(replaced):  # put the user's file back before cleaning up
                os.replace(replaced, target.path)
            raise
    finally:
        staged_in.remove()


def _dump_summary(sb: LocalSandbox, target: _DumpTarget) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "sandbox_id": sb.id,
        "path": os.fspath(target.path),
        "format": target.format,
    }
    if target.format != "folder":
        summary["bytes"] = target.path.stat().st_size
        return summary
    files = links = size = 0
    for folder, dirs, names in os.walk(target.path):  # links to folders are listed, not walked
        for name in [*dirs, *names]:
            st = os.lstat(os.path.join(folder, name))
            if stat.S_ISLNK(st.st_mode):
                links += 1
            elif stat.S_ISREG(st.st_mode):
                files += 1
                size += st.st_size
    summary.update(files=files, links=links, bytes=size)
    return summary


def _cmd_dump(args: argparse.Namespace, ui: _Output) -> int:
    target = _dump_target(args.output, args.force)  # before anything is sent
    sb = LocalSandbox.attach(args.id, base_url=args.base_url, progress=_progress(args))
    _dump(sb, target, args)
    if args.json:
        ui.json(_dump_summary(sb, target))
    replaced = " (replacing what was there)" if target.replace else ""
    ui.note(f"dumped {sb.id} to {target.path}{replaced}")
    return EXIT_OK


# --------------------------------------------------------------------------- exec


def _cmd_exec(args: argparse.Namespace, ui: _Output) -> int:
    sb = LocalSandbox.attach(args.id, base_url=args.base_url, progress=False)
    run = sb.execute(Path(args.script), requirements=args.requirement, name=args.name)
    for text in run.logs():
        ui.data(text)
        ui.out.flush()
    status = run.wait()
    if status == "completed":
        ui.note(f"execution {run.name} {status}")
        return EXIT_OK
    ui.problem(f"execution {run.name} {status}")
    return EXIT_ERROR


# --------------------------------------------------------------------------- release, reap


def _release_outcome(result: ReleaseResult, ours: set[str] | None) -> str:
    """``released``, ``already_released``, ``not_found`` or ``failed``.

    The service answers 404 both for an id it never gave this key and for one released
    already, so the local ledger tells them apart: a sandbox acquired here and not released by
    us (its TTL ran out, or another client released it) is ``already_released``; any other id
    is ``not_found``. ``ours`` None (``--all``, ``reap``): every 404 is ``already_released``.
    """
    if not result.ok:
        return "failed"
    if not result.already_released:
        return "released"
    if ours is None or result.sandbox_id in ours:
        return "already_released"
    return "not_found"


def _report_releases(
    results: Sequence[ReleaseResult],
    ui: _Output,
    args: argparse.Namespace,
    ours: set[str] | None = None,
) -> int:
    ignore_missing = getattr(args, "ignore_not_found", False)
    records = []
    failed = False
    for r in results:
        outcome = _release_outcome(r, ours)
        error = None if r.error is None else str(r.error)
        if outcome == "not_found":
            error = "no such sandbox (not of this API key, or released already)"
        records.append({"sandbox_id": r.sandbox_id, "outcome": outcome, "error": error})
        if outcome == "released":
            ui.note(f"released {r.sandbox_id}")
        elif outcome == "already_released":
            ui.note(f"{r.sandbox_id} was already released (by its TTL, or by another client)")
        elif outcome == "not_found" and ignore_missing:
            ui.note(f"{r.sandbox_id}: no such sandbox (ignored)")
        else:
            failed = True
            ui.problem(f"error: {r.sandbox_id}: {error}")
    if args.json:
        ui.json(records)
    if not results:
        ui.note("nothing to release")
    return EXIT_ERROR if failed else EXIT_OK


def _cmd_release(args: argparse.Namespace, ui: _Output) -> int:
    if args.all == bool(args.ids):
        raise _UsageError("name sandbox ids to release, or --all (not both)")
    if args.all:
        results = bulk_release(None, base_url=args.base_url, progress=False)
        return _report_releases(results, ui, args)
    settings = resolve_settings(None, args.base_url)
    held = default_ledger().held(base_url=settings.base_url, key=settings.api_key.fingerprint)
    ours = {entry.sandbox_id for entry in held}
    ids = list(dict.fromkeys(args.ids))
    results = bulk_release(ids, base_url=args.base_url, progress=False)
    return _report_releases(results, ui, args, ours)


def _cmd_reap(args: argparse.Namespace, ui: _Output) -> int:
    results = reap(base_url=args.base_url, include_live=args.include_live, dry_run=args.dry_run)
    if not args.dry_run:
        return _report_releases(results, ui, args)
    if args.json:
        ui.json([r.sandbox_id for r in results])
    else:
        for r in results:
            ui.data(f"{r.sandbox_id}\n")
    if not results:
        ui.note("nothing to release")
    return EXIT_OK


# --------------------------------------------------------------------------- demo


@contextlib.contextmanager
def _demo_target(out: TextIO) -> Iterator[dict[str, Any]]:
    """The real service when a key is set, else an embedded emulator on a free port."""
    if os.environ.get(API_KEY_ENV):
        out.write(f"Using {os.environ.get(BASE_URL_ENV) or 'https://api.klavis.ai'}\n")
        yield {}
        return
    try:
        from klavis_emulator import ConfinementError, EmulatorConfig, EmulatorServer
    except ImportError:  # pragma: no cover - depends on the installed extras
        raise MissingExtraError(
            "the demo without KLAVIS_API_KEY (set it to use the service)", extra="emulator"
        ) from None
    with contextlib.ExitStack() as stack:
        data = stack.enter_context(tempfile.TemporaryDirectory(prefix="klavis-demo-"))
        try:
            server = stack.enter_context(EmulatorServer(EmulatorConfig(data_dir=data)))
        except ConfinementError as exc:  # bwrap installed but unable to confine here
            raise ConfigurationError(f"the embedded emulator cannot start: {exc}") from None
        out.write(
            f"No {API_KEY_ENV} set: using an embedded emulator at {server.base_url}\n"
            "(set KLAVIS_API_KEY to run the same demo against the real service)\n\n"
        )
        os.environ.setdefault("KLAVIS_SANDBOX_STATE_DIR", os.path.join(data, "state"))
        yield {"api_key": f"demo-{secrets.token_hex(8)}", "base_url": server.base_url}


def _cmd_demo(args: argparse.Namespace, ui: _Output) -> int:
    out = ui.out
    started = time.perf_counter()
    files = {
        "hello.txt": "Hello from a Klavis local sandbox!\n",
        "notes.md": "# Notes\n- item 1\n- item 2\n",
        "config.json": '{"app": "demo", "version": "1.0"}\n',
    }
    with _demo_target(out) as conn:
        with LocalSandbox.acquire(
            ["filesystem", "git", "terminal"], ttl_seconds=600, progress=False, **conn
        ) as sb:
            out.write(f"1. acquired sandbox {sb.id}\n")
            for server in sb.servers:
                out.write(f"     {server.name:<10} {server.mcp_server_url}\n")
            report = round_trip_dump(sb, files)
            out.write(f"2. seeded {len(files)} files from a dict: {', '.join(files)}\n")
            out.write(f"3. round-trip dump: {report.summary()}\n")
            before = report.snapshot
            sb.seed({"notes.md": files["notes.md"] + "- item 3\n", "out/result.txt": "42\n"})
            after = sb.dump()
            diff = before.diff(after)
            out.write(f"4. changed the workspace; dump diff: {diff.summary()}\n")
            for line in str(diff).splitlines():
                out.write(f"     {line}\n")
            batch = bulk_acquire(["filesystem"], args.count, progress=False, **conn)
            out.write(f"5. bulk_acquire: {len(batch.sandboxes)} of {args.count} acquired\n")
            results = bulk_release([*batch.sandboxes, sb], progress=False, **conn)
            ok = sum(r.ok for r in results)
            out.write(f"6. bulk_release: {ok} of {len(results)} released (this one included)\n")
        left = list_sandboxes(**conn)
        out.write(f"7. sandboxes still listed: {len(left)}\n")
    out.write(f"done in {time.perf_counter() - started:.1f} s\n")
    return 0 if report.ok and not left and ok == len(results) else 1


def _epilog() -> str:
    codes = "\n".join(
        textwrap.fill(meaning, 78, initial_indent=f"  {code:<4} ", subsequent_indent=" " * 7)
        for code, meaning in EXIT_CODES.items()
    )
    prose = textwrap.fill(
        "Data goes to stdout, messages to stderr (-q silences them); --json prints the data as "
        f"JSON. {CAPABILITY_NOTE}.",
        78,
    )
    return f"{prose}\n\nexit status:\n{codes}"


def _parser() -> argparse.ArgumentParser:
    from workflows import __version__

    parser = argparse.ArgumentParser(
        prog="klavis-sandbox",
        description="Acquire, seed, dump and release Klavis local sandboxes. "
        f"The API key comes from {API_KEY_ENV} or a .env file.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--base-url", help=f"API base URL (default: ${BASE_URL_ENV} or https://api.klavis.ai)"
    )
    quiet = argparse.ArgumentParser(add_help=False)
    quiet.add_argument(
        "-q", "--quiet", action="store_true", help="no messages on stderr (errors still show)"
    )
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print the data as JSON")
    both = [quiet, as_json]
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "acquire",
        parents=both,
        help="acquire a sandbox and print its id (it stays held)",
        description="Acquire a sandbox, print its id on stdout (--json: the whole record, "
        "MCP URLs included) and leave it held until `release` or its TTL. "
        f"{CAPABILITY_NOTE}.",
    )
    p.add_argument(
        "servers", nargs="+", help=f"server names, or ALL; one of: {', '.join(SERVER_NAMES)}"
    )
    p.add_argument("--ttl", type=int, default=7200, help="seconds until auto-release (0 = never)")
    p.add_argument("--benchmark", default=None)
    p.set_defaults(run=_cmd_acquire)

    p = sub.add_parser(
        "list",
        parents=both,
        help="list this key's active sandboxes",
        description=f"List this key's active sandboxes (--json: with MCP URLs). {CAPABILITY_NOTE}.",
    )
    p.set_defaults(run=_cmd_list)

    p = sub.add_parser(
        "get",
        parents=both,
        help="show one sandbox",
        description=f"Show one sandbox and its servers' MCP URLs. {CAPABILITY_NOTE}.",
    )
    p.add_argument("id")
    p.set_defaults(run=_cmd_get)

    p = sub.add_parser(
        "seed",
        parents=both,
        help="upload a local folder into a sandbox's workspace",
        description="Upload a local folder into a sandbox's workspace (files of the same name "
        "are replaced, others stay). .gitignore and .sandboxignore rules apply.",
    )
    p.add_argument("id")
    p.add_argument("path", help="the folder to upload")
    p.add_argument("--ignore", action="append", default=[], help="gitignore pattern")
    p.add_argument("--no-gitignore", action="store_true", help="do not read .gitignore")
    p.add_argument(
        "--preserve-mtime",
        action="store_true",
        help="keep the files' modification times (default: one fixed time, so the same files "
        "give the same archive)",
    )
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)
    p.set_defaults(run=_cmd_seed)

    p = sub.add_parser(
        "dump",
        parents=both,
        help="download a sandbox's workspace to a folder, .tar.gz or .tar",
        description="Download a sandbox's workspace: into a new (or empty) folder, or as a "
        ".tar.gz/.tgz (as the service sends it) or .tar file. Other archive formats (.zip...) "
        "are refused. An existing path is refused unless --force, which replaces it: a folder's "
        "current contents are deleted, not merged.",
    )
    p.add_argument("id")
    p.add_argument("-o", "--output", required=True, help="a folder, or a .tar.gz/.tgz/.tar file")
    p.add_argument(
        "--force", action="store_true", help="replace an existing file or non-empty folder"
    )
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="give up if the whole download takes longer (default: no limit, but a "
        "download that stalls is ended)",
    )
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)
    p.set_defaults(run=_cmd_dump)

    p = sub.add_parser(
        "exec",
        parents=[quiet],
        help="run a Python script in a sandbox, streaming its output",
        description="Run a Python script in a sandbox; its output goes to stdout. Exit status "
        "1 when the script fails.",
    )
    p.add_argument("id")
    p.add_argument("script", help="the main.py to run")
    p.add_argument("-r", "--requirement", action="append", default=[], help="pip requirement")
    p.add_argument("--name", default=None, help="execution name (default: generated)")
    p.set_defaults(run=_cmd_exec)

    p = sub.add_parser(
        "release",
        parents=both,
        help="release sandboxes by id, or --all",
        description="Release sandboxes. An id the service does not know is an error (exit 1) "
        "unless --ignore-not-found; one acquired here whose TTL ran out is not.",
    )
    p.add_argument("ids", nargs="*")
    p.add_argument("--all", action="store_true", help="every sandbox this key lists")
    p.add_argument("--ignore-not-found", action="store_true", help="an unknown id is not an error")
    p.set_defaults(run=_cmd_release)

    p = sub.add_parser(
        "reap", parents=both, help="release what the local ledger says is still held"
    )
    p.add_argument("--dry-run", action="store_true", help="only print the ids it would release")
    p.add_argument(
        "--include-live",
        action="store_true",
        help="also release sandboxes whose acquiring process is still running",
    )
    p.set_defaults(run=_cmd_reap)

    p = sub.add_parser("demo", help="walk the lifecycle (embedded emulator without a key)")
    p.add_argument("--count", type=int, default=4, help="sandboxes for the bulk step")
    p.set_defaults(run=_cmd_demo)
    return parser


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run the CLI and return its exit status (see :data:`EXIT_CODES`).

    ``out`` and ``err`` default to ``sys.stdout`` and ``sys.stderr``; a usage error raises
    ``SystemExit(2)`` as argparse does.
    """
    args = _parser().parse_args(argv)
    ui = _Output(out or sys.stdout, err or sys.stderr, quiet=getattr(args, "quiet", False))
    unwind_on_sigterm()
    try:
        code: int = args.run(args, ui)
    except BrokenPipeError:
        return EXIT_BROKEN_PIPE
    except _UsageError as exc:
        ui.problem(f"{args.command}: {exc}")
        return EXIT_USAGE
    except KlavisError as exc:
        ui.problem(f"error: {exc}")
        return EXIT_ERROR
    except OSError as exc:  # a file the user named: one line too, never a traceback
        ui.problem(f"error: {exc}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        ui.problem("interrupted")
        return EXIT_INTERRUPTED
    except Terminated:
        ui.problem("terminated")
        return EXIT_TERMINATED
    return code


def main_entry() -> None:
    """Console-script entry point: :func:`main`, and a quiet end when stdout is closed."""
    code = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = EXIT_BROKEN_PIPE
    if code == EXIT_BROKEN_PIPE:
        # Python flushes stdout again at exit: point it at /dev/null so that stays silent
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    sys.exit(code)
