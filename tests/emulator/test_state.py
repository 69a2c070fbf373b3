"""The state module on its own (no HTTP): TTLs on a manual clock, tenants, threads, archives."""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from klavis_emulator import EmulatorConfig, EmulatorState, ManualClock
from klavis_emulator._archive import ArchiveRejected, extract_archive
from klavis_emulator._exec.run_log import complete_utf8_prefix, read_log
from klavis_emulator._exec.runner import execution_name_problem
from klavis_emulator._signing import SignatureError, UrlSigner
from klavis_emulator._state import SandboxNotFound, tenant_for_token
from klavis_emulator._workspace import make_archive
from tests.crafted import Member, file, folder, hardlink, tar_gz


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def state(tmp_path: Path, clock: ManualClock) -> Iterator[EmulatorState]:
    backend = EmulatorState(EmulatorConfig(data_dir=tmp_path, clock=clock))
    yield backend
    backend.close()


def test_tenant_is_a_hash() -> None:
    assert tenant_for_token("abc") == tenant_for_token("abc")
    assert tenant_for_token("abc") != tenant_for_token("abd")
    assert "abc" not in tenant_for_token("abc")


def test_ttl_expiry_on_a_manual_clock(state: EmulatorState, clock: ManualClock) -> None:
    record = state.acquire("t", ["git"], ttl_seconds=60)
    assert record.expires_ts == clock.time() + 60
    clock.advance(59.9)
    assert [r.id for r in state.list_sandboxes("t")] == [record.id]
    clock.advance(0.1)
    assert state.list_sandboxes("t") == []
    with pytest.raises(SandboxNotFound):
        state.get("t", record.id)
    assert not state.workspace_path(record.id).exists()


def test_created_at_comes_from_the_clock(state: EmulatorState, clock: ManualClock) -> None:
    info = state.acquire("t", "ALL").to_info("http://x")
    assert info["created_at"] == "2026-01-01T00:00:00+00:00"
    assert len(info["servers"]) == 16


def test_tenants_are_isolated(state: EmulatorState) -> None:
    record = state.acquire("alice", ["git"])
    with pytest.raises(SandboxNotFound):
        state.get("bob", record.id)
    with pytest.raises(SandboxNotFound):
        state.release("bob", record.id)
    assert state.list_sandboxes("bob") == []
    assert state.get("alice", record.id).id == record.id


def test_invalid_arguments_are_refused(state: EmulatorState) -> None:
    with pytest.raises(ValueError, match="server names"):
        state.acquire("t", ["nope"])
    with pytest.raises(ValueError, match="server names"):
        state.acquire("t", [])
    with pytest.raises(ValueError, match="ttl_seconds"):
        state.acquire("t", ["git"], ttl_seconds=59)
    with pytest.raises(ValueError, match="benchmark"):
        state.acquire("t", ["git"], benchmark="Other")


def test_concurrent_use_from_threads(state: EmulatorState) -> None:
    def work(index: int) -> str:
        record = state.acquire(f"tenant-{index % 4}", ["git", "word"])
        state.reset(record.tenant, record.id)
        state.dump(record.tenant, record.id, "http://x")
        return record.id

    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = list(pool.map(work, range(40)))
    assert len(set(ids)) == 40
    assert sum(len(state.list_sandboxes(f"tenant-{i}")) for i in range(4)) == 40
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda i: state.release(f"tenant-{i % 4}", ids[i]), range(40)))
    assert sum(len(state.list_sandboxes(f"tenant-{i}")) for i in range(4)) == 0


def test_signer_binds_method_key_and_expiry(clock: ManualClock) -> None:
    signer = UrlSigner(b"0123456789abcdef", clock)
    assert "0123456789abcdef" not in repr(signer)
    signed = signer.sign(base_url="http://h/", route="/r", method="PUT", key="a/b.gz", minutes=1)
    query = dict(part.split("=") for part in signed.url.split("?")[1].split("&"))
    signer.verify(method="PUT", key="a/b.gz", **query)
    with pytest.raises(SignatureError, match="does not match"):
        signer.verify(method="GET", key="a/b.gz", **query)
    with pytest.raises(SignatureError, match="does not match"):
        signer.verify(method="PUT", key="a/c.gz", **query)
    with pytest.raises(SignatureError, match=r"not a valid|does not name"):
        signer.verify(method="PUT", key="../b.gz", **query)
    clock.advance(60)
    with pytest.raises(SignatureError, match="expired"):
        signer.verify(method="PUT", key="a/b.gz", **query)


def test_make_archive_order_and_members(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "b" / "inner").mkdir(parents=True)
    (root / "a.txt").write_text("a")
    (root / "b" / "z.txt").write_text("z")
    (root / "b" / "inner" / "deep.txt").write_text("deep")
    (root / "c-link").symlink_to("a.txt")
    target = tmp_path / "out.tar.gz"
    assert make_archive(root, target) == 7
    with tarfile.open(target, "r:gz") as tar:
        names = tar.getnames()
        assert tar.getmember("./c-link").issym()
        deep = tar.extractfile("./b/inner/deep.txt")
        assert deep is not None
        assert deep.read() == b"deep"
    assert names == [
        ".",
        "./a.txt",
        "./b",
        "./b/inner",
        "./b/inner/deep.txt",
        "./b/z.txt",
        "./c-link",
    ]
    assert target.read_bytes()[:2] == b"\x1f\x8b"


