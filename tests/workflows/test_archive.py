"""Packing and unpacking tar.gz: reproducible, streaming, and safe against crafted input."""

from __future__ import annotations

import gzip
import io
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klavis_archive import PlannedTree
from tests import crafted
from workflows._dump._archive import (
    CHUNK_SIZE,
    ArchiveLimits,
    iter_archive_files,
    read_snapshot,
)
from workflows._dump._extract import extract_archive, prepare_destination
from workflows._errors import InvalidInputError, SourceChangedError, UnsafeArchiveError
from workflows._pack import pack_to_tempfile, write_archive
from workflows._paths import normalize_member_name
from workflows._seed import ExactReader, SourceFile, plan_directory, plan_mapping
from workflows._tar_common import ARCHIVE_MTIME

# --- helpers -----------------------------------------------------------------------------------


@dataclass
class M:
    """A member of a crafted archive."""

    name: str
    data: bytes = b""
    type: bytes = tarfile.REGTYPE
    linkname: str = ""
    mode: int = 0o644


def craft(*members: M, fmt: int = tarfile.PAX_FORMAT, **tar_kwargs: object) -> bytes:
    """A tar.gz with exactly these members, written without any sanitising."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=fmt, **tar_kwargs) as tar:  # type: ignore[call-overload]
        for m in members:
            info = tarfile.TarInfo(m.name)
            info.type = m.type
            info.linkname = m.linkname
            info.mode = m.mode
            info.mtime = 1_700_000_000
            if m.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
                info.size = len(m.data)
                tar.addfile(info, io.BytesIO(m.data))
            else:
                tar.addfile(info)
    return buf.getvalue()


def pack(files: dict[str, str | bytes], **kwargs: object) -> bytes:
    f, size = pack_to_tempfile(plan_mapping(files), **kwargs)  # type: ignore[arg-type]
    with f:
        data = f.read()
    assert len(data) == size
    return data


def read_tree(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (not following links), by POSIX relative path."""
    out: dict[str, bytes] = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if path.is_symlink():
                continue
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


def listing(root: Path) -> dict[str, object]:
    """A comparable picture of a tree: files with contents, links with targets, folders."""
    out: dict[str, object] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = path.read_bytes()
    return out


def members_of(data: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return tar.getmembers()


# --- member names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [(".", None), ("./", None), ("./a/b", "a/b"), ("a/b/", "a/b"), ("a//b", "a/b"), ("a", "a")],
)
def test_member_name_normalized(name: str, expected: str | None) -> None:
    assert normalize_member_name(name) == expected


@pytest.mark.parametrize("name", ["/etc/passwd", "../x", "a/../../x", "a/..", "a\x00b", ""])
def test_member_name_refused(name: str) -> None:
    with pytest.raises(UnsafeArchiveError) as info:
        normalize_member_name(name)
    assert info.value.member == name


# --- packing -----------------------------------------------------------------------------------


def test_pack_is_a_standard_reproducible_tar_gz() -> None:
    files: dict[str, str | bytes] = {"b.txt": "bee", "a/x.bin": b"\x00\xff", "é/ü.txt": "u"}
    data = pack(files)
    assert data == pack(dict(reversed(list(files.items()))))
    # gzip header: no file name flag, mtime 0
    assert data[:3] == b"\x1f\x8b\x08"
    assert data[3] == 0
    assert data[4:8] == b"\x00\x00\x00\x00"
    members = members_of(data)
    assert [m.name for m in members] == ["a/x.bin", "b.txt", "é/ü.txt"]  # no implied folders
    for m in members:
        assert m.isreg()
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) == (
            ARCHIVE_MTIME,
            0,
            0,
            "",
            "",
            0o644,
        )


def test_pack_directory_ignores_mtimes_and_owners(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "d").mkdir(parents=True)
    (root / "d" / "f.txt").write_text("hello")
    (root / "run").write_text("#!/bin/sh")
    (root / "run").chmod(0o700)
    (root / "empty").mkdir()
    (root / "lnk").symlink_to("d/f.txt")
    first = pack_to_tempfile(plan_directory(root))[0].read()
    for p in (root / "d" / "f.txt", root / "run", root / "d"):
        os.utime(p, (1_000_000, 1_000_000))
    (root / "d" / "f.txt").chmod(0o600)
    second = pack_to_tempfile(plan_directory(root))[0].read()
    assert first == second
    by_name = {m.name: m for m in members_of(first)}
    assert by_name["run"].mode == 0o755
    assert by_name["d/f.txt"].mode == 0o644
    assert by_name["empty"].isdir()
    assert by_name["lnk"].issym()
    assert by_name["lnk"].linkname == "d/f.txt"
    assert "d" not in by_name


def test_pack_directory_can_keep_mtimes_to_the_sub_second(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "empty").mkdir(parents=True)
    (root / "f.txt").write_text("hello")
    (root / "lnk").symlink_to("f.txt")
    os.utime(root / "f.txt", ns=(1_600_000_000_250_000_000, 1_600_000_000_250_000_000))
    os.utime(root / "empty", (1_500_000_000, 1_500_000_000))
    os.utime(root / "lnk", (1_400_000_000, 1_400_000_000), follow_symlinks=False)
    by_name = {m.name: m for m in members_of(pack_to_tempfile(plan_directory(root))[0].read())}
    assert {m.mtime for m in by_name.values()} == {ARCHIVE_MTIME}
    kept = pack_to_tempfile(plan_directory(root, preserve_mtime=True))[0].read()
    by_name = {m.name: m for m in members_of(kept)}
    assert by_name["f.txt"].mtime == 1_600_000_000.25  # a PAX header carries the fraction
    assert by_name["empty"].mtime == 1_500_000_000
    assert by_name["lnk"].mtime == 1_400_000_000


def test_threaded_and_inline_compression_hold_the_same_tar() -> None:
    entries = plan_mapping({f"f{i}": os.urandom(1000) * (i + 1) for i in range(30)})
    inline, threaded = io.BytesIO(), io.BytesIO()
    write_archive(entries, inline, threads=0)
    write_archive(entries, threaded, threads=1)
    assert gzip.decompress(inline.getvalue()) == gzip.decompress(threaded.getvalue())


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_compress_levels(level: int) -> None:
    out = io.BytesIO()
    n = write_archive(plan_mapping({"a": "x" * 10_000}), out, compresslevel=level)
    assert n == len(out.getvalue())
    assert read_snapshot(io.BytesIO(out.getvalue()))["a"] == b"x" * 10_000


