"""Attacks on the client through what it downloads: hostile dumps, hostile storage, hostile paths.

A dump's signed URL leads to whatever the API says. Here an emulator hands out URLs that lead to
:class:`~tests.hostile_storage.HostileStorage` (its ``public_url``), a real HTTP server on
loopback that answers crafted archives, junk, endless bodies, trickles and stalls. Every case
asserts the three outcomes:

* a specific error (the exact class and a fragment of its message), or the correct result;
* nothing written outside the target: the ``sentinel`` folder stays empty, and a refused dump
  leaves its destination exactly as it was (no partial tree, no temporary folder);
* nothing left acquired: the tenant lists no sandbox afterwards and the (private) ledger holds
  nothing.

Where the behaviour lives in the sync and async drivers (downloads, deadlines) the case runs
under both faces (the ``face`` fixture of ``tests/conftest.py``).
"""

from __future__ import annotations

import errno
import logging
import os
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import stamina

import workflows
from klavis_emulator import EmulatorConfig, EmulatorServer
from tests.crafted import (
    Member,
    file,
    hardlink,
    header_chain,
    long_name,
    pax_global_header,
    pax_sparse_file,
    sparse_file,
    tar_gz,
    zeros_file,
)
from tests.helpers import Face, import_the_library
from tests.hostile_storage import GZIP_HEAD, HostileStorage
from workflows import (
    ArchiveLimits,
    InvalidInputError,
    InvalidSeedPathError,
    LocalSandbox,
    Snapshot,
    SourceChangedError,
    UnsafeArchiveError,
)
from workflows._dump._archive import read_snapshot
from workflows._errors import TransferError, TransferTimeoutError

MiB = 1024 * 1024
GiB = 1024 * MiB

# --------------------------------------------------------------------------- harness


@pytest.fixture(scope="module")
def storage() -> Iterator[HostileStorage]:
    """The hostile store, shared by the module; each test sets its behaviour."""
    with HostileStorage() as server:
        yield server


@pytest.fixture(scope="module")
def hostile_emulator(storage: HostileStorage) -> Iterator[EmulatorServer]:
    """An emulator whose signed URLs lead to the hostile store."""
    with EmulatorServer(EmulatorConfig(public_url=storage.url)) as server:
        yield server


@dataclass
class World:
    """One case's world: a tenant on an emulator, the hostile store, folders of its own."""

    emulator: EmulatorServer
    storage: HostileStorage
    token: str
    tmp: Path

    @property
    def conn(self) -> dict[str, Any]:
        """Library keyword arguments for this tenant."""
        return {"api_key": self.token, "base_url": self.emulator.base_url}

    @property
    def sentinel(self) -> Path:
        """A folder that must stay empty: escaping writes would land here."""
        return self.tmp / "sentinel"

    @property
    def dest(self) -> Path:
        """Where dumps are extracted (inside ``out``, which holds nothing else)."""
        return self.tmp / "out" / "dest"

    def acquire(self, face: Face | None = None, **kwargs: Any) -> Any:
        """A library sandbox of this tenant (sync unless ``face`` is given)."""
        arguments = {"ttl_seconds": 600, **self.conn, **kwargs}
        if face is None:
            return LocalSandbox.acquire(["filesystem"], **arguments)
        return face.acquire(["filesystem"], **arguments)

    def workspace(self, sandbox_id: str) -> Path:
        """The emulator's folder for a sandbox's /data."""
        return self.emulator.state.workspace_path(sandbox_id)

    def assert_nothing_leaked(self) -> None:
        """Nothing acquired, nothing outside the target, no temporary leftovers."""
        with httpx.Client(
            base_url=self.emulator.base_url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        ) as http:
            listed = http.get("/local-sandbox").json()["local_sandboxes"]
        assert listed == [], "sandboxes leaked"
        assert workflows.default_ledger().held() == [], "the ledger still holds sandboxes"
        assert list(self.sentinel.iterdir()) == [], "something was written outside its folder"
        leftovers = [p.name for p in (self.tmp / "out").iterdir() if p.name != "dest"]
        assert leftovers == [], f"temporary files left next to the destination: {leftovers}"


