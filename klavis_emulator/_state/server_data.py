"""The per-server data documents of a sandbox (google_cloud, poste_email_toolathlon, canvas):
one validated JSON document per sandbox and server, in the ``server_data`` table.

Validation is the HTTP layer's (:mod:`klavis_emulator._server_data`); this part stores what
it is given and hands it back. A reset or release deletes a sandbox's documents.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from .sandboxes import SandboxPart

__all__ = ["ServerData"]


class ServerData(SandboxPart):
    """Store and read the data documents of the sandboxes' servers."""

    def forget(self, db: sqlite3.Connection, sandbox_id: str) -> None:
        """Delete the documents of a sandbox being released or reset."""
        db.execute("DELETE FROM server_data WHERE sandbox_id = ?", (sandbox_id,))

    def initialize(
        self, tenant: str, sandbox_id: str, server_name: str, document: Mapping[str, Any]
    ) -> None:
        """Store ``document`` (already validated) as the data of one of the sandbox's servers,
        replacing what it held."""
        self._sandboxes.require_server(tenant, sandbox_id, server_name)
        text = json.dumps(document, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
        with self._db.sandbox_lock(sandbox_id):
            self._sandboxes.workspace_locked(tenant, sandbox_id)
            with self._db.transaction() as db:
                db.execute(
                    "INSERT INTO server_data (sandbox_id, server_name, document, updated_ts) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT (sandbox_id, server_name) DO UPDATE SET "
                    "document = excluded.document, updated_ts = excluded.updated_ts",
                    (sandbox_id, server_name, text, self._clock.time()),
                )
        self._sandboxes.touch(sandbox_id)

    def dump(self, tenant: str, sandbox_id: str, server_name: str) -> dict[str, Any] | None:
        """The stored data of one of the sandbox's servers (``None``: never initialized)."""
        self._sandboxes.require_server(tenant, sandbox_id, server_name)
        with self._db.transaction() as db:
            row = db.execute(
                "SELECT document FROM server_data WHERE sandbox_id = ? AND server_name = ?",
                (sandbox_id, server_name),
            ).fetchone()
        if row is None:
            return None
        document: dict[str, Any] = json.loads(row["document"])
        return document
