"""The generated operations `workflows` uses, by name (the flows' ``Call`` steps name them).

Retry policy lives in the flows: reads, release, reset, signed-URL requests, initialize
(extracting the same archive twice gives the same workspace) and dumps are retried after an
ambiguous failure; acquire and execute never are, they are reconciled instead.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
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


class _Operations(Mapping[str, ModuleType]):
    """Imports each generated endpoint module (and the models it needs) on first use, so that
    ``import workflows`` stays fast."""

    def __getitem__(self, name: str) -> ModuleType:
        if name not in _NAMES:
            raise KeyError(name)
        return importlib.import_module(f"klavis_sandbox_client.api.local_sandbox.{name}")

    def __iter__(self) -> Iterator[str]:
        return iter(_NAMES)

    def __len__(self) -> int:
        return len(_NAMES)


OPERATIONS: Mapping[str, ModuleType] = _Operations()
"""The generated endpoint modules by name; each has ``sync_detailed`` and ``asyncio_detailed``."""
