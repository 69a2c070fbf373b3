"""Fixtures for the `workflows` tests: one suite, run for both the sync and the async face.

The ``face`` fixture is parametrized: ``sync`` is the library as is; ``async`` wraps
``AsyncLocalSandbox`` and the async recipes so every call runs on an event loop in a helper
thread (the tests' own thread never calls ``asyncio.run``), behind the sync face's names.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import pytest
import stamina

import workflows
from klavis_emulator import EmulatorServer

T = TypeVar("T")


class LoopThread:
    """An asyncio loop in a daemon thread; ``run(coro)`` waits for the result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=120)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class Blocking:
    """Wraps an async object: coroutine methods become blocking calls, the rest passes through."""

    def __init__(self, loop: LoopThread, target: Any) -> None:
        self._loop = loop
        self._target = target

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if inspect.iscoroutinefunction(attr):

            def call(*args: Any, **kwargs: Any) -> Any:
                return self._wrap(self._loop.run(attr(*args, **kwargs)))

            return call
        return attr

    def _wrap(self, value: Any) -> Any:
        if isinstance(
            value,
            workflows.AsyncLocalSandbox | workflows.AsyncSandboxBatch | workflows.AsyncExecution,
        ):
            return Blocking(self._loop, value)
        return value

    def __enter__(self) -> Any:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._loop.run(self._target.__aexit__(exc_type, exc, tb))

    def __iter__(self) -> Iterator[Any]:
        return iter(self._target)

    def __len__(self) -> int:
        return len(self._target)

    def __repr__(self) -> str:
        return repr(self._target)

    @property
    def sandboxes(self) -> list[Any]:
        return [Blocking(self._loop, s) for s in self._target.sandboxes]


class Face:
    """The library's entry points under their sync names, for one face."""

    def __init__(self, name: str, loop: LoopThread | None) -> None:
        self.name = name
        self._loop = loop

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None
        return self._loop.run(coro)

    def acquire(self, *args: Any, **kwargs: Any) -> Any:
        if self._loop is None:
            return workflows.LocalSandbox.acquire(*args, **kwargs)

        async def go() -> workflows.AsyncLocalSandbox:
            return await workflows.AsyncLocalSandbox.acquire(*args, **kwargs)

        return Blocking(self._loop, self._run(go()))

    def attach(self, *args: Any, **kwargs: Any) -> Any:
        if self._loop is None:
            return workflows.LocalSandbox.attach(*args, **kwargs)

        async def go() -> workflows.AsyncLocalSandbox:
            return await workflows.AsyncLocalSandbox.attach(*args, **kwargs)

        return Blocking(self._loop, self._run(go()))

    def _twin(self, name: str) -> Callable[..., Any]:
        if self._loop is None:
            fn: Callable[..., Any] = getattr(workflows, name)
            return fn
        afn = getattr(workflows, f"async_{name}")

        def call(*args: Any, **kwargs: Any) -> Any:
            args = tuple(a._target if isinstance(a, Blocking) else a for a in args)
            if "sandbox_ids" in kwargs and kwargs["sandbox_ids"] is not None:
                kwargs["sandbox_ids"] = [
                    a._target if isinstance(a, Blocking) else a for a in kwargs["sandbox_ids"]
                ]
            if args and isinstance(args[0], list):
                args = ([a._target if isinstance(a, Blocking) else a for a in args[0]], *args[1:])
            value = self._run(afn(*args, **kwargs))
            if isinstance(value, workflows.AsyncSandboxBatch):
                return Blocking(self._loop, value)  # type: ignore[arg-type]
            return value

        return call

    def collect(self, iterable: Any) -> list[Any]:
        """Drain an iterator, or an async iterator on the face's loop."""
        if self._loop is None:
            return list(iterable)

        async def drain() -> list[Any]:
            return [item async for item in iterable]

        return self._run(drain())

    def call(self, method: Callable[..., Any], *args: Any) -> Any:
        """Call a method of a raw (unwrapped) object of this face."""
        value = method(*args)
        return self._run(value) if inspect.iscoroutine(value) else value

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name in {
            "seed_from_dict",
            "round_trip_dump",
            "bulk_acquire",
            "bulk_release",
            "list_sandboxes",
            "reap",
        }:
            return self._twin(name)
        raise AttributeError(name)


@pytest.fixture(scope="session")
def loop_thread() -> Iterator[LoopThread]:
    loop = LoopThread()
    yield loop
    loop.close()


@pytest.fixture(params=["sync", "async"])
def face(request: pytest.FixtureRequest, loop_thread: LoopThread) -> Face:
    """The library under one of its two faces."""
    return Face(request.param, None if request.param == "sync" else loop_thread)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No test touches the real ledger, a real .env, or waits for real backoff."""
    monkeypatch.setenv("KLAVIS_SANDBOX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("KLAVIS_API_KEY", raising=False)
    monkeypatch.delenv("KLAVIS_BASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    stamina.set_testing(True, attempts=8)
    yield
    stamina.set_testing(False)


@pytest.fixture
def conn(emulator: EmulatorServer, token: str) -> dict[str, str]:
    """Keyword arguments that point the library at the session emulator as this test's tenant."""
    return {"api_key": token, "base_url": emulator.base_url}


@pytest.fixture
def faulty_emulator(tmp_path: Path) -> Iterator[EmulatorServer]:
    """A private emulator for fault-injection tests (so faults never hit other tests)."""
    with EmulatorServer(data_dir=tmp_path / "faulty-emulator") as server:
        yield server
