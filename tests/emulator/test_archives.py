"""Unsafe or broken archives are refused with a 400 (or 413), nothing is written outside the
workspace, and the workspace stays as it was."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from collections.abc import Callable, Mapping
from pathlib import Path

import httpx
import pytest

from klavis_emulator import ArchiveLimits, EmulatorConfig, EmulatorServer
from tests import crafted
from tests.helpers import data_folder_paths, staging_leftovers

MakeTarGz = Callable[[Mapping[str, bytes | str]], bytes]
Member = tuple[tarfile.TarInfo, bytes | None]


def _file(name: str, data: bytes = b"x") -> Member:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _special(name: str, kind: bytes, linkname: str = "") -> Member:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, None


def _tar_gz(*members: Member) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def _acquire(client: httpx.Client) -> str:
    response = client.post("/local-sandbox", json={"server_names": ["filesystem"]})
    assert response.status_code == 201
    sandbox_id: str = response.json()["local_sandbox_id"]
    return sandbox_id


def _upload_and_initialize(client: httpx.Client, sandbox_id: str, archive: bytes) -> httpx.Response:
    url = client.post(f"/local-sandbox/{sandbox_id}/upload-url").json()["upload_url"]
    put = client.put(url, content=archive, headers={"Content-Type": "application/gzip"})
    assert put.status_code == 200, put.text
    return client.post(f"/local-sandbox/{sandbox_id}/initialize")


def _snapshot(root: Path) -> dict[str, bytes | str | None]:
    """Every path under ``root`` -> file bytes, link target, or None for folders."""
    result: dict[str, bytes | str | None] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            result[rel] = str(path.readlink())
        elif path.is_file():
            result[rel] = path.read_bytes()
        else:
            result[rel] = None
    return result


def _paths_outside(emulator: EmulatorServer, workspace: Path) -> set[Path]:
    """Every path of the emulator's data dir outside the workspace and the object store."""
    data_dir = emulator.state.data_dir
    skip = (workspace, data_dir / "storage", data_dir / "tmp")
    return {
        path
        for path in data_folder_paths(emulator.state)
        if not any(path == s or s in path.parents for s in skip) and "sqlite3" not in path.name
    }


UNSAFE: dict[str, tuple[bytes, str]] = {
    "absolute path": (_tar_gz(_file("ok.txt"), _file("/tmp/klavis-evil.txt")), "absolute"),
    "dot-dot": (_tar_gz(_file("ok.txt"), _file("../evil.txt")), "'..'"),
    "nested dot-dot": (_tar_gz(_file("a/../../evil.txt")), "'..'"),
    "absolute symlink": (
        _tar_gz(_special("link", tarfile.SYMTYPE, "/etc/passwd")),
        "absolute",
    ),
    "symlink out": (
        _tar_gz(_file("ok.txt"), _special("sub/link", tarfile.SYMTYPE, "../../outside")),
        "outside",
    ),
    "write through a symlink": (
        _tar_gz(
            _special("escape", tarfile.SYMTYPE, "."),
            _special("escape/up", tarfile.SYMTYPE, ".."),
            _file("escape/up/evil.txt"),
        ),
        "outside",
    ),
    "hard link out": (_tar_gz(_special("hard", tarfile.LNKTYPE, "../../etc/passwd")), "hard link"),
    "hard link to nothing": (
        _tar_gz(_special("hard", tarfile.LNKTYPE, "missing.txt")),
        "hard link",
    ),
    "char device": (_tar_gz(_file("ok.txt"), _special("dev", tarfile.CHRTYPE)), "device"),
    "block device": (_tar_gz(_special("blk", tarfile.BLKTYPE)), "device"),
    "fifo": (_tar_gz(_special("pipe", tarfile.FIFOTYPE)), "FIFO"),
    "not gzip": (b"PK\x03\x04 this is a zip, not a tar.gz", "not gzip"),
    "plain tar": (b"x" * 1024, "not gzip"),
    "gzip but not tar": (gzip.compress(b"hello, I am not a tar archive" * 40), "tar.gz"),
    "truncated": (_tar_gz(_file("big.bin", bytes(range(256)) * 400))[:300], "tar.gz"),
    "empty": (b"", "not gzip"),
}


