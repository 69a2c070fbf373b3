"""``klavis-sandbox acquire --ttl never`` reaches the service as the library's
``ttl_seconds=None`` (as do ``none`` and ``0``, the older spelling): the sandbox outlives any
TTL, while one acquired with seconds is released (the parsing is in test_cli_grammar.py).

Against an emulator of its own (a real process): the test moves its clock a day forward,
which would expire the sandboxes of the session's shared emulator.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator

import httpx
import pytest

from workflows import EmulatorProcess, list_sandboxes
from workflows._cli import main


@pytest.fixture(scope="module")
def own_emulator() -> Iterator[str]:
    args = ["--no-mcp-at-acquire"]
    with EmulatorProcess([sys.executable, "-m", "klavis_emulator"], args=args) as emulator:
        yield emulator.base_url


def _acquire(ttl: str, url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    monkeypatch.setenv("KLAVIS_API_KEY", "ttl-test")
    monkeypatch.setenv("KLAVIS_BASE_URL", url)
    out, err = io.StringIO(), io.StringIO()
    code = main(["acquire", "filesystem", "--ttl", ttl], out=out, err=err)
    return code, out.getvalue().strip(), err.getvalue()


def test_never_keeps_the_sandbox_past_any_ttl_and_0_still_means_never(
    own_emulator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = {}
    for ttl in ("never", "NONE", "0", "600"):
        code, sandbox_id, err = _acquire(ttl, own_emulator, monkeypatch)
        assert code == 0, err
        held[ttl] = sandbox_id
        assert ("TTL 600 s" if ttl == "600" else "no TTL") in err, err
    moved = httpx.post(
        f"{own_emulator}/_emulator/clock/advance", json={"seconds": 86400 + 1}, timeout=30
    )
    assert moved.status_code == 200, moved.text
    left = {info.id for info in list_sandboxes(api_key="ttl-test", base_url=own_emulator)}
    assert left == {held["never"], held["NONE"], held["0"]}
