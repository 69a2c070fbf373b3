"""What goes into a seed: the files, links and folders planned from user input, no network.

* :mod:`._from_mapping`: seed from a mapping (``sb.seed({"path": "text" | b"bytes"})``) and
  its symbolic links;
* :mod:`._from_folder`: seed from a folder (``sb.seed_directory("./project")``);
* :mod:`._gitignore`: git's ignore rules (``.gitignore``, ``.sandboxignore``, ``ignore=``), as
  seeding a folder applies them;
* :mod:`._entries`: :class:`SourceFile`, one entry of the sorted list both planners hand the
  packer.

The modules have no ``__all__`` of their own: the list below is what the rest of the library
uses.
"""

from __future__ import annotations

from ._entries import SourceFile
from ._from_folder import DEFAULT_MAX_FILE_SIZE, plan_directory
from ._from_mapping import SeedContent, plan_mapping

__all__ = [
    "DEFAULT_MAX_FILE_SIZE",
    "SeedContent",
    "SourceFile",
    "plan_directory",
    "plan_mapping",
]
