"""Shared fixtures: one emulator per test session, a fresh tenant per test, a clean slate of the
library's process-wide bookkeeping per test, tar.gz and execution helpers (their code is in
``tests/helpers.py``, which test modules import from; never from a conftest)."""

from __future__ import annotations

import secrets
import signal
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pytest

from workflows import EmulatorProcess, _ownership

from .helpers import Executions, Face, LoopThread, MakeTarGz, build_tar_gz, sigint_state

if TYPE_CHECKING:  # imported where used: see emulator_url
    from klavis_emulator import EmulatorServer


@pytest.fixture(autouse=True)
def _fresh_ownership() -> None:
    """Each test starts with nothing owned, claimed or in flight in this process (the
    library's process-wide registries; see ``workflows._ownership``)."""
    _ownership.clear()


@pytest.fixture(autouse=True)
def _sigint_left_as_found() -> Iterator[None]:
    """A test that leaves SIGINT ignored in this process (or blocked in its main thread)
    fails itself, and the state is put back: every child the next tests start would inherit
    it and never answer Ctrl-C, and the tests that send one would fail
    (``expect_children_to_get_sigint``) though none of them is the cause."""
    before = sigint_state()
    yield
    after = sigint_state()
    if after == before:
        return
    blocked, ignored = after
    if blocked and not before[0]:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    if ignored and not before[1]:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    raise AssertionError(
        f"this test left SIGINT {'blocked in the main thread' if blocked else 'ignored'} "
        f"in the test process (before: blocked {before[0]}, ignored {before[1]}); put back"
    )


@pytest.fixture(autouse=True)
def _recursion_limit_left_as_found() -> Iterator[None]:
    """A test that leaves the interpreter's recursion limit changed fails itself, and the
    limit is put back: the tests after it would run under another limit (``mypy.api.run``
    leaves 2**14, under which an archive test's 3,000-header chain no longer overflowed,
    and that test failed only in the order worksteal gave it)."""
    before = sys.getrecursionlimit()
    yield
    after = sys.getrecursionlimit()
    if after == before:
        return
    sys.setrecursionlimit(before)
    raise AssertionError(
        f"this test left the recursion limit at {after} (it was {before}); put back"
    )


@pytest.fixture(scope="session")
def emulator() -> Iterator[EmulatorServer]:
    """An emulator on a free loopback port, with its state in a temporary folder. Its MCP
    servers start on first use, not at acquire: most of the suite's sandboxes never speak
    MCP (the tests of the start at acquire make an emulator of their own)."""
    from klavis_emulator import EmulatorConfig, EmulatorServer

    with EmulatorServer(EmulatorConfig(mcp_at_acquire=False)) as server:
        yield server


@pytest.fixture(scope="session")
def emulator_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The session emulator's base URL; in a venv without the emulator extra, the URL of a
    ``klavis-emulator`` from another environment started as a harness starts it, with
    :class:`workflows.EmulatorProcess` (``$KLAVIS_EMULATOR_COMMAND``, else the first that can
    serve on ``PATH``): ``scripts/test`` runs the MCP tests so under mcp 1.x."""
    from klavis_emulator._extra import missing

    if not missing():
        server: EmulatorServer = request.getfixturevalue("emulator")
        yield server.base_url
        return
    data = tmp_path_factory.mktemp("emulator")
    with EmulatorProcess(args=["--no-mcp-at-acquire"], data_dir=data) as process:
        yield process.base_url


@pytest.fixture
def token() -> str:
    """A fresh random API key: every test is its own tenant, isolated from the others."""
    return f"test-key-{secrets.token_hex(16)}"


@pytest.fixture
def client(emulator: EmulatorServer, token: str) -> Iterator[httpx.Client]:
    """An httpx client for the session emulator, authenticated with this test's key."""
    with httpx.Client(
        base_url=emulator.base_url,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30.0,
    ) as http:
        yield http


@pytest.fixture(scope="session")
def make_tar_gz() -> MakeTarGz:
    """The :func:`build_tar_gz` helper, as a fixture."""
    return build_tar_gz


@pytest.fixture
def executions(emulator: EmulatorServer, client: httpx.Client, token: str) -> Executions:
    """Execution helpers on the session emulator, as this test's tenant."""
    return Executions(emulator, client, token)


@pytest.fixture(scope="session")
def loop_thread() -> Iterator[LoopThread]:
    loop = LoopThread()
    yield loop
    loop.close()


@pytest.fixture(params=["sync", "async"])
def face(request: pytest.FixtureRequest, loop_thread: LoopThread) -> Face:
    """The library under one of its two faces."""
    return Face(request.param, None if request.param == "sync" else loop_thread)
