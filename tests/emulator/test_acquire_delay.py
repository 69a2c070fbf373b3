"""``--acquire-delay``: an acquire answers only after the delay (a VM start); and
``--no-mcp-at-acquire``, the options the pool benchmark starts its emulators with."""

from __future__ import annotations

import httpx
import pytest

from klavis_emulator import EmulatorConfig, EmulatorServer
from klavis_emulator.__main__ import build_parser, config_from_args


def test_an_acquire_is_not_answered_before_the_delay() -> None:
    with EmulatorServer(EmulatorConfig(acquire_delay=1.0, mcp_at_acquire=False)) as server:
        headers = {"Authorization": "Bearer delay-test"}
        body = {"server_names": ["filesystem"]}
        url = f"{server.base_url}/local-sandbox"
        answered = httpx.post(url, json=body, headers=headers, timeout=60)
        assert answered.status_code == 201
        # without the delay an acquire answers in milliseconds; with it, not within 0.25 s
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url, json=body, headers=headers, timeout=0.25)
        assert httpx.get(f"{server.base_url}/_emulator/health").status_code == 200


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