def test_make_archive_keeps_hard_links_and_skips_fifos(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("same")
    os.link(root / "a.txt", root / "b.txt")
    os.mkfifo(root / "pipe")
    target = tmp_path / "out.tar.gz"
    assert make_archive(root, target) == 3
    with tarfile.open(target, "r:gz") as tar:
        assert tar.getnames() == [".", "./a.txt", "./b.txt"]
        link = tar.getmember("./b.txt")
        assert link.islnk()
        assert link.linkname == "./a.txt"
        assert tar.getmember("./a.txt").uname == "root"


def _extracted(tmp_path: Path, *members: Member) -> Path:
    archive = tmp_path / "in.tar.gz"
    archive.write_bytes(tar_gz(members))
    root = tmp_path / "root"
    root.mkdir()
    extract_archive(archive, root)
    return root


def test_extraction_follows_archive_order(tmp_path: Path) -> None:
    """A later member replaces an earlier one of the same name, a folder replaces a file, and a
    hard link finds the file it names written."""
    many = [file(f"d{i % 7}/f{i}.txt", f"file {i}") for i in range(300)]
    root = _extracted(
        tmp_path,
        *many,
        file("same.txt", "first"),
        file("same.txt", "second"),
        file("was-file", "x"),
        folder("was-file"),
        file("was-file/in.txt", "in"),
        hardlink("linked.txt", "d0/f0.txt"),
    )
    assert all((root / f"d{i % 7}/f{i}.txt").read_text() == f"file {i}" for i in range(300))
    assert (root / "same.txt").read_text() == "second"
    assert (root / "was-file" / "in.txt").read_text() == "in"
    assert os.path.samefile(root / "linked.txt", root / "d0" / "f0.txt")


def test_extraction_refuses_a_member_under_an_earlier_file(tmp_path: Path) -> None:
    with pytest.raises(ArchiveRejected, match="which is not a directory"):
        _extracted(tmp_path, file("a", "data"), file("a/b", "under a file"))


def test_one_emulator_per_data_dir(tmp_path: Path) -> None:
    first = EmulatorState(EmulatorConfig(data_dir=tmp_path))
    with pytest.raises(RuntimeError, match="already using the data folder"):
        EmulatorState(EmulatorConfig(data_dir=tmp_path))
    first.close()
    second = EmulatorState(
        EmulatorConfig(data_dir=tmp_path)
    )  # free again once the first one is closed
    second.close()


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0),
        (b"abc", 3),
        ("é".encode(), 2),
        ("é".encode()[:1], 0),
        (b"ab" + "€".encode()[:1], 2),
        (b"ab" + "€".encode()[:2], 2),
        (b"ab" + "€".encode(), 5),
        (b"a" + "😀".encode()[:3], 1),
        (b"a" + "😀".encode(), 5),
        (b"\x80\x80\x80\x80\x80", 5),  # stray continuation bytes: nothing to wait for
        (b"a\xff", 2),  # an invalid byte is not the start of anything
        (b"a\xc0", 2),
        (b"a\xf5\x80", 3),
    ],
)
def test_complete_utf8_prefix(data: bytes, expected: int) -> None:
    assert complete_utf8_prefix(data) == expected


def test_read_log_follows_a_growing_file(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    assert read_log(log, 0, final=False) == ("", 0)  # no log yet
    text = "ü€😀 end\n"
    data = text.encode()
    seen = ""
    cursor = 0
    with log.open("ab", buffering=0) as out:
        for byte in data:  # the worst case: one byte at a time
            out.write(bytes([byte]))
            chunk, cursor = read_log(log, cursor, final=False)
            seen += chunk
    assert seen == text
    assert cursor == len(data)
    # The limit never splits a character either.
    assert read_log(log, 0, final=False, limit=2) == ("ü", 2)
    assert read_log(log, 2, final=False, limit=4) == ("€", 5)
    assert read_log(log, 2, final=True, limit=4) == ("€", 5)  # more bytes follow: no U+FFFD


def test_execution_names() -> None:
    for good in ("a", "eval_1", "setup.v2", "A-b_c.d", "x" * 128):
        assert execution_name_problem(good) is None, good
    for bad in ("", ".x", "-x", "a/b", "a\\b", "..", "a..b", "x" * 129, "a b", "é", "a\x00"):
        assert execution_name_problem(bad) is not None, bad


def test_find_live_ignores_the_tenant_and_expires_first(
    state: EmulatorState, clock: ManualClock
) -> None:
    record = state.acquire("owner", ["git"], ttl_seconds=60)
    found = state.find_live(record.id)
    assert found is not None
    assert found.tenant == "owner"
    assert state.find_live("not-a-sandbox") is None
    clock.advance(60)
    assert state.find_live(record.id) is None
    state.close()
    assert state.find_live(record.id) is None
