"""``klavis-sandbox acquire --ttl``: seconds, or ``never`` as the library's ``ttl_seconds=None``
(``0``, the older spelling of never, still works and says it is deprecated).

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
        deprecated = "--ttl 0 is deprecated: it means never, which is now spelled --ttl never"
        assert (deprecated in err) is (ttl == "0"), err
        lifetime = "TTL 600 s" if ttl == "600" else "no TTL: never released by the service"
        assert lifetime in err, err
    moved = httpx.post(f"{own_emulator}/_emulator/clock/advance", json={"seconds": 86400 + 1})
    assert moved.status_code == 200, moved.text
    left = {info.id for info in list_sandboxes(api_key="ttl-test", base_url=own_emulator)}
    assert left == {held["never"], held["NONE"], held["0"]}


@pytest.mark.parametrize(
    ("ttl", "said"),
    [
        ("soon", "argument --ttl: not a number of seconds or 'never': 'soon'"),
        ("-5", "argument --ttl: must be 60..86400 seconds or 'never': '-5'"),
    ],
)
def test_a_bad_ttl_is_a_usage_error(
    ttl: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["acquire", "filesystem", "--ttl", ttl])
    assert stopped.value.code == 2
    assert said in capsys.readouterr().err


def test_help_says_never_as_the_library_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["acquire", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert (
        "--ttl SECONDS|never seconds until the service releases it (60..86400), or 'never' as "
        "the library's ttl_seconds=None (0 still means never but is deprecated) (default: 7200)"
    ) in shown
