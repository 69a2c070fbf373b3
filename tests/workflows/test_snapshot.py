"""Snapshot: a read-only mapping with manifests, diffs and safe writing to a folder."""

from __future__ import annotations

import hashlib
import io
import os
import tracemalloc
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workflows._dump._archive import read_snapshot
from workflows._errors import InvalidInputError, InvalidSeedPathError
from workflows._pack import pack_to_tempfile
from workflows._seed import plan_directory, plan_mapping
from workflows._snapshot import ManifestEntry, Snapshot, SnapshotDiff

FILES: dict[str, str | bytes] = {"a.txt": "alpha", "d/b.bin": b"\x00\x01\x02", "d/e/c.md": "# c"}


def dumped(files: Mapping[str, str | bytes]) -> Snapshot:
    """A file-backed snapshot, as a dump gives."""
    f, _ = pack_to_tempfile(plan_mapping(files))
    with f:
        return read_snapshot(f)


@pytest.fixture(params=["memory", "dump"])
def snap(request: pytest.FixtureRequest) -> Snapshot:
    return Snapshot(FILES) if request.param == "memory" else dumped(FILES)


# --- mapping behaviour -------------------------------------------------------------------------


def test_mapping_protocol(snap: Snapshot) -> None:
    assert len(snap) == 3
    assert list(snap) == ["a.txt", "d/b.bin", "d/e/c.md"]
    assert snap["a.txt"] == b"alpha"
    assert snap["d/b.bin"] == b"\x00\x01\x02"
    assert "d/e/c.md" in snap
    assert "d" not in snap  # folders are not entries
    assert "./a.txt" not in snap
    assert snap.get("missing") is None
    with pytest.raises(KeyError):
        snap["missing"]
    assert dict(snap.items())["d/e/c.md"] == b"# c"
    assert isinstance(snap, Mapping)


def test_read_only(snap: Snapshot) -> None:
    with pytest.raises(TypeError):
        snap["x"] = b"y"  # type: ignore[index]
    with pytest.raises(TypeError):
        del snap["a.txt"]  # type: ignore[attr-defined]


def test_keys_normalized_and_checked() -> None:
    assert list(Snapshot({"./x//y.txt": "1"})) == ["x/y.txt"]
    assert list(Snapshot.from_mapping({"./z": b""})) == ["z"]
    with pytest.raises(InvalidSeedPathError):
        Snapshot({"../up": "x"})
    with pytest.raises(InvalidInputError):
        Snapshot({"a": 1})  # type: ignore[dict-item]
    assert len(Snapshot()) == 0


def test_repr_shows_counts_never_contents(snap: Snapshot) -> None:
    assert repr(snap) == "Snapshot(3 files, 11 bytes)"
    assert "alpha" not in repr(snap)
    assert repr(Snapshot({"a": "hi"})) == "Snapshot(1 file, 2 bytes)"
    assert repr(Snapshot()) == "Snapshot(0 files, 0 bytes)"
    assert snap.total_bytes == 11


def test_text(snap: Snapshot) -> None:
    assert snap.text("a.txt") == "alpha"
    assert Snapshot({"l": "é".encode("latin-1")}).text("l", encoding="latin-1") == "é"


# --- equality, manifest -----------------------------------------------------------------------


def test_equality() -> None:
    mem, disk = Snapshot(FILES), dumped(FILES)
    assert mem == disk
    assert disk == mem
    assert mem == {"a.txt": b"alpha", "d/b.bin": b"\x00\x01\x02", "d/e/c.md": b"# c"}
    assert mem == FILES  # str values compare as UTF-8
    assert mem != {**FILES, "a.txt": "other"}
    assert mem != {"a.txt": "alpha"}
    assert mem != Snapshot({**FILES, "new": ""})
    assert mem != {"a.txt": 1, "d/b.bin": 2, "d/e/c.md": 3}
    assert (mem == 3) is False
    with pytest.raises(TypeError):
        hash(mem)


def test_manifest(snap: Snapshot) -> None:
    manifest = snap.manifest()
    assert manifest == [
        ManifestEntry("a.txt", 5, hashlib.sha256(b"alpha").hexdigest()),
        ManifestEntry("d/b.bin", 3, hashlib.sha256(b"\x00\x01\x02").hexdigest()),
        ManifestEntry("d/e/c.md", 3, hashlib.sha256(b"# c").hexdigest()),
    ]
    path, size, sha = manifest[0]
    assert (path, size) == ("a.txt", 5)
    assert snap.sha256("a.txt") == sha


# --- diff --------------------------------------------------------------------------------------


