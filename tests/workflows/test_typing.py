"""What a type checker tells a user: ``mypy --strict`` on small programs against the library.

The pools are generic in the task type (the function and the tasks must agree), server names are
a ``Literal`` (a typo fails), and ``to_pandas()`` is a ``DataFrame`` where pandas-stubs is
installed (the ``pandas`` extra brings it). One mypy run checks every case.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

from mypy import api as mypy_api

import workflows

GOOD = textwrap.dedent(
    """
    from workflows import AsyncLocalSandbox, AsyncSandboxPool, LocalSandbox, SandboxPool
    from workflows import ServerName


    def score(sandbox: LocalSandbox, task: int) -> float:
        return float(task)


    async def ascore(sandbox: AsyncLocalSandbox, task: str) -> int:
        return len(task)


    SERVERS: list[ServerName] = ["filesystem", "git"]


    def run() -> None:
        with SandboxPool(SERVERS, size=2) as pool:
            results = pool.map(score, [1, 2])
            reveal_type(results)
            reveal_type(results.to_pandas())
        with LocalSandbox.acquire(["filesystem", "playwright"]) as sandbox:
            print(sandbox.id)
        with LocalSandbox.acquire("ALL") as sandbox:
            print(sandbox.id)


    async def arun() -> None:
        async with AsyncSandboxPool(["terminal"], size=2) as pool:
            reveal_type(await pool.map(ascore, ["a", "b"]))
    """
)

# Every public name, most of them imported by ``workflows`` on first use (PEP 562): a type
# checker sees them all, and nothing more (a typo is an error, not ``Any``).
EVERY_NAME = f"""
import workflows
from workflows import {", ".join(workflows.__all__)}

VERSION: str = workflows.__version__
"""

BAD = textwrap.dedent(
    """
    from workflows import AsyncLocalSandbox, AsyncSandboxPool, LocalSandbox, SandboxPool
    from workflows import Sandbox  # wrong: not a name of workflows


    def score(sandbox: LocalSandbox, task: int) -> float:
        return float(task)


    async def ascore(sandbox: AsyncLocalSandbox, task: str) -> int:
        return len(task)


    def run() -> None:
        with SandboxPool(["filesystem"], size=2) as pool:
            pool.map(score, ["a", "b"])  # wrong: str tasks, a function of int
        LocalSandbox.acquire(["filesystm"])  # wrong: a typo


    async def arun() -> None:
        async with AsyncSandboxPool(["terminal"], size=2) as pool:
            await pool.map(ascore, [1, 2])  # wrong: int tasks, a function of str
    """
)


def test_mypy_holds_tasks_server_names_and_frames_to_their_types(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(GOOD + EVERY_NAME)
    (tmp_path / "bad.py").write_text(BAD)
    # mypy's main raises the process's recursion limit (to 2**14) and leaves it so: put it
    # back, or the tests this worker runs next (tarfile's recursion on a header chain, a
    # tree deeper than shutil's recursion) see another interpreter than a user's
    limit = sys.getrecursionlimit()
    try:
        stdout, stderr, status = mypy_api.run(
            [
                *("--strict", "--config-file", "/dev/null", "--cache-dir", str(tmp_path / "cache")),
                *("--no-pretty", "--no-error-summary", "--hide-error-context"),
                "--show-error-codes",
                str(tmp_path / "good.py"),
                str(tmp_path / "bad.py"),
            ]
        )
    finally:
        sys.setrecursionlimit(limit)
    lines = [line.replace(str(tmp_path) + "/", "") for line in stdout.splitlines()]
    errors = [line for line in lines if ": error:" in line]
    notes = [line for line in lines if "Revealed type" in line]
    assert status == 1, stdout + stderr
    assert not [e for e in errors if e.startswith("good.py")], errors
    wrong = [str(n) for n, line in enumerate(BAD.splitlines(), 1) if "# wrong:" in line]
    assert sorted({e.split(":")[1] for e in errors if e.startswith("bad.py")}, key=int) == wrong
    assert any("filesystm" in e for e in errors), errors
    assert len(notes) == 3, lines
    assert re.search(r"PoolResults\[(builtins\.)?float\]", notes[0]), notes[0]
    assert re.search(r"PoolResults\[(builtins\.)?int\]", notes[2]), notes[2]
    # the pandas extra (in dev) brings pandas-stubs: without them pandas is untyped (Any)
    assert "pandas.core.frame.DataFrame" in notes[1], notes[1]
