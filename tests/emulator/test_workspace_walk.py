"""The walk of a folder that a sandbox's processes can change (``klavis_emulator._workspace``),
on its own: its order, its limits, its descriptors, and what it reads when a folder is swapped
for a symbolic link between two of its steps (the generator is paused there, so the swap
lands exactly where a racing process would need it).
"""

from __future__ import annotations

import os
from pathlib import Path

from klavis_emulator._archive import MAX_PATH_BYTES
from klavis_emulator._workspace import FOLDER_DESCRIPTORS, copy_tree, remove_tree, walk
from tests.helpers import descriptors_into, make_chain

SECRET = b"the emulator's own secret"


def _outside(tmp_path: Path) -> Path:
    """A folder beside the walked one, holding files named as the walked folder's."""
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("b.txt", "c.txt"):
        (outside / name).write_bytes(SECRET)
    return outside


def _read(fd: int) -> bytes:
    return os.pread(fd, 1 << 20, 0)


def test_order_kinds_and_what_is_left_out(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "b" / "c").mkdir(parents=True)
    (root / "a.txt").write_text("a")
    (root / "b" / "x.txt").write_text("x")
    (root / "c.txt").write_text("c")
    os.symlink("a.txt", root / "link")
    os.mkfifo(root / "fifo")
    steps = [(entry.kind, entry.arcname) for entry in walk(root)]
    assert steps == [
        ("folder", "."),
        ("file", "./a.txt"),
        ("folder", "./b"),
        ("folder", "./b/c"),
        ("end", "./b/c"),
        ("file", "./b/x.txt"),
        ("end", "./b"),
        ("file", "./c.txt"),
        ("link", "./link"),
        ("end", "."),
    ]


def test_a_folder_swapped_for_a_link_after_it_was_opened_is_read_as_opened(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    (root / "dir").mkdir(parents=True)
    for name in ("a.txt", "b.txt", "c.txt"):
        (root / "dir" / name).write_bytes(b"mine")
    outside = _outside(tmp_path)
    read: dict[str, bytes] = {}
    for entry in walk(root):
        if entry.kind == "file":
            read[entry.arcname] = _read(entry.fd)
            if entry.arcname == "./dir/a.txt":  # the swap a racing process makes
                os.rename(root / "dir", root / "moved")
                os.symlink(outside, root / "dir")
    assert read == {"./dir/a.txt": b"mine", "./dir/b.txt": b"mine", "./dir/c.txt": b"mine"}


def test_a_folder_swapped_before_it_is_opened_is_left_out(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "dir").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"mine")
    (root / "dir" / "b.txt").write_bytes(b"mine")
    outside = _outside(tmp_path)
    kinds: dict[str, str] = {}
    for entry in walk(root):
        kinds[entry.arcname] = entry.kind
        if entry.kind == "file":
            assert _read(entry.fd) == b"mine"
        if entry.arcname == "./a.txt":
            os.rename(root / "dir", root / "moved")  # listed as a folder, now a link
            os.symlink(outside, root / "dir")
    assert "./dir/b.txt" not in kinds
    assert kinds.get("./dir") in (None, "link")


def test_files_swapped_after_the_listing_are_left_out_never_followed_never_waited_on(
    tmp_path: Path,
) -> None:
    """The walk opens each entry as its folder's listing typed it (no ``lstat`` first): a
    file replaced after the listing by a link to a secret, a FIFO (no writer: an open
    without ``O_NONBLOCK`` would wait for ever) or a folder is left out, and its
    neighbours are read."""
    root = tmp_path / "root"
    root.mkdir()
    for name in ("a.txt", "b.txt", "c.txt", "d.txt", "e.txt"):
        (root / name).write_bytes(b"mine")
    outside = _outside(tmp_path)
    read: dict[str, bytes] = {}
    kinds: dict[str, str] = {}
    for entry in walk(root):
        kinds[entry.arcname] = entry.kind
        if entry.kind == "folder" and entry.arcname == ".":  # listed: now swap its files
            for name in ("b.txt", "c.txt", "d.txt"):
                os.unlink(root / name)
            os.symlink(outside / "b.txt", root / "b.txt")
            os.mkfifo(root / "c.txt")
            (root / "d.txt").mkdir()
            (root / "d.txt" / "inner").write_bytes(b"new")
        if entry.kind == "file":
            read[entry.arcname] = _read(entry.fd)
    assert read == {"./a.txt": b"mine", "./e.txt": b"mine"}
    assert set(kinds) == {".", "./a.txt", "./e.txt"}


