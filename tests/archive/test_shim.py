"""The tarfile shim, differentially: on the running interpreter (3.10 to 3.13, patched for
CVE-2024-6232 or not), the archive core reads what tarfile and GNU tar read, to the same bytes,
and refuses sparse and hostile members with its own errors, never a TypeError from a private
hook whose signature changed."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, cast

import pytest

from klavis_archive import (
    ArchiveRejected,
    DecompressAhead,
    ForwardReader,
    SparseMember,
    forget_members,
    igzip_file,
    open_tar,
)
from klavis_archive._tarfile_shim import HOOKS, missing_hooks, sparse_member_name
from klavis_emulator._archive import extract_archive as emulator_extract
from tests import crafted
from workflows._dump._extract import extract_archive as library_extract
from workflows._errors import UnsafeArchiveError

Tree = dict[str, Any]  # relative path -> bytes (a file), ("link", target) or "dir"
MTIME = 1_700_000_000


def _gnu_tar() -> str:
    tar = shutil.which("tar")
    if tar is None:
        pytest.skip("GNU tar is not installed")
    version = subprocess.run([tar, "--version"], capture_output=True, text=True, check=False)
    if "GNU tar" not in version.stdout:
        pytest.skip("GNU tar is not installed (the tar on PATH is another one)")
    return tar


def _tar_gz(build: Callable[[tarfile.TarFile], None], fmt: int, **kwargs: Any) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=fmt, **kwargs) as tar:
        build(tar)
    return buf.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes | None = None, **fields: Any) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = MTIME
    info.mode = 0o644
    for key, value in fields.items():
        setattr(info, key, value)
    if data is not None:
        info.size = len(data)
    tar.addfile(info, io.BytesIO(data) if data is not None else None)


def _long_names(tar: tarfile.TarFile) -> None:
    deep = "/".join(["d" * 90] * 3)
    _add(tar, f"{deep}/", type=tarfile.DIRTYPE, mode=0o755)
    _add(tar, f"{deep}/{'f' * 150}.txt", b"long name\n")
    _add(tar, "l", type=tarfile.SYMTYPE, linkname=f"{deep}/{'f' * 150}.txt")


def _pax_headers(tar: tarfile.TarFile) -> None:
    _add(tar, "café/naïve ☃.txt", b"unicode\n")
    _add(tar, "commented.txt", b"x" * 3000, pax_headers={"comment": "c" * 700})
    _add(tar, "float-time.txt", b"t", mtime=MTIME + 0.5)
    _add(tar, "big-uid.txt", b"u", uid=8**8, uname="u" * 40)


def _links(tar: tarfile.TarFile) -> None:
    _add(tar, "src/", type=tarfile.DIRTYPE, mode=0o755)
    _add(tar, "src/real.txt", b"real contents\n")
    _add(tar, "src/exec.sh", b"#!/bin/sh\n", mode=0o755)
    _add(tar, "hard.txt", type=tarfile.LNKTYPE, linkname="src/real.txt")
    _add(tar, "src/alias.txt", type=tarfile.SYMTYPE, linkname="real.txt")
    _add(tar, "top", type=tarfile.SYMTYPE, linkname="src")


ACCEPTED: dict[str, bytes] = {
    "gnu-long-names": _tar_gz(_long_names, tarfile.GNU_FORMAT),
    "pax-long-names": _tar_gz(_long_names, tarfile.PAX_FORMAT),
    "pax-headers": _tar_gz(_pax_headers, tarfile.PAX_FORMAT, pax_headers={"comment": "global"}),
    "ustar-links": _tar_gz(_links, tarfile.USTAR_FORMAT),
    "pax-links": _tar_gz(_links, tarfile.PAX_FORMAT),
}
SPARSE: dict[str, tuple[crafted.Member, str]] = {
    "pax-sparse-0.0": (crafted.pax_sparse_file("hole.bin", 65536, "0.0"), "PAX GNU.sparse 0.0"),
    "pax-sparse-0.1": (crafted.pax_sparse_file("hole.bin", 65536, "0.1"), "PAX GNU.sparse 0.1"),
    "pax-sparse-1.0": (crafted.pax_sparse_file("hole.bin", 65536, "1.0"), "PAX GNU.sparse 1.0"),
    "gnu-sparse": (crafted.sparse_file("hole.bin", 65536), "GNU type 'S'"),
}
HOSTILE: dict[str, list[crafted.Member]] = {
    "dot-dot": [crafted.file("../escaped.txt", "x")],
    "absolute": [crafted.file("/tmp/escaped.txt", "x")],
    "symlink-out": [crafted.symlink("out", "../../etc")],
    "absolute-symlink": [crafted.symlink("passwd", "/etc/passwd")],
    "pax-header-2MiB": [crafted.extended_header(2 * 1024 * 1024), crafted.file("x", "x")],
    "header-chain-9": [*crafted.header_chain(9), crafted.file("x", "x")],
    "global-headers-2MiB": [
        crafted.pax_global_header(700_000),
        crafted.file("a", "a"),
        crafted.pax_global_header(700_000, first_key=10**6),
        crafted.file("b", "b"),
    ],
}


def _tree(root: Path) -> Tree:
    """What is on disk under ``root``: files' bytes, links' targets, folders."""
    found: Tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                found[rel] = "dir"
            else:
                found[rel] = path.read_bytes()
    return found


def _by_tarfile(data: bytes) -> Tree:
    """What tarfile itself reads (no filter, no extraction): the reference of the core."""
    found: Tree = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for info in tar:
            name = info.name.rstrip("/")
            if info.issym():
                found[name] = ("link", info.linkname)
            elif info.isdir():
                found[name] = "dir"
            else:
                extracted = tar.extractfile(info)
                assert extracted is not None
                found[name] = extracted.read()
    return found


def _by_core(data: bytes) -> Tree:
    """What the core's bounded reader reads, through the shim's hooks."""
    found: Tree = {}
    contents: dict[str, bytes] = {}
    with (
        igzip_file(fileobj=io.BytesIO(data), mode="rb") as gz,
        open_tar(cast("IO[bytes]", ForwardReader(gz))) as tar,
    ):
        while (info := tar.next()) is not None:
            forget_members(tar)
            name = info.name.rstrip("/")
            if info.issym():
                found[name] = ("link", info.linkname)
            elif info.isdir():
                found[name] = "dir"
            elif info.islnk():
                found[name] = contents[info.linkname]
            else:
                found[name] = contents[name] = tar.fileobj.read(info.size)
    return found


def _by_gnu_tar(data: bytes, tmp: Path) -> Tree:
    root = tmp / "gnu"
    root.mkdir()
    subprocess.run(
        [_gnu_tar(), "-xzf", "-", "-C", str(root)], input=data, check=True, capture_output=True
    )
    return _tree(root)


def _by_library(data: bytes, tmp: Path) -> Tree:
    library_extract(io.BytesIO(data), tmp / "library")
    return _tree(tmp / "library")


def _by_emulator(data: bytes, tmp: Path) -> Tree:
    (tmp / "emulator").mkdir()
    archive = tmp / "archive.tar.gz"
    archive.write_bytes(data)
    emulator_extract(archive, tmp / "emulator")
    return _tree(tmp / "emulator")


def _members_only(tree: Tree, reference: Tree) -> Tree:
    """``tree`` without the folders the reference does not list (implied parents)."""
    return {k: v for k, v in tree.items() if v != "dir" or k in reference}


def test_every_hook_exists_on_this_interpreter() -> None:
    assert missing_hooks() == []
    assert set(HOOKS) >= {"_proc_member", "_proc_gnusparse_00"}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), "header-name"),
        (({"GNU.sparse.name": "real", "path": "p"}, b""), "real"),  # before the fix
        (({"path": "p"},), "p"),
        (([(20, b"GNU.sparse.size", b"1"), (15, b"path", b"raw")],), "raw"),  # 0.0 after it
        (([(20, b"GNU.sparse.name", b"n\xff")],), "n\udcff"),
        (([("junk",)],), "header-name"),
    ],
)
def test_the_sparse_name_is_read_from_either_signature(
    args: tuple[Any, ...], expected: str
) -> None:
    assert sparse_member_name(tarfile.TarInfo("header-name"), args) == expected


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_the_core_reads_what_tarfile_and_gnu_tar_read(case: str, tmp_path: Path) -> None:
    data = ACCEPTED[case]
    reference = _by_tarfile(data)
    assert _by_core(data) == reference
    gnu = _by_gnu_tar(data, tmp_path)
    assert _members_only(gnu, reference) == reference
    # both packages' extractions, built on the core, write the same bytes as GNU tar
    assert _by_library(data, tmp_path) == gnu
    assert _by_emulator(data, tmp_path) == gnu


@pytest.mark.parametrize("case", sorted(SPARSE))
def test_sparse_members_that_tarfile_and_gnu_tar_expand_are_refused(
    case: str, tmp_path: Path
) -> None:
    member, kind = SPARSE[case]
    data = crafted.tar_gz([crafted.file("ok.txt", "ok"), member])
    # tarfile and GNU tar both take the member as the sparse file it is: 64 KiB of holes
    reference = _by_tarfile(data)
    assert reference == {"ok.txt": b"ok", "hole.bin": bytes(65536)}
    assert _by_gnu_tar(data, tmp_path) == reference
    # the core refuses it through the shim's hooks, naming the member and the format
    with pytest.raises(SparseMember) as refused:
        _by_core(data)
    assert (refused.value.member, refused.value.kind) == ("hole.bin", kind)
    with pytest.raises(UnsafeArchiveError, match=r"'hole\.bin' is a sparse file") as mapped:
        _by_library(data, tmp_path)
    assert mapped.value.member == "hole.bin"
    with pytest.raises(ArchiveRejected, match=r"'hole\.bin' is a sparse file"):
        _by_emulator(data, tmp_path)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_members_are_refused(case: str, tmp_path: Path) -> None:
    data = crafted.tar_gz(HOSTILE[case])
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        assert tar.getmembers()  # tarfile itself reads them all, unfiltered
    with pytest.raises(UnsafeArchiveError):
        _by_library(data, tmp_path)
    with pytest.raises(ArchiveRejected):
        _by_emulator(data, tmp_path)
    # nothing beside them (the emulator's partial output stays in its folder: the caller
    # extracts into a staging copy and drops it)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["archive.tar.gz", "emulator"]


def test_an_archive_without_members_reads_as_empty(tmp_path: Path) -> None:
    """Python 3.10's tarfile seeks back one byte after an empty archive's end blocks, which a
    forward-only stream refuses (the library refused the empty archives it packs there)."""
    data = crafted.tar_gz([])
    assert _by_tarfile(data) == _by_core(data) == {}
    assert _by_library(data, tmp_path) == _by_emulator(data, tmp_path) == {}


def _many_small(tar: tarfile.TarFile) -> None:
    # 700 members of 0 to 1,100 bytes: headers fall on every offset of the reader's blocks,
    # some straddling two (read by tarfile's own next, the rest by the core's)
    for i in range(700):
        _add(tar, f"d{i % 7}/f{i:04d}.txt", bytes([65 + i % 26]) * (i * 37 % 1101))
    _add(tar, "after-a-pax-record.txt", b"p", pax_headers={"comment": "x"})
    _add(tar, "last/", type=tarfile.DIRTYPE, mode=0o700)


_FIELDS = ("name", "type", "size", "mode", "mtime", "uid", "gid", "uname", "gname", "linkname",
           "devmajor", "devminor", "offset", "offset_data", "pax_headers")  # fmt: skip


def _fields_by_tarfile(data: bytes) -> list[tuple[Any, ...]]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return [tuple(getattr(info, f) for f in _FIELDS) for info in tar]


def _fields_by_core(data: bytes, ahead: bool) -> list[tuple[Any, ...]]:
    found = []
    with contextlib.ExitStack() as stack:
        raw = io.BytesIO(data)
        gz = stack.enter_context(igzip_file(fileobj=raw, mode="rb"))
        stream: IO[bytes] = cast(
            "IO[bytes]",
            stack.enter_context(contextlib.closing(DecompressAhead(gz, raw)))
            if ahead
            else ForwardReader(gz),
        )
        tar = stack.enter_context(open_tar(stream))
        while (info := tar.next()) is not None:
            forget_members(tar)
            found.append(tuple(getattr(info, f) for f in _FIELDS))
            if info.isreg():  # read as the extractions do: the contents, not the padding
                stream.read(info.size)
    return found


@pytest.mark.parametrize("ahead", [False, True], ids=["in-line", "decompress-ahead"])
@pytest.mark.parametrize("case", [*sorted(ACCEPTED), "many-small", "many-small-global"])
def test_the_core_reads_every_header_field_as_tarfile(case: str, ahead: bool) -> None:
    """The core's ``next`` reads common headers itself (see ForwardTarFile): every field of
    every member, offsets and PAX records included, is what tarfile's own ``next`` gives."""
    if case == "many-small":
        data = _tar_gz(_many_small, tarfile.PAX_FORMAT)
    elif case == "many-small-global":  # a global record: every later member carries it
        data = _tar_gz(_many_small, tarfile.PAX_FORMAT, pax_headers={"comment": "global"})
    else:
        data = ACCEPTED[case]
    reference = _fields_by_tarfile(data)
    assert len(reference) >= 3
    assert _fields_by_core(data, ahead) == reference
