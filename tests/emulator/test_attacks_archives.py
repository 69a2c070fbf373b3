"""Hostile archives sent to the emulator: seeds (``initialize``) and execution uploads.

Every case asserts three outcomes:

* the specific answer: the HTTP status and a fragment of the ``detail`` (or, for archives that
  must be accepted, what the workspace then holds);
* nothing written outside the target: the sandbox's workspace is exactly as it was before the
  refused archive, no path of the emulator's data folder outside the workspace, the object
  store and the (empty again) staging folder changed, and no ``escaped-*`` file appeared next
  to the data folder or at the host's ``/data``;
* nothing left acquired: the case's sandboxes are released and the tenant's list is empty.

Archives are built by :mod:`tests.crafted`, streamed, so a 1 GiB sparse member or a 64 MiB PAX
header costs a few KiB to send; memory is measured by the benchmark, not here.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from klavis_emulator import ArchiveLimits, EmulatorConfig, EmulatorServer
from tests.crafted import (
    Member,
    extended_header,
    file,
    folder,
    hardlink,
    long_name,
    pax_header_bomb,
    pax_sparse_file,
    sparse_file,
    symlink,
    tar_gz,
    zeros_file,
)
from tests.helpers import data_folder_paths, make_chain, staging_leftovers

GZIP = {"Content-Type": "application/gzip"}
BASELINE = [file("keep.txt", "kept"), folder("d"), file("d/inner.txt", "inner")]

# --------------------------------------------------------------------------- harness


def _snapshot(root: Path) -> dict[str, bytes | str | None]:
    """Every path under ``root`` -> file bytes, link target, or None for folders."""
    result: dict[str, bytes | str | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                result[rel] = os.readlink(path)
            elif path.is_file():
                result[rel] = path.read_bytes()
            else:
                result[rel] = None
    return result


@dataclass
class Tenant:
    """One test's tenant on the session emulator, and the sandboxes it set up."""

    emulator: EmulatorServer
    client: httpx.Client
    token: str
    sandbox_ids: list[str] = field(default_factory=list)

    @property
    def escaped(self) -> str:
        """The file name an escaping member would use (unique to the test)."""
        return f"escaped-{self.token[-8:]}.txt"

    def acquire(self) -> str:
        """A sandbox of this tenant, released by the fixture."""
        response = self.client.post("/local-sandbox", json={"server_names": ["filesystem"]})
        assert response.status_code == 201, response.text
        sandbox_id: str = response.json()["local_sandbox_id"]
        self.sandbox_ids.append(sandbox_id)
        return sandbox_id

    def workspace(self, sandbox_id: str) -> Path:
        """The emulator's folder for the sandbox's workspace."""
        return self.emulator.state.workspace_path(sandbox_id)

    def upload(self, url: str, archive: bytes) -> None:
        """PUT ``archive`` to a signed upload URL."""
        put = httpx.put(url, content=archive, headers=GZIP, timeout=60)
        assert put.status_code == 200, put.text

    def seed(self, sandbox_id: str, archive: bytes) -> httpx.Response:
        """Upload ``archive`` as the sandbox's workspace and ask for initialize."""
        response = self.client.post(f"/local-sandbox/{sandbox_id}/upload-url")
        assert response.status_code == 200, response.text
        self.upload(response.json()["upload_url"], archive)
        return self.client.post(f"/local-sandbox/{sandbox_id}/initialize", timeout=120)

    def outside(self) -> set[str]:
        """Every path of the data folder outside workspaces of this tenant, the object store,
        and the SQLite files; plus the escape targets next to the data folder."""
        data_dir = self.emulator.data_dir
        mine = {self.workspace(sandbox_id) for sandbox_id in self.sandbox_ids}
        skip = (*mine, data_dir / "storage")
        paths = {
            str(path)
            for path in data_folder_paths(self.emulator.state)
            if not any(path == s or s in path.parents for s in skip) and "sqlite3" not in path.name
        }
        for place in (data_dir.parent, data_dir.parent.parent, Path("/data")):
            if (place / self.escaped).exists():
                paths.add(str(place / self.escaped))
        return paths

    def release_all(self) -> None:
        """Release every sandbox of the case and check the tenant holds none."""
        for sandbox_id in self.sandbox_ids:
            response = self.client.delete(f"/local-sandbox/{sandbox_id}")
            assert response.status_code in (200, 404), response.text
        listed = self.client.get("/local-sandbox")
        assert listed.json()["total_count"] == 0, listed.text


