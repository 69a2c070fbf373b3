"""No pool hangs after something raised (issue 32): whatever fails in a run, the task, its error's
own ``__str__``, or the pool's task flow itself, the next run of the same pool (``size=1``: one
sandbox, so a place not given back would block it for ever) finishes, and nothing is left
acquired. The Ray pool's cases (a task that does not pickle) are in ``test_ray_pool.py``.

The flow is broken through the pool's backend (wrapped, through the public seam): the reset of
the first task raises a ``BaseException`` that no rule of the flow catches, as a bug of ours
would.
"""

from __future__ import annotations

from typing import Any

import pytest

import workflows
from tests.helpers import Face, listed_sandboxes
from tests.workflows.live.pool_handle import PoolHandle


class FlowBroke(BaseException):
    """What the broken hands raise: caught by no rule of the flow."""


class Unprintable(Exception):
    """A task's own exception whose ``__str__`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("no str for you")


class BrokenOnce:
    """A pool backend (:class:`workflows.PoolBackend`) whose first reset raises
    :class:`FlowBroke`; the rest is the wrapped backend's."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.broke = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def reset(self, sandbox: Any) -> Any:
        if not self.broke:
            self.broke = True
            raise FlowBroke("the flow broke")
        return self.backend.reset(sandbox)


class AsyncBrokenOnce(BrokenOnce):
    """:class:`BrokenOnce` of an :class:`workflows.AsyncPoolBackend`."""

    async def reset(self, sandbox: Any) -> Any:
        if not self.broke:
            self.broke = True
            raise FlowBroke("the flow broke")
        return await self.backend.reset(sandbox)


def pool_broken_once(face: Face, conn: dict[str, Any]) -> PoolHandle:
    """A pool of ``face`` with one sandbox whose first task's flow raises at its reset: its
    backend wrapped in one that breaks (the pool's public ``backend``)."""
    pool: Any
    if face._loop is None:
        pool = workflows.SandboxPool(["filesystem"], size=1, progress=False, **conn)
        pool.backend = BrokenOnce(pool.backend)
        return PoolHandle(None, pool)
    pool = workflows.AsyncSandboxPool(["filesystem"], size=1, progress=False, **conn)
    pool.backend = AsyncBrokenOnce(pool.backend)
    return PoolHandle(face._loop, pool)


def seeds(sb: Any, task: int) -> str:
    sb.seed({"task.txt": str(task)})
    return str(sb.id)


def test_a_flow_that_raises_fails_the_run_and_its_sandbox_is_replaced_not_kept(
    face: Face, conn: dict[str, str], token: str
) -> None:
    with pool_broken_once(face, conn) as pool:
        with pytest.raises(FlowBroke):
            pool.map(seeds, [0])
        # the unreset sandbox was released at once, not kept idle for the next task
        assert listed_sandboxes(conn["base_url"], token) == []
        results = pool.map(seeds, [1, 2])  # size=1: hangs if the place was not given back
        assert [r.ok for r in results] == [True, True]
        assert len({r.value for r in results}) == 1  # one new sandbox, reset between tasks
    assert listed_sandboxes(conn["base_url"], token) == []


def test_a_task_error_whose_str_raises_is_recorded_and_the_pool_goes_on(
    make_pool: Any, conn: dict[str, str], token: str
) -> None:
    def unprintable(sb: Any, task: int) -> str:
        if task == 0:
            raise Unprintable
        return seeds(sb, task)

    with make_pool(["filesystem"], size=1, **conn) as pool:
        results = pool.map(unprintable, [0, 1])
        again = pool.map(seeds, [2])
    failed, ok = results
    assert (failed.ok, failed.failure, failed.error_type) == (False, "task", "Unprintable")
    assert failed.error == "<Unprintable: str() failed>"
    assert (ok.ok, again[0].ok) == (True, True)
    assert "Unprintable" in results.summary()
    assert listed_sandboxes(conn["base_url"], token) == []