@pytest.mark.parametrize("level", [-1, 4, 9])
def test_bad_compress_level(level: int) -> None:
    with pytest.raises(InvalidInputError, match="compresslevel"):
        write_archive(plan_mapping({"a": "x"}), io.BytesIO(), compresslevel=level)


def test_write_archive_returns_compressed_size_and_leaves_out_open() -> None:
    out = io.BytesIO()
    n = write_archive(plan_mapping({"a": "x" * 5000}), out)
    assert not out.closed
    assert n == len(out.getvalue()) > 0


def test_progress_counts_input_bytes_in_chunks(tmp_path: Path) -> None:
    big = tmp_path / "p" / "big.bin"
    big.parent.mkdir()
    big.write_bytes(os.urandom(2 * CHUNK_SIZE + 123))
    (tmp_path / "p" / "small").write_bytes(b"abc")
    calls: list[int] = []
    pack_to_tempfile(plan_directory(tmp_path / "p"), progress=calls.append)[0].close()
    assert sum(calls) == 2 * CHUNK_SIZE + 123 + 3
    assert max(calls) <= CHUNK_SIZE
    assert len(calls) >= 4


@pytest.mark.parametrize("now", [10, 1000], ids=["shrank", "grew"])
def test_a_file_whose_size_changed_since_planned_is_refused(tmp_path: Path, now: int) -> None:
    root = tmp_path / "p"
    root.mkdir()
    (root / "f").write_bytes(b"x" * 100)
    plan = plan_directory(root)
    (root / "f").write_bytes(b"y" * now)  # the same file (inode), another size
    with pytest.raises(SourceChangedError, match=f"size changed from 100 to {now:,} bytes") as info:
        pack_to_tempfile(plan)
    assert info.value.path == str(root / "f")


def test_a_file_that_shrinks_while_it_is_read_is_refused() -> None:
    reader = ExactReader(io.BytesIO(b"x" * 10), "f", 100, None)
    with pytest.raises(SourceChangedError, match="got shorter while it was being packed"):
        reader.read(100)


def test_the_reader_stops_at_the_planned_size() -> None:
    seen: list[int] = []
    reader = ExactReader(io.BytesIO(b"x" * 100), "f", 10, seen.append)
    assert reader.read() == b"x" * 10
    assert reader.read(5) == b""
    assert seen == [10]


def test_duplicate_entry_names_refused() -> None:
    entries = [SourceFile("a", 1, 0o644, data=b"1"), SourceFile("a", 1, 0o644, data=b"2")]
    with pytest.raises(InvalidInputError, match="'a'"):
        write_archive(entries, io.BytesIO())


def test_pack_to_tempfile_spools_to_disk_and_rewinds() -> None:
    f, size = pack_to_tempfile(plan_mapping({"r": os.urandom(200_000)}), spool_bytes=1024)
    with f:
        assert f.tell() == 0
        assert f._rolled  # type: ignore[attr-defined]  # on disk above the threshold
        assert len(f.read()) == size
    f, size = pack_to_tempfile(plan_mapping({"r": "small"}))
    with f:
        assert not f._rolled  # type: ignore[attr-defined]
        assert len(f.read()) == size