@pytest.fixture
def tenant(emulator: EmulatorServer, client: httpx.Client, token: str) -> Iterator[Tenant]:
    """This test's tenant; its sandboxes are released, and checked gone, after the test."""
    world = Tenant(emulator, client, token)
    yield world
    world.release_all()


def _refused_and_untouched(
    tenant: Tenant, archive: bytes, status: int, fragment: str
) -> httpx.Response:
    """Seed a sandbox with the baseline, then ``archive``: refused with ``status`` and
    ``fragment``, the workspace and everything outside it unchanged."""
    sandbox_id = tenant.acquire()
    assert tenant.seed(sandbox_id, tar_gz(BASELINE)).status_code == 200
    workspace = tenant.workspace(sandbox_id)
    before = _snapshot(workspace)
    outside_before = tenant.outside()

    response = tenant.seed(sandbox_id, archive)
    assert response.status_code == status, response.text
    assert fragment in response.json()["detail"], response.text
    assert _snapshot(workspace) == before
    assert tenant.outside() == outside_before
    assert staging_leftovers(tenant.emulator.state) == []
    return response


# --------------------------------------------------------------------------- refused seeds


@dataclass(frozen=True)
class Refused:
    """A seed archive (built when the case runs) refused with ``status`` and ``fragment``."""

    id: str
    members: Callable[[str], Sequence[Member]]
    status: int
    fragment: str


GiB = 1024**3
MiB = 1024**2

