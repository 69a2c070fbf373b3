"""pytest hooks for running the tutorial notebooks under nbval against the emulator.

nbval runs no fixtures for notebook cells, and each notebook's kernel copies ``os.environ``
when it starts. So one emulator per pytest process (per xdist worker) is started lazily from a
``pytest_runtest_setup`` hook that runs before the kernel of a notebook starts, and the
variables the notebooks read (``KLAVIS_BASE_URL``, ``KLAVIS_API_KEY``, and
``KLAVIS_SANDBOX_STATE_DIR`` for the ledger) are set there. Each notebook gets its own API key,
which the emulator treats as its own tenant, and starts with fault injection off, so one
notebook's leftovers can never change another's outputs. The emulator stops in
``pytest_sessionfinish``.

Run them with ``--dist loadfile`` under xdist: the cells of a notebook share one kernel.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from klavis_emulator import EmulatorServer

API_KEY_PREFIX = "demo-key"
"""Each notebook runs with the key ``demo-key-<notebook name>``: its own emulator tenant."""

_server: EmulatorServer | None = None
_state_dir: Path | None = None
_current_notebook: Path | None = None
_saved_env: dict[str, str | None] = {}


def _set_env(name: str, value: str) -> None:
    if name not in _saved_env:
        _saved_env[name] = os.environ.get(name)
    os.environ[name] = value


def _emulator() -> EmulatorServer:
    global _server, _state_dir
    if _server is None:
        _state_dir = Path(tempfile.mkdtemp(prefix="klavis-notebooks-state-"))
        _server = EmulatorServer().start()
        _set_env("KLAVIS_BASE_URL", _server.base_url)
        _set_env("KLAVIS_SANDBOX_STATE_DIR", str(_state_dir))
    return _server


def pytest_configure(config: pytest.Config) -> None:
    """Refuse an xdist mode that would split one notebook's cells between workers."""
    running_notebooks = config.getoption("nbval", False) or config.getoption("nbval_lax", False)
    dist = getattr(config.option, "dist", "no")
    if running_notebooks and dist not in ("no", "loadfile"):
        raise pytest.UsageError(
            f"the notebooks need `--dist loadfile` under xdist, not --dist {dist}: "
            "the cells of a notebook share one kernel"
        )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the first cell of each notebook (so before its kernel starts): point it at the
    emulator, with a tenant of its own and no faults."""
    global _current_notebook
    notebook = Path(str(item.fspath))
    if notebook.suffix != ".ipynb" or notebook == _current_notebook:
        return
    _current_notebook = notebook
    server = _emulator()
    server.faults.configure(rate=0.0, latency_ms=0)
    _set_env("KLAVIS_API_KEY", f"{API_KEY_PREFIX}-{notebook.stem}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the emulator and restore the environment."""
    global _server, _state_dir
    if _server is not None:
        _server.stop()
        _server = None
    if _state_dir is not None:
        shutil.rmtree(_state_dir, ignore_errors=True)
        _state_dir = None
    for name, value in _saved_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _saved_env.clear()
