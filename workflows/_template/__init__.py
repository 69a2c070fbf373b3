"""Seed templates: a seed packed once and seeded into many sandboxes.

* :mod:`._template`: :class:`SeedTemplate` (made from a folder, a mapping, a snapshot, or
  loaded by digest; pickled as digest and bytes);
* :mod:`._cache`: the per-user cache folder that keeps the packed archives (where, how it is
  bounded, written and checked);
* :mod:`._flow`: :func:`template_seed_flow`, the seed of a sandbox from a template, for both
  faces and the pools.
"""

from __future__ import annotations

from ._cache import CACHE_BYTES_ENV, CACHE_DIR_ENV, DEFAULT_CACHE_BYTES, cache_folder
from ._flow import template_seed_flow
from ._template import SeedTemplate

__all__ = [
    "CACHE_BYTES_ENV",
    "CACHE_DIR_ENV",
    "DEFAULT_CACHE_BYTES",
    "SeedTemplate",
    "cache_folder",
    "template_seed_flow",
]