REFUSED: list[Refused] = [
    # sparse members: 85 bytes of upload used to put 1 GiB on the emulator's disk
    Refused(
        "gnu-sparse-1GiB",
        lambda esc: [file("ok.txt"), sparse_file("big.bin", GiB)],
        400,
        "'big.bin' is a sparse file",
    ),
    Refused(
        "pax-sparse-0.0",
        lambda esc: [file("ok.txt"), pax_sparse_file("big.bin", GiB, "0.0")],
        400,
        "'big.bin' is a sparse file",
    ),
    Refused(
        "pax-sparse-0.1",
        lambda esc: [file("ok.txt"), pax_sparse_file("big.bin", GiB, "0.1")],
        400,
        "'big.bin' is a sparse file",
    ),
    Refused(
        "pax-sparse-1.0",
        lambda esc: [file("ok.txt"), pax_sparse_file("big.bin", GiB, "1.0")],
        400,
        "'big.bin' is a sparse file",
    ),
    # extended headers that tarfile would read whole into memory
    Refused(
        "pax-header-64MiB",
        lambda esc: [extended_header(64 * MiB), file("after.txt")],
        400,
        "extended header (PAX or GNU long name) of 67,108,864 bytes",
    ),
    Refused(
        "gnu-long-name-2MiB",
        lambda esc: [extended_header(2 * MiB, tarfile.GNUTYPE_LONGNAME), file("x")],
        400,
        "extended header (PAX or GNU long name) of 2,097,152 bytes",
    ),
    Refused(
        "gnu-long-link-2MiB",
        lambda esc: [extended_header(2 * MiB, tarfile.GNUTYPE_LONGLINK), symlink("x", "y")],
        400,
        "extended header (PAX or GNU long name) of 2,097,152 bytes",
    ),
    Refused(
        "pax-headers-in-a-row",
        lambda esc: [*(extended_header(600) for _ in range(9)), file("x")],
        400,
        "more than 8 extended headers in a row",
    ),
    Refused(
        "pax-chain-over-1MiB",
        lambda esc: [extended_header(600_000), extended_header(600_000), file("x")],
        400,
        "extended header (PAX or GNU long name) of 1,200,000 bytes",
    ),
    Refused(
        "global-headers-add-up",
        lambda esc: [
            extended_header(600_000, tarfile.XGLTYPE),
            file("a"),
            extended_header(600_000, tarfile.XGLTYPE),
            file("b"),
        ],
        400,
        "extended header (PAX or GNU long name) of 1,200,000 bytes",
    ),
    # names the file system cannot hold: a 400 naming the member, never a 500
    Refused(
        "name-component-300",
        lambda esc: [file(long_name(300), "x")],
        400,
        "has a path with a name component of 300 bytes; the limit is 255",
    ),
    Refused(
        "name-component-256-utf8",
        lambda esc: [file("d/" + "é" * 128, "x")],
        400,
        "name component of 256 bytes",
    ),
    Refused(
        "folder-component-300",
        lambda esc: [folder(long_name(300))],
        400,
        "name component of 300 bytes",
    ),
    Refused(
        "path-over-path-max",
        lambda esc: [file(long_name(200, depth=25), "x")],
        400,
        "has a path of 5024 bytes; the limit is 4095",
    ),
    Refused(
        "path-at-path-max-too-long-on-the-host",
        # 4,090 bytes, each component under 255: fine in the sandbox (/data/ + 4,090), too
        # long once the emulator's own staging folder is put in front of it
        lambda esc: [file(long_name(250, depth=16) + "/" + "f" * 74)],
        400,
        "cannot be written: File name too long (ENAMETOOLONG)",
    ),
    Refused(
        "too-deep",
        lambda esc: [file("/".join(["a"] * 600))],
        400,
        "is 599 folders deep; the limit is 512",
    ),
    Refused(
        "symlink-target-component-300",
        lambda esc: [symlink("link", long_name(300))],
        400,
        "a link target with a name component of 300 bytes",
    ),
    Refused(
        "symlink-target-over-path-max",
        lambda esc: [symlink("link", long_name(200, depth=25))],
        400,
        "a link target of 5024 bytes",
    ),
    Refused(
        "hard-link-target-component-300",
        lambda esc: [file("a"), hardlink("h", long_name(300))],
        400,
        "name component of 300 bytes",
    ),
    # absolute links: inside iff the target is /data or under /data/, never followed on the host
    Refused(
        "absolute-link-outside",
        lambda esc: [symlink("link", "/etc/passwd")],
        400,
        "is a symbolic link to an absolute path ('/etc/passwd') outside /data",
    ),
    Refused(
        "absolute-link-prefix-is-not-data",
        lambda esc: [symlink("link", "/datax/a.txt")],
        400,
        "outside /data",
    ),
    Refused(
        "absolute-link-double-slash",
        lambda esc: [symlink("link", "//data/a.txt")],
        400,
        "outside /data",
    ),
    Refused(
        "absolute-link-dot-dot-out-of-data",
        lambda esc: [symlink("link", "/data/../etc/passwd")],
        400,
        "symbolic link leading outside the workspace ('/data/../etc/passwd')",
    ),
    Refused(
        "absolute-link-to-data-parent",
        lambda esc: [symlink("link", "/data/..")],
        400,
        "leading outside the workspace",
    ),
    Refused(
        "absolute-link-resolving-out-through-a-relative-link",
        lambda esc: [folder("x"), symlink("x/up", ".."), symlink("a", "/data/x/up/../" + esc)],
        400,
        "Archive member 'a' is a symbolic link leading outside the workspace",
    ),
    Refused(
        "write-through-an-absolute-link",
        lambda esc: [folder("sub"), symlink("d2", "/data/sub"), file("d2/" + esc)],
        400,
        "through the symbolic link 'd2', which leads to an absolute path",
    ),
    Refused(
        "write-through-a-link-to-an-absolute-link",
        lambda esc: [
            folder("sub"),
            symlink("abs", "/data/sub"),
            symlink("rel", "abs"),
            file("rel/" + esc),
        ],
        400,
        "through the symbolic link 'rel', which leads to an absolute path",
    ),
    Refused(
        "write-through-an-absolute-link-to-the-root",
        lambda esc: [symlink("root", "/data"), file("root/" + esc)],
        400,
        "which leads to an absolute path",
    ),
    Refused(
        "absolute-link-made-to-lead-out-by-a-later-member",
        lambda esc: [
            folder("d0"),
            folder("d0/sub"),
            folder("sub"),
            symlink("q", "d0"),
            symlink("p", "/data/q/sub/../.."),
            symlink("q", "."),  # now /data/q/sub/../.. is the workspace's parent
        ],
        400,
        "leaves a symbolic link leading outside the workspace ('p' -> '/data/q/sub/../..')",
    ),
    Refused(
        "hard-link-through-an-absolute-link",
        lambda esc: [
            folder("real"),
            file("real/f.txt", "f"),
            symlink("d2", "/data/real"),
            hardlink("h", "d2/f.txt"),
        ],
        400,
        "which is not an earlier regular file",
    ),
]


