"""The git index reader behind Snapshot.diff, against indexes git itself wrote.

Each case built by the git program compares what :func:`workflows._git_index.index_meaning`
reads with ``git ls-files --stage``; crafted indexes (a tenant's) are read in bounded work and
memory, or compared byte for byte with a log line saying why.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from tests.helpers import git, git_repo
from workflows import Snapshot, SnapshotDiff, _git_index
from workflows._git_index import UnreadableIndex, index_digest, index_meaning, is_git_index

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _stage_listing(repo: Path) -> list[tuple[bytes, int, str, int]]:
    rows = []
    for line in git(repo, "ls-files", "--stage", "-z").split("\0"):
        if line:
            meta, path = line.split("\t", 1)
            mode, oid, stage = meta.split()
            rows.append((path.encode(), int(mode, 8), oid, int(stage)))
    return rows


def _read(repo: Path) -> list[tuple[bytes, int, str, int]]:
    meaning = index_meaning((repo / ".git" / "index").read_bytes())
    assert meaning is not None
    return [(e.path, e.mode, e.oid, (e.flags >> 12) & 3) for e in meaning[0]]


@needs_git
@pytest.mark.parametrize("version", [2, 3, 4])
def test_the_reader_agrees_with_git_on_every_index_version(tmp_path: Path, version: int) -> None:
    repo = git_repo(tmp_path / "repo")
    if version == 3:  # an intent-to-add entry has extended flags, which git writes as v3
        (repo / "later.txt").write_text("later\n")
        git(repo, "add", "-N", "later.txt")
    git(repo, "update-index", f"--index-version={version}")
    assert (repo / ".git" / "index").read_bytes()[4:8] == version.to_bytes(4, "big")
    assert _read(repo) == _stage_listing(repo)
    assert len(_read(repo)) == 5 + (version == 3)


@needs_git
def test_the_reader_agrees_with_git_on_a_sha256_repository(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo", object_format="sha256")
    listing = _stage_listing(repo)
    assert len(listing[0][2]) == 64
    assert _read(repo) == listing


@needs_git
def test_a_refreshed_index_is_no_change_and_a_staged_one_is(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    before = Snapshot.from_directory(repo)
    moved = tmp_path / "moved"
    shutil.copytree(repo, moved)  # new inodes and times, as in a seeded sandbox
    (moved / "a.txt").touch()
    git(moved, "status", "--short")  # rewrites the stale stat cache
    refreshed = Snapshot.from_directory(moved)
    assert refreshed[".git/index"] != before[".git/index"]
    assert not before.diff(refreshed), str(before.diff(refreshed))
    assert before.diff(refreshed, exact=True).modified == (".git/index",)

    (moved / "a.txt").write_text("changed\n")
    git(moved, "add", "a.txt")
    staged = Snapshot.from_directory(moved)
    assert before.diff(staged).modified == (".git/index", "a.txt")


@needs_git
def test_what_is_not_an_index_is_compared_byte_for_byte(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    data = (repo / ".git" / "index").read_bytes()
    assert index_meaning(data) is not None
    assert index_meaning(data[:-1]) is None  # the checksum no longer matches
    assert index_meaning(b"DIRC") is None
    assert index_meaning(b"") is None
    junk = {".git/index": b"not an index"}
    assert Snapshot(junk).diff({".git/index": b"not an index either"}).modified == (".git/index",)
    assert is_git_index(".git/index")
    assert is_git_index("vendor/lib/.git/index")
    assert not is_git_index("my.git/index")
    assert not is_git_index(".git/index.lock")


@needs_git
def test_a_v4_index_means_what_the_v2_one_of_the_same_entries_means(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    version_2 = (repo / ".git" / "index").read_bytes()
    git(repo, "update-index", "--index-version=4")
    version_4 = (repo / ".git" / "index").read_bytes()
    assert version_4[4:8] == (4).to_bytes(4, "big")
    assert len(version_4) < len(version_2)  # prefix-compressed paths
    assert index_meaning(version_4) == index_meaning(version_2)
    assert index_digest(version_4) == index_digest(version_2)
    assert not Snapshot({".git/index": version_2}).diff({".git/index": version_4})


@needs_git
def test_an_offset_table_that_restarts_a_path_means_the_same(tmp_path: Path) -> None:
    # with index.threads set, git writes an IEOT table and starts each of its blocks with a
    # whole path: here src/pkg/module_two.py drops all of src/pkg/module_one.py
    repo = git_repo(tmp_path / "repo")
    version_2 = (repo / ".git" / "index").read_bytes()
    git(repo, "-c", "index.threads=2", "update-index", "--index-version=4")
    blocks = (repo / ".git" / "index").read_bytes()
    assert b"IEOT" in blocks
    assert b"\x15src/pkg/module_two.py\x00" in blocks  # 21 bytes dropped, the path whole
    assert index_digest(blocks) == index_digest(version_2)
    assert index_meaning(blocks) == index_meaning(version_2)


# --- indexes git would not write: a tenant's crafted ones ------------------------------------


def _entry(path_field: bytes, *, mtime: int = 0, oid: bytes = b"\x11" * 20) -> bytes:
    """One v4 entry of a regular file: the stat cache (only the mtime set), the object id, the
    flags (stage 0, name length 1) and ``path_field`` (prefix varint, suffix, NUL)."""
    stat = struct.pack(">10L", 0, 0, mtime, 0, 0, 0, 0o100644, 0, 0, 0)
    return stat + oid + struct.pack(">H", 1) + path_field


def _index_v4(entries: list[bytes]) -> bytes:
    body = struct.pack(">4sLL", b"DIRC", 4, len(entries)) + b"".join(entries)
    return body + hashlib.sha1(body).digest()


def growing_paths_index(count: int, *, mtime: int = 0, changed: int = -1) -> bytes:
    """The index of the report: ``count`` v4 entries whose paths are ``a``, ``aa``, ``aaa``...
    (each keeps the previous path and appends one byte: 65 bytes an entry, paths totalling
    count**2 / 2 bytes); entry ``changed`` has another object id."""
    return _index_v4(
        [
            _entry(b"\x00a\x00", mtime=mtime, oid=b"\x22" * 20 if n == changed else b"\x11" * 20)
            for n in range(count)
        ]
    )


PEAK = """
import sys, tracemalloc
from tests.workflows.test_git_index import growing_paths_index
from workflows import Snapshot
count = int(sys.argv[1])
old = Snapshot({".git/index": growing_paths_index(count)})
refreshed = Snapshot({".git/index": growing_paths_index(count, mtime=1)})
staged = Snapshot({".git/index": growing_paths_index(count, mtime=1, changed=count // 2)})
tracemalloc.start()
same, changed = old.diff(refreshed), old.diff(staged)
print(tracemalloc.get_traced_memory()[1], bool(same), changed.modified)
"""


def test_a_crafted_v4_index_costs_memory_linear_in_its_size() -> None:
    count = 8000  # a 0.5 MB index whose paths total 32 MB
    size = len(growing_paths_index(count))
    done = subprocess.run(
        [sys.executable, "-c", PEAK, str(count)],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    peak, same, modified = done.stdout.strip().split(maxsplit=2)
    # Reading the two snapshots' files takes about 4 x the index (measured 3.9 x); spelling the
    # paths out took 68 MB here (130 x), and grows with the square of the index.
    assert int(peak) < 8 * size, f"peak {int(peak):,} bytes for a {size:,}-byte index"
    assert same == "False"  # a refreshed stat cache is no change, paths 8000 bytes long or not
    assert modified == "('.git/index',)"  # one object id changed


def _lines_run(fn: Callable[[], object], limit: int) -> int:
    """How many lines of ``workflows/_git_index.py`` running ``fn`` executes; stops it with
    AssertionError past ``limit`` (the old reader ran some 4 million for the varint below)."""
    count = 0

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
            if count > limit:
                raise AssertionError(f"more than {limit} lines of the index reader ran")
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename == _git_index.__file__ else None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        fn()
    finally:
        sys.settrace(previous)
    return count


def test_a_prefix_varint_longer_than_git_reads_is_refused_in_bounded_work(
    caplog: pytest.LogCaptureFixture,
) -> None:
    huge = b"\xff" * (1 << 20) + b"\x00"  # a 1 MiB varint: git stops at 64 bits (10 bytes)
    index = _index_v4([_entry(b"\x00a\x00"), _entry(huge + b"b\x00")])
    other = _index_v4([_entry(b"\x00a\x00", mtime=1), _entry(huge + b"b\x00", mtime=1)])
    diff: list[SnapshotDiff] = []
    with caplog.at_level(logging.WARNING, logger="workflows"):
        lines = _lines_run(
            lambda: diff.append(Snapshot({".git/index": index}).diff({".git/index": other})),
            limit=2000,
        )
    assert diff[0].modified == (".git/index",)  # compared byte for byte
    assert lines < 2000
    with pytest.raises(UnreadableIndex, match=r"entry 2: .* varint over git's 64 bits"):
        index_digest(index)
    assert [r.getMessage() for r in caplog.records] == [
        "Snapshot.diff: .git/index compared byte for byte: entry 2: its path's prefix length is "
        "a varint over git's 64 bits (git reads at most 10 bytes)"
    ]


def test_a_ten_byte_varint_is_read_as_git_reads_it() -> None:
    ten = b"\x80" * 9 + b"\x00"  # 10 bytes git reads as 128 + 128**2 + ... + 128**9 (< 2**64)
    value = sum(128**k for k in range(1, 10))
    with pytest.raises(UnreadableIndex, match=f"entry 2: drops {value} bytes of a 1-byte path"):
        index_digest(_index_v4([_entry(b"\x00a\x00"), _entry(ten + b"b\x00")]))
    over = b"\xff" * 9 + b"\x00"  # git's decode_varint gives up at the 9th byte
    with pytest.raises(UnreadableIndex, match=r"entry 2: .* varint over git's 64 bits"):
        index_digest(_index_v4([_entry(b"\x00a\x00"), _entry(over + b"b\x00")]))
    with pytest.raises(UnreadableIndex, match="entry 2: drops 2 bytes of a 1-byte path"):
        index_digest(_index_v4([_entry(b"\x00a\x00"), _entry(b"\x02b\x00")]))
    first = _index_v4([_entry(b"\x05a\x00"), _entry(b"\x01b\x00")])  # git ignores a first strip
    meaning = index_meaning(first)
    assert meaning is not None
    assert [e.path for e in meaning[0]] == [b"a", b"b"]
