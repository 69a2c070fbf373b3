"""A pool of either face behind sync names, for the live pool tests (the ``make_pool`` fixture
of this folder's conftest makes them): task bodies are written once, as sync functions of a
sandbox; under the async face the pool's coroutine runs them with ``asyncio.to_thread`` on a
blocking wrapper of the async sandbox."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType
from typing import Any

import workflows
from tests.helpers import Blocking, LoopThread
from workflows import PoolResults, TaskResult

Fn = Callable[[Any, Any], Any]


class PoolHandle:
    """A pool of one face behind sync names: ``map``, ``first_result``, ``with``."""

    def __init__(self, loop: LoopThread | None, pool: Any) -> None:
        self._loop = loop
        self.pool = pool
        self._stream: Any = None

    def _fn(self, fn: Fn) -> Any:
        if self._loop is None:
            return fn
        loop = self._loop

        async def run(sb: workflows.AsyncLocalSandbox, task: Any) -> Any:
            return await asyncio.to_thread(fn, Blocking(loop, sb), task)

        return run

    def map(self, fn: Fn, tasks: Any, **kwargs: Any) -> PoolResults[Any]:
        if self._loop is None:
            results: PoolResults[Any] = self.pool.map(fn, tasks, **kwargs)
            return results
        return self._loop.run(self.pool.map(self._fn(fn), tasks, **kwargs))

    def first_result(self, fn: Fn, tasks: Any) -> TaskResult[Any]:
        """Start ``imap_unordered`` and return its first result, leaving the rest running."""
        self._stream = self.pool.imap_unordered(self._fn(fn), tasks)
        if self._loop is None:
            first: TaskResult[Any] = next(self._stream)
            return first
        stream = self._stream

        async def first_on_the_loop() -> TaskResult[Any]:
            result: TaskResult[Any] = await stream.__anext__()
            return result

        return self._loop.run(first_on_the_loop())

    def close(self) -> Any:
        if self._loop is None:
            return self.pool.close()
        return self._loop.run(self.pool.close())

    def __enter__(self) -> PoolHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._loop is None:
            self.pool.__exit__(exc_type, exc, tb)
        else:
            self._loop.run(self.pool.__aexit__(exc_type, exc, tb))