@pytest.mark.skipif(shutil.which("tar") is None, reason="needs the tar program")
def test_gnu_tar_reads_our_archives(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {"a.txt": "a", "d/é.txt": "e", "long/" + "n" * 150: "x"}
    (tmp_path / "seed.tar.gz").write_bytes(pack(files))
    (tmp_path / "out").mkdir()
    subprocess.run(
        ["tar", "-xzf", str(tmp_path / "seed.tar.gz"), "-C", str(tmp_path / "out")], check=True
    )
    assert read_tree(tmp_path / "out") == {k: v.encode() for k, v in files.items()}  # type: ignore[union-attr]


# --- reading valid archives --------------------------------------------------------------------


SERVICE_STYLE = (
    M(".", type=tarfile.DIRTYPE, mode=0o755),
    M("./config.json", b'{"a": 1}'),
    M("./d/", type=tarfile.DIRTYPE, mode=0o755),
    M("./d/run.sh", b"#!/bin/sh\n", mode=0o755),
    M("./d/link", type=tarfile.SYMTYPE, linkname="../config.json"),
    M("./hard", type=tarfile.LNKTYPE, linkname="./config.json"),
)


def test_read_snapshot_of_a_service_style_dump() -> None:
    snap = read_snapshot(io.BytesIO(craft(*SERVICE_STYLE)))
    assert dict(snap) == {
        "config.json": b'{"a": 1}',
        "d/run.sh": b"#!/bin/sh\n",
        "hard": b'{"a": 1}',
    }
    assert snap.is_executable("d/run.sh")
    assert not snap.is_executable("config.json")


def test_extract_a_service_style_dump(tmp_path: Path) -> None:
    progress: list[int] = []
    names = extract_archive(
        io.BytesIO(craft(*SERVICE_STYLE)), tmp_path / "out", progress=progress.append
    )
    assert names == ["config.json", "d/run.sh", "hard"]
    out = tmp_path / "out"
    assert read_tree(out) == {
        "config.json": b'{"a": 1}',
        "d/run.sh": b"#!/bin/sh\n",
        "hard": b'{"a": 1}',
    }
    assert os.readlink(out / "d" / "link") == "../config.json"
    assert (out / "d" / "link").read_bytes() == b'{"a": 1}'
    assert os.access(out / "d" / "run.sh", os.X_OK)
    assert not os.access(out / "config.json", os.X_OK)
    assert (out / "config.json").stat().st_mtime == 1_700_000_000
    assert not (out / "hard").samefile(out / "config.json")  # a copy, not a link
    assert sum(progress) == 8 + 10 + 8
    assert sorted(os.listdir(tmp_path)) == ["out"]  # no temporary folder left


def test_new_dest_gets_ordinary_permissions(tmp_path: Path) -> None:
    (tmp_path / "reference").mkdir()
    extract_archive(io.BytesIO(pack({"a": "1"})), tmp_path / "out")
    mode = (tmp_path / "out").stat().st_mode & 0o7777
    assert mode == (tmp_path / "reference").stat().st_mode & 0o7777


class _ReadOnlyStream:
    """A stream that can only be read, like an HTTP response body."""

    def __init__(self, data: bytes) -> None:
        self._buf = io.BytesIO(data)

    def read(self, n: int = -1) -> bytes:
        return self._buf.read(n)


def test_reads_from_a_non_seekable_stream(tmp_path: Path) -> None:
    data = pack({"a": "1", "b/c": b"2" * 100_000})
    snap = read_snapshot(_ReadOnlyStream(data))  # type: ignore[arg-type]
    assert dict(snap) == {"a": b"1", "b/c": b"2" * 100_000}
    assert extract_archive(_ReadOnlyStream(data), tmp_path / "o") == ["a", "b/c"]  # type: ignore[arg-type]


def _tar_cut_inside_data() -> bytes:
    """A whole gzip stream of a tar that stops in the middle of a member's contents."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("a.bin")
        info.size = 10_000
        tar.addfile(info, io.BytesIO(b"a" * 10_000))
    return gzip.compress(buffer.getvalue()[: 512 + 5_000])


def test_a_tar_cut_inside_a_members_contents_is_not_valid(tmp_path: Path) -> None:
    with pytest.raises(UnsafeArchiveError, match=r"not a valid tar\.gz"):
        read_snapshot(io.BytesIO(_tar_cut_inside_data()))
    with pytest.raises(UnsafeArchiveError, match=r"not a valid tar\.gz"):
        extract_archive(io.BytesIO(_tar_cut_inside_data()), tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_the_archive_is_read_forwards_only() -> None:
    from klavis_archive import ForwardReader

    reader = ForwardReader(io.BytesIO(bytes(range(256)) * 40))
    assert reader.seekable()
    assert reader.read(10) == bytes(range(10))
    assert reader.seek(300) == 300 == reader.tell()
    assert reader.read(2) == bytes((300 % 256, 301 % 256))
    with pytest.raises(io.UnsupportedOperation):
        reader.seek(0)
    with pytest.raises(io.UnsupportedOperation):
        reader.seek(0, io.SEEK_END)
    assert reader.seek(50_000) == 10_240  # past the end: stops there
    assert reader.read(1) == b""
    with pytest.raises(tarfile.ReadError):  # never all at once
        reader.read(-1)


def test_the_forward_reader_gives_the_bytes_in_order_whatever_the_read_sizes() -> None:
    """Reads under its block come from the block read ahead, bigger ones straight through."""
    import random

    from klavis_archive import ForwardReader
    from klavis_archive._streams import _FORWARD_BLOCK

    data = os.urandom(5 * _FORWARD_BLOCK + 123)
    rng = random.Random(7)
    reader = ForwardReader(io.BytesIO(data))
    got = b""
    while True:
        size = rng.choice((0, 1, 511, 512, _FORWARD_BLOCK - 1, _FORWARD_BLOCK, 3 * _FORWARD_BLOCK))
        if rng.random() < 0.2:
            reader.seek(reader.tell() + size)
            got += data[len(got) : len(got) + size]
            continue
        chunk = reader.read(size)
        assert len(chunk) == min(size, len(data) - len(got))
        got += chunk
        assert reader.tell() == len(got)
        if len(got) >= len(data):
            break
    assert got == data
    assert reader.read(10) == b""


def test_a_members_contents_read_after_the_next_member_are_refused() -> None:
    items = iter_archive_files(io.BytesIO(pack({"a": "A" * 10, "b": "B" * 10})))
    _, _, first = next(items)
    _, _, second = next(items)
    assert first is not None
    assert second is not None
    with pytest.raises(UnsafeArchiveError, match="read after the next member"):
        first.read()
    assert second.read() == b"B" * 10


def test_extract_from_a_path_and_into_new_parents(tmp_path: Path) -> None:
    (tmp_path / "a.tar.gz").write_bytes(pack({"x/y.txt": "y"}))
    assert extract_archive(tmp_path / "a.tar.gz", tmp_path / "deep" / "er" / "out") == ["x/y.txt"]
    assert extract_archive(str(tmp_path / "a.tar.gz"), str(tmp_path / "o2")) == ["x/y.txt"]
    assert read_tree(tmp_path / "deep" / "er" / "out") == {"x/y.txt": b"y"}
    assert read_snapshot(tmp_path / "a.tar.gz")["x/y.txt"] == b"y"


def test_later_duplicate_member_wins() -> None:
    data = craft(M("a", b"first"), M("./a", b"second"))
    assert read_snapshot(io.BytesIO(data))["a"] == b"second"


def test_file_replacing_a_symlink_does_not_write_through_it(tmp_path: Path) -> None:
    data = craft(
        M("target", b"keep me"), M("l", type=tarfile.SYMTYPE, linkname="target"), M("l", b"new")
    )
    extract_archive(io.BytesIO(data), tmp_path / "out")
    assert (tmp_path / "out" / "target").read_bytes() == b"keep me"
    assert not (tmp_path / "out" / "l").is_symlink()
    assert (tmp_path / "out" / "l").read_bytes() == b"new"
    assert dict(read_snapshot(io.BytesIO(data))) == {"target": b"keep me", "l": b"new"}


def test_symlink_replacing_a_file_drops_the_entry() -> None:
    data = craft(M("t", b"t"), M("a", b"file"), M("a", type=tarfile.SYMTYPE, linkname="t"))
    assert dict(read_snapshot(io.BytesIO(data))) == {"t": b"t"}


def test_symlink_chain_that_stays_inside_is_fine(tmp_path: Path) -> None:
    data = craft(
        M("d/", type=tarfile.DIRTYPE),
        M("d/f", b"f"),
        M("l1", type=tarfile.SYMTYPE, linkname="d"),
        M("l2", type=tarfile.SYMTYPE, linkname="l1/f"),
        M("d/up", type=tarfile.SYMTYPE, linkname=".."),
        M("loop", type=tarfile.SYMTYPE, linkname="loop"),
    )
    assert extract_archive(io.BytesIO(data), tmp_path / "out") == ["d/f"]
    assert (tmp_path / "out" / "l2").read_bytes() == b"f"


def test_extract_merges_into_existing_dest(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (dest / "sub").mkdir(parents=True)
    (dest / "keep.txt").write_text("mine")
    (dest / "same.txt").write_text("old")
    (dest / "sub" / "old.txt").write_text("old")
    outside = tmp_path / "outside"
    outside.mkdir()
    (dest / "linked").symlink_to(outside)  # a folder member of this name replaces the link
    (dest / "flink").symlink_to(outside / "victim")  # a file member replaces the link
    data = craft(
        M("same.txt", b"new"), M("sub/new.txt", b"n"), M("linked/x", b"x"), M("flink", b"f")
    )
    extract_archive(io.BytesIO(data), dest)
    assert read_tree(dest) == {
        "keep.txt": b"mine",
        "same.txt": b"new",
        "sub/old.txt": b"old",
        "sub/new.txt": b"n",
        "linked/x": b"x",
        "flink": b"f",
    }
    assert not (dest / "linked").is_symlink()
    assert os.listdir(outside) == []
    assert sorted(os.listdir(tmp_path)) == ["dest", "outside"]


def test_extract_refuses_replacing_a_folder_with_a_file(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (dest / "x").mkdir(parents=True)
    (dest / "x" / "inner").write_text("i")
    before = listing(dest)
    with pytest.raises(InvalidInputError, match="folder"):
        extract_archive(io.BytesIO(craft(M("a", b"a"), M("x", b"file"))), dest)
    assert listing(dest) == before
    assert sorted(os.listdir(tmp_path)) == ["dest"]


def test_extract_into_a_file_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(InvalidInputError, match="not a folder"):
        extract_archive(io.BytesIO(pack({"a": "1"})), tmp_path / "f")


def test_iter_archive_files_yields_normalized_names() -> None:
    seen = [
        (n, i.type, r.read() if r else None)
        for n, i, r in iter_archive_files(io.BytesIO(craft(*SERVICE_STYLE)))
    ]
    assert seen == [
        ("config.json", tarfile.REGTYPE, b'{"a": 1}'),
        ("d", tarfile.DIRTYPE, None),
        ("d/run.sh", tarfile.REGTYPE, b"#!/bin/sh\n"),
        ("hard", tarfile.LNKTYPE, None),
        ("d/link", tarfile.SYMTYPE, None),  # links come last, once all were checked
    ]


def test_limits_that_fit_pass() -> None:
    data = craft(M("a", b"123"), M("b", b"456"))
    limits = ArchiveLimits(max_members=2, max_total_bytes=6, max_member_bytes=3)
    assert len(read_snapshot(io.BytesIO(data), limits=limits)) == 2


# --- crafted malicious or broken archives -------------------------------------------------------


def _valid() -> bytes:
    return pack({"a.txt": "a" * 5000, "b/c.txt": os.urandom(5000)})


def _flip_middle(data: bytes) -> bytes:
    mid = len(data) // 2
    return data[:mid] + bytes(b ^ 0xFF for b in data[mid : mid + 64]) + data[mid + 64 :]


BAD: dict[str, tuple[bytes | None, ArchiveLimits, str | None]] = {}


def bad(name: str, data: bytes, member: str | None, limits: ArchiveLimits | None = None) -> None:
    BAD[name] = (data, limits or ArchiveLimits(), member)


bad("absolute", craft(M("ok", b"1"), M("/tmp/evil", b"x")), "/tmp/evil")
bad("dotdot", craft(M("../evil", b"x")), "../evil")
bad("dotdot-inner", craft(M("a/../../evil", b"x")), "a/../../evil")
bad("symlink-absolute", craft(M("l", type=tarfile.SYMTYPE, linkname="/etc")), "l")
bad("symlink-up", craft(M("d/l", type=tarfile.SYMTYPE, linkname="../../outside")), "d/l")
bad("symlink-empty", craft(M("l", type=tarfile.SYMTYPE, linkname="")), "l")
bad(
    "symlink-chain",
    craft(
        M("sub/l", type=tarfile.SYMTYPE, linkname=".."),
        M("l2", type=tarfile.SYMTYPE, linkname="sub/l/.."),
    ),
    "l2",
)
bad(
    "symlink-chain-defined-later",
    craft(
        M("l2", type=tarfile.SYMTYPE, linkname="sub/l/.."),
        M("sub/l", type=tarfile.SYMTYPE, linkname=".."),
    ),
    "l2",
)
bad("hardlink-up", craft(M("h", type=tarfile.LNKTYPE, linkname="../outside")), "h")
bad("hardlink-absolute", craft(M("h", type=tarfile.LNKTYPE, linkname="/etc/passwd")), "h")
bad("hardlink-unknown", craft(M("h", type=tarfile.LNKTYPE, linkname="nothere")), "h")
bad(
    "hardlink-to-symlink",
    craft(
        M("t", b"t"),
        M("l", type=tarfile.SYMTYPE, linkname="t"),
        M("h", type=tarfile.LNKTYPE, linkname="l"),
    ),
    "h",
)
bad("chardev", craft(M("dev", type=tarfile.CHRTYPE)), "dev")
bad("blockdev", craft(M("dev", type=tarfile.BLKTYPE)), "dev")
bad("fifo", craft(M("p", type=tarfile.FIFOTYPE)), "p")
bad(
    "through-symlink",
    craft(
        M("sub/", type=tarfile.DIRTYPE),
        M("d", type=tarfile.SYMTYPE, linkname="sub"),
        M("d/x", b"x"),
    ),
    "d/x",
)
bad(
    "through-symlink-out",
    craft(M("d", type=tarfile.SYMTYPE, linkname="."), M("d/x", b"x")),
    "d/x",
)
bad("parent-is-file", craft(M("a", b"a"), M("a/b", b"b")), "a/b")
bad("folder-over-file", craft(M("a", b"a"), M("a/", type=tarfile.DIRTYPE)), "a")
bad("file-over-folder", craft(M("a/", type=tarfile.DIRTYPE), M("a", b"a")), "a")
bad("root-is-a-file", craft(M(".", b"x")), ".")
bad(
    "too-many-members",
    craft(*(M(f"f{i}", b"") for i in range(4))),
    "f3",
    ArchiveLimits(max_members=3),
)
bad(
    "too-many-bytes",
    craft(M("a", b"123456"), M("b", b"123456")),
    "b",
    ArchiveLimits(max_total_bytes=10),
)
bad("member-too-big", craft(M("a", b"123456")), "a", ArchiveLimits(max_member_bytes=5))
bad(
    "hardlink-amplification",
    craft(
        M("a", b"123456"),
        M("h1", type=tarfile.LNKTYPE, linkname="a"),
        M("h2", type=tarfile.LNKTYPE, linkname="a"),
    ),
    "h2",
    ArchiveLimits(max_total_bytes=15),
)
bad("huge-pax-header", craft(M("a", b"a"), pax_headers={"comment": "x" * (2 * 1024 * 1024)}), None)
bad("negative-size", crafted.tar_gz([crafted.negative_size("n")]), "n")
bad(
    "negative-size-pax-header",
    crafted.tar_gz([crafted.negative_size("././@PaxHeader", tarfile.XHDTYPE)]),
    "././@PaxHeader",
)
bad("negative-size-pax-record", crafted.tar_gz([crafted.pax_file("n", {"size": "-1"}, b"x")]), "n")
bad("sparse-gnu", crafted.tar_gz([crafted.sparse_file("s", 2**30)]), "s")
bad("sparse-pax-0.0", crafted.tar_gz([crafted.pax_sparse_file("s", 2**30, "0.0")]), "s")
bad("sparse-pax-0.1", crafted.tar_gz([crafted.pax_sparse_file("s", 2**30, "0.1")]), "s")
bad("sparse-pax-1.0", crafted.tar_gz([crafted.pax_sparse_file("s", 2**30, "1.0")]), "s")
bad(
    "hardlink-expansion",
    crafted.tar_gz(
        [crafted.zeros_file("z", 8 * 2**20), *(crafted.hardlink(f"h{i}", "z") for i in range(9))],
        compresslevel=9,
    ),
    "h0",  # 8 MiB of zeros is ~8 KiB compressed: its first copy passes 2000:1
)
# chains of extended headers (tarfile reads them by recursion) and global headers (tarfile keeps
# their records): a 24 KB archive of 3,000 raised a raw RecursionError; 20 global headers of
# 1 MiB with distinct keys grew the client by 278 MiB
for _kind, _label in (
    (tarfile.XHDTYPE, "x"),
    (tarfile.XGLTYPE, "g"),
    (tarfile.GNUTYPE_LONGNAME, "L"),
):
    bad(
        f"header-chain-{_label}-9",
        crafted.tar_gz(
            [crafted.file("ok", "1"), *crafted.header_chain(9, _kind), crafted.file("a")]
        ),
        None,
    )
    bad(
        f"header-chain-{_label}-3000",
        crafted.tar_gz([*crafted.header_chain(3000, _kind), crafted.file("a")]),
        None,
    )
bad(
    "header-chain-bytes",
    crafted.tar_gz([*(crafted.extended_header(400 * 1024) for _ in range(3)), crafted.file("a")]),
    None,
)
bad(
    "global-headers-total",
    crafted.tar_gz(
        [
            crafted.pax_global_header(600 * 1024),
            crafted.file("a", "1"),
            crafted.pax_global_header(600 * 1024, first_key=10**6),
            crafted.file("b", "2"),
        ]
    ),
    None,
)
bad("symlink-absolute-data-not-a-dump", craft(M("l", type=tarfile.SYMTYPE, linkname="/data")), "l")
bad("not-gzip", b"hello, this is not gzip at all", None)
bad("empty", b"", None)
bad("plain-tar", gzip.decompress(_valid()), None)
bad("gzip-of-garbage", gzip.compress(os.urandom(4096)), None)
bad("truncated", _valid()[: len(_valid()) // 2], None)
bad("corrupt", _flip_middle(_valid()), None)


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A destination with content, inside a parent folder; checks both are untouched after."""
    parent = tmp_path / "parent"
    dest = parent / "dest"
    dest.mkdir(parents=True)
    (dest / "existing.txt").write_text("existing")
    (dest / "sub").mkdir()
    (dest / "sub" / "kept").write_text("kept")
    before_dest = listing(dest)
    before_tmp = listing(tmp_path)
    yield parent, dest
    assert listing(dest) == before_dest
    assert listing(tmp_path) == before_tmp


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_archive_refused_by_extract(case: str, guarded: tuple[Path, Path]) -> None:
    data, limits, member = BAD[case]
    assert data is not None
    with pytest.raises(UnsafeArchiveError) as info:
        extract_archive(io.BytesIO(data), guarded[1], limits=limits)
    if member is not None:
        assert info.value.member == member
        assert repr(member) in str(info.value)
    else:
        assert info.value.member is None


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_archive_refused_into_new_dest(case: str, tmp_path: Path) -> None:
    data, limits, _ = BAD[case]
    assert data is not None
    with pytest.raises(UnsafeArchiveError):
        extract_archive(io.BytesIO(data), tmp_path / "new", limits=limits)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_archive_refused_by_read_snapshot(case: str) -> None:
    data, limits, member = BAD[case]
    assert data is not None
    with pytest.raises(UnsafeArchiveError) as info:
        read_snapshot(io.BytesIO(data), limits=limits)
    assert info.value.member == member


@pytest.mark.parametrize(
    ("case", "fragment"),
    [
        ("header-chain-x-9", "more than 8 extended headers in a row"),
        ("header-chain-L-3000", "more than 8 extended headers in a row"),
        ("header-chain-bytes", "bytes of extended headers in a row"),
        ("global-headers-total", "bytes of global headers"),
    ],
)
def test_header_chains_and_global_headers_are_capped(case: str, fragment: str) -> None:
    data, _, _ = BAD[case]
    assert data is not None
    with pytest.raises(UnsafeArchiveError, match=fragment):
        read_snapshot(io.BytesIO(data))


def test_a_real_chain_of_extended_headers_passes() -> None:
    # the worst real case: a global header, then a PAX header, a long link and a long name
    data = crafted.tar_gz(
        [
            crafted.pax_global_header(2000),
            crafted.extended_header(300, tarfile.XHDTYPE),
            crafted.extended_header(300, tarfile.GNUTYPE_LONGLINK),
            crafted.extended_header(300, tarfile.GNUTYPE_LONGNAME),
            crafted.file("after", "x"),
            *(crafted.file(f"f{i}", "y") for i in range(3)),
        ]
    )
    assert len(read_snapshot(io.BytesIO(data))) == 4


def test_a_recursion_error_while_reading_is_an_unsafe_archive(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # without the chain cap, tarfile's own recursion is what fails: never a raw RecursionError
    from klavis_archive import _limits

    monkeypatch.setattr(_limits, "MAX_HEADER_CHAIN", 10**9)
    data = BAD["header-chain-x-3000"][0]
    assert data is not None
    # 3,000 headers recurse deeper than CPython's default limit, which this test assumes
    # (whatever ran before it in this process)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        with pytest.raises(UnsafeArchiveError, match="nests its headers too deeply"):
            read_snapshot(io.BytesIO(data))
        with pytest.raises(UnsafeArchiveError, match="nests its headers too deeply"):
            extract_archive(io.BytesIO(data), tmp_path / "out")
    finally:
        sys.setrecursionlimit(limit)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "case", ["not-gzip", "empty", "truncated", "corrupt", "plain-tar", "gzip-of-garbage"]
)
def test_corrupt_data_says_not_a_valid_tar_gz(case: str) -> None:
    data, _, _ = BAD[case]
    assert data is not None
    with pytest.raises(UnsafeArchiveError, match=r"not a valid tar\.gz"):
        read_snapshot(io.BytesIO(data))


# --- properties --------------------------------------------------------------------------------

_SEGMENT_CHARS = st.sampled_from([*"abcxyzABZ019_-. ", "é", "ß", "中", "ü", "😀", "~"])
_SEGMENT = st.text(_SEGMENT_CHARS, min_size=1, max_size=12).filter(lambda s: s not in (".", ".."))
_PATH = st.lists(_SEGMENT, min_size=1, max_size=4).map("/".join)
_CONTENT = st.one_of(st.binary(max_size=3000), st.text(max_size=300))


def _drop_folder_clashes(files: dict[str, str | bytes]) -> dict[str, str | bytes]:
    parents = {p.rsplit("/", i)[0] for p in files for i in range(1, p.count("/") + 1)}
    return {k: v for k, v in files.items() if k not in parents}


FILE_MAPPINGS = st.dictionaries(_PATH, _CONTENT, max_size=12).map(_drop_folder_clashes)


def _as_bytes(files: dict[str, str | bytes]) -> dict[str, bytes]:
    return {k: v.encode() if isinstance(v, str) else v for k, v in files.items()}


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=FILE_MAPPINGS)
def test_pack_then_read_snapshot_is_identity(files: dict[str, str | bytes]) -> None:
    f, _ = pack_to_tempfile(plan_mapping(files))
    with f, read_snapshot(f) as snap:
        assert dict(snap) == _as_bytes(files)
        assert list(snap) == sorted(files)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=FILE_MAPPINGS)
