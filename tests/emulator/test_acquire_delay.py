"""``--acquire-delay``: an acquire answers only after the delay (a VM start); and
``--no-mcp-at-acquire``, the options the pool benchmark starts its emulators with."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from klavis_emulator import EmulatorConfig, EmulatorServer
from klavis_emulator.__main__ import build_parser, config_from_args


def test_an_acquire_is_not_answered_before_the_delay() -> None:
    with EmulatorServer(EmulatorConfig(acquire_delay=1.0, mcp_at_acquire=False)) as server:
        headers = {"Authorization": "Bearer delay-test"}
        body = {"server_names": ["filesystem"]}
        started = time.monotonic()
        answered = httpx.post(
            f"{server.base_url}/local-sandbox", json=body, headers=headers, timeout=30
        )
        assert answered.status_code == 201
        assert time.monotonic() - started >= 1.0  # a lower bound: the delay itself


def test_waiting_acquires_do_not_hold_the_threads_other_routes_need() -> None:
    """More acquires wait than anyio has worker threads (40): the list route, a sync one,
    still answers while they all wait, and shows them (they exist before they are answered)."""
    count = 45

    async def scenario(base_url: str) -> tuple[int, int]:
        headers = {"Authorization": "Bearer delay-crowd"}
        async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=120) as http:
            acquires = [
                asyncio.create_task(http.post("/local-sandbox", json={"server_names": ["git"]}))
                for _ in range(count)
            ]
            listed = 0
            while listed < count:
                await asyncio.sleep(0.05)  # a poll interval: the condition is the list itself
                listed = (await http.get("/local-sandbox")).json()["total_count"]
            answered_while_waiting = sum(task.done() for task in acquires)
            statuses = {(await task).status_code for task in acquires}
            assert statuses == {201}
            return listed, answered_while_waiting

    with EmulatorServer(EmulatorConfig(acquire_delay=10.0, mcp_at_acquire=False)) as server:
        listed, answered = asyncio.run(scenario(server.base_url))
    assert (listed, answered) == (count, 0)


def test_the_option_sets_the_field_and_refuses_negative_delays(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert config_from_args(build_parser().parse_args(["--acquire-delay", "2"])).acquire_delay == 2
    assert config_from_args(build_parser().parse_args([])).acquire_delay == 0
    assert config_from_args(build_parser().parse_args([])).mcp_at_acquire is True
    quiet = config_from_args(build_parser().parse_args(["--no-mcp-at-acquire"]))
    assert quiet.mcp_at_acquire is False
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--acquire-delay", "-1"])
    assert exit_info.value.code == 2
    assert "--acquire-delay" in capsys.readouterr().err
    with pytest.raises(ValueError, match="acquire_delay must not be negative"):
        EmulatorConfig(acquire_delay=-0.5)
