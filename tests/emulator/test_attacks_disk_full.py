"""A full disk on the emulator's side (a tenant filled it, or anything else): uploads and dumps
answer 507 naming the cause, and nothing half-written stays. Part of the attack corpus, so it
runs confined and unconfined.

A real limit, not a mocked file system: the emulator runs as a process whose file size limit
(``RLIMIT_FSIZE``) is a few MiB, so writing past it fails with ``EFBIG`` exactly where a full
disk fails with ``ENOSPC`` (Python ignores ``SIGXFSZ``, so the write raises).
"""

from __future__ import annotations

import os
import resource
import secrets
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import build_tar_gz, emulator_process

LIMIT = 8 * 1024 * 1024  # the emulator's largest file; SQLite and its WAL stay far below
GZIP = {"Content-Type": "application/gzip"}


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """An emulator process that cannot write a file over :data:`LIMIT`: its URL, data folder."""
    folder = tmp_path_factory.mktemp("disk-full")
    python = folder / "python-with-a-file-size-limit"
    python.write_text(
        f"#!{sys.executable}\n"
        "import os, resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({LIMIT}, {LIMIT}))\n"
        f"os.execv({sys.executable!r}, [{sys.executable!r}, *sys.argv[1:]])\n"
    )
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    if hard != resource.RLIM_INFINITY and hard < LIMIT:
        pytest.skip(f"this machine's file size limit ({hard} bytes) is below the test's")
    data = folder / "data"
    with emulator_process(str(python), data) as url:
        yield url, data


@pytest.fixture
def http(limited: tuple[str, Path]) -> Iterator[httpx.Client]:
    url, _ = limited
    headers = {"Authorization": f"Bearer disk-{secrets.token_hex(8)}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        yield client


def _acquire(http: httpx.Client) -> str:
    answer = http.post("/local-sandbox", json={"server_names": ["filesystem"]})
    assert answer.status_code == 201, answer.text
    sandbox_id: str = answer.json()["local_sandbox_id"]
    return sandbox_id


def _upload(http: httpx.Client, sandbox_id: str, body: bytes) -> httpx.Response:
    url = http.post(f"/local-sandbox/{sandbox_id}/upload-url").json()["upload_url"]
    return httpx.put(url, content=body, headers=GZIP, timeout=60)


def _leftovers(data: Path) -> list[str]:
    tmp = data / "tmp"
    return sorted(os.listdir(tmp)) if tmp.is_dir() else []


def test_an_upload_past_the_space_left_is_507_and_leaves_nothing(
    http: httpx.Client, limited: tuple[str, Path]
) -> None:
    sandbox_id = _acquire(http)
    answer = _upload(http, sandbox_id, build_tar_gz({"big.bin": os.urandom(LIMIT + 1024**2)}))
    assert answer.status_code == 507, answer.text
    detail = answer.json()["detail"]
    assert "ran out of disk space receiving the upload" in detail
    assert "EFBIG" in detail
    assert _leftovers(limited[1]) == []
    # nothing was stored: initialize finds no upload
    assert http.post(f"/local-sandbox/{sandbox_id}/initialize").status_code == 409


def test_a_dump_past_the_space_left_is_507_and_leaves_nothing(
    http: httpx.Client, limited: tuple[str, Path]
) -> None:
    sandbox_id = _acquire(http)
    for name in ("a.bin", "b.bin"):  # each fits; their dump does not
        body = build_tar_gz({name: os.urandom(LIMIT // 2 + 1024**2)})
        assert _upload(http, sandbox_id, body).status_code == 200
        assert http.post(f"/local-sandbox/{sandbox_id}/initialize").status_code == 200
    answer = http.get(f"/local-sandbox/{sandbox_id}/dump")
    assert answer.status_code == 507, answer.text
    assert "ran out of disk space writing the workspace's dump" in answer.json()["detail"]
    assert _leftovers(limited[1]) == []