def test_pack_then_extract_is_identity(files: dict[str, str | bytes]) -> None:
    f, _ = pack_to_tempfile(plan_mapping(files))
    with f, tempfile.TemporaryDirectory() as tmp:
        names = extract_archive(f, Path(tmp) / "out")
        assert names == sorted(files)
        assert read_tree(Path(tmp) / "out") == _as_bytes(files)


@settings(max_examples=30, deadline=None)
@given(files=FILE_MAPPINGS)
def test_packing_is_deterministic(files: dict[str, str | bytes]) -> None:
    assert pack(files) == pack(dict(sorted(files.items(), reverse=True)))


# --- expansion ---------------------------------------------------------------------------------


def test_the_expansion_ratio_counts_bytes_written_not_declared() -> None:
    # 32 MiB of zeros is ~1000:1, as far as deflate goes: under 2000:1, so it passes whole
    data = crafted.tar_gz([crafted.zeros_file("z", 32 * 2**20)], compresslevel=9)
    with read_snapshot(io.BytesIO(data)) as snap:
        assert snap.total_bytes == 32 * 2**20
    # a tighter ratio stops it while it is being read, naming it
    with pytest.raises(UnsafeArchiveError, match="max_expansion_ratio") as info:
        read_snapshot(io.BytesIO(data), limits=ArchiveLimits(max_expansion_ratio=100))
    assert info.value.member == "z"


