"""The async twins' docstrings, written in the source: complete, their examples valid async
code, and calling (with ``await``) what the sync twin's examples call, so the two cannot drift
apart silently."""

from __future__ import annotations

import ast
import doctest
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

import workflows
from workflows import (
    AsyncExecution,
    AsyncLocalSandbox,
    AsyncSandboxBatch,
    AsyncSandboxPool,
    Execution,
    LocalSandbox,
    SandboxBatch,
    SandboxPool,
)

TWINS = [
    (LocalSandbox, AsyncLocalSandbox),
    (Execution, AsyncExecution),
    (SandboxPool, AsyncSandboxPool),
    (SandboxBatch, AsyncSandboxBatch),
]
SYNC_ONLY = {"mcp_session"}  # async code has ``async with sb.mcp(...)``, the SDK's own session
# the sync functions of the library whose twin is ``async_<name>``
FUNCTIONS = [
    "list_sandboxes",
    "seed_from_dict",
    "round_trip_dump",
    "bulk_acquire",
    "bulk_release",
    "reap",
]
# what returns an awaitable without being a coroutine function: await it or ``async with`` it
AWAITABLE = {"acquire", "attach"}
RECEIVERS = {"sb", "run", "pool", "batch"}


def _public(cls: type) -> dict[str, Any]:
    return {
        name: member
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and callable(member)
    }


def _awaitables(cls: type) -> set[str]:
    return {n for n, m in _public(cls).items() if inspect.iscoroutinefunction(m)}


def _example_code(doc: str) -> str:
    examples = doctest.DocTestParser().get_examples(doc)
    return "".join(example.source for example in examples)


def _tree(code: str, name: str) -> ast.AST:
    tree: ast.AST = compile(code, name, "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    return tree


def _called(tree: ast.AST, receivers: set[str]) -> dict[str, list[ast.Call]]:
    """The calls of ``x.name(...)`` (``x`` one of ``receivers``) and ``name(...)``, by name."""
    calls: dict[str, list[ast.Call]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id in receivers:
                calls.setdefault(func.attr, []).append(node)
        elif isinstance(func, ast.Name):
            calls.setdefault(func.id, []).append(node)
    return calls


def _awaited(tree: ast.AST) -> set[int]:
    """The calls that are awaited, iterated with ``async for`` or entered with ``async with``."""
    done = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Await)}
    for node in ast.walk(tree):
        if isinstance(node, ast.AsyncFor):
            done.add(id(node.iter))
        if isinstance(node, ast.AsyncWith):
            done.update(id(item.context_expr) for item in node.items)
    return done


@pytest.mark.parametrize(("sync", "twin"), TWINS, ids=lambda c: c.__name__)
def test_every_async_method_documents_itself(sync: type, twin: type) -> None:
    assert set(_public(sync)) - set(_public(twin)) <= SYNC_ONLY
    for name, member in _public(twin).items():
        doc = inspect.getdoc(member) or ""
        assert len(doc) > 20, f"{twin.__name__}.{name} has no real docstring"
        assert f"see {sync.__name__}" not in doc, f"{twin.__name__}.{name} points elsewhere"
        assert "twin of" not in doc, f"{twin.__name__}.{name} points elsewhere"
        sync_doc = inspect.getdoc(getattr(sync, name, None)) or ""
        if sync_doc.split("\n")[0] == doc.split("\n")[0]:  # the same text: every line of it
            assert doc.count("\n") == sync_doc.count("\n"), name


@pytest.mark.parametrize("name", FUNCTIONS)
def test_every_async_function_documents_itself(name: str) -> None:
    twin = getattr(workflows, f"async_{name}")
    doc = inspect.getdoc(twin) or ""
    assert len(doc) > 20, f"async_{name} has no real docstring"
    assert "twin of" not in doc, f"async_{name} points elsewhere"


