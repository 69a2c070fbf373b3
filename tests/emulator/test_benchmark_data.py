"""Benchmark data packs: a sandbox acquired with a benchmark starts (and restarts on reset) with
the pack's files and data documents; other sandboxes do not; a bad pack stops the start."""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from klavis_emulator import EmulatorConfig, EmulatorServer
from klavis_emulator.__main__ import build_parser, config_from_args

DATASET = {"id": "atlas_ds", "description": "made by the test"}


def _make_pack(root: Path) -> Path:
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text("# atlas task\n")
    (root / "docs" / "data.csv").write_text("a,b\n1,2\n")
    (root / ".server-data").mkdir()
    document = {"datasets": [DATASET]}
    (root / ".server-data" / "google_cloud.json").write_text(json.dumps(document))
    return root


def _files(client: httpx.Client, sandbox_id: str) -> dict[str, bytes]:
    url = client.get(f"/local-sandbox/{sandbox_id}/dump").json()["download_url"]
    archive = httpx.get(url, timeout=30).content
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for member in tar:
            data = tar.extractfile(member) if member.isreg() else None
            if data is not None:
                files[member.name.removeprefix("./")] = data.read()
    return files


@pytest.fixture
def packed(tmp_path: Path, token: str) -> Iterator[httpx.Client]:
    pack = _make_pack(tmp_path / "atlas")
    config = EmulatorConfig(
        data_dir=tmp_path / "emulator", benchmark_data={"MCP_Atlas": pack}, host_mcp=False
    )
    with (
        EmulatorServer(config) as server,
        httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as client,
    ):
        yield client


def _acquire(client: httpx.Client, benchmark: str | None) -> str:
    body: dict[str, object] = {"server_names": ["filesystem", "google_cloud"]}
    if benchmark is not None:
        body["benchmark"] = benchmark
    response = client.post("/local-sandbox", json=body)
    assert response.status_code == 201, response.text
    sandbox_id: str = response.json()["local_sandbox_id"]
    return sandbox_id


def _datasets(client: httpx.Client, sandbox_id: str) -> list[dict[str, object]]:
    response = client.get(f"/local-sandbox/google_cloud/{sandbox_id}/dump")
    assert response.status_code == 200, response.text
    datasets: list[dict[str, object]] = response.json()["data"]["datasets"]
    return datasets


def test_a_benchmark_sandbox_starts_with_its_pack(packed: httpx.Client) -> None:
    sandbox_id = _acquire(packed, "MCP_Atlas")
    files = _files(packed, sandbox_id)
    assert files == {"README.md": b"# atlas task\n", "docs/data.csv": b"a,b\n1,2\n"}
    assert [d["id"] for d in _datasets(packed, sandbox_id)] == ["atlas_ds"]


def test_a_reset_restores_the_pack(packed: httpx.Client) -> None:
    sandbox_id = _acquire(packed, "MCP_Atlas")
    assert packed.post(f"/local-sandbox/{sandbox_id}/reset").status_code == 200
    assert set(_files(packed, sandbox_id)) == {"README.md", "docs/data.csv"}
    assert [d["id"] for d in _datasets(packed, sandbox_id)] == ["atlas_ds"]


def test_other_sandboxes_start_empty(packed: httpx.Client) -> None:
    for benchmark in (None, "Toolathlon"):
        sandbox_id = _acquire(packed, benchmark)
        assert _files(packed, sandbox_id) == {}
        assert _datasets(packed, sandbox_id) == []


def test_a_bad_pack_stops_the_start(tmp_path: Path) -> None:
    pack = _make_pack(tmp_path / "atlas")
    (pack / ".server-data" / "google_cloud.json").write_text('{"datasets": [{"nope": 1}]}')
    config = EmulatorConfig(data_dir=tmp_path / "e", benchmark_data={"MCP_Atlas": pack})
    with pytest.raises(ValueError, match=r"not a valid google_cloud document"):
        EmulatorServer(config).start()
    (pack / ".server-data" / "google_cloud.json").unlink()
    (pack / ".server-data" / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match=r"not <server>\.json"):
        EmulatorServer(config).start()
    missing = EmulatorConfig(data_dir=tmp_path / "e", benchmark_data={"MCP_Atlas": pack / "no"})
    with pytest.raises(ValueError, match="is not a folder"):
        EmulatorServer(missing).start()
    unknown = EmulatorConfig(data_dir=tmp_path / "e", benchmark_data={"Atlas": pack})
    with pytest.raises(ValueError, match="the benchmarks are MCP_Atlas"):
        EmulatorServer(unknown).start()


@pytest.mark.parametrize("where", ["docs/pipe", ".server-data/canvas.json"])
def test_a_pack_with_a_fifo_is_refused_at_start_by_name(tmp_path: Path, where: str) -> None:
    pack = _make_pack(tmp_path / "atlas")
    os.mkfifo(pack / where)  # reading it would block: the start must not even try
    config = EmulatorConfig(data_dir=tmp_path / "e", benchmark_data={"MCP_Atlas": pack})
    with pytest.raises(ValueError, match=rf"{re.escape(str(pack / where))} is not a regular"):
        EmulatorServer(config).start()


def test_a_pack_with_a_sparse_file_is_refused_at_start_by_name(tmp_path: Path) -> None:
    pack = _make_pack(tmp_path / "atlas")
    sparse = pack / "docs" / "holes.bin"
    with sparse.open("wb") as out:
        out.truncate(1024**3)  # 1 GiB of holes, no block written
    with sparse.open("rb") as check:
        if os.lseek(check.fileno(), 0, os.SEEK_HOLE) >= sparse.stat().st_size:
            pytest.skip(f"the file system of {tmp_path} does not report holes (SEEK_HOLE)")
    config = EmulatorConfig(data_dir=tmp_path / "e", benchmark_data={"MCP_Atlas": pack})
    with pytest.raises(ValueError, match=rf"{re.escape(str(sparse))} is a sparse file"):
        EmulatorServer(config).start()
    sparse.write_bytes(b"\0" * 4096)  # written out in full, the same bytes are welcome
    with EmulatorServer(config):
        pass


def test_the_command_takes_packs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(
        ["--benchmark-data", f"MCP_Atlas={tmp_path}", "--benchmark-data", "MCP_Mark=/x"]
    )
    assert config_from_args(args).benchmark_data == {"MCP_Atlas": tmp_path, "MCP_Mark": Path("/x")}
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--benchmark-data", "Atlas=/x"])
    assert exited.value.code == 2
    assert "unknown benchmark 'Atlas'" in capsys.readouterr().err
