"""Shared fixtures: one emulator per test session, a fresh tenant per test, tar.gz helpers."""

from __future__ import annotations

import io
import secrets
import tarfile
from collections.abc import Callable, Iterator, Mapping

import httpx
import pytest

from klavis_emulator import EmulatorServer

MakeTarGz = Callable[[Mapping[str, bytes | str]], bytes]


@pytest.fixture(scope="session")
def emulator() -> Iterator[EmulatorServer]:
    """An emulator on a free loopback port, with its state in a temporary folder."""
    with EmulatorServer() as server:
        yield server


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


def build_tar_gz(files: Mapping[str, bytes | str]) -> bytes:
    """A tar.gz holding ``files`` (name -> content); names ending in ``/`` become folders."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
                continue
            data = content.encode() if isinstance(content, str) else content
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture(scope="session")
def make_tar_gz() -> MakeTarGz:
    """The :func:`build_tar_gz` helper, as a fixture."""
    return build_tar_gz
