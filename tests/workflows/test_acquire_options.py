"""The keyword lists of acquire, attach, list and bulk release, each written once (a TypedDict
with ``Unpack``): every entry point takes them, and refuses an unknown one as Python would,
before anything is sent."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import pytest

import workflows
from workflows import AcquireOptions, AsyncLocalSandbox, LocalSandbox
from workflows._acquire import AttachOptions, ConnectionOptions, ReleaseOptions

SANDBOX_ID = "3f0c2a6e-8d4b-4c1e-9a7f-0b2d5e6f7a8b"

ENTRY_POINTS: list[tuple[str, Callable[..., Any], str]] = [
    ("acquire", lambda **kw: LocalSandbox.acquire(["git"], **kw), "AcquireOptions"),
    ("acquire", lambda **kw: AsyncLocalSandbox.acquire(["git"], **kw), "AcquireOptions"),
    ("SandboxPool", lambda **kw: workflows.SandboxPool(["git"], **kw), "SandboxPoolOptions"),
    (
        "AsyncSandboxPool",
        lambda **kw: workflows.AsyncSandboxPool(["git"], **kw),
        "SandboxPoolOptions",
    ),
    ("bulk_acquire", lambda **kw: workflows.bulk_acquire(["git"], 2, **kw), "AcquireOptions"),
    ("attach", lambda **kw: LocalSandbox.attach(SANDBOX_ID, **kw), "AttachOptions"),
    ("attach", lambda **kw: AsyncLocalSandbox.attach(SANDBOX_ID, **kw), "AttachOptions"),
    ("list_sandboxes", lambda **kw: workflows.list_sandboxes(**kw), "ConnectionOptions"),
    ("bulk_release", lambda **kw: workflows.bulk_release([], **kw), "ReleaseOptions"),
]
ASYNC_ENTRY_POINTS: list[tuple[str, Callable[..., Any]]] = [
    ("async_bulk_acquire", lambda **kw: workflows.async_bulk_acquire(["git"], 2, **kw)),
    ("async_list_sandboxes", lambda **kw: workflows.async_list_sandboxes(**kw)),
    ("async_bulk_release", lambda **kw: workflows.async_bulk_release([], **kw)),
]


def test_the_acquire_keywords() -> None:
    assert AcquireOptions.__optional_keys__ == {
        "benchmark",
        "ttl_seconds",
        "test_account_email",
        "api_key",
        "base_url",
        "timeout",
        "progress",
        "ledger",
        "limits",
        "host_limits",
    }
    assert ConnectionOptions.__optional_keys__ == {"api_key", "base_url", "timeout"}
    assert AttachOptions.__optional_keys__ == {
        "api_key",
        "base_url",
        "timeout",
        "progress",
        "limits",
    }
    assert ReleaseOptions.__optional_keys__ == {
        "api_key",
        "base_url",
        "timeout",
        "progress",
        "ledger",
    }


@pytest.mark.parametrize(("where", "call", "kind"), ENTRY_POINTS)
def test_an_unknown_keyword_is_a_type_error(
    where: str, call: Callable[..., Any], kind: str
) -> None:
    with pytest.raises(TypeError, match=rf"^{where}\(\) got an unexpected keyword argument 'ttl'$"):
        call(ttl=600)


@pytest.mark.parametrize(("where", "call"), ASYNC_ENTRY_POINTS)
def test_an_unknown_keyword_is_a_type_error_in_async_code(
    where: str, call: Callable[..., Any]
) -> None:
    with pytest.raises(TypeError, match=rf"^{where}\(\) got an unexpected keyword argument 'ttl'$"):
        asyncio.run(call(ttl=600))


@pytest.mark.parametrize(("where", "call", "kind"), ENTRY_POINTS)
def test_each_signature_names_its_typed_keywords(
    where: str, call: Callable[..., Any], kind: str
) -> None:
    """One list each: the signature says ``**options: Unpack[...]``, which mypy and editors read."""
    targets: dict[str, Callable[..., Any]] = {
        "acquire": LocalSandbox.acquire,
        "SandboxPool": workflows.SandboxPool.__init__,
        "AsyncSandboxPool": workflows.AsyncSandboxPool.__init__,
        "bulk_acquire": workflows.bulk_acquire,
        "attach": LocalSandbox.attach,
        "list_sandboxes": workflows.list_sandboxes,
        "bulk_release": workflows.bulk_release,
    }
    options = inspect.signature(targets[where]).parameters["options"]
    assert options.kind is inspect.Parameter.VAR_KEYWORD
    assert options.annotation == f"Unpack[{kind}]"
