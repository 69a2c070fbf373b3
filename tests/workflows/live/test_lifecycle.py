"""The library against the emulator over real HTTP, once per face (sync and async)."""

from __future__ import annotations

import logging
import os
import tarfile
from pathlib import Path

import pytest

import workflows
from klavis_emulator import EmulatorServer
from tests.helpers import Face, listed_sandboxes
from workflows import (
    FileTooLargeError,
    InvalidInputError,
    InvalidSeedPathError,
    NotFoundError,
    Snapshot,
)


def test_acquire_seed_dump_release(face: Face, conn: dict[str, str], token: str) -> None:
    with face.acquire(["filesystem", "git"], ttl_seconds=600, **conn) as sb:
        assert sb.status == "occupied"
        assert [s.name for s in sb.servers] == ["filesystem", "git"]
        assert sb.mcp_url("git").endswith(f"/git/mcp/?local_sandbox_id={sb.id}")
        assert listed_sandboxes(conn["base_url"], token) == [sb.id]
        assert sb.seed({"hello.txt": "hi", "data/x.bin": b"\x00\xff"}) == 2
        snap = sb.dump()
        assert isinstance(snap, Snapshot)
        assert dict(snap) == {"data/x.bin": b"\x00\xff", "hello.txt": b"hi"}
    assert sb.released
    assert listed_sandboxes(conn["base_url"], token) == []


