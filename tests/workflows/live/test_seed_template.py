"""Seed templates (issue 31, point 9) against the emulator, both faces: a tree packed once seeds
16 sandboxes to the workspace a plain seed gives; a pickled template (another process, another
cache) is never packed again; a damaged or missing cached archive is refused before anything is
sent; bad input is refused before anything is packed or sent.

Packs are counted through the library's own seam: every archive the library packs goes
through ``workflows._pack.write_archive`` (plain seeds through ``pack_to_tempfile``, templates
directly), wrapped here to count.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import workflows
from klavis_emulator import EmulatorServer
from tests.helpers import Face
from workflows import (
    InvalidInputError,
    InvalidSeedPathError,
    SeedTemplate,
    SeedTemplateError,
    Snapshot,
    SourceChangedError,
)
from workflows import _pack as pack_module
from workflows._pack import pack_to_tempfile
from workflows._seed import plan_directory

SANDBOXES = 16


@pytest.fixture
def packs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One item per archive the library packs (its entry count), from now on."""
    calls: list[int] = []
    real = pack_module.write_archive

    def counting(entries: Any, *args: Any, **kwargs: Any) -> int:
        calls.append(len(entries))
        return real(entries, *args, **kwargs)

    monkeypatch.setattr(pack_module, "write_archive", counting)
    return calls


def make_task(root: Path) -> Path:
    """A task's tree: nested files, an executable, a link, an empty folder, an ignored log."""
    root.mkdir()
    for i in range(40):
        folder = root / f"pkg{i % 4}" / f"mod{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i:02}.py").write_text(f"VALUE = {i}\n" * (i + 1))
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    (root / "data.bin").write_bytes(bytes(range(256)) * 64)
    (root / "latest").symlink_to("pkg0/mod0/f00.py")
    (root / "empty").mkdir()
    (root / ".gitignore").write_text("*.log\n")
    (root / "debug.log").write_text("left out")
    return root


def _seed_all(face: Face, sandboxes: list[Any], template: SeedTemplate) -> list[int]:
    """Seed every sandbox from ``template`` at once: threads (sync), one gather (async)."""
    if face.name == "sync":
        with ThreadPoolExecutor(max_workers=8) as pool:
            return list(pool.map(lambda sb: sb.seed(template), sandboxes))

    raw = [getattr(sb, "_target", sb) for sb in sandboxes]  # the async face wraps its sandboxes

    async def together() -> list[int]:
        return list(await asyncio.gather(*(sb.seed(template) for sb in raw)))

    counts: list[int] = face.call(together)
    return counts


def _uploads(emulator: EmulatorServer, sandbox_id: str) -> list[Path]:
    stored = emulator.state.data_dir / "storage" / "sandboxes" / sandbox_id
    return [p for p in stored.rglob("*") if p.is_file()] if stored.exists() else []


def _nothing_held(face: Face, conn: dict[str, str]) -> None:
    assert face.list(**conn) == [], "a sandbox was left acquired"
    assert workflows.default_ledger().held() == []


def test_a_template_seeds_16_sandboxes_packed_once(
    face: Face, conn: dict[str, str], tmp_path: Path, packs: list[int]
) -> None:
    task = make_task(tmp_path / "task")
    template = SeedTemplate.from_folder(task)
    assert len(packs) == 1
    assert template.files == 44  # 40 modules, run.sh, data.bin, .gitignore, the link
    assert template.path.is_file()
    with face.acquire(["filesystem"], **conn) as plain:
        assert plain.seed_directory(task) == template.files
        expected = plain.dump()
    assert len(packs) == 2  # the plain seed packs its own
    with face.bulk_acquire(["filesystem"], SANDBOXES, **conn) as batch:
        sandboxes = list(batch.sandboxes)
        assert len(sandboxes) == SANDBOXES
        assert _seed_all(face, sandboxes, template) == [template.files] * SANDBOXES
        assert len(packs) == 2, "a template seed packed again"
        for sb in sandboxes:
            dumped = face.call(sb.dump)
            assert dumped == expected
            assert dict(dumped.links) == {"latest": "pkg0/mod0/f00.py"}
            assert dumped.is_executable("run.sh")
            assert "debug.log" not in dumped
    _nothing_held(face, conn)