@pytest.mark.parametrize("case", list(UNSAFE))
def test_unsafe_archive_is_refused_and_changes_nothing(
    client: httpx.Client, emulator: EmulatorServer, make_tar_gz: MakeTarGz, case: str
) -> None:
    archive, expected = UNSAFE[case]
    sandbox_id = _acquire(client)
    good = _upload_and_initialize(client, sandbox_id, make_tar_gz({"keep.txt": "k", "d/": b""}))
    assert good.status_code == 200
    workspace = emulator.state.workspace_path(sandbox_id)
    before = _snapshot(workspace)
    outside_before = _paths_outside(emulator, workspace)

    response = _upload_and_initialize(client, sandbox_id, archive)
    assert response.status_code == 400, response.text
    assert expected in response.json()["detail"]
    assert _snapshot(workspace) == before
    assert _paths_outside(emulator, workspace) == outside_before
    assert not Path("/tmp/klavis-evil.txt").exists()
    assert not (workspace.parent / "evil.txt").exists()
    assert not (workspace.parent.parent / "evil.txt").exists()
    # Nothing left behind in the staging area either.
    assert staging_leftovers(emulator.state) == []


def test_links_inside_the_tree_are_fine(client: httpx.Client, emulator: EmulatorServer) -> None:
    sandbox_id = _acquire(client)
    archive = _tar_gz(
        _file("data/real.txt", b"real"),
        _special("data/alias.txt", tarfile.SYMTYPE, "real.txt"),
        _special("top.txt", tarfile.SYMTYPE, "data/real.txt"),
        _special("hard.txt", tarfile.LNKTYPE, "data/real.txt"),
        _file("./dotted.txt", b"dot"),
    )
    response = _upload_and_initialize(client, sandbox_id, archive)
    assert response.status_code == 200, response.text
    workspace = emulator.state.workspace_path(sandbox_id)
    assert (workspace / "data" / "alias.txt").read_text() == "real"
    assert (workspace / "top.txt").is_symlink()
    assert (workspace / "hard.txt").read_text() == "real"
    assert (workspace / "dotted.txt").read_text() == "dot"


def test_file_permissions_are_kept_but_not_setuid(
    client: httpx.Client, emulator: EmulatorServer
) -> None:
    sandbox_id = _acquire(client)
    script, _ = info_data = _file("run.sh", b"#!/bin/sh\necho hi\n")
    script.mode = 0o4755
    response = _upload_and_initialize(client, sandbox_id, _tar_gz(info_data))
    assert response.status_code == 200
    mode = (emulator.state.workspace_path(sandbox_id) / "run.sh").stat().st_mode
    assert mode & 0o777 == 0o755
    assert not mode & 0o4000


def test_archive_caps_answer_413(tmp_path: Path, token: str, make_tar_gz: MakeTarGz) -> None:
    limits = ArchiveLimits(max_members=5, max_bytes=1000)
    with (
        EmulatorServer(EmulatorConfig(data_dir=tmp_path, archive_limits=limits)) as server,
        httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as http,
    ):
        sandbox_id = _acquire(http)
        many = make_tar_gz({f"f{i}.txt": "x" for i in range(6)})
        too_many = _upload_and_initialize(http, sandbox_id, many)
        assert too_many.status_code == 413
        assert "more than 5 members" in too_many.json()["detail"]
        bomb = make_tar_gz({"zeros.bin": bytes(5000)})  # compresses to a few dozen bytes
        too_big = _upload_and_initialize(http, sandbox_id, bomb)
        assert too_big.status_code == 413
        assert "1000 bytes" in too_big.json()["detail"]
        assert list(server.state.workspace_path(sandbox_id).iterdir()) == []
        fine = _upload_and_initialize(http, sandbox_id, make_tar_gz({"a": "1", "b": "2"}))
        assert fine.status_code == 200


