"""The git index reader behind Snapshot.diff, against indexes git itself wrote.

Each case builds a repository with the git program and compares what
:func:`workflows._git_index.index_meaning` reads with ``git ls-files --stage``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import git, git_repo
from workflows import Snapshot
from workflows._git_index import index_meaning, is_git_index

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


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


def test_the_reader_agrees_with_git_on_a_sha256_repository(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo", object_format="sha256")
    listing = _stage_listing(repo)
    assert len(listing[0][2]) == 64
    assert _read(repo) == listing


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
