"""An ``mcp`` that is installed but fails to import is named as such, with its real cause.

Each case runs a fresh interpreter whose ``sys.path`` starts with a folder holding a broken
``mcp`` (a package and its ``dist-info``, so ``importlib.metadata`` reports its version) in
front of the venv's real one. The broken package fails the way real installs do: mcp 1.12.1
beside pydantic 2.12 or newer imports a private pydantic name that is gone (the real import,
against this venv's real pydantic), and an install missing one of its dependencies.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

PROGRAM = """
from workflows import KlavisError, _mcp
try:  # the function behind LocalSandbox.list_tools, on a URL nobody answers
    _mcp.list_tools("http://127.0.0.1:9/mcp")
except KlavisError as exc:
    print(type(exc).__name__)
    print(exc)
    print(type(exc.__cause__).__name__)
"""


def _broken_mcp(folder: Path, version: str, init: str) -> None:
    (folder / "mcp").mkdir(parents=True)
    (folder / "mcp" / "__init__.py").write_text(init)
    info = folder / f"mcp-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: mcp\nVersion: {version}\n")


def _run(folder: Path) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(folder)}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_mcp_1_12_with_a_newer_pydantic_names_the_cause_and_the_fix(tmp_path: Path) -> None:
    from pydantic._internal import _typing_extra

    pydantic = importlib.metadata.version("pydantic")
    # the line of mcp 1.12.1 (mcp/server/fastmcp/utilities/func_metadata.py) that fails; under a
    # pydantic older than 2.12, which still has that name, one it never had fails the same way
    name = "eval_type_backport"
    if hasattr(_typing_extra, name):  # pragma: no cover - venv-dependent
        name = "eval_type_backport_gone"
    _broken_mcp(tmp_path, "1.12.1", f"from pydantic._internal._typing_extra import {name}\n")
    kind, message, cause = _run(tmp_path)
    assert (kind, cause) == ("ConfigurationError", "ImportError")
    assert "needs the mcp extra" not in message
    assert message.startswith(
        "talking to MCP servers: mcp is installed but cannot be imported "
        f"(mcp 1.12.1, pydantic {pydantic}): ImportError: cannot import name "
        f"'{name}' from 'pydantic._internal._typing_extra'"
    ), message
    assert message.endswith(
        "; fix: pip install 'pydantic<2.12' (or an mcp release made for your pydantic)"
    ), message


def test_mcp_missing_a_dependency_names_it(tmp_path: Path) -> None:
    _broken_mcp(tmp_path, "1.12.1", "import httpx_sse_not_installed_here\n")
    kind, message, cause = _run(tmp_path)
    assert (kind, cause) == ("ConfigurationError", "ModuleNotFoundError")
    pydantic = importlib.metadata.version("pydantic")
    assert message == (
        "talking to MCP servers: mcp is installed but cannot be imported "
        f"(mcp 1.12.1, pydantic {pydantic}): ModuleNotFoundError: No module named "
        "'httpx_sse_not_installed_here'; fix: pip install --force-reinstall 'mcp>=1.12,<3'"
    )


def test_an_old_mcp_that_lacks_the_transport_names_the_supported_range(tmp_path: Path) -> None:
    # mcp before 1.8 had no Streamable HTTP client: the import fails, the version says why
    _broken_mcp(tmp_path, "1.6.0", "")
    kind, message, cause = _run(tmp_path)
    assert (kind, message, cause) == (
        "ConfigurationError",
        "workflows needs mcp>=1.12,<3, found mcp 1.6.0",
        "ModuleNotFoundError",
    )
