"""The emulator's routes, one :class:`~fastapi.APIRouter` per resource, thin over the state.

================  =====================================================================
``sandboxes``     acquire, list, get, release, reset (``/local-sandbox[/{id}]``)
``workspace``     the workspace archive: upload URL, initialize, dump
``executions``    execution upload URL, execute, status, logs, export artifacts
``server_data``   the per-server data documents (google_cloud, poste_email_toolathlon, canvas)
``storage``       the targets of signed URLs (``/_storage/upload``, ``/_storage/download``)
``control``       the emulator's own ``/_emulator`` routes (health, faults, clock)
================  =====================================================================

Each router sets its auth, error answers and tag once; :data:`ROUTERS` is the order in
which :func:`~klavis_emulator.create_app` includes them.
"""

from __future__ import annotations

from typing import Final

from fastapi import APIRouter

from . import control, executions, sandboxes, server_data, storage, workspace

__all__ = ["ROUTERS"]

ROUTERS: Final[tuple[APIRouter, ...]] = (
    sandboxes.router,
    workspace.router,
    executions.router,
    server_data.router,
    storage.router,
    control.router,
)
