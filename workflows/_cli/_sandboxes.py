"""The commands about sandboxes themselves: ``acquire``, ``list`` and ``get``."""

from __future__ import annotations

import argparse
from typing import cast

from workflows._models import ServerNames
from workflows._sandbox import LocalSandbox, list_sandboxes

from ._output import CAPABILITY_NOTE, EXIT_OK, Output, info_json


def cmd_acquire(args: argparse.Namespace, ui: Output) -> int:
    # the names typed on the command line are sent as they are (the service judges them)
    names = cast("ServerNames", "ALL" if args.servers == ["ALL"] else list(args.servers))
    sb = LocalSandbox.acquire(  # detached: it outlives this command, and reap spares it
        names,
        ttl_seconds=args.ttl,  # None: never (--ttl never)
        benchmark=args.benchmark,
        base_url=args.base_url,
        progress=False,
        detach=True,
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
    ttl = "no TTL" if args.ttl is None else f"TTL {args.ttl} s"
    ui.note(
        f"acquired {sb.id} ({', '.join(s.name for s in sb.servers)}; {ttl}); "
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