def test_acquire_and_release_log_the_same_lines_on_both_faces(
    face: Face, conn: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Both faces log through one function (issue 33: the async acquire did not name the
    servers, and its release logged nothing)."""
    caplog.set_level(logging.INFO, logger="workflows")
    with face.acquire(["filesystem", "git"], **conn) as sb:
        pass
    lines = [r.getMessage() for r in caplog.records if r.name == "workflows"]
    assert f"acquired sandbox {sb.id} (filesystem, git)" in lines
    assert f"released sandbox {sb.id}" in lines


def test_seed_merges_and_reset_empties(face: Face, conn: dict[str, str]) -> None:
    with face.acquire(["filesystem"], **conn) as sb:
        sb.seed({"a.txt": "1"})
        sb.seed({"b.txt": "2", "a.txt": "one"})
        assert dict(sb.dump()) == {"a.txt": b"one", "b.txt": b"2"}
        sb.reset()
        assert dict(sb.dump()) == {}


def test_refresh_and_repr_and_info(face: Face, conn: dict[str, str]) -> None:
    with face.acquire("ALL", benchmark="Toolathlon", ttl_seconds=None, **conn) as sb:
        info = sb.refresh()
        assert info.id == sb.id
        assert info.created_at
        assert len(sb.servers) == len(workflows.SERVER_NAMES)
        assert sb.benchmark == "Toolathlon"
        text = repr(sb)
        assert sb.id in text
        assert conn["api_key"] not in text
        with pytest.raises(workflows.InvalidInputError, match="no 'nope' server"):
            sb.mcp_url("nope")


def test_release_is_idempotent(face: Face, conn: dict[str, str], token: str) -> None:
    sb = face.acquire(["git"], **conn)
    assert sb.release() is True
    assert sb.release() is False
    assert listed_sandboxes(conn["base_url"], token) == []
    with pytest.raises(InvalidInputError, match="was released"):
        sb.dump()


def test_attach_does_not_own(face: Face, conn: dict[str, str], token: str) -> None:
    with face.acquire(["git"], **conn) as owner:
        with face.attach(owner.id, **conn) as attached:
            assert attached.id == owner.id
            assert not attached.owned
        assert listed_sandboxes(conn["base_url"], token) == [owner.id]
    assert listed_sandboxes(conn["base_url"], token) == []


def test_attach_unknown_or_other_tenant_is_not_found(
    face: Face, conn: dict[str, str], emulator: EmulatorServer
) -> None:
    with pytest.raises(NotFoundError) as caught:
        face.attach("00000000-0000-0000-0000-000000000000", **conn)
    assert caught.value.status_code == 404
    assert caught.value.sandbox_id == "00000000-0000-0000-0000-000000000000"
    with face.acquire(["git"], **conn) as sb, pytest.raises(NotFoundError):
        face.attach(sb.id, api_key="someone-else", base_url=emulator.base_url)


def test_released_elsewhere_counts_as_already_released(face: Face, conn: dict[str, str]) -> None:
    sb = face.acquire(["git"], **conn)
    face.attach(sb.id, **conn).release()
    assert sb.release() is False


def test_dump_to_folder_and_archive(face: Face, conn: dict[str, str], tmp_path: Path) -> None:
    with face.acquire(["filesystem"], **conn) as sb:
        sb.seed({"x/y.txt": "deep", "top.txt": "top"})
        folder = sb.dump_to(tmp_path / "out")
        assert (folder / "x" / "y.txt").read_text() == "deep"
        assert (folder / "top.txt").read_text() == "top"
        archive = sb.dump_to(tmp_path / "saved" / "ws.tar.gz")
        with tarfile.open(archive) as tar:
            names = tar.getnames()
        assert "./x/y.txt" in names
        assert "./top.txt" in names
        assert not list((tmp_path / "saved").glob(".dump-*"))
        (tmp_path / "afile").write_text("")
        with pytest.raises(InvalidInputError, match="not a folder"):
            sb.dump_to(tmp_path / "afile")


def test_seed_directory_honours_ignore_files(
    face: Face, conn: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "build").mkdir()
    (project / "src" / "main.py").write_text("print('hi')\n")
    (project / "src" / "debug.log").write_text("noise")
    (project / "build" / "out.o").write_bytes(b"\x7fELF")
    (project / "secret.env").write_text("TOKEN=1")
    (project / "keep.log").write_text("kept by negation")
    (project / ".gitignore").write_text("build/\n*.log\n!keep.log\n")
    (project / ".sandboxignore").write_text("secret.env\n")
    with face.acquire(["filesystem"], **conn) as sb:
        count = sb.seed_directory(project, ignore=["src/*.tmp"])
        names = set(sb.dump())
    assert names == {".gitignore", ".sandboxignore", "keep.log", "src/main.py"}
    assert count == 4


def test_a_dump_compares_with_the_folder_it_was_seeded_from(
    face: Face, conn: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "main.py").write_text("print('hi')\n")
    (project / "debug.log").write_text("noise")
    (project / ".gitignore").write_text("*.log\n")
    (project / "link").symlink_to("src/main.py")
    with face.acquire(["filesystem"], **conn) as sb:
        sb.seed_directory(project, ignore=["*.tmp"])
        local = Snapshot.from_directory(project, ignore=["*.tmp"])
        assert sb.dump() == local
        assert "debug.log" not in local
        assert dict(local.links) == {"link": "src/main.py"}
        sb.seed({"src/main.py": "print('changed')\n", "new.txt": "n"})
        diff = local.diff(sb.dump())
    assert (diff.added, diff.removed, diff.modified) == (("new.txt",), (), ("src/main.py",))


def test_seed_directory_can_keep_modification_times(
    face: Face, conn: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "main.c").write_text("int main(void) { return 0; }\n")
    (project / "Makefile").write_text("main: src/main.c\n")
    os.utime(project / "src" / "main.c", (1_700_000_000, 1_700_000_000))
    os.utime(project / "Makefile", (1_600_000_000, 1_600_000_000))
    with face.acquire(["filesystem"], **conn) as sb:
        sb.seed_directory(project)
        fixed = sb.dump_to(tmp_path / "fixed")
        sb.seed_directory(project, preserve_mtime=True)
        kept = sb.dump_to(tmp_path / "kept")
    assert os.stat(fixed / "Makefile").st_mtime == 946_684_800  # the reproducible default
    assert os.stat(kept / "Makefile").st_mtime == 1_600_000_000  # through the service and back
    assert os.stat(kept / "src" / "main.c").st_mtime == 1_700_000_000


def test_round_trip_dump(face: Face, conn: dict[str, str]) -> None:
    with face.acquire(["filesystem"], **conn) as sb:
        sb.seed({"before.txt": "was here"})
        report = face.round_trip_dump(sb, {"a.txt": "A", "nested/b.bin": b"\x01\x02"})
        assert report.ok
        assert report.missing == ()
        assert report.changed == ()
        assert report.extra == ("before.txt",)
        assert report.snapshot["nested/b.bin"] == b"\x01\x02"
        assert face.seed_from_dict(sb, {"c.txt": "C"}) == 1


def test_bad_input_is_refused_before_anything_is_sent(
    face: Face, conn: dict[str, str], token: str, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInputError, match="valid names are"):
        face.acquire(["filesystem", "gitt"], **conn)
    with pytest.raises(InvalidInputError, match="between 60 and 86400"):
        face.acquire(["git"], ttl_seconds=10, **conn)
    with pytest.raises(InvalidInputError, match="empty"):
        face.acquire([], **conn)
    assert listed_sandboxes(conn["base_url"], token) == []
    with face.acquire(["filesystem"], **conn) as sb:
        with pytest.raises(InvalidSeedPathError, match=r"\.\."):
            sb.seed({"../escape.txt": "x"})
        with pytest.raises(InvalidInputError):
            sb.seed({"ok.txt": 3})
        with pytest.raises(InvalidInputError, match=r"does not exist|not a directory|missing"):
            sb.seed_directory(tmp_path / "missing")
        big = tmp_path / "big"
        big.mkdir()
        (big / "huge.bin").write_bytes(b"x" * 2048)
        with pytest.raises(FileTooLargeError, match=r"huge\.bin"):
            sb.seed_directory(big, max_file_size=1024)
        assert dict(sb.dump()) == {}


def test_bulk_acquire_and_release(face: Face, conn: dict[str, str], token: str) -> None:
    batch = face.bulk_acquire(["git"], 5, concurrency=3, ttl_seconds=600, **conn)
    assert len(batch) == 5
    sandboxes = batch.sandboxes
    assert len({s.id for s in sandboxes}) == 5
    assert sorted(listed_sandboxes(conn["base_url"], token)) == sorted(s.id for s in sandboxes)
    results = face.bulk_release([s.id for s in sandboxes[:2]], concurrency=2, **conn)
    assert [r.ok for r in results] == [True, True]
    results = face.bulk_release(None, **conn)
    assert {r.sandbox_id for r in results} == {s.id for s in sandboxes[2:]}
    assert all(r.ok and not r.already_released for r in results)
    assert listed_sandboxes(conn["base_url"], token) == []


def test_bulk_release_reports_each_item(face: Face, conn: dict[str, str]) -> None:
    results = face.bulk_release(["00000000-0000-0000-0000-00000000dead"], **conn)
    assert len(results) == 1
    assert results[0].ok
    assert results[0].already_released
    with pytest.raises(InvalidInputError, match="not a sandbox id"):
        face.bulk_release(["a/b"], **conn)


def test_bulk_acquire_failures_do_not_abort(face: Face, emulator: EmulatorServer) -> None:
    bad = {"api_key": "k", "base_url": emulator.base_url.replace("127.0.0.1", "127.0.0.1:1")}
    # a base URL with a closed port: every acquire fails, each one is reported
    bad["base_url"] = "http://127.0.0.1:9"
    batch = face.bulk_acquire(["git"], 3, concurrency=2, **bad)
    assert len(batch) == 3
    assert batch.sandboxes == []
    assert all(isinstance(r.error, workflows.ApiConnectionError) for r in batch)


def test_list_sandboxes(face: Face, conn: dict[str, str]) -> None:
    with face.acquire(["git", "terminal"], **conn) as sb:
        listed = face.list_sandboxes(**conn)
        assert [i.id for i in listed] == [sb.id]
        assert {s.name for s in listed[0].servers} == {"git", "terminal"}
        assert face.list(**conn) == listed  # the classmethod and the function are one
