"""The public surface: every type a public signature names can be imported from `workflows`."""

from __future__ import annotations

import importlib.metadata

import workflows
from tests.helpers import public_callables, types_named_by


def test_every_type_in_a_public_signature_is_exported() -> None:
    missing = {
        f"{where}: {name}"
        for where, fn in public_callables(workflows)
        for name in types_named_by(fn, "workflows")
        if name not in workflows.__all__
    }
    assert not missing, sorted(missing)


def test_the_walk_sees_the_signatures_it_checks() -> None:
    walked = dict(public_callables(workflows))
    assert "LocalSandbox.list" in walked
    assert "AsyncLocalSandbox.acquire" in walked
    assert "PendingSandbox" in types_named_by(walked["AsyncLocalSandbox.acquire"], "workflows")
    assert "Settings" in types_named_by(walked["LocalSandbox.settings"], "workflows")


def test_version_comes_from_the_installed_distribution() -> None:
    assert workflows.__version__ == importlib.metadata.version("klavis-sandbox")
