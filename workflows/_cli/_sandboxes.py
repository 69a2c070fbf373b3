"""The commands about sandboxes themselves: ``acquire``, ``list``, ``get`` and ``exec``."""

from __future__ import annotations

import argparse
from pathlib import Path

from workflows._ownership import forget
from workflows._sandbox import LocalSandbox, list_sandboxes

from ._output import CAPABILITY_NOTE, EXIT_ERROR, EXIT_OK, Output, info_json


def cmd_acquire(args: argparse.Namespace, ui: Output) -> int:
    names: list[str] | str = "ALL" if args.servers == ["ALL"] else list(args.servers)
    ttl: int | None = args.ttl
    if ttl == 0:  # the older spelling of never, kept working
        ui.note("--ttl 0 is deprecated: it means never, which is now spelled --ttl never")
        ttl = None
    sb = LocalSandbox.acquire(
        names,
        ttl_seconds=ttl,
        benchmark=args.benchmark,
        base_url=args.base_url,
        progress=False,
    )
    try:
        if args.json:
            ui.json(info_json(sb.info))
        else:
            ui.data(f"{sb.id}\n")
        ui.out.flush()  # a closed stdout shows here, while the sandbox can still be released
    except BrokenPipeError:
        sb.release()
        ui.problem(f"stdout was closed before the sandbox id was read; released {sb.id}")
        raise
    # the sandbox outlives this command: hand it over to the ledger and to `release`
    forget(sb.id, sb.settings)
    lifetime = "no TTL: never released by the service" if ttl is None else f"TTL {ttl} s"
    ui.note(
        f"acquired {sb.id} ({', '.join(s.name for s in sb.servers)}; {lifetime}); "
        f"release it with: klavis-sandbox release {sb.id}"
    )
    return EXIT_OK


def cmd_list(args: argparse.Namespace, ui: Output) -> int:
    infos = list_sandboxes(base_url=args.base_url)
    if args.json:
        ui.json([info_json(i) for i in infos])
        return EXIT_OK
    if not infos:
        ui.note("no active sandboxes")
        return EXIT_OK
    rows = [("ID", "STATUS", "CREATED", "SERVERS")]
    rows += [
        (i.id, i.status or "", i.created_at or "", ",".join(s.name for s in i.servers))
        for i in infos
    ]
    ui.table(rows)
    return EXIT_OK


def cmd_get(args: argparse.Namespace, ui: Output) -> int:
    sb = LocalSandbox.attach(args.id, base_url=args.base_url)
    if args.json:
        ui.json(info_json(sb.info))
        return EXIT_OK
    ui.data(f"id:        {sb.id}\nstatus:    {sb.status}\n")
    ui.data(f"created:   {sb.info.created_at}\nbenchmark: {sb.benchmark}\n")
    for server in sb.servers:
        ui.data(f"  {server.name:<24} {server.mcp_server_url or ''}\n")
    ui.note(f"note: {CAPABILITY_NOTE}")
    return EXIT_OK


def cmd_exec(args: argparse.Namespace, ui: Output) -> int:
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
