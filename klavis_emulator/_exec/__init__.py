"""What a sandbox's processes run in, and how they end: executions, confinement, processes.

================  =====================================================================
``confinement``   how an execution or an MCP server is confined: the one ``bwrap`` command
                  builder, the probe, and the once-per-emulator decision
``host_paths``    the builder's overlays and PID 1 init, which keep the host's folder names
                  out of a confined process's ``/proc``
``data_overlay``  the data folder's overlays (workspaces, executions) and their holder,
                  whose namespaces confined processes enter: no host path at ``/data``
``root_masks``    what a root emulator's confined processes must not read of ``/usr``, ``/etc``
``runner``        one execution run (``main.py`` of an uploaded archive) in a thread
``requirements``  the check of an execution's ``requirements.txt`` (wheels only)
``run_log``       an execution's log: read by byte cursor, the emulator's ``[emulator]`` lines
``processes``     how a reset ends every process of a sandbox (found from the emulator's side)
``peers``         whether a loopback client is a process of one of the sandboxes
================  =====================================================================

No FastAPI and no SQLite here: the state (:mod:`klavis_emulator._state`) drives these.
"""

from __future__ import annotations

from .confinement import (
    CONFINE_ENV,
    CONFINED_PATH,
    CONFINED_WORKSPACE,
    PRIVATE_TMP,
    SANDBOX_COMMANDS,
    Confinement,
    ConfinementError,
    bwrap_args,
    decide_confinement,
    detect_confinement,
    missing_commands,
)
from .peers import peer_is_sandboxed
from .processes import end_processes, sandbox_processes
from .run_log import append_note, read_log
from .runner import (
    EXECUTION_STATUSES,
    FINAL_STATUSES,
    ExecutionRun,
    RunSettings,
    execution_name_problem,
)

__all__ = [
    "CONFINED_PATH",
    "CONFINED_WORKSPACE",
    "CONFINE_ENV",
    "EXECUTION_STATUSES",
    "FINAL_STATUSES",
    "PRIVATE_TMP",
    "SANDBOX_COMMANDS",
    "Confinement",
    "ConfinementError",
    "ExecutionRun",
    "RunSettings",
    "append_note",
    "bwrap_args",
    "decide_confinement",
    "detect_confinement",
    "end_processes",
    "execution_name_problem",
    "missing_commands",
    "peer_is_sandboxed",
    "read_log",
    "sandbox_processes",
]