def _direct_tar_gz(*members: tuple[str, str, object]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, kind, arg in members:
            info = tarfile.TarInfo(name)
            if kind == "f":
                assert isinstance(arg, bytes)
                info.size = len(arg)
                tar.addfile(info, io.BytesIO(arg))
            elif kind == "d":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.type = tarfile.SYMTYPE if kind == "l" else tarfile.LNKTYPE
                assert isinstance(arg, str)
                info.linkname = arg
                tar.addfile(info)
    return buf.getvalue()


def _extract_directly(tmp_path: Path, data: bytes) -> tuple[str, list[str]]:
    from klavis_emulator import _archive

    root = tmp_path / "box" / "root"
    root.mkdir(parents=True)
    archive = tmp_path / "a.tgz"
    archive.write_bytes(data)
    try:
        _archive.extract_archive(archive, root)
        result = "ok"
    except _archive.ArchiveRejected as exc:
        result = f"rejected: {exc}"
    outside = sorted(
        str(p.relative_to(tmp_path))
        for p in (tmp_path / "box").rglob("*")
        if p != root and root not in p.parents
    )
    return result, outside


def test_a_symlink_chain_built_member_by_member_cannot_escape(tmp_path: Path) -> None:
    chain = _direct_tar_gz(
        ("d0/", "d", None),
        ("d0/sub/", "d", None),
        ("sub/", "d", None),
        ("q", "l", "d0"),
        ("p", "l", "q/sub/../.."),
        ("p/a.txt", "f", b"a"),
        ("q", "l", "."),  # now p leads out of the tree
        ("p/evil.txt", "f", b"evil"),
    )
    result, outside = _extract_directly(tmp_path, chain)
    assert result.startswith("rejected")
    assert outside == []


def test_a_cut_gzip_end_is_refused_and_a_self_hard_link_is_fine(tmp_path: Path) -> None:
    whole = _direct_tar_gz(("a", "f", b"A"))
    assert _extract_directly(tmp_path / "cut", whole[:-4])[0].startswith("rejected")
    self_link = _direct_tar_gz(("a", "f", b"A"), ("a", "h", "a"))
    assert _extract_directly(tmp_path / "self", self_link) == ("ok", [])


# ---------------------------------------------------------------------- decompressing ahead


def _decompress_threads() -> list[str]:
    import threading

    return [t.name for t in threading.enumerate() if t.name == "archive-decompress"]


def test_a_tar_cut_inside_a_members_contents_is_refused(tmp_path: Path) -> None:
    """A whole gzip stream whose tar stops in the middle of a file's contents."""
    from klavis_emulator._archive import ArchiveRejected, extract_archive

    whole = io.BytesIO()
    with tarfile.open(fileobj=whole, mode="w") as tar:
        info = tarfile.TarInfo("a.bin")
        info.size = 10_000
        tar.addfile(info, io.BytesIO(b"a" * 10_000))
    archive = tmp_path / "cut.tar.gz"
    archive.write_bytes(gzip.compress(whole.getvalue()[: 512 + 5_000]))
    (tmp_path / "root").mkdir()
    with pytest.raises(ArchiveRejected, match="truncated or corrupt"):
        extract_archive(archive, tmp_path / "root")


@pytest.mark.parametrize(
    "member",
    [
        crafted.negative_size("n"),
        crafted.negative_size("././@PaxHeader", tarfile.XHDTYPE),
        crafted.pax_file("n", {"size": "-1"}, b"x"),
    ],
    ids=["header", "pax-header", "pax-record"],
)
def test_a_negative_size_is_refused(tmp_path: Path, member: crafted.Member) -> None:
    """tarfile reads a size of "-1" as -1, and a read of -1 bytes would read everything."""
    from klavis_emulator._archive import ArchiveRejected, extract_archive

    archive = tmp_path / "negative.tar.gz"
    archive.write_bytes(crafted.tar_gz([member, crafted.file("after", b"y" * 4096)]))
    (tmp_path / "root").mkdir()
    with pytest.raises(ArchiveRejected, match="negative size"):
        extract_archive(archive, tmp_path / "root")
    assert not (tmp_path / "root" / "after").exists()


def test_the_decompressed_archive_is_never_read_all_at_once(tmp_path: Path) -> None:
    from klavis_archive import DecompressAhead, igzip_file

    path = tmp_path / "a.gz"
    path.write_bytes(gzip.compress(b"x" * 1000))
    with path.open("rb") as raw, igzip_file(fileobj=raw, mode="rb") as gz:
        stream = DecompressAhead(gz, raw)
        with pytest.raises(tarfile.ReadError):
            stream.read(-1)
        with pytest.raises(tarfile.ReadError):
            stream.read(None)
        assert stream.read(10) == b"x" * 10
        stream.close()


def test_a_refused_archive_leaves_no_decompressing_thread(tmp_path: Path) -> None:
    from klavis_emulator._archive import ArchiveRejected, extract_archive

    archive = tmp_path / "bad.tar.gz"
    big = os.urandom(3 * 1024 * 1024)  # more blocks than wait in the queue: the worker blocks
    archive.write_bytes(_tar_gz(_file("/etc/evil", b"x"), _file("big.bin", big)))
    (tmp_path / "root").mkdir()
    with pytest.raises(ArchiveRejected):
        extract_archive(archive, tmp_path / "root")
    assert _decompress_threads() == []
    assert list((tmp_path / "root").iterdir()) == []


def test_decompressing_ahead_reports_the_compressed_position_and_the_decompressor_errors(
    tmp_path: Path,
) -> None:
    from klavis_archive import CHUNK_SIZE, DecompressAhead, igzip_file

    data = os.urandom(3 * CHUNK_SIZE + 5)
    packed = gzip.compress(data)
    path = tmp_path / "a.gz"
    path.write_bytes(packed)
    with path.open("rb") as raw, igzip_file(fileobj=raw, mode="rb") as gz:
        stream = DecompressAhead(gz, raw)
        positions = []
        read = b""
        while chunk := stream.read(65536):
            read += chunk
            positions.append(stream.compressed_position)
        assert read == data
        # each block carries where the compressed file stood before it: never ahead of it
        assert positions == sorted(positions)
        assert positions[0] == 0
        assert 0 < positions[-1] <= len(packed)
        stream.close()
    path.write_bytes(packed[: len(packed) // 2])  # cut: the decompressor's own EOFError
    with path.open("rb") as raw, igzip_file(fileobj=raw, mode="rb") as gz:
        stream = DecompressAhead(gz, raw)
        with pytest.raises(EOFError):
            while stream.read(65536):
                pass
        with pytest.raises(EOFError):  # and again: an error is never taken for the end
            stream.read(1)
        stream.close()
    assert _decompress_threads() == []


def test_decompressing_ahead_reads_exact_sizes_across_blocks_and_seeks_forwards_only(
    tmp_path: Path,
) -> None:
    """What a TarFile opened in mode "r" asks of its file: whole reads, tell, forward seeks."""
    from klavis_archive import CHUNK_SIZE, DecompressAhead, igzip_file

    data = os.urandom(2 * CHUNK_SIZE + 700)
    path = tmp_path / "a.gz"
    path.write_bytes(gzip.compress(data))
    with path.open("rb") as raw, igzip_file(fileobj=raw, mode="rb") as gz:
        stream = DecompressAhead(gz, raw)
        assert stream.seekable()
        assert stream.read(512) == data[:512]
        start = CHUNK_SIZE - 100  # a read across the end of the first block
        assert stream.seek(start) == start == stream.tell()
        assert stream.read(1000) == data[start : start + 1000]
        assert stream.tell() == start + 1000
        with pytest.raises(io.UnsupportedOperation):
            stream.seek(10)  # backwards
        with pytest.raises(io.UnsupportedOperation):
            stream.seek(0, io.SEEK_END)
        stream.seek(start + 1000)  # where it is: nothing to skip
        assert stream.read(CHUNK_SIZE + 200) == data[start + 1000 : start + CHUNK_SIZE + 1200]
        # past the end: the seek stops there and reads return nothing
        assert stream.seek(len(data) + 4096) == len(data)
        assert stream.read(512) == b""
        stream.close()
    assert _decompress_threads() == []


class _TellFailsLater(io.BufferedReader):
    """A file whose ``tell`` fails after its first call (outside the decompressor)."""

    calls = 0

    def tell(self) -> int:
        self.calls += 1
        if self.calls > 1:
            raise OSError("tell failed")
        return super().tell()


def test_an_error_of_the_decompressing_thread_outside_the_decompressor_reaches_the_reader(
    tmp_path: Path,
) -> None:
    from klavis_archive import CHUNK_SIZE, DecompressAhead, igzip_file

    path = tmp_path / "a.gz"
    path.write_bytes(gzip.compress(os.urandom(3 * CHUNK_SIZE)))
    with _TellFailsLater(io.FileIO(path)) as raw, igzip_file(fileobj=raw, mode="rb") as gz:
        stream = DecompressAhead(gz, raw)
        with pytest.raises(OSError, match="tell failed"):
            while stream.read(65536):
                pass
        stream.close()
    assert _decompress_threads() == []


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o000])
def test_files_get_the_archives_modes_and_times_whatever_the_umask(
    umask: int, tmp_path: Path
) -> None:
    """The extraction sets a file's mode again only where the umask took bits of it (read from
    /proc/self/status once per extraction): either way the file ends with the member's mode
    (owner read and write always added) and the member's time."""
    from klavis_emulator._archive import extract_archive

    members = [
        crafted.file("a/plain.txt", "p", mode=0o644),
        crafted.file("a/b/run.sh", "#!/bin/sh\n", mode=0o755),
        crafted.file("shared.txt", "s", mode=0o664),
        crafted.file("private.txt", "q", mode=0o400),
    ]
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(crafted.tar_gz(members))
    (tmp_path / "root").mkdir()
    old = os.umask(umask)
    try:
        extract_archive(archive, tmp_path / "root")
    finally:
        os.umask(old)
    found = {
        name: (
            os.stat(tmp_path / "root" / name).st_mode & 0o777,
            os.stat(tmp_path / "root" / name).st_mtime,
        )
        for name in ("a/plain.txt", "a/b/run.sh", "shared.txt", "private.txt")
    }
    assert found == {
        "a/plain.txt": (0o644, crafted.MTIME),
        "a/b/run.sh": (0o755, crafted.MTIME),
        "shared.txt": (0o664, crafted.MTIME),
        "private.txt": (0o600, crafted.MTIME),
    }
