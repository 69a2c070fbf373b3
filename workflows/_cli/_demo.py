"""``demo``: the whole lifecycle in eight steps (one of them an MCP tool call), against the
service when a key is set, else against an embedded emulator (the one place the library
imports the emulator, lazily), else, where the emulator extra is not installed (a harness's
venv pinning mcp 1.x), against a ``klavis-emulator`` of another environment found on PATH (a
pipx or uv tool install)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import secrets
import shlex
import tempfile
import time
from collections.abc import Iterator
from typing import Any, TextIO

from workflows._config import API_KEY_ENV, BASE_URL_ENV
from workflows._emulator_process import EmulatorProcess, find_emulator_command
from workflows._errors import ConfigurationError, MissingExtraError
from workflows._recipes import bulk_acquire, bulk_release, round_trip_dump
from workflows._sandbox import LocalSandbox, list_sandboxes

from ._output import EXIT_ERROR, EXIT_OK, Output


@contextlib.contextmanager
def _demo_target(out: TextIO, base_url: str | None) -> Iterator[dict[str, Any]]:
    """The real service when a key is set (at ``base_url`` when given), else an embedded
    emulator on a free port, else (without the emulator extra here) a ``klavis-emulator`` of
    another environment found on PATH, started with :class:`~workflows.EmulatorProcess`."""
    if os.environ.get(API_KEY_ENV):
        out.write(f"Using {base_url or os.environ.get(BASE_URL_ENV) or 'https://api.klavis.ai'}\n")
        yield {"base_url": base_url} if base_url else {}
        return
    with contextlib.ExitStack() as stack:
        data = stack.enter_context(tempfile.TemporaryDirectory(prefix="klavis-demo-"))
        try:
            from klavis_emulator import ConfinementError, EmulatorConfig, EmulatorServer
        except ImportError:  # the extra is not here: an emulator of another environment?
            command = find_emulator_command()
            if command is None:
                raise MissingExtraError(
                    "the demo without KLAVIS_API_KEY (set it to use the service)",
                    extra="emulator",
                    detail=" (or a klavis-emulator on PATH, which it starts)",
                ) from None
            process = EmulatorProcess(command, data_dir=os.path.join(data, "emulator"))
            base_url = stack.enter_context(process).base_url
            where = shlex.join(command)
        else:
            try:
                server = stack.enter_context(EmulatorServer(EmulatorConfig(data_dir=data)))
            except ConfinementError as exc:  # bwrap installed but unable to confine here
                raise ConfigurationError(f"the embedded emulator cannot start: {exc}") from None
            base_url, where = server.base_url, "an embedded emulator"
        out.write(
            f"No {API_KEY_ENV} set: using {where} at {base_url}\n"
            "(set KLAVIS_API_KEY to run the same demo against the real service)\n\n"
        )
        os.environ.setdefault("KLAVIS_SANDBOX_STATE_DIR", os.path.join(data, "state"))
        yield {"api_key": f"demo-{secrets.token_hex(8)}", "base_url": base_url}


def _tool_call(sb: LocalSandbox, out: TextIO) -> bool:
    """Step 4: one MCP tool call, as an agent makes it: the filesystem server reads a seeded
    file. Skipped, saying why, where the ``mcp`` package is not installed here."""
    path = "/data/hello.txt"
    try:
        result = sb.call_tool("filesystem", "read_text_file", {"path": path})
    except MissingExtraError as exc:
        out.write(f"4. MCP tool call skipped: {exc}\n")
        return True
    shown = result.text.strip()
    out.write(f"4. MCP tool call: filesystem read_text_file {path} -> {shown!r}\n")
    return not result.is_error


def cmd_demo(args: argparse.Namespace, ui: Output) -> int:
    out = io.StringIO() if ui.quiet else ui.out  # -q: nothing unless a step fails
    started = time.perf_counter()
    files = {
        "hello.txt": "Hello from a Klavis local sandbox!\n",
        "notes.md": "# Notes\n- item 1\n- item 2\n",
        "config.json": '{"app": "demo", "version": "1.0"}\n',
    }
    with _demo_target(out, args.base_url) as conn:
        with LocalSandbox.acquire(
            ["filesystem", "git", "terminal"], ttl_seconds=600, progress=False, **conn
        ) as sb:
            out.write(f"1. acquired sandbox {sb.id}\n")
            for server in sb.servers:
                out.write(f"     {server.name:<10} {server.mcp_server_url}\n")
            report = round_trip_dump(sb, files)
            out.write(f"2. seeded {len(files)} files from a dict: {', '.join(files)}\n")
            out.write(f"3. round-trip dump: {report.summary()}\n")
            tool_ok = _tool_call(sb, out)
            before = report.snapshot
            sb.seed({"notes.md": files["notes.md"] + "- item 3\n", "out/result.txt": "42\n"})
            after = sb.dump()
            diff = before.diff(after)
            out.write(f"5. changed the workspace; dump diff: {diff.summary()}\n")
            for line in str(diff).splitlines():
                out.write(f"     {line}\n")
            batch = bulk_acquire(["filesystem"], args.count, progress=False, **conn)
            out.write(f"6. bulk_acquire: {len(batch.sandboxes)} of {args.count} acquired\n")
            results = bulk_release([*batch.sandboxes, sb], progress=False, **conn)
            ok = sum(r.ok for r in results)
            out.write(f"7. bulk_release: {ok} of {len(results)} released (this one included)\n")
        left = list_sandboxes(**conn)
        out.write(f"8. sandboxes still listed: {len(left)}\n")
    out.write(f"done in {time.perf_counter() - started:.1f} s\n")
    if report.ok and tool_ok and not left and ok == len(results):
        return EXIT_OK
    ui.problem(
        f"demo: a step failed (round trip {'ok' if report.ok else 'differs'}; tool call "
        f"{'ok' if tool_ok else 'failed'}; {ok} of {len(results)} released; {len(left)} "
        "still listed)"
    )
    return EXIT_ERROR
