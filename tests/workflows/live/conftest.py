"""Fixtures of the live pool tests: ``make_pool`` (a pool of the test's face) and ``gate``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import workflows
from tests.helpers import Face, LoopThread
from tests.workflows.live.pool_handle import PoolHandle


@pytest.fixture
def make_pool(face: Face) -> Callable[..., PoolHandle]:
    loop: LoopThread | None = face._loop

    def make(*args: Any, **kwargs: Any) -> PoolHandle:
        kwargs.setdefault("progress", False)
        if loop is None:
            return PoolHandle(None, workflows.SandboxPool(*args, **kwargs))
        return PoolHandle(loop, workflows.AsyncSandboxPool(*args, **kwargs))

    return make


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """What blocked tasks wait for; set when the test ends, so their threads finish."""
    event = threading.Event()
    yield event
    event.set()