@pytest.mark.parametrize("case", REFUSED, ids=[case.id for case in REFUSED])
def test_hostile_seed_is_refused_and_changes_nothing(tenant: Tenant, case: Refused) -> None:
    archive = tar_gz(case.members(tenant.escaped))
    assert len(archive) < 200_000  # streamed and compressed: the hostile part costs nothing
    _refused_and_untouched(tenant, archive, case.status, case.fragment)


def test_a_pax_header_bomb_is_refused_from_its_first_block(tenant: Tenant) -> None:
    """The 1 GiB header of the issue: 1 MB to upload, refused before its data is read (it
    used to take the emulator from 313 to 3,784 MiB and answer 200)."""
    archive = pax_header_bomb(GiB)
    _refused_and_untouched(tenant, archive, 400, "of 1,073,741,824 bytes")


# --------------------------------------------------------------------------- accepted seeds


def test_links_to_data_are_workspace_content_kept_verbatim(tenant: Tenant) -> None:
    """``ln -s /data/a.txt link`` inside the sandbox: seeded and dumped as written."""
    links = {
        "link": "/data/a.txt",
        "root": "/data",
        "sub/up": "/data/sub/../a.txt",
        "sub/dangling": "/data/not-yet-there",
        "loop1": "loop2",  # a loop inside the workspace leads nowhere, so not outside
        "loop2": "loop1",
    }
    sandbox_id = tenant.acquire()
    members = [file("a.txt", "A"), folder("sub")]
    members += [symlink(name, target) for name, target in links.items()]
    response = tenant.seed(sandbox_id, tar_gz(members))
    assert response.status_code == 200, response.text
    workspace = tenant.workspace(sandbox_id)
    for name, target in links.items():
        assert os.readlink(workspace / name) == target
    assert (workspace / "a.txt").read_text() == "A"

    dumped = _dump(tenant, sandbox_id)
    for name, target in links.items():
        assert dumped[f"./{name}"] == ("link", target)

    # the dump seeds another sandbox as it is (a round trip)
    other = tenant.acquire()
    assert tenant.seed(other, _dump_bytes(tenant, sandbox_id)).status_code == 200
    assert _snapshot(tenant.workspace(other)) == _snapshot(workspace)


def test_a_link_made_inside_the_sandbox_does_not_block_later_seeds(tenant: Tenant) -> None:
    """The issue's case: after an agent ran ``ln -s /data/a.txt link`` through the terminal
    server, every seed got 400. The link is made here where the server would make it."""
    sandbox_id = tenant.acquire()
    assert tenant.seed(sandbox_id, tar_gz([file("a.txt", "A")])).status_code == 200
    workspace = tenant.workspace(sandbox_id)
    os.symlink("/data/a.txt", workspace / "link")
    response = tenant.seed(sandbox_id, tar_gz([file("b.txt", "B")]))
    assert response.status_code == 200, response.text
    assert os.readlink(workspace / "link") == "/data/a.txt"
    assert (workspace / "b.txt").read_text() == "B"
    assert _dump(tenant, sandbox_id)["./link"] == ("link", "/data/a.txt")


