"""The commands about sandboxes themselves: ``acquire``, ``list``, ``get`` and ``exec``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import cast

from workflows._errors import InvalidInputError
from workflows._execution import Execution
from workflows._execution_input import (
    directory_execution_files,
    execution_files,
    read_requirements_file,
)
from workflows._models import ServerNames
from workflows._sandbox import LocalSandbox, list_sandboxes

from ._output import CAPABILITY_NOTE, EXIT_ERROR, EXIT_OK, Output, UsageError, info_json


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


def _exec_requirements(args: argparse.Namespace) -> list[str]:
    """The lines of every ``-r FILE`` (read as pip reads them) and every ``--with SPEC``."""
    lines: list[str] = []
    for name in args.requirement:
        if not Path(name).exists() and not name.endswith(".txt"):
            raise UsageError(
                f"-r {name}: -r reads a requirements file, as pip does, and there is no file "
                f"{name!r}; to install one package, use --with {name}"
            )
        try:
            lines += read_requirements_file(name, what=f"-r {name}")
        except InvalidInputError as exc:
            raise UsageError(str(exc)) from None
    return lines + list(args.with_requirements)


def _exec_files(args: argparse.Namespace) -> dict[str, Path]:
    """``--file PATH`` as ``{name beside main.py: path}``, each checked."""
    files: dict[str, Path] = {}
    for given in args.files:
        path = Path(given)
        name = path.resolve().name if path.name in ("", ".", "..") else path.name
        if not path.exists():
            raise UsageError(f"--file {given}: no such file or folder")
        if name == "main.py":
            raise UsageError(f"--file {given}: the script to run is the SCRIPT argument")
        if name == "requirements.txt":
            raise UsageError(
                f"--file {given}: requirements files are installed with -r {given} "
                "(to send the file without installing it, give it another name)"
            )
        if name in files:
            raise UsageError(
                f"--file {files[name]} and --file {given} would both be sent as {name!r}"
            )
        files[name] = path
    return files


def _ended(run: Execution) -> str:
    """How the run ended, for the closing message: main.py's exit status when the emulator
    logged it; the real service reports none."""
    code = run.exit_code()
    if code is None:
        return "the service reports no exit status; the output above says why"
    if code < 0:
        return f"main.py was killed by signal {-code}"
    return f"main.py exited with status {code}"


def cmd_exec(args: argparse.Namespace, ui: Output) -> int:
    script = Path(args.script)
    if not script.exists():
        raise UsageError(f"{args.script}: no such script or folder")
    requirements = _exec_requirements(args)
    files = _exec_files(args)
    if script.is_dir() and requirements and (script / "requirements.txt").is_file():
        raise UsageError(
            f"{args.script} has a requirements.txt, which is installed: drop -r/--with "
            "(or list them in that file)"
        )
    try:  # every argument is checked before the first request (attach is one)
        if script.is_dir():
            directory_execution_files(script, requirements=requirements, files=files)
        else:
            execution_files(script, requirements=requirements, files=files)
    except InvalidInputError as exc:
        raise UsageError(str(exc)) from None
    sb = LocalSandbox.attach(args.id, base_url=args.base_url, progress=False)
    if script.is_dir():
        run = sb.execute_directory(script, requirements=requirements, files=files, name=args.name)
    else:
        run = sb.execute(script, requirements=requirements, files=files, name=args.name)
    for text in run.logs():
        ui.data(text)
        ui.out.flush()
    status = run.wait()
    if status == "completed":
        ui.note(f"execution {run.name} {status}")
        return EXIT_OK
    ui.problem(f"execution {run.name} {status} ({_ended(run)})")
    return EXIT_ERROR
