"""What goes into a seed: the files, links and folders planned from user input, no network.

* :mod:`._plan`: seed from a mapping (``sb.seed({...})``) and from a folder
  (``sb.seed_directory("./project")``): a sorted list of :class:`SourceFile` for the packer;
* :mod:`._gitignore`: git's ignore rules (``.gitignore``, ``.sandboxignore``, ``ignore=``), as
  seeding a folder applies them.

The modules have no ``__all__`` of their own: the list below is what the rest of the library
uses.
"""

from __future__ import annotations

from ._plan import (
    DEFAULT_MAX_FILE_SIZE,
    IGNORE_FILE_NAMES,
    SeedContent,
    SourceFile,
    plan_directory,
    plan_links,
    plan_mapping,
)

__all__ = [
    "DEFAULT_MAX_FILE_SIZE",
    "IGNORE_FILE_NAMES",
    "SeedContent",
    "SourceFile",
    "plan_directory",
    "plan_links",
    "plan_mapping",
]