def test_a_venv_made_inside_the_sandbox_does_not_block_later_seeds(tenant: Tenant) -> None:
    """A venv made in /data has ``bin/python -> /usr/bin/python3``: outside the workspace,
    but made inside the sandbox, not by an archive. Later seeds are accepted and keep it; an
    archive bringing such a link, or writing through it, is still refused."""
    sandbox_id = tenant.acquire()
    assert tenant.seed(sandbox_id, tar_gz([folder("venv"), folder("venv/bin")])).status_code == 200
    workspace = tenant.workspace(sandbox_id)
    os.symlink("/usr/bin/python3", workspace / "venv" / "bin" / "python")
    os.symlink("/etc", workspace / "etc")
    response = tenant.seed(sandbox_id, tar_gz([file("main.py", "print(1)")]))
    assert response.status_code == 200, response.text
    assert os.readlink(workspace / "venv" / "bin" / "python") == "/usr/bin/python3"
    assert (workspace / "main.py").read_text() == "print(1)"
    assert _dump(tenant, sandbox_id)["./venv/bin/python"] == ("link", "/usr/bin/python3")

    before = _snapshot(workspace)
    outside_before = tenant.outside()
    for archive, fragment in [
        (tar_gz([symlink("venv/bin/python3", "/usr/bin/python3")]), "outside /data"),
        (tar_gz([file("etc/" + tenant.escaped)]), "outside the workspace through the symbolic"),
    ]:
        response = tenant.seed(sandbox_id, archive)
        assert response.status_code == 400, response.text
        assert fragment in response.json()["detail"]
        assert _snapshot(workspace) == before
        assert tenant.outside() == outside_before
    assert not Path("/etc", tenant.escaped).exists()


def test_names_at_the_limits_are_accepted(tenant: Tenant) -> None:
    sandbox_id = tenant.acquire()
    name = long_name(255)
    utf8 = "é" * 127  # 254 bytes
    long = long_name(100, depth=30)  # 3,029 bytes
    deep = "/".join(["a"] * 513)  # 512 folders
    contents = {name: "n", utf8: "u", long: "l", deep: "d"}
    members = [file(path, text) for path, text in contents.items()]
    response = tenant.seed(sandbox_id, tar_gz([*members, symlink("link", name)]))
    assert response.status_code == 200, response.text
    workspace = tenant.workspace(sandbox_id)
    for path, text in contents.items():
        assert (workspace / path).read_text() == text
    assert _dump(tenant, sandbox_id)[f"./{deep}"] == ("file", b"d")


def test_odd_things_made_inside_the_sandbox_do_not_break_later_seeds(tenant: Tenant) -> None:
    """A FIFO, or folders deeper than Python's recursion limit allows ``shutil.copytree`` to
    copy (``mkdir -p`` in the sandbox can make 2,000 levels): the copy made for a seed used
    to fail on both with a 500. They are made here where the sandbox would make them."""
    sandbox_id = tenant.acquire()
    workspace = tenant.workspace(sandbox_id)
    os.mkfifo(workspace / "pipe")
    deep = workspace.joinpath(*["d"] * 600)
    deep.mkdir(parents=True)
    (deep / "bottom.txt").write_text("bottom")
    response = tenant.seed(sandbox_id, tar_gz([file("new.txt", "new")]))
    assert response.status_code == 200, response.text
    assert (workspace / "new.txt").read_text() == "new"
    assert (deep / "bottom.txt").read_text() == "bottom"
    dumped = _dump(tenant, sandbox_id)
    assert dumped["./" + "/".join(["d"] * 600) + "/bottom.txt"] == ("file", b"bottom")
    assert "./pipe" not in dumped  # FIFOs are neither dumped nor kept by a seed


@pytest.mark.parametrize("how", ["reset", "release"])
def test_a_tree_deeper_than_python_recursion_is_reset_and_released(
    tenant: Tenant, how: str
) -> None:
    """A sandbox's process can make folders thousands of levels deep (entering each one, so
    no path passes PATH_MAX). ``shutil.rmtree`` recursed once a level before Python 3.13, and
    ``RecursionError`` is no ``OSError``: even ``ignore_errors=True`` raised it, and every reset
    and release of such a sandbox answered 500."""
    sandbox_id = tenant.acquire()
    workspace = tenant.workspace(sandbox_id)
    make_chain(workspace, 3000)
    if how == "reset":
        response = tenant.client.post(f"/local-sandbox/{sandbox_id}/reset")
        assert response.status_code == 200, response.text
        assert os.listdir(workspace) == []
    else:
        response = tenant.client.delete(f"/local-sandbox/{sandbox_id}")
        assert response.status_code == 200, response.text
        assert not workspace.exists()


