"""A sandbox handed to another process: pickled without its key, usable there with the key of
that process's own environment, and refused (before anything is sent) without it."""

from __future__ import annotations

import asyncio
import os
import pickle
import subprocess
import sys
import textwrap
from typing import Any

import pytest

import workflows
from tests.helpers import Face, listed_sandboxes
from workflows import AsyncLocalSandbox, LocalSandbox, SandboxHandle

# The receiving process: unpickles a sandbox from stdin, dumps it, prints what it found.
RECEIVER = textwrap.dedent(
    """
    import pickle, sys
    try:
        sb = pickle.load(sys.stdin.buffer)
        with sb:
            print(type(sb).__name__, sb.owned, sorted(sb.dump()))
    except Exception as exc:
        print(type(exc).__name__, exc)
    """
)


def receive(payload: bytes, key: str | None) -> str:
    """What :data:`RECEIVER` prints in a fresh interpreter whose environment has ``key``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KLAVIS_")}
    if key is not None:
        env["KLAVIS_API_KEY"] = key
    done = subprocess.run(
        [sys.executable, "-c", RECEIVER],
        input=payload,
        capture_output=True,
        env=env,
        cwd=os.path.dirname(__file__),  # no .env of the checkout's
        timeout=120,
        check=True,
    )
    return done.stdout.decode().strip()


def test_a_pickled_sandbox_carries_no_key_and_works_where_the_key_is_in_the_environment(
    conn: dict[str, Any], token: str
) -> None:
    with LocalSandbox.acquire(["filesystem"], **conn) as sb:
        sb.seed({"a.txt": "A"})
        payload = pickle.dumps(sb)
        assert token.encode() not in payload
        assert receive(payload, token) == "LocalSandbox False ['a.txt']"
        # the receiver's `with` did not release it: it is not the owner
        assert listed_sandboxes(conn["base_url"], token) == [sb.id]
    assert listed_sandboxes(conn["base_url"], token) == []


def test_a_receiver_without_the_key_or_with_another_is_told_so(
    conn: dict[str, Any], token: str
) -> None:
    with LocalSandbox.acquire(["filesystem"], **conn) as sb:
        payload = pickle.dumps(sb)
        missing = receive(payload, None)
        assert missing.startswith("ConfigurationError")
        assert sb.id in missing
        assert "never pickled" in missing
        assert "KLAVIS_API_KEY" in missing
        assert "runtime_env" in missing
        other = receive(payload, "test-key-another-one")
        assert other.startswith("ConfigurationError")
        assert "another API key" in other
        assert sb.settings.api_key.fingerprint in other
        assert token not in missing + other


def test_the_handle_holds_no_credentials(face: Face, conn: dict[str, Any], token: str) -> None:
    with face.acquire(["filesystem", "poste_email_toolathlon"], **conn) as sb:
        handle = sb.handle()
        assert isinstance(handle, SandboxHandle)
        assert handle.id == sb.id
        assert handle.base_url == conn["base_url"]
        assert handle.key_fingerprint == sb.settings.api_key.fingerprint
        assert [s.mcp_server_url for s in handle.info.servers] == [
            s.mcp_server_url for s in sb.servers
        ]
        assert all(s.auth_data is None and s.metadata is None for s in handle.info.servers)
        assert token.encode() not in pickle.dumps(handle)
        assert token not in repr(handle)
        raw = getattr(sb, "_target", sb)  # the async face's object under the test's wrapper
        account = sb.info.server("poste_email_toolathlon").auth_data
        assert account is not None
        password = str(account["password"]).encode()
        assert password not in pickle.dumps(raw)


def test_from_handle_makes_a_sandbox_of_each_face_without_a_request(
    conn: dict[str, Any], token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KLAVIS_API_KEY", token)
    with LocalSandbox.acquire(["filesystem"], **conn) as sb:
        sb.seed({"b.txt": "B"})
        handle = sb.handle()
        again = LocalSandbox.from_handle(handle)
        assert not again.owned
        assert dict(again.dump()) == {"b.txt": b"B"}

        async def use() -> dict[str, bytes]:
            async with AsyncLocalSandbox.from_handle(handle) as twin:
                assert not twin.owned
                return dict(await twin.dump())

        assert asyncio.run(use()) == {"b.txt": b"B"}
        # a pickled async sandbox comes back as an async one
        twin = pickle.loads(pickle.dumps(AsyncLocalSandbox.from_handle(handle)))
        assert isinstance(twin, AsyncLocalSandbox)
        assert twin.id == sb.id
        asyncio.run(twin.aclose())
        assert listed_sandboxes(conn["base_url"], token) == [sb.id]


def test_from_handle_refuses_bad_arguments() -> None:
    with pytest.raises(TypeError, match="takes a SandboxHandle, not str"):
        LocalSandbox.from_handle("sandbox-id")  # type: ignore[arg-type]
    info = workflows.SandboxInfo("x", "occupied")
    handle = SandboxHandle(info, "http://127.0.0.1:9", "0" * 16, 5.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'ttl_seconds'"):
        LocalSandbox.from_handle(handle, ttl_seconds=60)  # type: ignore[call-arg]
