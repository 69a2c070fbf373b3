"""The archive core's :class:`~klavis_archive.PlannedTree` on real folders: it opens planned
files below the root and only those, following no link at any depth, checks each against its
planned identity, and keeps a bounded number of descriptors open."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from klavis_archive import OPEN_FOLDERS, FileIdentity, PlannedTree, SourceChanged
from tests.helpers import descriptors_into


def _identity(path: Path) -> FileIdentity:
    return FileIdentity.of(os.lstat(path))


def _read(tree: PlannedTree, parts: list[str], identity: FileIdentity) -> bytes:
    fd = tree.open_file(parts, identity)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to count descriptors")
def test_files_at_every_depth_open_with_a_bounded_number_of_descriptors(tmp_path: Path) -> None:
    depth = OPEN_FOLDERS * 2 + 5
    folder = tmp_path
    planned: list[tuple[list[str], FileIdentity, bytes]] = []
    parts: list[str] = []
    for level in range(depth):
        folder = folder / f"d{level}"
        folder.mkdir()
        parts = [*parts, f"d{level}"]
        for name in ("a.txt", "b.txt"):
            data = f"{level}/{name}".encode()
            (folder / name).write_bytes(data)
            planned.append(([*parts, name], _identity(folder / name), data))
    planned.sort(key=lambda p: "/".join(p[0]))  # plans come sorted by name
    assert descriptors_into(tmp_path) == 0
    with PlannedTree(tmp_path, (os.lstat(tmp_path).st_dev, os.lstat(tmp_path).st_ino)) as tree:
        for names, identity, data in planned:
            assert _read(tree, names, identity) == data
            assert 0 < descriptors_into(tmp_path) <= OPEN_FOLDERS + 1
    assert descriptors_into(tmp_path) == 0


def test_a_folder_deep_in_the_path_swapped_for_a_link_is_not_followed(tmp_path: Path) -> None:
    depth = OPEN_FOLDERS + 8  # past the folders kept open: opened for that file alone
    folders = [f"d{i}" for i in range(depth)]
    deepest = tmp_path.joinpath(*folders)
    deepest.mkdir(parents=True)
    (deepest / "f.txt").write_text("planned")
    identity = _identity(deepest / "f.txt")
    swapped = tmp_path.joinpath(*folders[: depth - 3])
    moved = swapped.with_name("moved")
    swapped.rename(moved)
    swapped.mkdir()
    # a link to the planned subtree itself: the same file at its end, and still not followed
    (swapped / folders[depth - 3]).symlink_to(moved / folders[depth - 3])
    with PlannedTree(tmp_path) as tree, pytest.raises(SourceChanged) as caught:
        tree.open_file([*folders, "f.txt"], identity)
    assert caught.value.parts == tuple(folders[: depth - 2])
    assert caught.value.reason == "the folder was replaced by a symbolic link"


def test_a_fifo_or_a_folder_in_a_files_place_is_refused_without_blocking(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    identity = _identity(tmp_path / "f")
    (tmp_path / "f").unlink()
    os.mkfifo(tmp_path / "f")  # no writer: a blocking open would hang here
    with PlannedTree(tmp_path) as tree, pytest.raises(SourceChanged, match="special file"):
        tree.open_file(["f"], identity)
    (tmp_path / "f").unlink()
    (tmp_path / "f").mkdir()
    with PlannedTree(tmp_path) as tree, pytest.raises(SourceChanged, match="by a folder"):
        tree.open_file(["f"], identity)


def test_a_folder_on_the_path_replaced_by_a_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f").write_text("x")
    identity = _identity(tmp_path / "sub" / "f")
    shutil.rmtree(tmp_path / "sub")
    (tmp_path / "sub").write_text("now a file")
    with PlannedTree(tmp_path) as tree, pytest.raises(SourceChanged) as caught:
        tree.open_file(["sub", "f"], identity)
    assert (caught.value.parts, caught.value.reason) == (
        ("sub",),
        "the folder was replaced by a file",
    )