def test_small_archives_are_never_judged_by_their_ratio() -> None:
    data = crafted.tar_gz(
        [crafted.zeros_file("z", 2**20), *(crafted.hardlink(f"h{i}", "z") for i in range(6))],
        compresslevel=9,
    )
    assert len(read_snapshot(io.BytesIO(data))) == 7  # 7 MiB written, under the 8 MiB floor


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_members": "x"}, "max_members"),
        ({"max_members": 0}, "max_members"),
        ({"max_members": True}, "max_members"),
        ({"max_members": None}, "max_members"),
        ({"max_members": 1.5}, "max_members"),
        ({"max_total_bytes": -1}, "max_total_bytes"),
        ({"max_total_bytes": "10"}, "max_total_bytes"),
        ({"max_member_bytes": 0}, "max_member_bytes"),
        ({"max_member_bytes": "big"}, "max_member_bytes"),
        ({"max_archive_bytes": 0}, "max_archive_bytes"),
        ({"max_archive_bytes": 2.5}, "max_archive_bytes"),
        ({"max_expansion_ratio": 1}, "max_expansion_ratio"),
        ({"max_expansion_ratio": 0.5}, "max_expansion_ratio"),
        ({"max_expansion_ratio": float("nan")}, "max_expansion_ratio"),
        ({"max_expansion_ratio": "2000"}, "max_expansion_ratio"),
        ({"max_expansion_ratio": True}, "max_expansion_ratio"),
    ],
    ids=repr,
)
def test_archive_limits_are_checked_when_made(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInputError, match=f"ArchiveLimits.{field} must be"):
        ArchiveLimits(**kwargs)  # type: ignore[arg-type]