def test_diff_example() -> None:
    before = Snapshot({"keep": "k", "gone": "g", "edit": "1"})
    after = dumped({"keep": "k", "edit": "2", "new": "n"})
    d = before.diff(after)
    assert d == SnapshotDiff(added=("new",), removed=("gone",), modified=("edit",))
    assert d
    assert d.summary() == "1 added, 1 removed, 1 modified"
    assert str(d) == "~ edit\n- gone\n+ new"


def test_diff_equal_is_falsy() -> None:
    d = Snapshot(FILES).diff(dumped(FILES))
    assert not d
    assert str(d) == "no changes"
    assert d.summary() == "no changes"


def test_diff_against_plain_mapping_normalizes_keys() -> None:
    d = Snapshot({"a": "1", "b": "2"}).diff({"./a": "1", "b": b"3"})
    assert (d.added, d.removed, d.modified) == ((), (), ("b",))


def test_diff_same_size_different_content() -> None:
    assert Snapshot({"a": "xy"}).diff({"a": "yx"}).modified == ("a",)


# --- lifetime ----------------------------------------------------------------------------------


def test_close_frees_contents_keeps_index(snap: Snapshot) -> None:
    manifest = snap.manifest()
    with snap as same:
        assert same is snap
    assert snap.closed
    with pytest.raises(ValueError, match="closed"):
        snap["a.txt"]
    assert list(snap) == ["a.txt", "d/b.bin", "d/e/c.md"]
    assert snap.manifest() == manifest
    assert snap == Snapshot(FILES)
    assert not snap.diff(FILES)
    snap.close()  # idempotent


def test_large_dump_reads_with_flat_memory(tmp_path: Path) -> None:
    big = {f"f{i}.bin": os.urandom(1024 * 1024) for i in range(24)}
    archive = tmp_path / "big.tar.gz"
    f, _ = pack_to_tempfile(plan_mapping(big), compresslevel=0)
    with f, open(archive, "wb") as out:
        out.write(f.read())
    del big
    tracemalloc.start()
    try:
        with read_snapshot(archive) as snap:
            total = sum(e.size for e in snap.manifest())
            _, peak = tracemalloc.get_traced_memory()
            assert len(snap["f3.bin"]) == 1024 * 1024
    finally:
        tracemalloc.stop()
    assert total == 24 * 1024 * 1024
    assert peak < 5 * 1024 * 1024, f"peak {peak:,} bytes"  # 24 MiB of files read


# --- to_directory ------------------------------------------------------------------------------


def test_to_directory_writes_everything(snap: Snapshot, tmp_path: Path) -> None:
    written = snap.to_directory(tmp_path / "out" / "deep")
    root = tmp_path / "out" / "deep"
    assert written == [root / "a.txt", root / "d" / "b.bin", root / "d" / "e" / "c.md"]
    assert (root / "a.txt").read_bytes() == b"alpha"
    assert (root / "d" / "e" / "c.md").read_bytes() == b"# c"


