"""Whether the ``emulator`` extra is installed, found before anything imports it.

``pip install klavis-sandbox`` brings the library only; the emulator's web stack and MCP host
come with ``pip install 'klavis-sandbox[emulator]'``. Without them, the ``klavis-emulator``
command prints one line naming the extra (exit code 1, no traceback) and ``import
klavis_emulator`` still works, but using any of its names raises :class:`EmulatorExtraMissing`
with the same line. :func:`importlib.util.find_spec` looks for the modules without importing
them, so the check costs nothing when they are there.

The line knows where it runs: in an environment whose ``mcp`` is 1.x (a benchmark harness's
venv pinning ``mcp==1.12.1``), ``pip install 'klavis-sandbox[emulator]'`` would replace that
``mcp`` with 2.x and break the pin, so the line names the tool route instead (``uv tool
install`` or ``pipx install``: the emulator in an environment of its own) and
``workflows.EmulatorProcess``, which starts such a ``klavis-emulator`` from the harness.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import Final

__all__ = [
    "EXTRA_MODULES",
    "EmulatorExtraMissing",
    "exit_if_missing",
    "install_hint",
    "missing",
    "missing_message",
    "pinned_mcp",
]

EXTRA_MODULES: Final = ("fastapi", "uvicorn", "fastmcp", "mcp_server_git", "psutil", "aiosmtpd")
"""The top-level modules of the ``emulator`` extra's distributions that the emulator uses."""

INSTALL: Final = "pip install 'klavis-sandbox[emulator]'"
TOOL_INSTALL: Final = (
    "uv tool install 'klavis-sandbox[emulator]' (or pipx install 'klavis-sandbox[emulator]')"
)
_EXTRA_MCP_MAJOR: Final = 2  # the emulator extra's "mcp>=2.3,<3" (pyproject.toml)


class EmulatorExtraMissing(ModuleNotFoundError):
    """The ``emulator`` extra is not installed; the message says how to install it."""


def missing() -> tuple[str, ...]:
    """The modules of :data:`EXTRA_MODULES` that cannot be found (none when installed)."""
    return tuple(name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None)


def pinned_mcp() -> str | None:
    """The version of ``mcp`` installed here when it is older than the emulator extra's (a
    harness's pin, which installing the extra here would replace); else None."""
    try:
        version = importlib.metadata.version("mcp")
    except importlib.metadata.PackageNotFoundError:
        return None
    major = version.split(".", 1)[0]
    return version if major.isdigit() and int(major) < _EXTRA_MCP_MAJOR else None


def install_hint() -> str:
    """How to get the emulator from here: ``pip install`` of the extra, or, where that would
    replace the environment's ``mcp`` 1.x, the tool route and ``EmulatorProcess``."""
    pinned = pinned_mcp()
    if pinned is None:
        return f"{INSTALL}, then run klavis-emulator setup"
    return (
        f"not with {INSTALL} here, which would replace this environment's mcp {pinned} with "
        f"mcp {_EXTRA_MCP_MAJOR}.x; install the emulator as a tool of its own, {TOOL_INSTALL}, "
        "run klavis-emulator setup, and start it from this environment with "
        "workflows.EmulatorProcess() (it finds klavis-emulator on PATH)"
    )


def missing_message(names: tuple[str, ...]) -> str:
    """The one line that says what is missing and how to install it (:func:`install_hint`).

    >>> print(missing_message(("fastapi",)))  # doctest: +ELLIPSIS
    klavis-emulator needs the emulator extra (fastapi is not installed): ...
    """
    what = f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} not installed"
    return f"klavis-emulator needs the emulator extra ({what}): {install_hint()}"


def exit_if_missing() -> None:
    """For the command: exit with the one line on stderr (code 1) when the extra is missing."""
    names = missing()
    if names:
        raise SystemExit(missing_message(names))