def test_archive_limits_accept_what_they_document() -> None:
    limits = ArchiveLimits(
        max_members=1,
        max_total_bytes=1,
        max_member_bytes=None,
        max_expansion_ratio=None,
        max_archive_bytes=None,
    )
    assert limits.max_members == 1
    assert ArchiveLimits(max_expansion_ratio=1.5, max_member_bytes=7).max_member_bytes == 7
    assert ArchiveLimits(max_expansion_ratio=3).max_expansion_ratio == 3


def test_the_derived_download_cap_is_loose_unless_members_are_capped_too() -> None:
    # what the ArchiveLimits docstring says: each allowed member may carry 10,751 bytes of tar
    # overhead, so 10 MiB of files under the default member count still admit ~2.3 GiB
    loose = ArchiveLimits(max_total_bytes=10 * 2**20).archive_bytes_cap()
    assert 2.2 * 2**30 < loose < 2.4 * 2**30
    assert ArchiveLimits(max_total_bytes=10 * 2**20, max_members=100).archive_bytes_cap() < (
        13 * 2**20
    )


def test_archive_bytes_cap_is_derived_from_the_limits() -> None:
    small = ArchiveLimits(max_total_bytes=2**20, max_members=10)
    assert 2**20 < small.archive_bytes_cap() < 2 * 2**20
    assert ArchiveLimits(max_archive_bytes=5).archive_bytes_cap() == 5
    assert ArchiveLimits().archive_bytes_cap() > ArchiveLimits().max_total_bytes
    # an archive at the limits, of incompressible data with long names, fits under its cap
    files: dict[str, str | bytes] = {f"{'n' * 200}/{i:03}": os.urandom(10_000) for i in range(10)}
    data = pack(files, compresslevel=0)
    limits = ArchiveLimits(max_total_bytes=100_000, max_members=10)
    assert len(read_snapshot(io.BytesIO(data), limits=limits)) == 10
    assert len(data) <= limits.archive_bytes_cap()


