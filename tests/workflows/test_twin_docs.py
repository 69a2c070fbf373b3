"""The async twins' docstrings: complete, and their examples valid async code."""

from __future__ import annotations

import ast
import doctest
import inspect

import pytest

from workflows import AsyncExecution, AsyncLocalSandbox, Execution, LocalSandbox, _twin_docs

TWINS = [(LocalSandbox, AsyncLocalSandbox), (Execution, AsyncExecution)]
SYNC_ONLY = {"mcp_session"}  # async code has ``async with sb.mcp(...)``, the SDK's own session


def _public(cls: type) -> dict[str, object]:
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


@pytest.mark.parametrize(("sync", "twin"), TWINS, ids=lambda c: c.__name__)
def test_every_async_method_documents_itself(sync: type, twin: type) -> None:
    assert set(_public(sync)) - set(_public(twin)) <= SYNC_ONLY
    for name, member in _public(twin).items():
        doc = inspect.getdoc(member) or ""
        assert len(doc) > 20, f"{twin.__name__}.{name} has no real docstring"
        assert f"see {sync.__name__}" not in doc, f"{twin.__name__}.{name} points elsewhere"
        sync_doc = inspect.getdoc(getattr(sync, name, None)) or ""
        if sync_doc.split("\n")[0] == doc.split("\n")[0]:  # shared: every line came along
            assert doc.count("\n") == sync_doc.count("\n"), name


@pytest.mark.parametrize(("sync", "twin"), TWINS, ids=lambda c: c.__name__)
def test_async_examples_await_every_coroutine(sync: type, twin: type) -> None:
    awaitables = _awaitables(twin)
    checked = 0
    for name, member in _public(twin).items():
        code = _example_code(inspect.getdoc(member) or "")
        if not code:
            continue
        tree = compile(code, name, "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        awaited = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Await)}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in awaitables
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in {"sb", "run", twin.__name__}
            ):
                assert id(node) in awaited, f"{twin.__name__}.{name}: {ast.unparse(node)}"
                checked += 1
    assert checked >= (5 if twin is AsyncLocalSandbox else 0)


def test_help_on_an_async_twin_says_what_the_sync_one_says() -> None:
    sync_doc = inspect.getdoc(LocalSandbox.seed_directory) or ""
    async_doc = inspect.getdoc(AsyncLocalSandbox.seed_directory) or ""
    assert "preserve_mtime=True" in async_doc
    assert async_doc.replace("await sb.", "sb.") == sync_doc
    call_doc = inspect.getdoc(AsyncLocalSandbox.call_tool) or ""
    assert '(await sb.call_tool("terminal", "run_command", {"command": "ls"})).text' in call_doc
    listing = inspect.getdoc(AsyncLocalSandbox.list) or ""
    assert "for info in await AsyncLocalSandbox.list():" in listing


def test_the_adaptation_rules() -> None:
    adapt = _twin_docs.adapt_docstring
    assert adapt(">>> for t in run.logs():\n", set(), {"logs"}) == (
        ">>> async for t in run.logs():\n"
    )
    assert adapt(">>> with LocalSandbox.acquire(['git']) as sb:\n", set()) == (
        ">>> async with AsyncLocalSandbox.acquire(['git']) as sb:\n"
    )
    assert adapt(">>> sb.f(g(1), (2,))[0]\n", {"f"}) == ">>> (await sb.f(g(1), (2,)))[0]\n"
    assert adapt("see :class:`~workflows.LocalSandbox`, ExecutionTimeoutError", set()) == (
        "see :class:`~workflows.AsyncLocalSandbox`, ExecutionTimeoutError"
    )
    assert doctest.testmod(_twin_docs).failed == 0
