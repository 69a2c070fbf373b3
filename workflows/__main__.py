"""``python -m workflows`` runs the ``klavis-sandbox`` CLI."""

from __future__ import annotations

import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main())