# --- links of a workspace dump -----------------------------------------------------------------

WORKSPACE = crafted.tar_gz(
    [
        crafted.folder("."),
        crafted.file("./a.txt", "A"),
        crafted.folder("./sub"),
        crafted.file("./sub/b.txt", "B"),
        crafted.symlink("./link", "/data/a.txt"),
        crafted.symlink("./sub/root", "/data"),
        crafted.symlink("./sub/up", "../a.txt"),
        crafted.symlink("./py", "/usr/bin/python3"),
        crafted.symlink("./python", "py"),
        crafted.symlink("./esc", "sub/../.."),
    ]
)
KEPT = {"link": "/data/a.txt", "sub/root": "/data", "sub/up": "../a.txt"}
SKIPPED = {"esc": "sub/../..", "py": "/usr/bin/python3", "python": "py"}


def test_a_dump_keeps_links_into_data_and_skips_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="workflows"):
        snap = read_snapshot(io.BytesIO(WORKSPACE), workspace_links=True)
    assert dict(snap) == {"a.txt": b"A", "sub/b.txt": b"B"}
    assert dict(snap.links) == KEPT
    assert dict(snap.skipped_links) == SKIPPED
    assert "left out 3 symlinks" in caplog.text
    assert "'py' -> '/usr/bin/python3'" in caplog.text


def test_other_archives_still_refuse_links_leading_out() -> None:
    with pytest.raises(UnsafeArchiveError, match="leads outside"):
        read_snapshot(io.BytesIO(WORKSPACE))


def test_extracting_a_dump_writes_relative_links(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="workflows"):
        extract_archive(io.BytesIO(WORKSPACE), tmp_path / "out", workspace_links=True)
    out = tmp_path / "out"
    assert listing(out) == {
        "a.txt": b"A",
        "sub": "dir",
        "sub/b.txt": b"B",
        "link": ("link", "a.txt"),
        "sub/root": ("link", ".."),
        "sub/up": ("link", "../a.txt"),
    }
    assert (out / "sub" / "root" / "link").read_text() == "A"
    assert "left out 3 symlinks" in caplog.text
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_a_skipped_link_replaces_an_earlier_file_of_its_name(tmp_path: Path) -> None:
    data = crafted.tar_gz([crafted.file("x", "was a file"), crafted.symlink("x", "/etc/passwd")])
    extract_archive(io.BytesIO(data), tmp_path / "out", workspace_links=True)
    assert os.listdir(tmp_path / "out") == []
    snap = read_snapshot(io.BytesIO(data), workspace_links=True)
    assert (dict(snap), dict(snap.skipped_links)) == ({}, {"x": "/etc/passwd"})


def test_a_later_file_replaces_a_skipped_link(tmp_path: Path) -> None:
    data = crafted.tar_gz([crafted.symlink("x", "/etc/passwd"), crafted.file("x", "a file")])
    snap = read_snapshot(io.BytesIO(data), workspace_links=True)
    assert (dict(snap), dict(snap.skipped_links)) == ({"x": b"a file"}, {})


# --- destinations ------------------------------------------------------------------------------


def test_prepare_destination_makes_parents_and_discard_removes_them(tmp_path: Path) -> None:
    dest = tmp_path / "a" / "b" / "out"
    destination = prepare_destination(dest)
    assert (tmp_path / "a" / "b").is_dir()
    assert len(os.listdir(tmp_path / "a" / "b")) == 1  # the staging folder
    destination.discard()
    destination.discard()  # idempotent
    assert os.listdir(tmp_path) == []


