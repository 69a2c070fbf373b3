"""The public surface: every type a public signature names can be imported from `workflows`."""

from __future__ import annotations

import importlib.metadata
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import workflows

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _public_callables() -> Iterator[tuple[str, Callable[..., Any]]]:
    for name in workflows.__all__:
        obj = getattr(workflows, name)
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj) and obj.__module__.startswith("workflows."):
            members: dict[str, Any] = {}
            for klass in reversed(obj.__mro__):  # inherited ones too (the sandboxes' base)
                if klass.__module__.startswith("workflows."):
                    members.update(vars(klass))
            for attr, member in members.items():
                if attr.startswith("_"):
                    continue
                fn = getattr(member, "__func__", member)  # classmethods, staticmethods
                if isinstance(member, property):
                    fn = member.fget
                if inspect.isfunction(fn):
                    yield f"{name}.{attr}", fn


def _workflows_types_named(fn: Callable[..., Any]) -> set[str]:
    """The classes of `workflows` that ``fn``'s annotations name (read as written)."""
    module = sys.modules[fn.__module__]
    found: set[str] = set()
    for param, annotation in fn.__annotations__.items():
        if param.startswith("_"):  # a private keyword (the batches' shared connection)
            continue
        for word in _NAME.findall(str(annotation)):
            obj = getattr(module, word, None)
            if inspect.isclass(obj) and obj.__module__.startswith("workflows"):
                found.add(word)
    return found


def test_every_type_in_a_public_signature_is_exported() -> None:
    missing = {
        f"{where}: {name}"
        for where, fn in _public_callables()
        for name in _workflows_types_named(fn)
        if name not in workflows.__all__
    }
    assert not missing, sorted(missing)


def test_the_walk_sees_the_signatures_it_checks() -> None:
    walked = dict(_public_callables())
    assert "LocalSandbox.list" in walked
    assert "AsyncLocalSandbox.acquire" in walked
    assert "PendingSandbox" in _workflows_types_named(walked["AsyncLocalSandbox.acquire"])
    assert "Settings" in _workflows_types_named(walked["LocalSandbox.settings"])


def test_version_comes_from_the_installed_distribution() -> None:
    assert workflows.__version__ == importlib.metadata.version("klavis-sandbox")