def _world(emulator: EmulatorServer, storage: HostileStorage, tmp_path: Path, token: str) -> World:
    world = World(emulator, storage, token, tmp_path / "case")
    for folder_ in (world.tmp, world.sentinel, world.tmp / "out"):
        folder_.mkdir()
    return world


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """A private ledger, no key or base URL in the environment, no real backoff."""
    monkeypatch.setenv("KLAVIS_SANDBOX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("KLAVIS_API_KEY", raising=False)
    monkeypatch.delenv("KLAVIS_BASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)  # no stray .env file supplies a key
    stamina.set_testing(True, attempts=1)
    yield
    stamina.set_testing(False)


@pytest.fixture
def hostile(
    isolated: None,
    hostile_emulator: EmulatorServer,
    storage: HostileStorage,
    tmp_path: Path,
    token: str,
) -> Iterator[World]:
    """A world whose dumps come from the hostile store."""
    storage.reset()
    yield _world(hostile_emulator, storage, tmp_path, token)
    storage.reset()


@pytest.fixture
def real(
    isolated: None, emulator: EmulatorServer, storage: HostileStorage, tmp_path: Path, token: str
) -> World:
    """A world on the session emulator, with its own (honest) storage."""
    return _world(emulator, storage, tmp_path, token)


def _raised(action: Callable[[], object], error: type[BaseException], fragment: str) -> str:
    """Run ``action``; it must raise exactly ``error`` with ``fragment`` in the message."""
    with pytest.raises(BaseException) as caught:  # noqa: PT011 - the exact type is checked
        action()
    assert type(caught.value) is error, repr(caught.value)
    message = str(caught.value)
    assert fragment in message, message
    return message


# --------------------------------------------------------------------------- expansion (3)


@dataclass(frozen=True)
class Bomb:
    id: str
    members: Callable[[], list[Member]]
    fragment: str
    compresslevel: int = 9


def _hardlinks(target: str, count: int) -> list[Member]:
    return [hardlink(f"copy-{i:03}", target) for i in range(count)]


BOMBS = [
    # the 92-byte dump: a 1 GiB sparse file, then hard links to it
    Bomb(
        "sparse-gnu-then-hardlinks",
        lambda: [sparse_file("hole.bin", GiB), *_hardlinks("hole.bin", 12)],
        "'hole.bin' is a sparse file",
    ),
    Bomb("sparse-pax-0.0", lambda: [pax_sparse_file("hole.bin", GiB, "0.0")], "is a sparse file"),
    Bomb("sparse-pax-0.1", lambda: [pax_sparse_file("hole.bin", GiB, "0.1")], "is a sparse file"),
    Bomb("sparse-pax-1.0", lambda: [pax_sparse_file("hole.bin", GiB, "1.0")], "is a sparse file"),
    # 16 MiB of zeros (about 16 KiB compressed), copied 64 times by hard links: 1 GiB written
    Bomb(
        "hardlink-copies",
        lambda: [zeros_file("zeros.bin", 16 * MiB), *_hardlinks("zeros.bin", 64)],
        "max_expansion_ratio",
    ),
]


@pytest.mark.parametrize("bomb", BOMBS, ids=[b.id for b in BOMBS])
@pytest.mark.parametrize("how", ["dump_to", "dump"])
def test_expansion_bombs_are_refused(bomb: Bomb, how: str, hostile: World) -> None:
    archive = tar_gz([file("before.txt", "ok"), *bomb.members()], compresslevel=bomb.compresslevel)
    assert len(archive) < 100_000
    hostile.storage.body(archive)
    with hostile.acquire() as sandbox:
        action = (lambda: sandbox.dump_to(hostile.dest)) if how == "dump_to" else sandbox.dump
        _raised(action, UnsafeArchiveError, bomb.fragment)
    assert not hostile.dest.exists(), "a refused dump left a destination"
    hostile.assert_nothing_leaked()


def test_zeros_compress_at_most_1032_to_1_and_pass(hostile: World) -> None:
    # a real workspace can hold a big, highly compressible file: deflate's ceiling (~1032:1)
    # stays under the default 2000:1, so it comes back whole
    archive = tar_gz([zeros_file("disk.img", 48 * MiB)], compresslevel=9)
    assert 48 * MiB / len(archive) > 1000
    hostile.storage.body(archive)
    with hostile.acquire() as sandbox:
        sandbox.dump_to(hostile.dest)
    assert (hostile.dest / "disk.img").stat().st_size == 48 * MiB
    hostile.assert_nothing_leaked()


def test_a_few_hard_links_are_copies(hostile: World) -> None:
    archive = tar_gz([file("a.txt", "shared"), hardlink("b.txt", "a.txt")])
    hostile.storage.body(archive)
    with hostile.acquire() as sandbox:
        snapshot = sandbox.dump()
        sandbox.dump_to(hostile.dest)
    assert dict(snapshot) == {"a.txt": b"shared", "b.txt": b"shared"}
    assert (hostile.dest / "b.txt").read_text() == "shared"
    assert not (hostile.dest / "b.txt").is_symlink()
    hostile.assert_nothing_leaked()


def test_expansion_ratio_is_a_limit_the_user_can_lift(hostile: World) -> None:
    hostile.storage.body(
        tar_gz([zeros_file("zeros.bin", 16 * MiB), *_hardlinks("zeros.bin", 4)], compresslevel=9)
    )
    limits = ArchiveLimits(max_expansion_ratio=None)
    with hostile.acquire(limits=limits) as sandbox:
        snapshot = sandbox.dump()
    assert len(snapshot) == 5
    assert snapshot.total_bytes == 5 * 16 * MiB
    hostile.assert_nothing_leaked()


# --------------------------------------------------------------------------- downloads (4)


@pytest.mark.parametrize("keep", [False, True], ids=["folder", "tar.gz"])
def test_a_body_that_is_not_gzip_is_refused_at_its_first_bytes(
    face: Face, hostile: World, keep: bool
) -> None:
    # 512 MiB of junk, as in the issue: the client must stop reading at once
    hostile.storage.stream(b"<!DOCTYPE html>", b"junk ", 512 * MiB, declared=512 * MiB)
    limits = ArchiveLimits(max_total_bytes=10 * MiB)
    dest = hostile.dest.with_name("dest.tar.gz") if keep else hostile.dest
    with hostile.acquire(face, limits=limits) as sandbox:
        _raised(lambda: sandbox.dump_to(dest), UnsafeArchiveError, "is not a tar.gz archive")
    assert hostile.storage.wait_idle()
    assert hostile.storage.bytes_sent < 64 * MiB  # what the socket buffers held, at most
    assert not dest.exists()
    hostile.assert_nothing_leaked()


def test_a_kept_archive_is_saved_as_downloaded(face: Face, hostile: World) -> None:
    archive = tar_gz([file("a.txt", "A"), hardlink("b.txt", "a.txt")])
    hostile.storage.body(archive)
    dest = hostile.dest.with_name("dest.tar.gz")
    with hostile.acquire(face) as sandbox:
        assert sandbox.dump_to(dest) == dest
    assert dest.read_bytes() == archive
    dest.unlink()
    hostile.assert_nothing_leaked()


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "close-delimited"])
def test_a_body_over_the_limits_stops_while_streaming(
    face: Face, hostile: World, declared: bool
) -> None:
    # gzip-looking, then 1 GiB of junk: nothing is decompressed while downloading, so the cap
    # derived from the limits (see ArchiveLimits.archive_bytes_cap) is what stops it
    limits = ArchiveLimits(max_total_bytes=10 * MiB, max_members=100)
    cap = limits.archive_bytes_cap()
    assert cap < 32 * MiB
    total = GiB
    hostile.storage.stream(GZIP_HEAD, b"\xa5junk", total, declared=total if declared else None)
    with hostile.acquire(face, limits=limits) as sandbox:
        fragment = "declares" if declared else "is larger than"
        # dump_to(folder) reads the archive once it is downloaded (dump() reads it as it
        # arrives, and stops at the first bad block: see the test below)
        _raised(lambda: sandbox.dump_to(hostile.dest), UnsafeArchiveError, fragment)
    assert hostile.storage.wait_idle()
    assert hostile.storage.bytes_sent < cap + 64 * MiB
    assert not hostile.dest.exists()
    hostile.assert_nothing_leaked()