@pytest.mark.parametrize(("sync", "twin"), TWINS, ids=lambda c: c.__name__)
def test_async_examples_await_every_coroutine(sync: type, twin: type) -> None:
    awaitables = _awaitables(twin)
    checked = 0
    for name, member in _public(twin).items():
        code = _example_code(inspect.getdoc(member) or "")
        if not code:
            continue
        tree = _tree(code, name)
        awaited = _awaited(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in awaitables
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in {"sb", "run", "pool", twin.__name__}
            ):
                assert id(node) in awaited, f"{twin.__name__}.{name}: {ast.unparse(node)}"
                checked += 1
    assert checked >= (5 if twin is AsyncLocalSandbox else 0)


def _pairs() -> list[tuple[str, Callable[..., object], Callable[..., object], set[str]]]:
    """(name, sync member, async member, the async side's awaitable names) of every twin."""
    pairs = []
    for sync, twin in TWINS:
        awaitables = _awaitables(twin) | AWAITABLE
        for name, member in _public(twin).items():
            if name in _public(sync):
                pairs.append((f"{twin.__name__}.{name}", getattr(sync, name), member, awaitables))
        pairs.append((twin.__name__, sync, twin, awaitables))
    coroutines = {f"async_{name}" for name in FUNCTIONS}
    for name in FUNCTIONS:
        sync_fn, twin_fn = getattr(workflows, name), getattr(workflows, f"async_{name}")
        pairs.append((f"async_{name}", sync_fn, twin_fn, coroutines | _awaitables(LocalSandbox)))
    return pairs


@pytest.mark.parametrize(("name", "sync", "twin", "awaitables"), _pairs(), ids=lambda x: x)
def test_async_examples_call_what_the_sync_examples_call(
    name: str, sync: Callable[..., object], twin: Callable[..., object], awaitables: set[str]
) -> None:
    """Every call the sync examples make stands in the async examples too (``f`` as
    ``async_f``), awaited there when the async side's is awaitable."""
    sync_code = _example_code(inspect.getdoc(sync) or "")
    if not sync_code:
        return
    twin_code = _example_code(inspect.getdoc(twin) or "")
    assert twin_code, f"{name} has no examples, while its sync twin has"
    receivers = RECEIVERS | {getattr(sync, "__name__", ""), getattr(twin, "__name__", "")}
    receivers |= {"LocalSandbox", "AsyncLocalSandbox"}
    sync_calls = _called(_tree(sync_code, name), receivers)
    twin_tree = _tree(twin_code, name)
    twin_calls, awaited = _called(twin_tree, receivers), _awaited(twin_tree)
    for called in sync_calls:
        twin_name = f"async_{called}" if called in FUNCTIONS else called
        if twin_name not in awaitables and called not in awaitables:
            continue  # a plain call (print, a property): nothing to await
        assert twin_name in twin_calls, f"{name}: the sync examples call {called}, these do not"
        for node in twin_calls[twin_name]:
            assert id(node) in awaited, f"{name}: {ast.unparse(node)} is not awaited"


def test_help_on_an_async_twin_says_what_the_sync_one_says() -> None:
    sync_doc = inspect.getdoc(LocalSandbox.seed_directory) or ""
    async_doc = inspect.getdoc(AsyncLocalSandbox.seed_directory) or ""
    assert "preserve_mtime=True" in async_doc
    assert async_doc.replace("await sb.", "sb.") == sync_doc
    call_doc = inspect.getdoc(AsyncLocalSandbox.call_tool) or ""
    assert '(await sb.call_tool("terminal", "run_command", {"command": "ls"})).text' in call_doc
    listing = inspect.getdoc(AsyncLocalSandbox.list) or ""
    assert "for info in await AsyncLocalSandbox.list():" in listing


def test_no_docstring_is_made_at_import_time() -> None:
    """An editor reads docstrings from the source: every async twin's is written there."""
    for _, twin in TWINS:
        source = inspect.getsource(twin)
        for name, member in _public(twin).items():
            if name in vars(twin) and inspect.getdoc(member):
                assert f"def {name}(" in source
                function = getattr(member, "__func__", member)
                lines = inspect.getsource(function).splitlines()
                start = next(i for i, line in enumerate(lines) if "def " in line)
                code = textwrap.dedent("\n".join(lines[start:]))
                own = ast.get_docstring(ast.parse(code).body[0])  # type: ignore[arg-type]
                assert own, f"{twin.__name__}.{name}'s docstring is not in its source"
