"""The pools' keywords and their defaults, written once: :class:`PoolOptions` (a pool's),
:class:`RunOptions` (a run's: ``map`` and ``imap_unordered``, sync and async) and
:class:`SandboxPoolOptions` (a pool that acquires: the pool's and
:class:`~workflows.AcquireOptions`). Each signature says ``**options: Unpack[...]``; the
defaults live in :data:`POOL_DEFAULTS` and :data:`RUN_DEFAULTS`, and nowhere else."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from .._acquire import AcquireOptions, check_keywords
from ._failures import RetryOn
from ._results import check_pool_size, check_run

__all__ = [
    "POOL_DEFAULTS",
    "RUN_DEFAULTS",
    "PoolOptions",
    "RunOptions",
    "RunSettings",
    "SandboxPoolOptions",
    "resolve_pool",
    "resolve_run",
    "split_pool_options",
]


class PoolOptions(TypedDict, total=False):
    """The keywords of every pool (each optional; the default follows its name).

    * ``size`` (4): at most this many sandboxes at a time (held, idle, or being acquired).
    * ``health_check_after`` (60.0): seconds a sandbox may sit idle before it is checked again.
    * ``progress`` (None): a bar of the tasks (None: when a terminal or notebook shows it).
    """

    size: int
    health_check_after: float
    progress: bool | None


class RunOptions(TypedDict, total=False):
    """The keywords of a pool's run, ``map`` and ``imap_unordered`` (each optional; the default
    follows its name).

    * ``timeout`` (None: no limit): seconds each attempt may run.
    * ``retries`` (0): how many more times a failed task runs, each on a clean sandbox.
    * ``retry_on`` (``"infrastructure"``): which failures ``retries`` apply to
      (:data:`~workflows.RetryOn`; ``"any"``: the task's own exceptions too).
    """

    timeout: float | None
    retries: int
    retry_on: RetryOn


class SandboxPoolOptions(PoolOptions, AcquireOptions, total=False):
    """The keywords of a pool that acquires its sandboxes (:class:`~workflows.SandboxPool`,
    :class:`~workflows.AsyncSandboxPool`, ``workflows.ray.RaySandboxPool``): the pool's
    (:class:`PoolOptions`) and the acquire's (:class:`~workflows.AcquireOptions`)."""


POOL_DEFAULTS: PoolOptions = {"size": 4, "health_check_after": 60.0, "progress": None}
"""The defaults of :class:`PoolOptions`."""

RUN_DEFAULTS: RunOptions = {"timeout": None, "retries": 0, "retry_on": "infrastructure"}
"""The defaults of :class:`RunOptions`."""


@dataclass(frozen=True)
class RunSettings:
    """A run's options, checked, with the defaults filled in."""

    timeout: float | None
    retries: int
    retry_on: RetryOn


def resolve_pool(where: str, options: Mapping[str, Any]) -> PoolOptions:
    """``options`` (the keywords of ``where``), checked, with the defaults filled in."""
    check_keywords(where, options, PoolOptions)
    resolved: PoolOptions = {**POOL_DEFAULTS, **options}  # type: ignore[typeddict-item]
    check_pool_size(resolved["size"], resolved["health_check_after"])
    return resolved


def resolve_run(where: str, fn: Callable[..., Any], options: Mapping[str, Any]) -> RunSettings:
    """A run's ``options`` (the keywords of ``where``), checked with its function."""
    check_keywords(where, options, RunOptions)
    resolved: RunOptions = {**RUN_DEFAULTS, **options}  # type: ignore[typeddict-item]
    run = RunSettings(resolved["timeout"], resolved["retries"], resolved["retry_on"])
    check_run(fn, run.timeout, run.retries, run.retry_on)
    return run


def split_pool_options(options: Mapping[str, Any]) -> tuple[PoolOptions, AcquireOptions]:
    """:class:`SandboxPoolOptions` split: the pool's keywords, and the acquire's (``progress``
    is the pool's bar; each acquire of a pool shows none)."""
    pool_keys = PoolOptions.__optional_keys__
    pool: PoolOptions = {k: v for k, v in options.items() if k in pool_keys}  # type: ignore[assignment]
    acquire: AcquireOptions = {  # type: ignore[assignment]
        k: v for k, v in options.items() if k not in pool_keys
    }
    return pool, acquire
