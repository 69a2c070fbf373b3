"""The pools: many tasks over a few sandboxes (see :mod:`workflows._pool._sync`)."""

from ._results import PoolResults, TaskResult
from ._sync import AsyncSandboxPool, SandboxPool

__all__ = ["AsyncSandboxPool", "PoolResults", "SandboxPool", "TaskResult"]
