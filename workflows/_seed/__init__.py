"""What goes into a seed: the files, links and folders planned from user input, no network.

* :mod:`._from_mapping`: seed from a mapping (``sb.seed({"path": "text" | b"bytes"})``) and
  its symbolic links;
* :mod:`._from_folder`: seed from a folder (``sb.seed_directory("./project")``);
* :mod:`._gitignore`: git's ignore rules (``.gitignore``, ``.sandboxignore``, ``ignore=``), as
  seeding a folder applies them;
* :mod:`._entries`: :class:`SourceFile`, one entry of the sorted list both planners hand the
  packer, and :class:`OnDisk`, where a planned file is and what it was;
* :mod:`._opening`: :class:`PlannedFiles`, which opens the planned files for packing and
  nothing else (no link followed, each checked against what was planned).

The modules have no ``__all__`` of their own: the list below is what the rest of the library
uses.
"""

from __future__ import annotations

from workflows._config import DEFAULT_MAX_FILE_SIZE

from ._entries import OnDisk, SourceFile
from ._from_folder import FolderOptions, FolderRules, plan_directory
from ._from_mapping import LinkedFiles, SeedContent, plan_mapping
from ._opening import ExactReader, PlannedFiles

__all__ = [
    "DEFAULT_MAX_FILE_SIZE",
    "ExactReader",
    "FolderOptions",
    "FolderRules",
    "LinkedFiles",
    "OnDisk",
    "PlannedFiles",
    "SeedContent",
    "SourceFile",
    "plan_directory",
    "plan_mapping",
]