def test_a_dump_read_as_it_arrives_stops_at_its_first_bad_block(face: Face, hostile: World) -> None:
    # gzip-looking, then 1 GiB of junk without a declared length: dump() inflates while it
    # downloads, so the junk's first block ends the download, long before the size cap
    hostile.storage.stream(GZIP_HEAD, b"\xa5junk", GiB, declared=None)
    with hostile.acquire(face) as sandbox:
        _raised(lambda: sandbox.dump(), UnsafeArchiveError, "not a valid tar.gz archive")
    assert hostile.storage.wait_idle()
    assert hostile.storage.bytes_sent < 64 * MiB  # what the socket buffers held, at most
    hostile.assert_nothing_leaked()


def test_a_trickle_is_cut_at_the_timeout_of_the_whole_transfer(face: Face, hostile: World) -> None:
    # one byte every 0.25 s: every single read is quick, only a deadline across reads ends it
    hostile.storage.trickle(GZIP_HEAD + b"\x00" * 400, interval=0.25)
    with hostile.acquire(face) as sandbox:
        _raised(
            lambda: sandbox.dump_to(hostile.dest, timeout=1.5),
            TransferTimeoutError,
            "timeout=1.5",
        )
    assert hostile.storage.wait_idle()
    assert hostile.storage.bytes_sent < 100  # it hung up long before the 410 bytes
    assert not hostile.dest.exists()
    hostile.assert_nothing_leaked()