def test_the_template_is_the_archive_a_plain_seed_packs(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task")
    archive, _ = pack_to_tempfile(plan_directory(task))
    with archive:
        plain = archive.read()
    template = SeedTemplate.from_folder(task)
    assert template.read_bytes() == plain
    assert template.size == len(plain)
    assert SeedTemplate.from_folder(task) == template  # the same tree, the same digest
    assert SeedTemplate.from_folder(task, preserve_mtime=True) != template
    assert SeedTemplate.load(template.digest) == template
    assert SeedTemplate.load(template.digest).files == template.files


def test_a_template_from_a_mapping_or_a_snapshot_seeds_what_seed_sends(
    face: Face, conn: dict[str, str], packs: list[int]
) -> None:
    files: dict[str, str | bytes] = {"task.md": "fix it", "data/x.bin": b"\x00\x01"}
    by_mapping = SeedTemplate.from_mapping(files, links={"link": "task.md"})
    assert by_mapping.files == 3
    with face.acquire(["filesystem"], **conn) as sb:
        assert sb.seed(by_mapping) == 3
        dumped = sb.dump()
        assert dumped == Snapshot(files, links={"link": "task.md"})
        by_snapshot = SeedTemplate.from_snapshot(dumped)
        assert by_snapshot == by_mapping  # the dump seeds back to the same archive
        sb.reset()
        assert sb.seed(by_snapshot) == 3
        assert sb.dump() == dumped
    assert len(packs) == 2
    _nothing_held(face, conn)


def test_a_pickled_template_is_never_packed_again(
    conn: dict[str, str], tmp_path: Path, packs: list[int]
) -> None:
    template = SeedTemplate.from_folder(make_task(tmp_path / "task"))
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(template, protocol=5, buffer_callback=buffers.append)
    assert [bytes(b.raw()) for b in buffers] == [template.read_bytes()]  # out of band, as Ray
    assert str(template.path).encode() not in data  # never a path of this host
    in_band = pickle.dumps(template)
    assert str(template.path).encode() not in in_band
    assert conn["api_key"].encode() not in in_band

    again = pickle.loads(in_band)
    assert again == template
    assert again.files == template.files
    assert pickle.loads(data, buffers=buffers) == template
    assert len(packs) == 1

    # another process, with a cache of its own, packing impossible: it seeds from the bytes
    (tmp_path / "template.pickle").write_bytes(in_band)
    child = tmp_path / "child.py"
    child.write_text(
        "import json, pickle, sys\n"
        "import workflows._pack\n"
        "def refuse(*args, **kwargs):\n"
        "    raise AssertionError('packed while unpickling or seeding')\n"
        "workflows._pack.write_archive = refuse\n"
        "from workflows import LocalSandbox\n"
        "template = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "with LocalSandbox.acquire(['filesystem'], ttl_seconds=600) as sb:\n"
        "    count = sb.seed(template)\n"
        "    dumped = sb.dump()\n"
        "print(json.dumps({'digest': template.digest, 'path': str(template.path),\n"
        "                  'count': count, 'files': sorted(dumped)}))\n"
    )
    env = {
        **os.environ,
        "KLAVIS_API_KEY": conn["api_key"],
        "KLAVIS_BASE_URL": conn["base_url"],
        "KLAVIS_SANDBOX_CACHE_DIR": str(tmp_path / "other-cache"),
        "KLAVIS_SANDBOX_STATE_DIR": str(tmp_path / "other-state"),
    }
    done = subprocess.run(
        [sys.executable, str(child), str(tmp_path / "template.pickle")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["digest"] == template.digest
    assert result["path"].startswith(str(tmp_path / "other-cache" / "templates"))
    assert Path(result["path"]).read_bytes() == template.read_bytes()
    assert result["count"] == template.files
    assert "run.sh" in result["files"]


def test_bytes_damaged_on_their_way_are_refused_when_unpickled(tmp_path: Path) -> None:
    template = SeedTemplate.from_mapping({"a.txt": "A" * 1000})
    data = bytearray(pickle.dumps(template))
    archive = template.read_bytes()
    at = bytes(data).index(archive) + len(archive) // 2
    data[at] ^= 0xFF
    with pytest.raises(SeedTemplateError, match="damaged on their way") as caught:
        pickle.loads(bytes(data))
    assert caught.value.digest == template.digest


@pytest.mark.parametrize("damage", ["flipped", "truncated", "removed", "replaced-by-link"])
def test_a_damaged_cached_archive_is_refused_before_anything_is_sent(
    face: Face, conn: dict[str, str], emulator: EmulatorServer, tmp_path: Path, damage: str
) -> None:
    template = SeedTemplate.from_folder(make_task(tmp_path / "task"))
    archive = template.read_bytes()
    if damage == "flipped":
        template.path.write_bytes(archive[:100] + bytes([archive[100] ^ 1]) + archive[101:])
    elif damage == "truncated":
        template.path.write_bytes(archive[:-10])
    elif damage == "removed":
        template.path.unlink()
    else:
        (tmp_path / "elsewhere.tar.gz").write_bytes(archive)  # the right bytes, but a link
        template.path.unlink()
        template.path.symlink_to(tmp_path / "elsewhere.tar.gz")
    fragment = "no longer in the cache" if damage in ("removed", "replaced-by-link") else "match"
    with face.acquire(["filesystem"], **conn) as sb:
        with pytest.raises(SeedTemplateError, match=fragment) as caught:
            sb.seed(template)
        assert type(caught.value) is SeedTemplateError
        assert caught.value.digest == template.digest
        assert _uploads(emulator, sb.id) == [], "the damaged archive was uploaded"
        assert list(emulator.state.workspace_path(sb.id).iterdir()) == []
    _nothing_held(face, conn)
    with pytest.raises(SeedTemplateError):
        pickle.dumps(template)  # nor sent to another process
    with pytest.raises(SeedTemplateError):
        SeedTemplate.load(template.digest)


def test_bad_input_is_refused_before_anything_is_packed(
    tmp_path: Path, packs: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache" / "templates"
    with pytest.raises(InvalidInputError, match="no such folder"):
        SeedTemplate.from_folder(tmp_path / "missing")
    (tmp_path / "outside.txt").write_text("secret")
    leaky = tmp_path / "leaky"
    leaky.mkdir()
    (leaky / "esc").symlink_to(tmp_path / "outside.txt")
    with pytest.raises(InvalidInputError, match="outside the folder"):
        SeedTemplate.from_folder(leaky)
    with pytest.raises(InvalidSeedPathError):
        SeedTemplate.from_mapping({"../x": "no"})
    with pytest.raises(InvalidInputError, match="takes a Snapshot"):
        SeedTemplate.from_snapshot({"a": "b"})  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="not a template digest"):
        SeedTemplate.load("abc")
    with pytest.raises(SeedTemplateError, match="no longer in the cache"):
        SeedTemplate.load("sha256:" + "0" * 64)
    with pytest.raises(TypeError, match="from_folder"):
        SeedTemplate()
    monkeypatch.setenv("KLAVIS_SANDBOX_TEMPLATE_CACHE_BYTES", "lots")
    with pytest.raises(workflows.ConfigurationError, match="KLAVIS_SANDBOX_TEMPLATE_CACHE_BYTES"):
        SeedTemplate.from_mapping({"a": "b"})
    assert packs == []
    assert not cache.exists() or list(cache.iterdir()) == []


def test_a_folder_changed_while_a_template_is_made_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = make_task(tmp_path / "task")
    (tmp_path / "host.txt").write_text("host secret")
    planner = plan_directory

    def plan_then_swap(*args: Any, **kwargs: Any) -> Any:
        planned = planner(*args, **kwargs)
        (task / "run.sh").unlink()
        (task / "run.sh").symlink_to(tmp_path / "host.txt")
        return planned

    monkeypatch.setattr("workflows._seed._from_folder.plan_directory", plan_then_swap)
    with pytest.raises(SourceChangedError, match=r"run\.sh"):
        SeedTemplate.from_folder(task)
    assert list((tmp_path / "cache" / "templates").iterdir()) == []  # no archive, no partial


def test_seeding_a_released_sandbox_from_a_template_is_refused(
    face: Face, conn: dict[str, str]
) -> None:
    template = SeedTemplate.from_mapping({"a": "b"})
    sb = face.acquire(["filesystem"], **conn)
    sb.release()
    with pytest.raises(InvalidInputError, match="was released"):
        sb.seed(template)


@pytest.fixture
def spans() -> Iterator[Any]:
    """Tracing on to a provider of the test's own, its spans kept in memory."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    workflows.enable_tracing(provider)
    yield exporter
    workflows.disable_tracing()
    provider.shutdown()


def test_a_template_seed_is_traced_as_a_seed(face: Face, conn: dict[str, str], spans: Any) -> None:
    template = SeedTemplate.from_mapping({"a.txt": "A" * 5000})
    with face.acquire(["filesystem"], **conn) as sb:
        sb.seed(template)
        sandbox_id = sb.id
    [seed] = [s for s in spans.get_finished_spans() if s.name == "klavis.seed"]
    attributes = dict(seed.attributes or {})
    assert attributes["klavis.sandbox.id"] == sandbox_id
    assert attributes["klavis.bytes"] == template.size
