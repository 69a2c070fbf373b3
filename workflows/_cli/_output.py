"""How a command reports: data on stdout, messages on stderr, and the exit statuses."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, TextIO

from workflows._models import SandboxInfo

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NO_STATUS = 125
EXIT_HANGUP = 129
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
EXIT_TERMINATED = 143

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_ERROR: "error (stderr says which: unknown sandbox, refused path, failed release...)",
    EXIT_USAGE: "usage error (unknown command, bad or missing argument)",
    EXIT_NO_STATUS: "exec, logs: the execution failed and no exit status is known (pip "
    "failed, a time limit); otherwise exec and logs exit with the script's own status, 128 + N "
    "when signal N killed it",
    EXIT_HANGUP: "hung up (SIGHUP: the terminal closed)",
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


class UsageError(Exception):
    """Arguments that parse but do not make sense together: exit 2, like argparse's own."""


class Output:
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

    def table(self, rows: Sequence[Sequence[str]]) -> None:
        """Rows as columns padded to their widest cell, two spaces apart."""
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            line = "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            self.data(line + "\n")


def info_json(info: SandboxInfo) -> dict[str, Any]:
    """A sandbox's record for ``--json``, without its servers' ``auth_data``."""
    data = asdict(info)
    for server in data["servers"]:
        server.pop("auth_data", None)  # may hold credentials; `get --json` is for reading
    return data


def files_text(count: int) -> str:
    """``1 file``, ``3 files``.

    >>> files_text(1), files_text(0)
    ('1 file', '0 files')
    """
    return f"{count} file{'' if count == 1 else 's'}"


def progress_choice(args: argparse.Namespace) -> bool | None:
    """``--progress``/``--no-progress`` as given; ``-q`` turns bars off unless asked for."""
    chosen: bool | None = getattr(args, "progress", None)
    return False if chosen is None and args.quiet else chosen