def test_a_dump_broken_off_part_way_is_read_again_from_its_start(
    face: Face, hostile: World
) -> None:
    # dump() reads the archive as it arrives: the first answer breaks off after the reader has
    # had part of it, the retry sends it all, and the snapshot holds exactly the archive's files
    # (nothing of the first answer twice, nothing missing)
    stamina.set_testing(True, attempts=2)
    payload = os.urandom(3 * MiB)  # incompressible: the archive is about as big
    archive = tar_gz([file("big.bin", payload), file("small.txt", "after the big one")])
    hostile.storage.cut_once(archive, at=len(archive) // 2)
    with hostile.acquire(face) as sandbox, sandbox.dump() as snapshot:
        assert dict(snapshot) == {"big.bin": payload, "small.txt": b"after the big one"}
    assert hostile.storage.requests == 2
    hostile.assert_nothing_leaked()


#: A deflate block that holds nothing (not final, stored, length 0 and its complement).
EMPTY_STORED_BLOCK = b"\x00\x00\x00\xff\xff"


@pytest.mark.parametrize("how", ["dump", "dump_to"])
def test_a_trickle_without_a_timeout_is_ended_as_too_slow(
    face: Face, hostile: World, how: str
) -> None:
    # the form: the timeout given when acquiring, then a plain dump(): no deadline for
    # the whole transfer, but under 64 KiB within a window of the sandbox's timeout ends it
    # (4 s: the same timeout bounds the API calls, which a busy machine may be slow to answer).
    # The trickle is valid deflate (empty stored blocks, as a sync flush writes them): dump()
    # inflates as it downloads, and junk would end it as no tar.gz first
    hostile.storage.trickle(GZIP_HEAD + EMPTY_STORED_BLOCK * 800, interval=0.25)
    with hostile.acquire(face, timeout=4) as sandbox:
        action = sandbox.dump if how == "dump" else (lambda: sandbox.dump_to(hostile.dest))
        _raised(action, TransferTimeoutError, "fewer than 65,536 bytes in 4 s")
    assert hostile.storage.wait_idle()
    assert hostile.storage.bytes_sent < 4000  # it hung up long before the end
    assert not hostile.dest.exists()
    hostile.assert_nothing_leaked()


@pytest.mark.parametrize("how", ["dump_to folder", "dump_to tar.gz", "dump"])
def test_a_slow_but_working_download_has_no_deadline_without_timeout(
    face: Face, hostile: World, how: str
) -> None:
    # a steady 256 KiB/s for longer than the sandbox's timeout: a 60 s whole-transfer default
    # once failed every workspace that took over a minute to download, whatever its speed. The
    # timeout also bounds each API call (acquire, GET /dump), which a loaded CI machine once
    # took over 2 s to answer: 5 s leaves them room, and the download takes ~6 s. One paced
    # download a case (each way of downloading once a face: 6 downloads, where a dump_to and a
    # dump in each of 4 cases downloaded 8, 13 s of the run's time more)
    payload = os.urandom(1536 * 1024)  # incompressible: the archive is about as big
    archive = tar_gz([file("big.bin", payload)])
    hostile.storage.paced(archive, piece=128 * 1024, interval=0.55)  # ~6 s in all
    dest = hostile.dest.with_name("dest.tar.gz") if how == "dump_to tar.gz" else hostile.dest
    with hostile.acquire(face, timeout=5) as sandbox:
        if how == "dump":
            assert sandbox.dump()["big.bin"] == payload
        else:
            assert sandbox.dump_to(dest) == dest
    if how == "dump_to tar.gz":
        assert dest.read_bytes() == archive
        dest.unlink()
    elif how == "dump_to folder":
        assert (dest / "big.bin").read_bytes() == payload
    hostile.assert_nothing_leaked()


class _Clock:
    """A clock for the download guard that moves only when told (no sleeping, no timing)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _guard(timeout: float | None, clock: _Clock) -> Any:
    from workflows._transfer import DownloadGuard

    guard = DownloadGuard("http://store/x?sig=secret", timeout, None, window=60.0, clock=clock)
    guard.start(httpx.Response(200))
    return guard


def test_the_low_speed_guard_ends_a_trickle_and_never_a_slow_working_download() -> None:
    clock = _Clock()
    # 64 KiB every 59 s, for an hour: slow, but it works, and there is no deadline in all
    working = _guard(None, clock)
    working.feed(GZIP_HEAD)
    for _ in range(61):
        clock.now += 59
        working.feed(b"\0" * 64 * 1024)
    assert working.written == len(GZIP_HEAD) + 61 * 64 * 1024
    # one byte every 2 s: ended once a window of 60 s received fewer than 64 KiB
    trickle = _guard(None, clock)
    trickle.feed(GZIP_HEAD)
    with pytest.raises(TransferTimeoutError, match="fewer than 65,536 bytes in 60 s") as info:
        for _ in range(100):
            clock.now += 2
            trickle.feed(b"\0")
    assert info.value.timeout == 60.0
    assert trickle.written == len(GZIP_HEAD) + 29  # the 30th byte, at 60 s, ended it
    assert "secret" not in str(info.value)
    # with timeout=, the deadline is what counts, whatever the speed
    fast = _guard(5.0, clock)
    fast.feed(GZIP_HEAD)
    clock.now += 4.9
    fast.feed(b"\0" * 2**20)
    clock.now += 0.2
    with pytest.raises(TransferTimeoutError, match="timeout=5"):
        fast.feed(b"\0" * 2**20)


def test_a_stalled_body_is_cut_at_the_timeout(face: Face, hostile: World) -> None:
    hostile.storage.stall(GZIP_HEAD, seconds=120)
    with hostile.acquire(face) as sandbox:
        _raised(lambda: sandbox.dump(timeout=1), TransferTimeoutError, "timeout=1")
    hostile.storage.end_pauses()
    assert hostile.storage.wait_idle()
    hostile.assert_nothing_leaked()


def test_a_stall_without_a_timeout_ends_at_the_per_read_timeout(face: Face, hostile: World) -> None:
    # no deadline for the whole transfer, but no read waits longer than the sandbox's timeout
    # (an ordinary read timeout, retried like any; one attempt here)
    hostile.storage.stall(GZIP_HEAD, seconds=120)
    with hostile.acquire(face, timeout=3) as sandbox:  # room for the API calls on a busy machine
        _raised(lambda: sandbox.dump_to(hostile.dest), TransferError, "ReadTimeout")
    hostile.storage.end_pauses()
    assert hostile.storage.wait_idle()
    assert not hostile.dest.exists()
    hostile.assert_nothing_leaked()


# --------------------------------------------------------------------------- header chains (3)


CHAINS = {
    "x-3000": lambda: [*header_chain(3000, tarfile.XHDTYPE), file("a.txt", "x")],
    "g-3000": lambda: [*header_chain(3000, tarfile.XGLTYPE), file("a.txt", "x")],
    "L-3000": lambda: [*header_chain(3000, tarfile.GNUTYPE_LONGNAME), file("a.txt", "x")],
    "global-3x1000KiB": lambda: [
        member
        for i in range(3)
        for member in (pax_global_header(1000 * 1024, first_key=i * 10**6), file(f"f{i}"))
    ],
}


@pytest.mark.parametrize("chain", sorted(CHAINS))
@pytest.mark.parametrize("how", ["dump_to", "dump", "tar.gz"])
def test_header_chains_and_global_headers_are_refused(hostile: World, chain: str, how: str) -> None:
    # 3,000 headers in a row (24 KB) raised a raw RecursionError; 20 global headers of 1 MiB
    # grew the client by 278 MiB
    archive = tar_gz([file("before.txt", "ok"), *CHAINS[chain]()], compresslevel=9)
    assert len(archive) < 5 * MiB
    hostile.storage.body(archive)
    with hostile.acquire() as sandbox:
        if how == "dump":
            action: Callable[[], object] = sandbox.dump
        elif how == "dump_to":
            action = lambda: sandbox.dump_to(hostile.dest)  # noqa: E731
        else:  # a kept archive is saved as downloaded: reading it is what must fail cleanly
            kept = hostile.tmp / "kept.tar.gz"
            sandbox.dump_to(kept)
            action = lambda: read_snapshot(kept)  # noqa: E731
        fragment = "global headers" if chain.startswith("global") else "in a row"
        _raised(action, UnsafeArchiveError, fragment)
    assert not hostile.dest.exists()
    hostile.assert_nothing_leaked()


# --------------------------------------------------------------------------- links (7)


def _link_workspace(world: World, sandbox: Any) -> None:
    """What an agent leaves with ``ln -s`` in /data, and what a venv holds."""
    sandbox.seed({"a.txt": "A", "sub/b.txt": "B", "venv/bin/python3.11": "not really"})
    ws = world.workspace(sandbox.id)
    os.symlink("/data/a.txt", ws / "link")  # ln -s /data/a.txt link
    os.symlink("/data/sub", ws / "sub-link")  # a folder
    os.symlink("/data", ws / "sub" / "root")  # the workspace itself
    os.symlink("../a.txt", ws / "sub" / "up")  # relative, inside
    os.symlink("/usr/bin/python3", ws / "venv" / "bin" / "python3")  # leaves /data
    os.symlink("python3", ws / "venv" / "bin" / "python")  # through one that leaves
    os.symlink("../../..", ws / "sub" / "escape")  # relative, leaves


INSIDE = {
    "link": "/data/a.txt",
    "sub-link": "/data/sub",
    "sub/root": "/data",
    "sub/up": "../a.txt",
}
OUTSIDE = {
    "venv/bin/python3": "/usr/bin/python3",
    "venv/bin/python": "python3",
    "sub/escape": "../../..",
}


def test_absolute_links_into_data_survive_a_dump_and_a_seed(
    real: World, caplog: pytest.LogCaptureFixture
) -> None:
    with real.acquire() as sandbox:
        _link_workspace(real, sandbox)
        with caplog.at_level(logging.WARNING, logger="workflows"):
            snapshot = sandbox.dump()
    assert dict(snapshot) == {
        "a.txt": b"A",
        "sub/b.txt": b"B",
        "venv/bin/python3.11": b"not really",
    }
    assert dict(snapshot.links) == INSIDE
    assert dict(snapshot.skipped_links) == OUTSIDE
    assert "venv/bin/python3" in caplog.text
    # seeding from the snapshot sends the links back, as they were
    with real.acquire() as again:
        again.seed(snapshot)
        ws = real.workspace(again.id)
        assert {name: os.readlink(ws / name) for name in INSIDE} == INSIDE
        assert not os.path.lexists(ws / "venv" / "bin" / "python3")
        assert again.dump() == snapshot
    real.assert_nothing_leaked()


def test_dump_to_writes_links_into_data_as_relative_links_and_skips_the_rest(
    real: World, caplog: pytest.LogCaptureFixture
) -> None:
    with real.acquire() as sandbox:
        _link_workspace(real, sandbox)
        with caplog.at_level(logging.WARNING, logger="workflows"):
            sandbox.dump_to(real.dest)
    dest = real.dest
    assert os.readlink(dest / "link") == "a.txt"
    assert os.readlink(dest / "sub-link") == "sub"
    assert os.readlink(dest / "sub" / "root") == ".."
    assert os.readlink(dest / "sub" / "up") == "../a.txt"
    assert (dest / "link").read_text() == "A"
    assert (dest / "sub-link" / "b.txt").read_text() == "B"
    assert (dest / "sub" / "root" / "a.txt").read_text() == "A"
    for name in OUTSIDE:
        assert not os.path.lexists(dest / name), name
        assert name in caplog.text
    assert (dest / "venv" / "bin" / "python3.11").read_text() == "not really"
    real.assert_nothing_leaked()


def test_dump_to_never_writes_through_a_link_already_in_the_destination(real: World) -> None:
    real.dest.mkdir()
    (real.dest / "sub").symlink_to(real.sentinel)  # planted before the dump
    with real.acquire() as sandbox:
        sandbox.seed({"sub/b.txt": "B"})
        sandbox.dump_to(real.dest)
    assert not (real.dest / "sub").is_symlink()
    assert (real.dest / "sub").is_dir()
    assert (real.dest / "sub" / "b.txt").read_text() == "B"
    real.assert_nothing_leaked()


@pytest.mark.parametrize(
    ("links", "fragment"),
    [
        ({"l": "/etc/passwd"}, "leads outside the workspace"),
        ({"l": "/database"}, "leads outside the workspace"),
        ({"l": "../x"}, "leads outside the workspace"),
        ({"a/l": "../../data/x"}, "leads outside the workspace"),
        ({"l": "/data/../etc"}, "leads outside the workspace"),
        ({"l": "m/..", "m": "/data/.."}, "leads outside the workspace"),
        ({"l": ""}, "empty"),
        ({"/l": "a.txt"}, "is absolute"),
        ({"a.txt": "b"}, "both name"),
        ({"a.txt/l": "b"}, "needs it to be a folder"),
    ],
    ids=lambda v: repr(v) if isinstance(v, dict) else None,
)
def test_links_given_to_a_snapshot_are_checked_like_seed_keys(
    real: World, links: dict[str, str], fragment: str
) -> None:
    def build() -> Snapshot:
        return Snapshot({"a.txt": "A"}, links=links)

    _raised(build, InvalidSeedPathError, fragment)
    real.assert_nothing_leaked()


# --------------------------------------------------------------------------- destinations (9, 10)


def _destination_refused(
    world: World, face: Face, path: str | Path, error: type[BaseException], fragment: str
) -> None:
    before = sorted(p.name for p in world.tmp.iterdir())
    with world.acquire(face) as sandbox:
        _raised(lambda: sandbox.dump_to(path), error, fragment)
    # checked before anything was downloaded
    assert world.storage.requests == 0
    assert sorted(p.name for p in world.tmp.iterdir()) == before
    world.assert_nothing_leaked()


def test_dump_to_an_empty_path_is_refused(face: Face, hostile: World) -> None:
    (hostile.tmp / "precious.txt").write_text("keep")
    os.chdir(hostile.tmp)  # dump_to("") once extracted here, replacing files
    _destination_refused(hostile, face, "", InvalidInputError, "empty")
    assert (hostile.tmp / "precious.txt").read_text() == "keep"


def test_dump_to_under_a_file_is_refused_before_downloading(face: Face, hostile: World) -> None:
    (hostile.tmp / "a-file").write_text("x")
    _destination_refused(
        hostile, face, hostile.tmp / "a-file" / "out", InvalidInputError, "is not a folder"
    )


def test_dump_to_under_proc_is_refused_before_downloading(face: Face, hostile: World) -> None:
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc on this system")
    _destination_refused(hostile, face, "/proc/self/x/out", InvalidInputError, "/proc/self/x/out")


@pytest.mark.parametrize(
    ("name", "fragment"),
    [(long_name(300), "NAME_MAX"), (long_name(200, depth=25), "PATH_MAX")],
    ids=["component-300", "path-5024"],
)
def test_dump_to_a_name_too_long_is_refused(
    face: Face, hostile: World, name: str, fragment: str
) -> None:
    _destination_refused(hostile, face, hostile.tmp / name, InvalidInputError, fragment)


def test_dump_to_a_tar_gz_replaces_a_symlink_and_never_writes_through_it(
    face: Face, hostile: World
) -> None:
    # a shared folder where someone planted ws.tar.gz -> ~/.bashrc, and a dangling link
    victim = hostile.sentinel / "home"
    victim.mkdir()
    (victim / ".bashrc").write_text("original\n")
    shared = hostile.tmp / "shared"
    shared.mkdir()
    (shared / "ws.tar.gz").symlink_to(victim / ".bashrc")
    (shared / "dangling.tgz").symlink_to(victim / "planted.tar.gz")
    archive = tar_gz([file("a.txt", "A")])
    hostile.storage.body(archive)
    with hostile.acquire(face) as sandbox:
        for name in ("ws.tar.gz", "dangling.tgz"):
            assert sandbox.dump_to(shared / name) == shared / name
            assert not (shared / name).is_symlink(), name
            assert (shared / name).read_bytes() == archive
    assert (victim / ".bashrc").read_text() == "original\n"
    assert sorted(os.listdir(victim)) == [".bashrc"]
    assert sorted(os.listdir(shared)) == ["dangling.tgz", "ws.tar.gz"]
    victim.joinpath(".bashrc").unlink()
    victim.rmdir()
    hostile.assert_nothing_leaked()


@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-folder", "dangling"])
def test_dump_to_a_folder_that_is_a_symlink_is_refused_before_downloading(
    face: Face, hostile: World, dangling: bool
) -> None:
    # extracting into the link's target would write outside the path named
    elsewhere = hostile.tmp / "elsewhere"
    if not dangling:
        elsewhere.mkdir()
    link = hostile.tmp / "ws"
    link.symlink_to(elsewhere)
    _destination_refused(hostile, face, link, InvalidInputError, "is a symlink")
    assert link.is_symlink()
    assert list(elsewhere.iterdir()) == [] if not dangling else not elsewhere.exists()


def test_a_member_too_deep_for_the_destination_is_refused(hostile: World) -> None:
    # 3,931 bytes inside the sandbox (fine under /data), over PATH_MAX under a long destination
    deep = long_name(150, depth=26)
    hostile.storage.body(tar_gz([file("first.txt", "1"), file(f"{deep}/x.txt", "deep")]))
    parent = hostile.tmp / "out" / ("p" * 200)  # made for the dump, so removed after it fails
    with hostile.acquire() as sandbox:
        message = _raised(
            lambda: sandbox.dump_to(parent / "dest"), InvalidInputError, "File name too long"
        )
    assert deep[:40] in message
    assert not parent.exists(), "the folders made for the dump were left"
    hostile.assert_nothing_leaked()


# --------------------------------------------------------------------------- seeding (9, 11)


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        (long_name(300), "255"),
        (f"a/{long_name(256)}/b.txt", "255"),
        (long_name(200, depth=21), "4,095"),
        ("é" * 128 + ".txt", "255"),  # 260 bytes in UTF-8, 132 characters
    ],
    ids=["component-300", "inner-component-256", "path-4220", "utf8-bytes"],
)
def test_seed_keys_too_long_are_refused_before_sending(
    real: World, key: str, fragment: str
) -> None:
    with real.acquire() as sandbox:
        message = _raised(lambda: sandbox.seed({key: "x"}), InvalidSeedPathError, fragment)
        assert key[:40] in message
        assert not any(real.workspace(sandbox.id).iterdir())
    real.assert_nothing_leaked()


def test_a_file_that_vanishes_before_packing_is_named(
    real: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = real.tmp / "project"
    project.mkdir()
    (project / "a.txt").write_text("a")
    (project / "gone.txt").write_text("soon gone")
    import workflows._seed._from_folder as seed_plan

    planned = seed_plan.plan_directory

    def plan_then_delete(*args: Any, **kwargs: Any) -> Any:
        entries = planned(*args, **kwargs)
        (project / "gone.txt").unlink()  # deleted between planning and packing
        return entries

    import_the_library()  # the faces plan through workflows._seed._from_folder.FolderRules
    monkeypatch.setattr("workflows._seed._from_folder.plan_directory", plan_then_delete)
    with real.acquire() as sandbox:
        _raised(lambda: sandbox.seed_directory(project), SourceChangedError, "gone.txt")
        assert not any(real.workspace(sandbox.id).iterdir())
    real.assert_nothing_leaked()


def test_an_unreadable_file_is_named_before_sending(
    real: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = real.tmp / "project"
    project.mkdir()
    secret = project / "secret.txt"
    secret.write_text("no")
    secret.chmod(0)
    if os.geteuid() == 0:
        # root reads files whatever their permissions: the OS's refusal is simulated where the
        # planned file is opened, so the same refusal is checked as any other user would meet it
        from klavis_archive import PlannedTree

        opened = PlannedTree.open_file

        def refusing_open(tree: PlannedTree, parts: Any, identity: Any) -> int:
            if parts[-1] == "secret.txt":
                raise PermissionError(errno.EACCES, "Permission denied")
            return opened(tree, parts, identity)

        monkeypatch.setattr(PlannedTree, "open_file", refusing_open)
    try:
        with real.acquire() as sandbox:
            _raised(lambda: sandbox.seed_directory(project), InvalidInputError, "secret.txt")
            assert not any(real.workspace(sandbox.id).iterdir())
    finally:
        secret.chmod(0o644)
    real.assert_nothing_leaked()
