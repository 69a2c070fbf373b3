"""Fixtures for the `workflows` tests: isolation from the real ledger and .env, and (for
``live/``) the session emulator as this test's tenant: one suite, run for both faces.

The ``face`` fixture (in ``tests/conftest.py``; its classes in ``tests/helpers.py``) is
parametrized: ``sync`` is the library as is; ``async`` wraps ``AsyncLocalSandbox`` and the async
recipes so every call runs on an event loop in a helper thread (the tests' own thread never
calls ``asyncio.run``), behind the sync face's names.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import stamina

if TYPE_CHECKING:  # imported where used: the MCP tests also run without the emulator installed
    from klavis_emulator import EmulatorServer


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No test touches the real ledger, the real template cache, a real .env, or waits for
    real backoff."""
    monkeypatch.setenv("KLAVIS_SANDBOX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KLAVIS_SANDBOX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KLAVIS_SANDBOX_TEMPLATE_CACHE_BYTES", raising=False)
    monkeypatch.delenv("KLAVIS_API_KEY", raising=False)
    monkeypatch.delenv("KLAVIS_BASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    stamina.set_testing(True, attempts=8)
    yield
    stamina.set_testing(False)


@pytest.fixture
def conn(emulator_url: str, token: str) -> dict[str, str]:
    """Keyword arguments that point the library at the session emulator as this test's tenant."""
    return {"api_key": token, "base_url": emulator_url}


@pytest.fixture
def faulty_emulator(tmp_path: Path) -> Iterator[EmulatorServer]:
    """A private emulator for fault-injection tests (so faults never hit other tests)."""
    from klavis_emulator import EmulatorConfig, EmulatorServer

    with EmulatorServer(EmulatorConfig(data_dir=tmp_path / "faulty-emulator")) as server:
        yield server
