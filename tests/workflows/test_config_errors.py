"""Configuration order, and the mapping of every status to the error tree (MockTransport only)."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import httpx
import pytest

import workflows
from workflows import (
    ApiError,
    AuthenticationError,
    BadRequestError,
    ConfigurationError,
    ConflictError,
    NotFoundError,
    RateLimitError,
    RequestValidationError,
    ServerError,
)
from workflows._config import resolve_settings
from workflows._errors import retry_backoff
from workflows._transport import api_hooks, parse_retry_after


def test_argument_beats_environment_beats_dotenv(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / ".env").write_text(
        "# comment\nexport KLAVIS_API_KEY='from-dotenv'\nKLAVIS_BASE_URL=http://evil.test\n"
    )
    assert resolve_settings().api_key.reveal() == "from-dotenv"
    assert resolve_settings().base_url == workflows.DEFAULT_BASE_URL  # never from .env
    monkeypatch.setenv("KLAVIS_API_KEY", "from-env")
    monkeypatch.setenv("KLAVIS_BASE_URL", "http://127.0.0.1:8000/")
    assert resolve_settings().api_key.reveal() == "from-env"
    assert resolve_settings().base_url == "http://127.0.0.1:8000"
    settings = resolve_settings("from-arg", "https://api.eu.klavis.ai")
    assert settings.api_key.reveal() == "from-arg"
    assert settings.base_url == "https://api.eu.klavis.ai"


def test_no_key_says_how_to_get_one() -> None:
    with pytest.raises(ConfigurationError) as caught:
        resolve_settings()
    message = str(caught.value)
    assert "KLAVIS_API_KEY" in message
    assert "klavis-emulator" in message


@pytest.mark.parametrize("url", ["ftp://x", "api.klavis.ai", "https://x/?a=1", ""])
def test_bad_base_url(url: str) -> None:
    with pytest.raises(ConfigurationError, match="base URL"):
        resolve_settings("k", url or "http://")


def test_no_key_fails_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError):
        workflows.LocalSandbox.acquire(["git"], base_url="http://127.0.0.1:9")


def _client(status: int, body: object, headers: dict[str, str] | None = None) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return httpx.Response(status, content=content, headers=headers or {})

    return httpx.Client(
        transport=httpx.MockTransport(handler),
        base_url="http://api.test",
        event_hooks=api_hooks(),
        timeout=30,
    )


@pytest.mark.parametrize(
    ("status", "body", "kind", "message"),
    [
        (400, {"detail": "archive is not gzip"}, BadRequestError, "archive is not gzip"),
        (401, {"detail": "Not authenticated"}, AuthenticationError, "Not authenticated"),
        (403, b"", AuthenticationError, "forbidden"),
        (404, {"detail": "Local sandbox x not found"}, NotFoundError, "not found"),
        (409, {"detail": "nothing uploaded"}, ConflictError, "nothing uploaded"),
        (413, {"detail": "too big"}, ApiError, "too big"),
        (429, {"detail": "slow down"}, RateLimitError, "slow down"),
        (500, b"<html>oops</html>", ServerError, "oops"),
        (502, {"detail": "bad gateway"}, ServerError, "bad gateway"),
        (520, b"", ServerError, "server error"),
    ],
)
def test_status_mapping(status: int, body: object, kind: type[ApiError], message: str) -> None:
    with _client(status, body, {"Retry-After": "2"}) as client, pytest.raises(kind) as caught:
        client.get("/local-sandbox/sb-1/dump", headers={"Authorization": "Bearer sk-zzz"})
    error = caught.value
    assert type(error) is kind
    assert error.status_code == status
    assert message in error.message
    assert error.sandbox_id == "sb-1"
    assert "sk-zzz" not in str(error)
    if isinstance(error, RateLimitError):
        assert error.retry_after == 2.0


def test_validation_error_lists_fields() -> None:
    body = {
        "detail": [
            {"loc": ["body", "ttl_seconds"], "msg": "Input should be >= 60", "type": "x"},
            {"loc": ["body", "server_names", 0], "msg": "bad name", "type": "y"},
        ]
    }
    with _client(422, body) as client, pytest.raises(RequestValidationError) as caught:
        client.post("/local-sandbox")
    assert caught.value.errors == [
        ("body.ttl_seconds", "Input should be >= 60"),
        ("body.server_names.0", "bad name"),
    ]
    assert "ttl_seconds" in str(caught.value)


def test_retry_policy() -> None:
    assert retry_backoff(RateLimitError("x", status_code=429, retry_after=3.0)) == 3.0
    assert retry_backoff(ServerError("x", status_code=503)) is True
    assert retry_backoff(ServerError("x", status_code=501)) is False
    assert retry_backoff(NotFoundError("x", status_code=404)) is False
    assert retry_backoff(workflows.ApiTimeoutError("t")) is True
    assert retry_backoff(workflows.TransferError("t", status_code=403)) is False
    assert retry_backoff(workflows.TransferError("t", status_code=None)) is True
    assert retry_backoff(ValueError("x")) is False


def test_parse_retry_after() -> None:
    assert parse_retry_after("120") == 60.0
    assert parse_retry_after("-1") == 0.0
    assert parse_retry_after("Thu, 01 Jan 1970 00:01:00 GMT", now=30.0) == 30.0
    assert parse_retry_after("nan") is None


def test_all_lists_exactly_the_public_names() -> None:
    public = {n for n in dir(workflows) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(workflows, n)).__name__ == "module"}
    assert set(workflows.__all__) == public - modules - {"annotations"}
    for name in workflows.__all__:
        item = getattr(workflows, name)
        if typing.get_origin(item) is not None:  # a type alias (ServerName): documented in the
            continue  # source, an attribute docstring, as a Literal has no __doc__ of its own
        if callable(item) and not isinstance(item, type(workflows)):
            assert getattr(item, "__doc__", None), f"{name} has no docstring"
    for name in ("KlavisError", "NotFoundError", "LocalSandbox", "AsyncLocalSandbox", "Snapshot"):
        assert name in workflows.__all__
    assert issubclass(workflows.UnsafeArchiveError, workflows.KlavisError)
    assert issubclass(workflows.TransferError, workflows.KlavisError)


def test_written_out_names_match_the_contract() -> None:
    from klavis_sandbox_client.models import BenchmarkEnum, LocalSandboxMCPServer

    assert sorted(workflows.SERVER_NAMES) == sorted(m.value for m in LocalSandboxMCPServer)
    assert sorted(workflows.BENCHMARKS) == sorted(m.value for m in BenchmarkEnum)


def test_import_does_not_load_the_generated_models() -> None:
    import subprocess
    import sys

    code = (
        "import sys, workflows; "
        "print(sorted(m for m in sys.modules if m.startswith(('klavis_sandbox_client.models', "
        "'klavis_sandbox_client.api', 'mcp', 'httpx2', 'fastmcp', 'tqdm'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_emulator_and_library_agree_on_the_server_names() -> None:
    # the two packages may not import each other: the emulator reads the contract's enum, the
    # library writes it out (a type checker reads a Literal only when it is written out)
    from klavis_emulator._state import LOCAL_SERVER_NAMES

    assert tuple(LOCAL_SERVER_NAMES) == workflows.SERVER_NAMES