def test_prepare_destination_keeps_parents_that_were_there(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep")
    destination = prepare_destination(tmp_path / "ws.tar.gz", keep_archive=True)
    with destination.open_archive() as sink:
        sink.write(b"bytes")
    destination.commit_archive()
    assert sorted(os.listdir(tmp_path)) == ["mine.txt", "ws.tar.gz"]
    destination.discard()
    assert sorted(os.listdir(tmp_path)) == ["mine.txt", "ws.tar.gz"]


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda root: root / "file" / "out", "is not a folder"),
        (lambda root: root / "file", "it exists and is not a folder"),
        (lambda root: root / "file" / "x" / "y", "is not a folder"),
    ],
)
def test_prepare_destination_refuses_with_nothing_made(
    tmp_path: Path, make: object, fragment: str
) -> None:
    (tmp_path / "file").write_text("x")
    assert callable(make)
    with pytest.raises(InvalidInputError, match=fragment):
        prepare_destination(make(tmp_path))
    assert os.listdir(tmp_path) == ["file"]


def test_a_kept_archive_replaces_a_symlink_and_never_writes_through_it(tmp_path: Path) -> None:
    home, shared = tmp_path / "home", tmp_path / "shared"
    home.mkdir()
    shared.mkdir()
    (home / ".bashrc").write_text("original\n")
    (shared / "ws.tar.gz").symlink_to(home / ".bashrc")
    (shared / "dangling.tgz").symlink_to(home / "planted.tar.gz")
    for name in ("ws.tar.gz", "dangling.tgz"):
        destination = prepare_destination(shared / name, keep_archive=True)
        with destination.open_archive() as sink:
            sink.write(b"the archive")
        destination.commit_archive()
        assert not (shared / name).is_symlink(), name
        assert (shared / name).read_bytes() == b"the archive"
    assert (home / ".bashrc").read_text() == "original\n"
    assert sorted(os.listdir(home)) == [".bashrc"]
    assert sorted(os.listdir(shared)) == ["dangling.tgz", "ws.tar.gz"]


def test_a_kept_archive_may_replace_a_symlink_to_a_folder(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "ws.tar.gz").symlink_to(tmp_path / "folder")
    destination = prepare_destination(tmp_path / "ws.tar.gz", keep_archive=True)
    destination.commit_archive()
    assert (tmp_path / "ws.tar.gz").is_file()
    assert os.listdir(tmp_path / "folder") == []


@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-folder", "dangling"])
def test_a_folder_destination_that_is_a_symlink_is_refused(tmp_path: Path, dangling: bool) -> None:
    elsewhere = tmp_path / "elsewhere"
    if not dangling:
        elsewhere.mkdir()
        (elsewhere / "keep.txt").write_text("keep")
    (tmp_path / "shared").mkdir()
    link = tmp_path / "shared" / "ws"
    link.symlink_to(elsewhere)
    before = listing(tmp_path)
    for path in (link, f"{link}/"):
        with pytest.raises(InvalidInputError, match=r"it is a symlink \(to .*elsewhere'\)"):
            prepare_destination(path)
        with pytest.raises(InvalidInputError, match="is a symlink"):
            extract_archive(io.BytesIO(_valid()), path)
    assert listing(tmp_path) == before
    assert link.is_symlink()


def test_symlinks_on_the_way_to_a_destination_are_followed(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "real")
    extract_archive(io.BytesIO(_valid()), tmp_path / "via" / "out")
    assert (tmp_path / "real" / "out" / "a.txt").is_file()
    destination = prepare_destination(tmp_path / "via" / "ws.tar.gz", keep_archive=True)
    destination.commit_archive()
    assert (tmp_path / "real" / "ws.tar.gz").is_file()


def test_a_symlink_planted_at_the_destination_during_the_download_is_refused(
    tmp_path: Path,
) -> None:
    (tmp_path / "elsewhere").mkdir()
    dest = tmp_path / "out"
    dest.mkdir()
    destination = prepare_destination(dest)
    dest.rmdir()
    dest.symlink_to(tmp_path / "elsewhere")  # between the check and the move into place
    with pytest.raises(InvalidInputError, match="is a symlink"):
        destination.extract(io.BytesIO(_valid()))
    assert os.listdir(tmp_path / "elsewhere") == []
    assert sorted(os.listdir(tmp_path)) == ["elsewhere", "out"]


def test_a_member_the_destination_cannot_hold_is_named(tmp_path: Path) -> None:
    deep = crafted.long_name(200, depth=20)  # 4,019 bytes: fine alone, too long under tmp_path
    data = crafted.tar_gz([crafted.file("a.txt", "a"), crafted.file(f"{deep}/x", "x")])
    with pytest.raises(InvalidInputError, match="File name too long") as info:
        extract_archive(io.BytesIO(data), tmp_path / "new" / "out")
    assert deep[:30] in str(info.value)
    assert os.listdir(tmp_path) == []


# --- packing files that cannot be read -----------------------------------------------------------


def test_a_file_gone_before_packing_is_named(tmp_path: Path) -> None:
    (tmp_path / "gone.txt").write_text("x")
    entries = plan_directory(tmp_path)
    (tmp_path / "gone.txt").unlink()
    with pytest.raises(SourceChangedError, match=r"gone\.txt.*it disappeared"):
        pack_to_tempfile(entries)


def test_a_file_that_cannot_be_read_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "secret.txt").write_text("x")
    entries = plan_directory(tmp_path)

    def refuse(tree: PlannedTree, parts: object, identity: object) -> int:
        # the system's refusal where the planned file is opened (root reads any file)
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(PlannedTree, "open_file", refuse)
    with pytest.raises(InvalidInputError, match=r"cannot read .*secret\.txt.*Permission denied"):
        pack_to_tempfile(entries)


@pytest.mark.parametrize("threads", [0, 1])
def test_a_failed_pack_closes_without_an_unraisable_error(tmp_path: Path, threads: int) -> None:
    """On an error the spool is closed before the packer's streams are collected; on Python
    3.13 their close flushed the closed spool (ValueError, reported as unraisable)."""
    import gc
    import sys

    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "gone.txt").write_text("x")
    entries = plan_directory(tmp_path)
    (tmp_path / "gone.txt").unlink()
    unraisable: list[object] = []
    hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        with pytest.raises(InvalidInputError, match="disappeared"):
            pack_to_tempfile(entries, threads=threads)
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert unraisable == []
