"""The MCP host's event loop, reached from any thread.

The host's proxies, server processes and background starts live on the event loop of the
emulator's app; the state calls the host from request threads and the TTL reaper.
:class:`LoopBridge` holds that loop while the host serves and runs work on it: a callback
(without waiting), a task it keeps until done, or a coroutine whose result a thread waits for.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["LoopBridge"]

logger = logging.getLogger("klavis_emulator.mcp")

T = TypeVar("T")


class LoopBridge:
    """The loop of a serving host (None otherwise), and the tasks started on it."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def __repr__(self) -> str:
        return f"LoopBridge(attached={self.loop is not None}, tasks={len(self._tasks)})"

    def attach(self) -> None:
        """Use the running loop (called on it, when the host starts serving)."""
        self.loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()

    def detach(self) -> None:
        """Forget the loop (the host stopped serving)."""
        self.loop = None
        self._thread = None

    def on_loop(self) -> bool:
        """Whether this thread is the loop's."""
        return threading.get_ident() == self._thread

    def call_soon(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the loop, from any thread, without waiting (at once on the
        loop's own thread; nothing when there is no loop)."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        if self.on_loop():
            callback()
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(callback)

    def spawn(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``work`` as a task of the loop, kept until it is done (on the loop's thread)."""
        assert self.loop is not None
        task = self.loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def run(self, work: Coroutine[Any, Any, T], timeout: float = 60.0) -> T | None:
        """Run ``work`` on the loop. From another thread, wait for it (up to ``timeout``
        seconds) and return its result, or None if it did not finish; on the loop's own
        thread only start it (None). Without a loop, ``work`` is dropped."""
        loop = self.loop
        if loop is None or loop.is_closed():
            work.close()
            return None
        if self.on_loop():
            self.spawn(work)
            return None
        try:
            future = asyncio.run_coroutine_threadsafe(work, loop)
        except RuntimeError:  # the loop closed meanwhile
            work.close()
            return None
        try:
            return future.result(timeout)
        except (TimeoutError, concurrent.futures.TimeoutError):
            logger.warning("work on the MCP host's loop took over %g s", timeout)
        except concurrent.futures.CancelledError:
            pass  # the host is stopping
        return None
