"""Ids that would reach the wrong place, and the CLI's answer to every error a user can cause.

A sandbox id is pasted into a URL path: ``..`` made ``GET /local-sandbox/..`` (that is
``GET /``), ``bulk_release([".."])`` sent ``DELETE /`` and reported it released, and
``attach(".")`` raised a bare ``KeyError``. Ids are now checked as the service's (UUIDs) before
any URL is built: each case asserts the exact error, that nothing was sent (a loopback listener
sees no connection), and that nothing is held.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import workflows
from tests.helpers import SilentService, isolate, run_cli
from workflows import InvalidInputError, LocalSandbox

BAD_IDS = [".", "..", "", " ", "../x", "a/b", "%2e%2e", "?x=1", "#", "00000000-0000-0000-0000"]


@pytest.fixture
def silent_service() -> Iterator[SilentService]:
    """A stand-in for the service: ``connections() == 0`` proves nothing was sent."""
    with SilentService() as service:
        yield service


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """See :func:`tests.helpers.isolate`."""
    return isolate(monkeypatch, tmp_path)


def _calls(bad: str, conn: dict[str, Any]) -> dict[str, Callable[[], object]]:
    async def async_attach() -> object:
        return await workflows.AsyncLocalSandbox.attach(bad, **conn)

    return {
        "attach": lambda: LocalSandbox.attach(bad, **conn),
        "async-attach": lambda: asyncio.run(async_attach()),
        "bulk_release": lambda: workflows.bulk_release([bad], **conn),
        "async_bulk_release": lambda: asyncio.run(workflows.async_bulk_release([bad], **conn)),
    }


@pytest.mark.parametrize("bad", BAD_IDS)
@pytest.mark.parametrize("call", ["attach", "async-attach", "bulk_release", "async_bulk_release"])
def test_an_id_that_is_not_a_uuid_is_refused_before_any_request(
    bad: str, call: str, silent_service: SilentService, isolated: Path
) -> None:
    conn: dict[str, Any] = {"api_key": "test-key", "base_url": silent_service.url}
    with pytest.raises(InvalidInputError) as caught:
        _calls(bad, conn)[call]()
    assert type(caught.value) is InvalidInputError
    assert f"not a sandbox id: {bad!r}" in str(caught.value)
    assert "UUID" in str(caught.value)
    assert silent_service.connections() == 0, "a request was sent for a bad id"
    assert workflows.default_ledger().held() == []
    assert list(isolated.iterdir()) == []


def test_a_non_string_id_is_refused(silent_service: SilentService, isolated: Path) -> None:
    with pytest.raises(InvalidInputError, match="a sandbox id is a string"):
        LocalSandbox.attach(42, api_key="k", base_url=silent_service.url)  # type: ignore[arg-type]
    assert silent_service.connections() == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["get", ".."],
        ["release", ".."],
        ["dump", ".", "-o", "out"],
        ["dump", "00000000-0000-4000-8000-000000000001", "-o", ""],
        ["seed", "..", "."],
        ["exec", "../x", "main.py"],
    ],
    ids=["get", "release", "dump", "dump-to-nowhere", "seed", "exec"],
)
def test_the_cli_answers_a_bad_id_with_one_line(
    argv: list[str], silent_service: SilentService, isolated: Path
) -> None:
    (isolated / "main.py").write_text("print('hi')\n")
    done = run_cli(argv, env={"KLAVIS_API_KEY": "test-key", "KLAVIS_BASE_URL": silent_service.url})
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    expected = "dump -o got an empty path" if argv[-1] == "" else "not a sandbox id:"
    assert lines[0].startswith(f"klavis-sandbox: error: {expected}")
    assert silent_service.connections() == 0
    assert sorted(p.name for p in isolated.iterdir()) == ["main.py"]  # no `out` folder


@pytest.mark.parametrize(
    ("keyword", "value", "fragment"),
    [
        ("api_key", 123, "api_key must be a str"),
        ("base_url", 5, "base_url must be a str"),
        ("timeout", "5", "timeout must be a positive number"),
        ("timeout", float("nan"), "timeout must be a positive number"),
        ("timeout", float("inf"), "timeout must be a positive number"),
        ("timeout", True, "timeout must be a positive number"),
    ],
)
def test_settings_of_the_wrong_type_are_refused_before_any_request(
    keyword: str, value: object, fragment: str, silent_service: SilentService, isolated: Path
) -> None:
    conn: dict[str, Any] = {"api_key": "test-key", "base_url": silent_service.url, keyword: value}
    with pytest.raises(workflows.ConfigurationError, match=fragment):
        LocalSandbox.acquire(["filesystem"], **conn)
    assert silent_service.connections() == 0
    assert workflows.default_ledger().held() == []