def test_deep_trees_keep_few_descriptors_and_stop_at_the_path_limit(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    deepest = (MAX_PATH_BYTES - 1) // 2  # "d/" a level, then "f": the last file that fits
    make_chain(root, deepest + 5)
    assert descriptors_into(root) == 0
    most = 0
    levels: list[int] = []
    # counted every 7th step: each count reads the link of every descriptor, and the kernel
    # spells each deep folder's path by climbing its 2,000 levels (every step: 17-25 s a run)
    for step, entry in enumerate(walk(root)):
        if step % 7 == 0:
            most = max(most, descriptors_into(root))
        if entry.kind == "file":
            levels.append(int(_read(entry.fd)))
    assert 0 < most <= FOLDER_DESCRIPTORS + 2  # the folders kept, the root's, a file
    # every file whose path fits MAX_PATH_BYTES ("d" < "f": the deepest comes first)
    assert levels == list(reversed(range(deepest + 1)))
    assert descriptors_into(root) == 0  # every descriptor closed
    copy = tmp_path / "copy"
    copy_tree(root, copy)  # deeper than the host's PATH_MAX with the copy's prefix
    fd = os.open(copy, os.O_RDONLY | os.O_DIRECTORY)
    try:
        path = "/".join(["d"] * deepest + ["f"])
        with open(os.open(path, os.O_RDONLY, dir_fd=fd)) as copied:
            assert copied.read() == str(deepest)
    finally:
        os.close(fd)
    for tree in (root, copy):  # shutil.rmtree (pytest's cleanup too) recursed before 3.13
        remove_tree(tree)
        assert not tree.exists()


def test_remove_tree_deletes_any_depth_and_never_follows_a_link(tmp_path: Path) -> None:
    outside = _outside(tmp_path)
    root = tmp_path / "root"
    root.mkdir()
    make_chain(root, 3000)
    os.symlink(outside, root / "link")
    (root / "sub").mkdir()
    os.symlink(outside / "b.txt", root / "sub" / "file-link")
    remove_tree(root)
    assert not root.exists()
    assert sorted(os.listdir(outside)) == ["b.txt", "c.txt"]  # what links led to stays
    remove_tree(root)  # gone already: nothing to do
    (root).write_text("a file")
    remove_tree(root)
    assert not root.exists()


def test_a_shallow_folder_swapped_while_the_walk_is_deep_ends_its_walk(tmp_path: Path) -> None:
    root = tmp_path / "root"
    chain = root.joinpath(*(["d"] * (FOLDER_DESCRIPTORS + 20)))
    chain.mkdir(parents=True)
    (root / "d" / "z.txt").write_bytes(b"mine")  # read after the walk comes back up
    outside = tmp_path / "outside"
    (outside / "d").mkdir(parents=True)
    (outside / "z.txt").write_bytes(SECRET)
    read: dict[str, bytes] = {}
    swapped = False
    for entry in walk(root):
        if entry.kind == "file":
            read[entry.arcname] = _read(entry.fd)
        if entry.kind == "folder" and len(entry.parts) == FOLDER_DESCRIPTORS + 20 and not swapped:
            # ./d was closed to stay under the budget: put a link in its place
            os.rename(root / "d", root / "moved")
            os.symlink(outside, root / "d")
            swapped = True
    assert swapped
    assert SECRET not in read.values()
    assert "./d/z.txt" not in read  # its folder could not be opened again as itself


def test_copy_tree_copies_contents_modes_times_and_links(tmp_path: Path) -> None:
    source = tmp_path / "source"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "run.sh").write_bytes(b"#!/bin/sh\n")
    (source / "sub" / "run.sh").chmod(0o750)
    os.utime(source / "sub" / "run.sh", ns=(1_000_000_000, 2_000_000_000))
    os.symlink("/data/sub/run.sh", source / "abs")
    os.mkfifo(source / "fifo")
    # nested folders, read-only and timed: written first, then given their modes and times
    (source / "sub" / "ro" / "deeper").mkdir(parents=True)
    (source / "sub" / "ro" / "deeper" / "f").write_bytes(b"in a read-only folder")
    for depth, folder in enumerate((source / "sub" / "ro" / "deeper", source / "sub" / "ro")):
        os.utime(folder, ns=(1_000_000_000, 3_000_000_000 + depth))
        folder.chmod(0o500)
    (source / "sub").chmod(0o705)
    copy = tmp_path / "copy"
    copy_tree(source, copy)
    for depth, folder in enumerate((copy / "sub" / "ro" / "deeper", copy / "sub" / "ro")):
        assert folder.stat().st_mode & 0o777 == 0o500
        assert folder.stat().st_mtime_ns == 3_000_000_000 + depth
    assert (copy / "sub" / "ro" / "deeper" / "f").read_bytes() == b"in a read-only folder"
    for tree in (source, copy):  # writable again, for pytest's cleanup as another user
        for folder in (tree / "sub" / "ro", tree / "sub" / "ro" / "deeper"):
            folder.chmod(0o700)
    assert (copy / "sub" / "run.sh").read_bytes() == b"#!/bin/sh\n"
    assert (copy / "sub" / "run.sh").stat().st_mode & 0o777 == 0o750
    assert (copy / "sub" / "run.sh").stat().st_mtime_ns == 2_000_000_000
    assert (copy / "sub").stat().st_mode & 0o777 == 0o705
    assert os.readlink(copy / "abs") == "/data/sub/run.sh"
    assert not (copy / "fifo").exists()
