"""``klavis-sandbox``: the command line face of `workflows` (``python -m workflows`` runs it)."""

from __future__ import annotations

from ._main import EXIT_CODES, main, main_entry

__all__ = ["EXIT_CODES", "main", "main_entry"]
