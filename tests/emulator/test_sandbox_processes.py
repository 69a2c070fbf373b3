"""Which of the emulator's descendants belong to a sandbox (``sandbox_processes``), on real
process trees started by this test process (it plays the emulator: the scan starts at its
own pid): unconfined trees working in folders, and a command line that binds a folder at
``/data`` as a sandbox's ``bwrap`` does.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from klavis_emulator._exec.confinement import CONFINED_WORKSPACE
from klavis_emulator._exec.processes import end_processes, sandbox_processes
from tests.helpers import wait_until

# a shell that starts a grandchild and waits: two processes a tree
TREE = ["sh", "-c", "sleep 600 & wait"]


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        process.kill()
        process.wait()
    for child in psutil.Process().children(recursive=True):  # the orphaned sleeps
        if child.cmdline()[:2] == ["sleep", "600"]:
            child.kill()


def _tree_pids(process: subprocess.Popen[bytes]) -> set[int]:
    root = psutil.Process(process.pid)
    wait_until(lambda: bool(root.children()), "the shell's sleep started")
    return {process.pid, *(child.pid for child in root.children(recursive=True))}


def test_a_scan_finds_every_process_of_its_folders_and_none_of_others(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    folders = [tmp_path / f"w{index}" for index in range(6)]
    trees: dict[Path, set[int]] = {}
    for folder in folders:
        (folder / "sub").mkdir(parents=True)
        pids: set[int] = set()
        for cwd in (folder, folder / "sub"):  # below the folder counts too
            started.append(subprocess.Popen(TREE, cwd=cwd))
            pids |= _tree_pids(started[-1])
        trees[folder] = pids
    # a sandbox's bwrap, as its command line names it: the folder bound at /data
    bound = tmp_path / "bound"
    bound.mkdir()
    started.append(
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import time; time.sleep(600)",
                "--bind",
                str(bound),
                CONFINED_WORKSPACE,
            ],
            cwd=tmp_path,
        )
    )
    trees[bound] = {started[-1].pid}

    for folder, pids in trees.items():
        assert {p.pid for p in sandbox_processes(folder)} == pids
    assert {p.pid for p in sandbox_processes(folders[0], folders[1])} == (
        trees[folders[0]] | trees[folders[1]]
    )
    assert sandbox_processes(tmp_path / "nobody's") == []

    assert end_processes(sandbox_processes(folders[2])) == []
    assert not any(
        psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
        for pid in trees[folders[2]]
    )
    assert {p.pid for p in sandbox_processes(folders[3])} == trees[folders[3]]
