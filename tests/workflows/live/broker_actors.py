"""Ray actors and helpers of the broker's tests (issue 31): holders shaped as RL frameworks hold
sandboxes (async actors running many ``async_sandbox`` blocks), a gate the test opens, a keeper
that holds one lease across calls, and a poller of the emulator's list.

Ray ships this module's classes by value: its workers need not import tests/.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import Counter
from typing import Any

import ray

from workflows import failure_kind
from workflows.ray import SandboxBroker

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]

REPO = {f"src/module_{n}.py": f"def f{n}():\n    return {n}\n" for n in range(9)}
REPO["README.md"] = "a ten-file repository\n"


@ray.remote(num_cpus=0)
class Gate:
    """What the holders' blocks wait for, on the cluster: opened by the test."""

    def __init__(self) -> None:
        self.event: asyncio.Event | None = None

    def _event(self) -> asyncio.Event:
        if self.event is None:  # made on the actor's event loop
            self.event = asyncio.Event()
        return self.event

    async def wait(self) -> None:
        await self._event().wait()

    async def open(self) -> None:
        self._event().set()


async def _episode(sb: Any, index: int) -> dict[str, Any]:
    """An agent's episode: seed a 10-file repository, a tool call, a dump, a reward."""
    await sb.seed({**REPO, "task.txt": str(index)})
    listing = await sb.call_tool("filesystem", "list_directory", {"path": "/data/src"})
    await sb.call_tool(
        "filesystem", "write_file", {"path": "/data/answer.txt", "content": str(2 * index)}
    )
    snapshot = await sb.dump()
    reward = snapshot.text("answer.txt") == str(2 * index) and "module_3.py" in listing.text
    return {"index": index, "reward": reward, "sandbox": sb.id}


@ray.remote(num_cpus=0)
class Episodes:
    """A verl-shaped async rollout actor: ``n`` concurrent ``async_sandbox`` blocks."""

    async def pid(self) -> int:
        return os.getpid()

    async def run(
        self, broker: SandboxBroker, n: int, gate: Any = None, work: bool = False
    ) -> dict[str, Any]:
        """Run ``n`` blocks at once; each waits for ``gate`` (if any) while it holds its
        sandbox, then does an episode's work (``work``) or none. Counts what they raised."""
        errors: Counter[str] = Counter()
        kinds: Counter[str] = Counter()
        results: list[dict[str, Any]] = []

        async def one(index: int) -> None:
            try:
                async with broker.async_sandbox(["filesystem"]) as sb:
                    if gate is not None:
                        await gate.wait.remote()
                    if work:
                        results.append(await _episode(sb, index))
                    else:
                        results.append({"index": index, "sandbox": sb.id})
            except Exception as exc:
                errors[type(exc).__name__] += 1
                kinds[failure_kind(exc)] += 1

        await asyncio.gather(*(one(i) for i in range(n)))
        return {"results": results, "errors": dict(errors), "kinds": dict(kinds)}


@ray.remote(num_cpus=0)
class Keeper:
    """Holds one lease across calls, as a long episode does; says what its calls raise."""

    def __init__(self) -> None:
        self.block: Any = None
        self.sandbox: Any = None

    async def pid(self) -> int:
        return os.getpid()

    async def take(self, broker: SandboxBroker) -> str:
        self.block = broker.async_sandbox(["filesystem"])
        self.sandbox = await self.block.__aenter__()
        return str(self.sandbox.id)

    async def use(self) -> dict[str, Any]:
        """Seed and dump: what came back, or what was raised (type, message, kind)."""
        try:
            await self.sandbox.seed({"use.txt": "used"})
            return {"ok": (await self.sandbox.dump()).text("use.txt")}
        except Exception as exc:
            return {"error": type(exc).__name__, "message": str(exc), "kind": failure_kind(exc)}

    async def block_the_loop(self, seconds: float) -> None:
        time.sleep(seconds)  # noqa: ASYNC251 - on purpose: the loop is blocked

    async def leave(self) -> None:
        await self.block.__aexit__(None, None, None)
