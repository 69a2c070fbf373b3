"""Attacks on the API key: keys that cannot be sent, and `.env` files planted where we look.

Each case checks that the specific error is raised before anything is sent (a loopback
listener that must see no connection stands in for the service), that the key appears in no
message, log record or CLI output, and that nothing was acquired.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import workflows
from tests.helpers import SilentService, isolate, run_cli
from workflows import ConfigurationError, LocalSandbox


@pytest.fixture
def silent_service() -> Iterator[SilentService]:
    """A stand-in for the service: ``connections() == 0`` proves nothing was sent."""
    with SilentService() as service:
        yield service


SECRET = "sk-attack-" + "7" * 24
# where a key can go wrong: a line end (read from a file), a space, a control or non-ASCII char
BAD_KEYS = {
    "newline-at-end-inside": f"{SECRET}\nX-Injected: 1",
    "carriage-return": f"{SECRET}\rmore",
    "inner-space": f"{SECRET[:8]} {SECRET[8:]}",
    "tab": f"{SECRET}\tx",
    "nul": f"{SECRET}\x00",
    "non-ascii": f"{SECRET}é",
}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """See :func:`tests.helpers.isolate`."""
    return isolate(monkeypatch, tmp_path)


def _calls(url: str, key: str) -> dict[str, Callable[[], Any]]:
    conn: dict[str, Any] = {"api_key": key, "base_url": url}
    return {
        "acquire": lambda: LocalSandbox.acquire(["filesystem"], **conn),
        "list": lambda: workflows.list_sandboxes(**conn),
        "attach": lambda: LocalSandbox.attach("00000000-0000-4000-8000-000000000001", **conn),
        "bulk_release_all": lambda: workflows.bulk_release(None, **conn),
        "reap": lambda: workflows.reap(**conn),
    }


@pytest.mark.parametrize("bad", BAD_KEYS, ids=list(BAD_KEYS))
@pytest.mark.parametrize("call", ["acquire", "list", "attach", "bulk_release_all", "reap"])
def test_a_key_that_cannot_be_sent_is_refused_before_any_request(
    bad: str,
    call: str,
    silent_service: SilentService,
    clean_env: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = silent_service.url
    key = BAD_KEYS[bad]
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ConfigurationError) as caught:
        _calls(url, key)[call]()
    message = str(caught.value)
    assert "the API key from the api_key argument contains" in message
    assert SECRET not in message
    assert SECRET[10:] not in message  # not even a part of it
    assert all(SECRET not in r.getMessage() for r in caplog.records)
    assert silent_service.connections() == 0, "a request was sent with a bad key"
    assert workflows.default_ledger().held() == []


def test_a_bad_key_from_the_environment_names_its_source(
    silent_service: SilentService, clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KLAVIS_BASE_URL", silent_service.url)
    monkeypatch.setenv("KLAVIS_API_KEY", f"{SECRET}\nsecond-line")
    with pytest.raises(ConfigurationError, match="from the KLAVIS_API_KEY environment variable"):
        workflows.list_sandboxes()
    assert silent_service.connections() == 0


def test_the_cli_prints_one_line_without_the_key(
    silent_service: SilentService, clean_env: Path
) -> None:
    bad_key = f"{SECRET}\nX-Injected: 1"
    done = run_cli(["list"], env={"KLAVIS_API_KEY": bad_key, "KLAVIS_BASE_URL": silent_service.url})
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("klavis-sandbox: error: the API key from the KLAVIS_API_KEY")
    assert SECRET not in done.stderr
    assert silent_service.connections() == 0


# ------------------------------------------------------------------------------- .env files


def test_a_dotenv_in_a_parent_folder_is_not_read(clean_env: Path) -> None:
    # a shared parent such as the temp folder: anyone could have put it there
    (clean_env.parent / ".env").write_text(f"KLAVIS_API_KEY={SECRET}\n")
    child = clean_env / "project"
    child.mkdir()
    os.chdir(child)
    from workflows._config import resolve_settings

    with pytest.raises(ConfigurationError, match=r"in a \.env file in the current folder"):
        resolve_settings()


def test_a_dotenv_in_the_current_folder_supplies_the_key(clean_env: Path) -> None:
    (clean_env / ".env").write_text(f"export KLAVIS_API_KEY='{SECRET}'\n")
    from workflows._config import resolve_settings

    assert resolve_settings().api_key.reveal() == SECRET


def test_a_dotenv_with_a_bad_key_names_the_file_not_the_key(clean_env: Path) -> None:
    (clean_env / ".env").write_text(f'KLAVIS_API_KEY="{SECRET} {SECRET}"\n')
    from workflows._config import resolve_settings

    with pytest.raises(ConfigurationError) as caught:
        resolve_settings()
    assert str(clean_env / ".env") in str(caught.value)
    assert SECRET not in str(caught.value)


def test_a_dotenv_owned_by_another_user_is_refused(clean_env: Path) -> None:
    planted = clean_env / ".env"
    if os.getuid() == 0:
        planted.write_text(f"KLAVIS_API_KEY={SECRET}\n")
        os.chown(planted, 12345, 12345)
    else:  # a file root owns, reached by the name .env, is another user's file too
        planted.symlink_to("/etc/passwd")
    from workflows._config import resolve_settings

    with pytest.raises(ConfigurationError, match="belongs to another user") as caught:
        resolve_settings()
    assert SECRET not in str(caught.value)
    # an explicit key still works: the planted file is only refused as a source
    assert resolve_settings("explicit-key").api_key.reveal() == "explicit-key"
