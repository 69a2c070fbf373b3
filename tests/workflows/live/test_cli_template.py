"""``klavis-sandbox template`` and ``seed`` of several sandboxes against the emulator: a folder is
packed once per invocation (counted through the library's ``write_archive``), a digest seeds
without packing, and a sandbox that fails does not stop the others."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from workflows import SeedTemplate, Snapshot
from workflows import _pack as pack_module
from workflows._cli import main


class Ran(NamedTuple):
    code: int
    out: str
    err: str


@pytest.fixture
def cli(conn: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``main`` in this process as this test's tenant, stdout and stderr captured apart."""
    monkeypatch.setenv("KLAVIS_API_KEY", conn["api_key"])
    monkeypatch.setenv("KLAVIS_BASE_URL", conn["base_url"])

    def run(*argv: str) -> Ran:
        out, err = io.StringIO(), io.StringIO()
        code = main(list(argv), out=out, err=err)
        return Ran(code, out.getvalue(), err.getvalue())

    return run


@pytest.fixture
def packs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = pack_module.write_archive

    def counting(entries: Any, *args: Any, **kwargs: Any) -> int:
        calls.append(len(entries))
        return real(entries, *args, **kwargs)

    monkeypatch.setattr(pack_module, "write_archive", counting)
    return calls


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "task"
    project.mkdir()
    (project / "a.txt").write_text("A")
    (project / "sub").mkdir()
    (project / "sub" / "b.txt").write_text("B")
    (project / "skip.log").write_text("no")
    return project


def test_seed_of_several_sandboxes_packs_the_folder_once(
    cli: Any, tmp_path: Path, packs: list[int]
) -> None:
    ids = [cli("acquire", "filesystem", "-q").out.strip() for _ in range(3)]
    project = _project(tmp_path)
    ran = cli("seed", *ids, str(project), "--ignore", "*.log", "--json")
    assert ran.code == 0, ran.err
    assert len(packs) == 1
    digest = SeedTemplate.from_folder(project, ignore=["*.log"]).digest
    assert json.loads(ran.out) == [{"sandbox_id": i, "files": 2, "template": digest} for i in ids]
    assert f"packed 2 files once: template {digest}" in ran.err
    for sandbox_id in ids:
        out = tmp_path / f"out-{sandbox_id}"
        assert cli("dump", sandbox_id, "-o", str(out), "-q").code == 0
        assert Snapshot.from_directory(out) == {"a.txt": "A", "sub/b.txt": "B"}
    cli("release", *ids)


def test_template_prints_a_digest_that_seed_uploads_without_packing(
    cli: Any, tmp_path: Path, packs: list[int]
) -> None:
    project = _project(tmp_path)
    made = cli("template", str(project))
    assert made.code == 0, made.err
    digest = made.out.strip()
    assert made.out == f"{digest}\n"  # DIGEST=$(klavis-sandbox template ./task) works
    assert digest.startswith("sha256:")
    record = json.loads(cli("template", str(project), "--json", "-q").out)
    assert record["digest"] == digest
    assert record["files"] == 3
    assert Path(record["path"]).is_file()
    assert len(packs) == 2  # one per `template` run

    sandbox_id = cli("acquire", "filesystem", "-q").out.strip()
    seeded = cli("seed", sandbox_id, digest, "--json", "-q")
    assert seeded.code == 0, seeded.err
    assert json.loads(seeded.out) == {"sandbox_id": sandbox_id, "files": 3, "template": digest}
    assert len(packs) == 2  # a digest is never packed again
    refused = cli("seed", sandbox_id, digest, "--ignore", "*.log")
    assert refused.code == 2
    assert "apply to packing a folder" in refused.err
    unknown = cli("seed", sandbox_id, "sha256:" + "0" * 64)
    assert unknown.code == 1
    assert "no longer in the cache" in unknown.err
    cli("release", sandbox_id)


def test_a_sandbox_that_fails_does_not_stop_the_others(cli: Any, tmp_path: Path) -> None:
    good = cli("acquire", "filesystem", "-q").out.strip()
    gone = cli("acquire", "filesystem", "-q").out.strip()
    cli("release", gone)
    ran = cli("seed", gone, good, str(_project(tmp_path)))
    assert ran.code == 1
    assert f"seed {gone}:" in ran.err
    assert f"seeded 3 files into {good}" in ran.err
    cli("release", good)
