"""``python -m workflows`` runs the ``klavis-sandbox`` CLI."""

from __future__ import annotations

from ._cli import main_entry

if __name__ == "__main__":
    main_entry()
