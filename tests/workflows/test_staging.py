"""Temporary entries beside a destination: which leftovers a later dump removes, and which never.

Real files and real processes, no HTTP: a pid whose process has ended (a child that exited), a
running one (a child waiting on its stdin), a lock held by another open file (what a process
of another pid namespace sharing the folder holds).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from workflows._dump._staging import STAGING_PREFIX, make_staging, remove_stale


@pytest.fixture
def ended_pid() -> int:
    """The pid of a process that has ended (and been waited for)."""
    with subprocess.Popen([sys.executable, "-c", "pass"]) as child:
        assert child.wait(timeout=60) == 0
    return child.pid


@pytest.fixture
def running_pid() -> Iterator[int]:
    """The pid of a process that runs until the test ends."""
    with subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    ) as child:
        try:
            yield child.pid
        finally:
            assert child.stdin is not None
            child.stdin.close()
            child.wait(timeout=60)


def _folder(parent: Path, name: str) -> Path:
    path = parent / name
    path.mkdir()
    (path / "root").mkdir()
    (path / "root" / "big.bin").write_bytes(b"x" * 1000)
    return path


def test_only_provably_stale_entries_of_this_user_are_removed(
    tmp_path: Path, ended_pid: int, running_pid: int
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("keep")
    parent = tmp_path / "parent"
    parent.mkdir()
    stale_folder = _folder(parent, f"{STAGING_PREFIX}{ended_pid}-abcd1234")
    stale_file = parent / f"{STAGING_PREFIX}{ended_pid}-efgh5678.tmp"
    stale_file.write_bytes(b"half an archive")
    kept = {
        # a running process's dump in progress
        _folder(parent, f"{STAGING_PREFIX}{running_pid}-running1").name,
        # this process's own
        _folder(parent, f"{STAGING_PREFIX}{os.getpid()}-mine0001").name,
        # the names older versions used, without a pid: whose they are cannot be told
        _folder(parent, f"{STAGING_PREFIX}k2j4h5g6").name,
        # another program's files
        "notes.txt",
        ".klavis-dump-notes",
        # a link of the right name: never followed, never removed
        f"{STAGING_PREFIX}{ended_pid}-link0001",
    }
    (parent / "notes.txt").write_text("mine")
    (parent / ".klavis-dump-notes").write_text("mine too")
    (parent / f"{STAGING_PREFIX}{ended_pid}-link0001").symlink_to(elsewhere)
    # a stale-looking entry whose lock is held: a process whose pid means nothing here
    locked = _folder(parent, f"{STAGING_PREFIX}{ended_pid}-locked01")
    kept.add(locked.name)
    holder = os.open(locked, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        removed = remove_stale(str(parent))
        assert sorted(removed) == sorted([stale_folder.name, stale_file.name])
        assert set(os.listdir(parent)) == kept
    finally:
        os.close(holder)
    assert (elsewhere / "precious.txt").read_text() == "keep"
    # once nobody holds its lock, the dead process's entry goes too
    assert remove_stale(str(parent)) == [locked.name]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_another_user_s_leftover_is_never_removed(tmp_path: Path, ended_pid: int) -> None:
    theirs = _folder(tmp_path, f"{STAGING_PREFIX}{ended_pid}-theirs01")
    os.chown(theirs, 65534, 65534)
    assert remove_stale(str(tmp_path)) == []
    assert theirs.is_dir()


@pytest.mark.parametrize("folder", [True, False], ids=["folder", "file"])
def test_an_entry_in_use_is_named_for_its_process_and_locked(tmp_path: Path, folder: bool) -> None:
    staging = make_staging(str(tmp_path), folder=folder)
    name = os.path.basename(staging.path)
    assert name.startswith(f"{STAGING_PREFIX}{os.getpid()}-")
    assert name.endswith(".tmp") != folder
    probe = os.open(staging.path, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):  # another open file cannot take its lock
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        staging.remove()
        staging.remove()  # idempotent
        assert os.listdir(tmp_path) == []
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # let go with it
    finally:
        os.close(probe)
