"""The pools' keywords are one set of types with their defaults written once
(``workflows._pool._options``): every pool's ``map`` and ``imap_unordered`` say
``**options: Unpack[RunOptions]``, every pool that acquires ``Unpack[SandboxPoolOptions]``, and
a keyword none of them has is refused, named, before anything is sent."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

import workflows
from workflows._pool._options import POOL_DEFAULTS, RUN_DEFAULTS

RUNS: list[Callable[..., Any]] = [
    workflows.BackendPool.map,
    workflows.BackendPool.imap_unordered,
    workflows.AsyncBackendPool.map,
    workflows.AsyncBackendPool.imap_unordered,
]


@pytest.mark.parametrize("run", RUNS, ids=lambda fn: fn.__qualname__)
def test_every_run_takes_the_one_options_type(run: Callable[..., Any]) -> None:
    options = inspect.signature(run).parameters["options"]
    assert options.kind is inspect.Parameter.VAR_KEYWORD
    assert options.annotation == "Unpack[RunOptions]"


def test_the_sandbox_pools_run_the_engines_map() -> None:
    # SandboxPool and AsyncSandboxPool write no map of their own: the engines' (and so RunOptions)
    assert workflows.SandboxPool.map is workflows.BackendPool.map
    assert workflows.AsyncSandboxPool.map is workflows.AsyncBackendPool.map


def test_the_defaults_are_the_typed_dicts_keys() -> None:
    assert set(RUN_DEFAULTS) == workflows.RunOptions.__optional_keys__
    assert set(POOL_DEFAULTS) == workflows.PoolOptions.__optional_keys__
    assert RUN_DEFAULTS["retry_on"] == "infrastructure"
    assert workflows.SandboxPoolOptions.__optional_keys__ == (
        workflows.PoolOptions.__optional_keys__ | workflows.AcquireOptions.__optional_keys__
    )


def test_a_keyword_no_pool_has_is_refused_by_name() -> None:
    pool = workflows.SandboxPool(["git"], api_key="k", base_url="http://127.0.0.1:9", size=1)
    with pytest.raises(TypeError, match=r"got an unexpected keyword argument 'retry'$"):
        pool.map(lambda sb, task: task, [1], retry=2)  # type: ignore[call-arg]
    with pytest.raises(workflows.InvalidInputError, match="retry_on"):
        pool.map(lambda sb, task: task, [1], retry_on="never")  # type: ignore[arg-type]
    assert pool.close() == []
