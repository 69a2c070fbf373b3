"""Whether the ``emulator`` extra is installed, found before anything imports it.

``pip install klavis-sandbox`` brings the library only; the emulator's web stack and MCP host
come with ``pip install 'klavis-sandbox[emulator]'``. Without them, the ``klavis-emulator``
command prints one line naming the extra (exit code 1, no traceback) and ``import
klavis_emulator`` still works, but using any of its names raises :class:`EmulatorExtraMissing`
with the same line. :func:`importlib.util.find_spec` looks for the modules without importing
them, so the check costs nothing when they are there.
"""

from __future__ import annotations

import importlib.util
from typing import Final

__all__ = ["EXTRA_MODULES", "EmulatorExtraMissing", "exit_if_missing", "missing", "missing_message"]

EXTRA_MODULES: Final = ("fastapi", "uvicorn", "fastmcp", "mcp_server_git", "psutil", "aiosmtpd")
"""The top-level modules of the ``emulator`` extra's distributions that the emulator uses."""

INSTALL: Final = "pip install 'klavis-sandbox[emulator]'"


class EmulatorExtraMissing(ModuleNotFoundError):
    """The ``emulator`` extra is not installed; the message says how to install it."""


def missing() -> tuple[str, ...]:
    """The modules of :data:`EXTRA_MODULES` that cannot be found (none when installed)."""
    return tuple(name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None)


def missing_message(names: tuple[str, ...]) -> str:
    """The one line that says what is missing and how to install it.

    >>> missing_message(("fastapi",))
    "klavis-emulator needs the emulator extra (fastapi is not installed): pip install 'klavis-sandbox[emulator]', then run klavis-emulator setup"
    """  # noqa: E501 - a doctest's output is one line
    what = f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} not installed"
    return (
        f"klavis-emulator needs the emulator extra ({what}): {INSTALL}, "
        "then run klavis-emulator setup"
    )


def exit_if_missing() -> None:
    """For the command: exit with the one line on stderr (code 1) when the extra is missing."""
    names = missing()
    if names:
        raise SystemExit(missing_message(names))
