"""Print the oldest and the newest Python the package claims, beyond the running one.

One line each, ``3.X <path>``, or ``3.X -`` where this machine has no such interpreter (on
PATH, pyenv's or uv's, as the emulator's setup looks for one; nothing is downloaded). The
claim is pyproject.toml's ``Programming Language :: Python :: 3.X`` classifiers. Used by
``scripts/test``, which runs the suite again with each interpreter found.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from klavis_emulator._mcp.setup import python_of

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def claimed_minors(pyproject: str) -> list[int]:
    """The ``X`` of every ``Programming Language :: Python :: 3.X`` classifier, in order."""
    found = re.findall(r'"Programming Language :: Python :: 3\.(\d+)"', pyproject)
    return sorted({int(minor) for minor in found})


def main() -> None:
    claimed = claimed_minors(PYPROJECT.read_text(encoding="utf-8"))
    for minor in dict.fromkeys([claimed[0], claimed[-1]]):
        if minor != sys.version_info[1]:
            found = python_of(minor)
            print(f"3.{minor} {found.executable if found is not None else '-'}")


if __name__ == "__main__":
    main()
