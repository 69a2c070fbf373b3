"""``klavis-sandbox``: the command line face of `workflows`.

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
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from typing import Any, TextIO

from ._config import API_KEY_ENV, BASE_URL_ENV
from ._errors import ConfigurationError, KlavisError
from ._models import SERVER_NAMES, SandboxInfo
from ._paths import check_destination
from ._reap import reap
from ._recipes import ReleaseResult, bulk_acquire, bulk_release, round_trip_dump
from ._sandbox import LocalSandbox, list_sandboxes

__all__ = ["main"]


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


def _print_table(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        out.write("\n")


def _print_results(results: Sequence[ReleaseResult], out: TextIO) -> int:
    failed = 0
    for r in results:
        if r.ok:
            note = " (already released)" if r.already_released else ""
            out.write(f"released {r.sandbox_id}{note}\n")
        else:
            failed += 1
            out.write(f"FAILED   {r.sandbox_id}: {r.error}\n")
    if not results:
        out.write("nothing to release\n")
    return 1 if failed else 0


def _cmd_acquire(args: argparse.Namespace, out: TextIO) -> int:
    names: list[str] | str = "ALL" if args.servers == ["ALL"] else list(args.servers)
    sb = LocalSandbox.acquire(
        names,
        ttl_seconds=None if args.ttl == 0 else args.ttl,
        benchmark=args.benchmark,
        base_url=args.base_url,
    )
    # the sandbox outlives this command: hand it over to the ledger and to `release`
    from ._ownership import forget

    forget(sb.id, sb.settings)
    if args.json:
        json.dump(_info_json(sb.info), out, indent=2)
        out.write("\n")
    else:
        out.write(f"{sb.id}\n")
        for server in sb.servers:
            out.write(f"  {server.name:<24} {server.mcp_server_url or ''}\n")
    return 0


def _cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    infos = list_sandboxes(base_url=args.base_url)
    if args.json:
        json.dump([_info_json(i) for i in infos], out, indent=2)
        out.write("\n")
        return 0
    if not infos:
        out.write("no active sandboxes\n")
        return 0
    rows = [("ID", "STATUS", "CREATED", "SERVERS")]
    rows += [
        (i.id, i.status or "", i.created_at or "", ",".join(s.name for s in i.servers))
        for i in infos
    ]
    _print_table(rows, out)
    return 0


def _cmd_get(args: argparse.Namespace, out: TextIO) -> int:
    sb = LocalSandbox.attach(args.id, base_url=args.base_url)
    if args.json:
        json.dump(_info_json(sb.info), out, indent=2)
        out.write("\n")
        return 0
    out.write(f"id:        {sb.id}\nstatus:    {sb.status}\n")
    out.write(f"created:   {sb.info.created_at}\nbenchmark: {sb.benchmark}\n")
    for server in sb.servers:
        out.write(f"  {server.name:<24} {server.mcp_server_url or ''}\n")
    return 0


def _cmd_seed(args: argparse.Namespace, out: TextIO) -> int:
    sb = LocalSandbox.attach(args.id, base_url=args.base_url, progress=args.progress)
    count = sb.seed_directory(args.path, ignore=args.ignore, gitignore=not args.no_gitignore)
    out.write(f"seeded {count} files into {sb.id}\n")
    return 0


def _cmd_dump(args: argparse.Namespace, out: TextIO) -> int:
    check_destination(args.output, what="dump -o")  # before anything is sent
    sb = LocalSandbox.attach(args.id, base_url=args.base_url, progress=args.progress)
    path = sb.dump_to(args.output, timeout=args.timeout)
    out.write(f"dumped {sb.id} to {path}\n")
    return 0


def _cmd_exec(args: argparse.Namespace, out: TextIO) -> int:
    from pathlib import Path

    sb = LocalSandbox.attach(args.id, base_url=args.base_url, progress=False)
    run = sb.execute(Path(args.script), requirements=args.requirement, name=args.name)
    for text in run.logs():
        out.write(text)
        out.flush()
    status = run.wait()
    sys.stderr.write(f"klavis-sandbox: execution {run.name} {status}\n")
    return 0 if status == "completed" else 1


def _cmd_release(args: argparse.Namespace, out: TextIO) -> int:
    if args.all == bool(args.ids):
        raise KlavisError("name sandbox ids to release, or --all (not both)")
    results = bulk_release(None if args.all else args.ids, base_url=args.base_url)
    return _print_results(results, out)


def _cmd_reap(args: argparse.Namespace, out: TextIO) -> int:
    results = reap(base_url=args.base_url, include_live=args.include_live, dry_run=args.dry_run)
    if args.dry_run:
        for r in results:
            out.write(f"would release {r.sandbox_id}\n")
        if not results:
            out.write("nothing to release\n")
        return 0
    return _print_results(results, out)


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
        raise KlavisError(
            "no KLAVIS_API_KEY and the emulator is not installed: "
            "pip install 'klavis-sandbox[emulator]', or set KLAVIS_API_KEY"
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


def _cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="klavis-sandbox",
        description="Acquire, seed, dump and release Klavis local sandboxes. "
        f"The API key comes from {API_KEY_ENV} or a .env file.",
    )
    parser.add_argument(
        "--base-url", help=f"API base URL (default: ${BASE_URL_ENV} or https://api.klavis.ai)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("acquire", help="acquire a sandbox and print its id (it stays held)")
    p.add_argument(
        "servers", nargs="+", help=f"server names, or ALL; one of: {', '.join(SERVER_NAMES)}"
    )
    p.add_argument("--ttl", type=int, default=7200, help="seconds until auto-release (0 = never)")
    p.add_argument("--benchmark", default=None)
    p.add_argument("--json", action="store_true", help="print the details as JSON")
    p.set_defaults(run=_cmd_acquire)

    p = sub.add_parser("list", help="list this key's active sandboxes")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=_cmd_list)

    p = sub.add_parser("get", help="show one sandbox")
    p.add_argument("id")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=_cmd_get)

    for name, run, help_text in (
        ("seed", _cmd_seed, "upload a local folder into a sandbox's workspace"),
        ("dump", _cmd_dump, "download a sandbox's workspace to a folder or .tar.gz"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("id")
        if name == "seed":
            p.add_argument("path", help="the folder to upload")
            p.add_argument("--ignore", action="append", default=[], help="gitignore pattern")
            p.add_argument("--no-gitignore", action="store_true", help="do not read .gitignore")
        else:
            p.add_argument("-o", "--output", required=True, help="a folder, or a .tar.gz file")
            p.add_argument(
                "--timeout",
                type=_seconds,
                default=None,
                metavar="SECONDS",
                help="give up if the whole download takes longer (default: no limit, but a "
                "download that stalls is ended)",
            )
        p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)
        p.set_defaults(run=run)

    p = sub.add_parser("exec", help="run a Python script in a sandbox, streaming its output")
    p.add_argument("id")
    p.add_argument("script", help="the main.py to run")
    p.add_argument("-r", "--requirement", action="append", default=[], help="pip requirement")
    p.add_argument("--name", default=None, help="execution name (default: generated)")
    p.set_defaults(run=_cmd_exec)

    p = sub.add_parser("release", help="release sandboxes by id, or --all")
    p.add_argument("ids", nargs="*")
    p.add_argument("--all", action="store_true", help="every sandbox this key lists")
    p.set_defaults(run=_cmd_release)

    p = sub.add_parser("reap", help="release what the local ledger says is still held")
    p.add_argument("--dry-run", action="store_true", help="only list what would be released")
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


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 failure, 2 usage)."""
    args = _parser().parse_args(argv)
    stream = out or sys.stdout
    try:
        code: int = args.run(args, stream)
    except KlavisError as exc:
        sys.stderr.write(f"klavis-sandbox: error: {exc}\n")
        return 1
    except OSError as exc:  # a file the user named: one line too, never a traceback
        sys.stderr.write(f"klavis-sandbox: error: {exc}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("klavis-sandbox: interrupted\n")
        return 130
    return code


def main_entry() -> None:
    """Console-script entry point."""
    sys.exit(main())
