"""The task functions of the pools' shared rule tests: module-level (a process backend's
workers import them by name; Ray ships them by value), sync functions of a sandbox."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workflows import ApiConnectionError


def clean_then_seed(sb: Any, task: int) -> dict[str, Any]:
    """What the sandbox held when the task began (a clean one: nothing), then seeds it; task
    1, 4, 7, ... fail on purpose."""
    before = sorted(sb.dump())
    sb.seed({f"task-{task}.txt": str(task)})
    if task % 3 == 1:
        raise ValueError(f"task {task} fails on purpose")
    return {"before": before, "sandbox": sb.id}


def fails_first_on_infrastructure(sb: Any, task: tuple[str, int]) -> int:
    """The first attempt of task ``n`` lets through an infrastructure error (the marker file
    in the folder ``task[0]`` says it was tried); the next one passes."""
    folder, n = task
    try:
        (Path(folder) / f"{n}.tried").touch(exist_ok=False)
    except FileExistsError:
        return n
    raise ApiConnectionError(f"the service dropped the first attempt of task {n}")


def wrong(sb: Any, task: int) -> None:
    """A task whose own code fails, every time."""
    raise ValueError("the answer is 42")


def sandbox_id(sb: Any, task: int) -> str:
    """The id of the sandbox the task ran on."""
    return str(sb.id)