def test_to_directory_keeps_exec_bits_of_a_dump(tmp_path: Path) -> None:
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, mode in (("run.sh", 0o755), ("data", 0o644)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = 2, mode
            tar.addfile(info, io.BytesIO(b"ok"))
    buf.seek(0)
    with read_snapshot(buf) as snap:
        snap.to_directory(tmp_path)
    assert os.access(tmp_path / "run.sh", os.X_OK)
    assert not os.access(tmp_path / "data", os.X_OK)


def test_to_directory_refuses_existing_file_writing_nothing(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b.bin").write_bytes(b"mine")
    with pytest.raises(InvalidInputError, match=r"'d/b\.bin'.*overwrite=True"):
        Snapshot(FILES).to_directory(tmp_path)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["b.bin", "d"]
    assert (tmp_path / "d" / "b.bin").read_bytes() == b"mine"


def test_to_directory_overwrite(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("old")
    (tmp_path / "other").write_text("untouched")
    Snapshot(FILES).to_directory(tmp_path, overwrite=True)
    assert (tmp_path / "a.txt").read_text() == "alpha"
    assert (tmp_path / "other").read_text() == "untouched"


def test_to_directory_never_writes_through_symlinks(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.txt").write_text("precious")
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "d").symlink_to(outside)
    with pytest.raises(InvalidInputError, match="symlink"):
        Snapshot(FILES).to_directory(dest, overwrite=True)
    (dest / "d").unlink()
    (dest / "a.txt").symlink_to(outside / "a.txt")
    Snapshot(FILES).to_directory(dest, overwrite=True)
    assert (outside / "a.txt").read_text() == "precious"
    assert not (dest / "a.txt").is_symlink()
    assert (dest / "a.txt").read_text() == "alpha"
    assert sorted(os.listdir(outside)) == ["a.txt"]


def test_to_directory_folder_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "a.txt").mkdir()
    with pytest.raises(InvalidInputError, match="is a folder"):
        Snapshot(FILES).to_directory(tmp_path, overwrite=True)
    (tmp_path / "a.txt").rmdir()
    (tmp_path / "d").write_text("file where a folder goes")
    with pytest.raises(InvalidInputError, match="not a folder"):
        Snapshot(FILES).to_directory(tmp_path, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["d"]


def test_to_directory_target_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(InvalidInputError, match="not a folder"):
        Snapshot(FILES).to_directory(tmp_path / "f")


# --- diff laws ---------------------------------------------------------------------------------

_KEYS = st.sampled_from(["a", "b", "c/d", "c/e", "f/g/h", "é", "z.txt"])
_SNAPS = st.dictionaries(_KEYS, st.binary(max_size=4), max_size=7).map(Snapshot)


@settings(max_examples=50, deadline=None)
@given(a=_SNAPS, b=_SNAPS)
def test_diff_laws(a: Snapshot, b: Snapshot) -> None:
    ab, ba = a.diff(b), b.diff(a)
    assert not a.diff(a)
    assert ab.added == ba.removed
    assert ab.removed == ba.added
    assert ab.modified == ba.modified
    assert (set(a) - set(ab.removed)) | set(ab.added) == set(b)
    assert set(ab.modified) <= set(a) & set(b)
    assert set(ab.modified) == {k for k in set(a) & set(b) if a[k] != b[k]}
    for part in (ab.added, ab.removed, ab.modified):
        assert list(part) == sorted(part)
    assert bool(ab) == (a != b)


# --- links -------------------------------------------------------------------------------------


def test_links_are_held_apart_from_files() -> None:
    snap = Snapshot({"a.txt": "A"}, links={"l": "/data/a.txt", "./sub/up": "../a.txt"})
    assert list(snap) == ["a.txt"]
    assert "l" not in snap
    assert dict(snap.links) == {"l": "/data/a.txt", "sub/up": "../a.txt"}
    assert dict(snap.skipped_links) == {}
    assert repr(snap) == "Snapshot(1 file, 1 bytes, 2 links)"
    assert snap.manifest() == [ManifestEntry("a.txt", 1, hashlib.sha256(b"A").hexdigest())]
    with pytest.raises(TypeError):
        snap.links["x"] = "y"  # type: ignore[index]


def test_a_snapshot_of_a_snapshot_keeps_its_links() -> None:
    snap = Snapshot({"a.txt": "A"}, links={"l": "a.txt"})
    assert dict(Snapshot(snap).links) == {"l": "a.txt"}
    assert Snapshot(snap) == snap


def test_links_count_in_equality_and_diffs() -> None:
    plain = Snapshot({"a.txt": "A"})
    linked = Snapshot({"a.txt": "A"}, links={"l": "a.txt"})
    moved = Snapshot({"a.txt": "A"}, links={"l": "/data/a.txt"})
    assert linked != plain
    assert plain == {"a.txt": "A"}
    assert linked != {"a.txt": "A"}
    assert plain.diff(linked) == SnapshotDiff(added=("l",))
    assert linked.diff(moved) == SnapshotDiff(modified=("l",))
    as_file = Snapshot({"a.txt": "A", "l": "a.txt"})
    assert linked.diff(as_file) == SnapshotDiff(modified=("l",))


def test_links_of_a_dump_and_the_ones_left_out() -> None:
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, target in (("in", "/data/a"), ("out", "/usr/bin/python3")):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    buf.seek(0)
    snap = read_snapshot(buf, workspace_links=True)
    assert dict(snap.links) == {"in": "/data/a"}
    assert dict(snap.skipped_links) == {"out": "/usr/bin/python3"}
    assert repr(snap) == "Snapshot(0 files, 0 bytes, 1 link, 1 skipped link)"
    snap.close()
    assert dict(snap.links) == {"in": "/data/a"}  # the index outlives the contents


def test_to_directory_writes_links_relative(tmp_path: Path) -> None:
    snap = Snapshot(
        {"a.txt": "A", "sub/b.txt": "B"},
        links={"l": "/data/a.txt", "sub/root": "/data", "sub/up": "../a.txt"},
    )
    written = snap.to_directory(tmp_path)
    assert written[-3:] == [tmp_path / "l", tmp_path / "sub" / "root", tmp_path / "sub" / "up"]
    assert os.readlink(tmp_path / "l") == "a.txt"
    assert os.readlink(tmp_path / "sub" / "root") == ".."
    assert (tmp_path / "sub" / "root" / "sub" / "b.txt").read_text() == "B"
    with pytest.raises(InvalidInputError, match="already exists"):
        snap.to_directory(tmp_path)
    snap.to_directory(tmp_path, overwrite=True)
    assert os.readlink(tmp_path / "l") == "a.txt"


def test_from_directory_reads_what_seeding_the_folder_sends(tmp_path: Path) -> None:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "src" / "main.py").write_text("print('hi')\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    (root / "debug.log").write_text("noise")
    (root / "notes.tmp").write_text("scratch")
    (root / ".gitignore").write_text("*.log\n")
    (root / "src" / "up").symlink_to("../run.sh")
    for gitignore in (True, False):
        snap = Snapshot.from_directory(root, ignore=["*.tmp"], gitignore=gitignore)
        planned = plan_directory(root, ignore=["*.tmp"], gitignore=gitignore)
        assert [*snap, *snap.links] == sorted(e.name for e in planned if not e.is_dir)
        assert ("debug.log" in snap) is not gitignore
    assert snap["src/main.py"] == b"print('hi')\n"
    assert snap.is_executable("run.sh")
    assert not snap.is_executable("src/main.py")
    assert dict(snap.links) == {"src/up": "../run.sh"}
    (root / "src" / "main.py").write_text("changed")  # the snapshot holds its own copy
    assert snap.text("src/main.py") == "print('hi')\n"
    assert (
        str(snap.diff(Snapshot.from_directory(root))) == "- debug.log\n+ notes.tmp\n~ src/main.py"
    )


def test_from_directory_refuses_what_seeding_refuses(tmp_path: Path) -> None:
    (tmp_path / "out").symlink_to("/etc")
    with pytest.raises(InvalidInputError, match="outside the folder"):
        Snapshot.from_directory(tmp_path)
    with pytest.raises(InvalidInputError, match="no such folder"):
        Snapshot.from_directory(tmp_path / "missing")
    assert Snapshot.from_directory(tmp_path, ignore=["out"]) == {}


def test_every_way_of_reading_a_folder_takes_the_same_rules(tmp_path: Path) -> None:
    """``seed_directory`` (both faces), ``SeedTemplate.from_folder`` and
    ``Snapshot.from_directory`` take the folder rules as one ``FolderOptions``, so the keywords
    of one call can be passed to another (issue 33: ``preserve_mtime`` was missing from
    ``Snapshot.from_directory``), and refuse any other keyword in their own name."""
    import inspect

    from workflows import AsyncLocalSandbox, FolderOptions, LocalSandbox, SeedTemplate

    assert set(FolderOptions.__optional_keys__) == {
        "ignore",
        "gitignore",
        "max_file_size",
        "preserve_mtime",
    }
    readers = {
        "seed_directory": (LocalSandbox.seed_directory, AsyncLocalSandbox.seed_directory),
        "from_folder": (SeedTemplate.from_folder,),
        "from_directory": (Snapshot.from_directory,),
    }
    for reader in [r for group in readers.values() for r in group]:
        *_, last = inspect.signature(reader).parameters.values()
        assert (last.kind, last.annotation) == (last.VAR_KEYWORD, "Unpack[FolderOptions]")
    (tmp_path / "a.txt").write_text("A")
    (tmp_path / "b.log").write_text("B")
    keywords: FolderOptions = {"ignore": "*.log", "gitignore": False, "preserve_mtime": True}
    assert Snapshot.from_directory(tmp_path, **keywords) == {"a.txt": b"A"}
    assert SeedTemplate.from_folder(tmp_path, cache_dir=tmp_path / "c", **keywords).files == 1
    with pytest.raises(TypeError, match=r"from_directory\(\) got an unexpected keyword .*'nope'"):
        Snapshot.from_directory(tmp_path, nope=True)  # type: ignore[call-arg]


def test_every_file_has_its_own_digest_when_small_ones_are_hashed_in_batches() -> None:
    # small files are hashed in batches of 1 MiB on a thread, big ones chunk by chunk: the
    # manifest must still give each file, hard-link copies and replaced names included, the
    # SHA-256 of its own contents
    from tests.crafted import file, hardlink, tar_gz

    small = {f"small/{n:03}.txt": os.urandom(n * 97 if n % 2 else 33_000 + n) for n in range(300)}
    big = os.urandom(3 * 1024 * 1024 + 5)
    members = [file(name, data) for name, data in small.items()]
    members += [
        file("big.bin", big),
        hardlink("copy-of-first.txt", "small/000.txt"),
        file("small/299.txt", b"replaced"),
    ]
    expected = {**small, "big.bin": big, "copy-of-first.txt": small["small/000.txt"]}
    expected["small/299.txt"] = b"replaced"
    with read_snapshot(io.BytesIO(tar_gz(members, compresslevel=1))) as snapshot:
        assert dict(snapshot) == expected
        assert snapshot.manifest() == [
            ManifestEntry(name, len(data), hashlib.sha256(data).hexdigest())
            for name, data in sorted(expected.items())
        ]
