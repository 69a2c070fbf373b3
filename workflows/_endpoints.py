"""The generated operations `workflows` uses, by name (the flows' ``Call`` steps name them).

Retry policy lives in the flows: reads, release, reset, signed-URL requests, initialize
(extracting the same archive twice gives the same workspace) and dumps are retried after an
ambiguous failure; acquire and execute never are, they are reconciled instead.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["OPERATIONS"]

_NAMES = (
    "acquire_local_sandbox",
    "dump_canvas_data",
    "dump_google_cloud_data",
    "dump_poste_email_data",
    "dump_workspace",
    "execute_script",
    "export_artifacts",
    "get_execution_logs",
    "get_execution_status",
    "get_execution_upload_url",
    "get_local_sandbox",
    "get_upload_url",
    "initialize_canvas_data",
    "initialize_google_cloud_data",
    "initialize_poste_email_data",
    "initialize_workspace",
    "list_local_sandboxes",
    "release_local_sandbox",
    "reset_local_sandbox",
)

OPERATIONS: dict[str, ModuleType] = {
    name: importlib.import_module(f"klavis_sandbox_client.api.local_sandbox.{name}")
    for name in _NAMES
}
"""The generated endpoint modules by name; each has ``sync_detailed`` and ``asyncio_detailed``."""