def test_a_real_compression_ratio_is_accepted(tenant: Tenant) -> None:
    """16 MiB of zeros pack about 1030:1, deflate's best: under the 2000:1 cap."""
    sandbox_id = tenant.acquire()
    archive = tar_gz([zeros_file("zeros.bin", 16 * MiB)], compresslevel=9)
    assert len(archive) < 20_000
    response = tenant.seed(sandbox_id, archive)
    assert response.status_code == 200, response.text
    assert (tenant.workspace(sandbox_id) / "zeros.bin").stat().st_size == 16 * MiB


def test_the_expansion_ratio_cap_answers_413(tmp_path: Path, token: str) -> None:
    """The ratio cap itself (a real archive cannot reach the default 2000:1: lowered here)."""
    limits = ArchiveLimits(max_ratio=100, ratio_grace_bytes=MiB)
    with (
        EmulatorServer(EmulatorConfig(data_dir=tmp_path / "data", archive_limits=limits)) as server,
        httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as http,
    ):
        own = Tenant(server, http, token)
        try:
            archive = tar_gz([file("ok.txt"), zeros_file("zeros.bin", 8 * MiB)])
            _refused_and_untouched(own, archive, 413, "expands more than 100 times")
        finally:
            own.release_all()


# --------------------------------------------------------------------------- execution uploads


@pytest.mark.parametrize(
    ("members", "fragment"),
    [
        ([file("main.py", "print(1)"), sparse_file("big.bin", GiB)], "'big.bin' is a sparse file"),
        ([extended_header(64 * MiB), file("main.py")], "extended header"),
        ([file("main.py"), file(long_name(300))], "name component of 300 bytes"),
        ([file("main.py"), symlink("l", "/etc/passwd")], "outside /data"),
    ],
    ids=["sparse", "pax-header", "long-name", "absolute-link"],
)
def test_hostile_execution_archive_is_refused(
    tenant: Tenant, members: list[Member], fragment: str
) -> None:
    sandbox_id = tenant.acquire()
    outside_before = tenant.outside()
    response = tenant.client.post(
        f"/local-sandbox/{sandbox_id}/execution-upload-url", json={"execution_name": "run1"}
    )
    assert response.status_code == 200, response.text
    tenant.upload(response.json()["upload_url"], tar_gz(members))
    started = tenant.client.post(
        f"/local-sandbox/{sandbox_id}/execute", json={"execution_name": "run1"}
    )
    assert started.status_code == 400, started.text
    assert fragment in started.json()["detail"]
    assert tenant.outside() == outside_before
    assert not any(tenant.workspace(sandbox_id).iterdir())
    status = tenant.client.get(
        f"/local-sandbox/{sandbox_id}/execution-status", params={"execution_name": "run1"}
    )
    assert status.status_code == 404, status.text


# --------------------------------------------------------------------------- helpers


def _dump_bytes(tenant: Tenant, sandbox_id: str) -> bytes:
    response = tenant.client.get(f"/local-sandbox/{sandbox_id}/dump")
    assert response.status_code == 200, response.text
    download = httpx.get(response.json()["download_url"], timeout=60)
    assert download.status_code == 200
    return download.content


def _dump(tenant: Tenant, sandbox_id: str) -> dict[str, tuple[str, str | bytes | None]]:
    """Member name -> (kind, link target or contents) of the sandbox's dump."""
    members: dict[str, tuple[str, str | bytes | None]] = {}
    with tarfile.open(fileobj=io.BytesIO(_dump_bytes(tenant, sandbox_id)), mode="r:gz") as tar:
        for info in tar:
            if info.issym():
                members[info.name] = ("link", info.linkname)
            elif info.isreg():
                data = tar.extractfile(info)
                members[info.name] = ("file", data.read() if data else None)
            else:
                members[info.name] = ("other", None)
    return members
