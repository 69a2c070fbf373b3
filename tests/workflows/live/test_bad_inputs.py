"""A corpus of bad inputs, across `workflows` and the emulator, each refused precisely.

Every case asserts the *specific* error (the library's exception class itself, not a parent,
plus a fragment of its message; or the HTTP status plus a fragment of the ``detail``), that the
API key does not appear in it, and that nothing leaked:

* no sandbox is left listed for the test's tenant once the case's own set-up sandboxes are
  released (so a refused acquire created nothing, and a ``with`` block released on error);
* the ledger (private to the test) holds nothing;
* the ``sentinel`` folder, where an escaping write would land, stays empty; and no file named
  ``escaped-*`` appears anywhere in the emulator's data folder.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import stamina

import workflows
from klavis_emulator import EmulatorServer
from tests.helpers import build_tar_gz
from workflows import (
    ConfigurationError,
    FileTooLargeError,
    InvalidInputError,
    InvalidSeedPathError,
    LocalSandbox,
    NotFoundError,
    Snapshot,
    UnsafeArchiveError,
)
from workflows._dump._extract import extract_archive

# --------------------------------------------------------------------------- harness


@dataclass
class Ctx:
    """One case's world: its tenant, the session emulator, and folders of its own."""

    emulator: EmulatorServer
    client: httpx.Client
    token: str
    tmp: Path
    setup_ids: list[str] = field(default_factory=list)

    @property
    def sentinel(self) -> Path:
        """A folder that must stay empty: escaping writes would land here."""
        return self.tmp / "sentinel"

    @property
    def escaped(self) -> str:
        """The name an escaping archive member uses (unique to the test)."""
        return f"escaped-{self.token[-8:]}.txt"

    @property
    def conn(self) -> dict[str, Any]:
        """Library keyword arguments for this tenant."""
        return {"api_key": self.token, "base_url": self.emulator.base_url}

    def acquire(self, servers: Sequence[str] = ("filesystem",)) -> str:
        """A set-up sandbox (plain HTTP), released by the harness after the case."""
        response = self.client.post("/local-sandbox", json={"server_names": list(servers)})
        assert response.status_code == 201, response.text
        sandbox_id: str = response.json()["local_sandbox_id"]
        self.setup_ids.append(sandbox_id)
        return sandbox_id

    def upload_url(self, sandbox_id: str) -> str:
        """A signed upload URL for the sandbox's workspace archive."""
        response = self.client.post(f"/local-sandbox/{sandbox_id}/upload-url")
        assert response.status_code == 200, response.text
        url: str = response.json()["upload_url"]
        return url

    def initialize_with(self, archive: bytes) -> httpx.Response:
        """Upload ``archive`` to a fresh set-up sandbox and ask for initialize."""
        sandbox_id = self.acquire()
        put = httpx.put(
            self.upload_url(sandbox_id),
            content=archive,
            headers={"Content-Type": "application/gzip"},
            timeout=30,
        )
        assert put.status_code == 200, put.text
        response = self.client.post(f"/local-sandbox/{sandbox_id}/initialize")
        assert not any(self.workspace(sandbox_id).iterdir()), "the refused archive left files"
        return response

    def workspace(self, sandbox_id: str) -> Path:
        """The emulator's workspace folder of a sandbox."""
        return self.emulator.state.workspace_path(sandbox_id)

    def assert_untouched(self, sandbox_id: str) -> None:
        """Nothing reached the sandbox: no upload stored, an empty workspace."""
        upload = self.emulator.data_dir / "storage" / "sandboxes" / sandbox_id
        assert not upload.exists() or not any(upload.iterdir()), "an archive was uploaded"
        assert not any(self.workspace(sandbox_id).iterdir()), "the workspace changed"

    def refused_inside_with(self, action: Callable[[LocalSandbox], object]) -> None:
        """Run ``action`` on a library sandbox in ``with``; check nothing was sent first."""
        with LocalSandbox.acquire(["filesystem"], ttl_seconds=600, **self.conn) as sandbox:
            try:
                action(sandbox)
            finally:
                self.assert_untouched(sandbox.id)

    def release_setup(self) -> None:
        """Release the set-up sandboxes (already gone is fine)."""
        for sandbox_id in self.setup_ids:
            response = self.client.delete(f"/local-sandbox/{sandbox_id}")
            assert response.status_code in (200, 404), response.text


@dataclass(frozen=True)
class Raises:
    """The library raises exactly ``error`` with ``fragment`` in its message."""

    error: type[BaseException]
    fragment: str


@dataclass(frozen=True)
class Answers:
    """The emulator answers ``status`` with ``fragment`` in its ``detail``."""

    status: int
    fragment: str


@dataclass(frozen=True)
class Case:
    id: str
    run: Callable[[Ctx], Any]
    expect: Raises | Answers


CASES: list[Case] = []


def case(case_id: str, expect: Raises | Answers) -> Callable[[Callable[[Ctx], Any]], None]:
    """Register a bad-input case."""

    def register(fn: Callable[[Ctx], Any]) -> None:
        CASES.append(Case(case_id, fn, expect))

    return register


def tar_gz(members: Sequence[tarfile.TarInfo], data: Mapping[str, bytes] | None = None) -> bytes:
    """A tar.gz of hand-made members (``data`` holds the contents of regular files)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info in members:
            content = (data or {}).get(info.name, b"")
            if info.isreg():
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
            else:
                tar.addfile(info)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    """A tar member of type ``kind``."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.mode = 0o644
    return info


# --------------------------------------------------------------------------- library: acquire


def _acquire(**kwargs: Any) -> Callable[[Ctx], object]:
    def run(ctx: Ctx) -> object:
        arguments = {"server_names": ["filesystem"], **ctx.conn, **kwargs}
        names = arguments.pop("server_names")
        return LocalSandbox.acquire(names, **arguments)

    return run


case(
    "acquire-unknown-server",
    Raises(InvalidInputError, "unknown MCP server 'gitt'; valid names are: "),
)(_acquire(server_names=["filesystem", "gitt"]))
case("acquire-empty-server-list", Raises(InvalidInputError, "server_names is empty"))(
    _acquire(server_names=[])
)
case("acquire-bare-server-string", Raises(InvalidInputError, 'did you mean ["git"]'))(
    _acquire(server_names="git")
)
case("acquire-server-named-twice", Raises(InvalidInputError, "named twice"))(
    _acquire(server_names=["git", "git"])
)
case("acquire-server-not-a-string", Raises(InvalidInputError, "unknown MCP server 3"))(
    _acquire(server_names=["git", 3])
)
case("acquire-ttl-below-60", Raises(InvalidInputError, "between 60 and 86400"))(
    _acquire(ttl_seconds=59)
)
case("acquire-ttl-above-86400", Raises(InvalidInputError, "between 60 and 86400"))(
    _acquire(ttl_seconds=86_401)
)
case("acquire-ttl-bool", Raises(InvalidInputError, "whole number of seconds"))(
    _acquire(ttl_seconds=True)
)
case("acquire-ttl-float", Raises(InvalidInputError, "whole number of seconds"))(
    _acquire(ttl_seconds=600.5)
)
case("acquire-unknown-benchmark", Raises(InvalidInputError, "unknown benchmark 'MCP-Atlas'"))(
    _acquire(benchmark="MCP-Atlas")
)
case("acquire-email-not-a-string", Raises(InvalidInputError, "test_account_email must be"))(
    _acquire(test_account_email=42)
)
case("acquire-no-api-key", Raises(ConfigurationError, "no Klavis API key"))(_acquire(api_key=""))
case("acquire-blank-api-key", Raises(ConfigurationError, "no Klavis API key"))(
    _acquire(api_key="   ")
)
case("acquire-base-url-not-http", Raises(ConfigurationError, "must be an http(s) URL"))(
    _acquire(base_url="ftp://127.0.0.1:1")
)
case("acquire-base-url-with-query", Raises(ConfigurationError, "must not carry a query"))(
    _acquire(base_url="http://127.0.0.1:1/?key=x")
)
case("acquire-timeout-zero", Raises(ConfigurationError, "timeout must be a positive number"))(
    _acquire(timeout=0)
)

# --------------------------------------------------------------------------- library: seed keys


def _seed(files: object) -> Callable[[Ctx], object]:
    def run(ctx: Ctx) -> object:
        ctx.refused_inside_with(lambda sb: sb.seed(files))  # type: ignore[arg-type]
        return None

    return run


for _id, _files, _fragment in [
    ("seed-key-absolute", {"/etc/passwd": "x"}, "is absolute"),
    ("seed-key-windows-drive", {"C:/x.txt": "x"}, "is absolute"),
    ("seed-key-dotdot", {"../escaped.txt": "x"}, "has a '..' part"),
    ("seed-key-nested-dotdot", {"a/../../escaped.txt": "x"}, "has a '..' part"),
    ("seed-key-nul", {"a\x00b.txt": "x"}, "contains a NUL character"),
    ("seed-key-backslash", {"a\\b.txt": "x"}, "contains a backslash"),
    ("seed-key-empty", {"": "x"}, "is empty"),
    ("seed-key-folder", {"data/": "x"}, "ends with '/'"),
    ("seed-key-root", {".": "x"}, "names a folder, not a file"),
    ("seed-key-not-str", {7: "x"}, "seed key 7 is a int"),
    ("seed-keys-collide", {"a.txt": "1", "./a.txt": "2"}, "both name the file 'a.txt'"),
    ("seed-key-file-and-folder", {"a": "1", "a/b.txt": "2"}, "is a file, but 'a/b.txt' needs"),
]:
    case(_id, Raises(InvalidSeedPathError, _fragment))(_seed(_files))

case("seed-value-not-bytes", Raises(InvalidInputError, "seed value for 'a.txt' is a int"))(
    _seed({"a.txt": 1})
)
case("seed-not-a-mapping", Raises(InvalidInputError, "files must be a mapping"))(
    _seed([("a.txt", "x")])
)

# --------------------------------------------------------------------------- library: folders


def _seed_dir(make: Callable[[Ctx], Path], **kwargs: Any) -> Callable[[Ctx], object]:
    def run(ctx: Ctx) -> object:
        folder = make(ctx)
        ctx.refused_inside_with(lambda sb: sb.seed_directory(folder, **kwargs))
        return None

    return run


def _project(ctx: Ctx) -> Path:
    folder = ctx.tmp / "project"
    folder.mkdir(exist_ok=True)
    (folder / "ok.txt").write_text("fine")
    return folder


def _with_link_out(ctx: Ctx) -> Path:
    folder = _project(ctx)
    (folder / "link").symlink_to(ctx.sentinel)
    return folder


def _with_fifo(ctx: Ctx) -> Path:
    folder = _project(ctx)
    os.mkfifo(folder / "pipe")
    return folder


def _with_big_file(ctx: Ctx) -> Path:
    folder = _project(ctx)
    (folder / "big.bin").write_bytes(b"x" * 11)
    return folder


case("seed-dir-missing", Raises(InvalidInputError, "no such folder"))(
    _seed_dir(lambda ctx: ctx.tmp / "nowhere")
)
case("seed-dir-is-a-file", Raises(InvalidInputError, "it is not a folder"))(
    _seed_dir(lambda ctx: _project(ctx) / "ok.txt")
)
case("seed-dir-symlink-out", Raises(InvalidInputError, "outside the folder being seeded"))(
    _seed_dir(_with_link_out)
)
case("seed-dir-fifo", Raises(InvalidInputError, "is a named pipe (fifo)"))(_seed_dir(_with_fifo))
case("seed-dir-file-too-large", Raises(FileTooLargeError, "over the max_file_size of 10"))(
    _seed_dir(_with_big_file, max_file_size=10)
)
case("seed-dir-negative-max-size", Raises(InvalidInputError, "max_file_size must be >= 0"))(
    _seed_dir(_project, max_file_size=-1)
)

# --------------------------------------------------------------------------- library: ids, targets


case("attach-empty-id", Raises(InvalidInputError, "not a sandbox id: ''"))(
    lambda ctx: LocalSandbox.attach("", **ctx.conn)
)
case("attach-id-with-slash", Raises(InvalidInputError, "not a sandbox id: '../x'"))(
    lambda ctx: LocalSandbox.attach("../x", **ctx.conn)
)
case("attach-unknown-id", Raises(NotFoundError, "not found"))(
    lambda ctx: LocalSandbox.attach("00000000-0000-4000-8000-000000000000", **ctx.conn)
)
case("attach-another-tenants-sandbox", Raises(NotFoundError, "belongs to another API key"))(
    lambda ctx: LocalSandbox.attach(
        ctx.acquire(), api_key=f"other-{ctx.token}", base_url=ctx.emulator.base_url
    )
)
case("bulk-release-bad-id", Raises(InvalidInputError, "not a sandbox id: 'a/b'"))(
    lambda ctx: workflows.bulk_release(["a/b"], **ctx.conn)
)
case("bulk-release-zero-concurrency", Raises(InvalidInputError, "concurrency must be"))(
    lambda ctx: workflows.bulk_release([], concurrency=0, **ctx.conn)
)
case("bulk-acquire-zero-count", Raises(InvalidInputError, "count must be a positive"))(
    lambda ctx: workflows.bulk_acquire(["git"], 0, **ctx.conn)
)


def _dump_to(make: Callable[[Ctx], Path]) -> Callable[[Ctx], object]:
    def run(ctx: Ctx) -> object:
        ctx.refused_inside_with(lambda sb: sb.dump_to(make(ctx)))
        return None

    return run


def _existing_file(ctx: Ctx) -> Path:
    target = ctx.tmp / "taken"
    target.write_text("keep me")
    return target


def _folder_named_tgz(ctx: Ctx) -> Path:
    target = ctx.tmp / "out.tar.gz"
    target.mkdir()
    return target


case("dump-to-existing-file", Raises(InvalidInputError, "exists and is not a folder"))(
    _dump_to(_existing_file)
)
case("dump-to-folder-named-tgz", Raises(InvalidInputError, "is a folder; name a file"))(
    _dump_to(_folder_named_tgz)
)


def _snapshot_through_link(ctx: Ctx) -> object:
    out = ctx.tmp / "out"
    out.mkdir()
    (out / "a").symlink_to(ctx.sentinel)
    return Snapshot({"a/x.txt": "x"}).to_directory(out)


case("snapshot-write-through-symlink", Raises(InvalidInputError, "is a symlink, not a folder"))(
    _snapshot_through_link
)

# --------------------------------------------------------------------------- library: archives
# What `dump_to` runs on a downloaded archive; the destination sits in the sentinel folder, so
# a refused archive must leave the sentinel folder empty (no destination, no temporary folder).


def _extract(archive: Callable[[Ctx], bytes]) -> Callable[[Ctx], object]:
    def run(ctx: Ctx) -> object:
        return extract_archive(io.BytesIO(archive(ctx)), ctx.sentinel / "dest")

    return run


for _id, _archive, _fragment in [
    (
        "extract-dotdot-member",
        lambda ctx: tar_gz([member(f"../{ctx.escaped}")]),
        "has a '..' part",
    ),
    (
        "extract-absolute-member",
        lambda ctx: tar_gz([member(str(ctx.sentinel / ctx.escaped))]),
        "has an absolute path",
    ),
    (
        "extract-symlink-out",
        lambda ctx: tar_gz([member("link", tarfile.SYMTYPE, "../../outside")]),
        "leads outside the destination",
    ),
    (
        "extract-write-through-symlink",
        lambda ctx: tar_gz([member("link", tarfile.SYMTYPE, "."), member(f"link/{ctx.escaped}")]),
        "would be written through the symlink 'link'",
    ),
    (
        "extract-device",
        lambda ctx: tar_gz([member("dev", tarfile.CHRTYPE)]),
        "is a character device",
    ),
    ("extract-not-gzip", lambda ctx: b"PK\x03\x04 a zip file", "not a valid tar.gz archive"),
    (
        "extract-truncated",
        lambda ctx: build_tar_gz({"a.bin": os.urandom(50_000)})[:20_000],
        "not a valid tar.gz archive",
    ),
]:
    case(_id, Raises(UnsafeArchiveError, _fragment))(_extract(_archive))

# --------------------------------------------------------------------------- emulator: tokens


def _get(path: str, headers: Mapping[str, str]) -> Callable[[Ctx], httpx.Response]:
    def run(ctx: Ctx) -> httpx.Response:
        return httpx.get(ctx.emulator.base_url + path, headers=dict(headers), timeout=30)

    return run


case("http-no-token", Answers(401, "Missing API key"))(_get("/local-sandbox", {}))
case("http-basic-auth", Answers(401, "Missing API key"))(
    _get("/local-sandbox", {"Authorization": "Basic dXNlcjpwYXNz"})
)
case("http-empty-bearer", Answers(401, "Missing API key"))(
    _get("/local-sandbox", {"Authorization": "Bearer"})
)
case("http-another-tenant", Answers(404, "belongs to another API key"))(
    lambda ctx: httpx.get(
        f"{ctx.emulator.base_url}/local-sandbox/{ctx.acquire()}",
        headers={"Authorization": f"Bearer other-{ctx.token}"},
        timeout=30,
    )
)

# --------------------------------------------------------------------------- emulator: acquire


def _post_acquire(body: object) -> Callable[[Ctx], httpx.Response]:
    return lambda ctx: ctx.client.post("/local-sandbox", json=body)


for _id, _body, _status, _fragment in [
    ("http-unknown-server", {"server_names": ["gitt"]}, 422, "is 'gitt', which is not a valid"),
    ("http-server-string", {"server_names": "git"}, 422, "got the string 'git'"),
    ("http-no-servers", {"server_names": []}, 422, "must name at least one server"),
    ("http-ttl-59", {"server_names": ["git"], "ttl_seconds": 59}, 422, "greater than or equal"),
    ("http-ttl-string", {"server_names": ["git"], "ttl_seconds": "600"}, 422, "valid integer"),
    ("http-bad-benchmark", {"server_names": ["git"], "benchmark": "x"}, 422, "'MCP_Atlas'"),
    ("http-body-not-object", ["git"], 422, "valid dictionary"),
]:
    case(_id, Answers(_status, _fragment))(_post_acquire(_body))

case("http-unknown-sandbox", Answers(404, "not found"))(
    lambda ctx: ctx.client.get("/local-sandbox/00000000-0000-4000-8000-000000000000")
)


def _release_twice(ctx: Ctx) -> httpx.Response:
    sandbox_id = ctx.acquire()
    assert ctx.client.delete(f"/local-sandbox/{sandbox_id}").status_code == 200
    return ctx.client.delete(f"/local-sandbox/{sandbox_id}")


case("http-release-twice", Answers(404, "was released"))(_release_twice)
case("http-bad-region", Answers(422, "'us' or 'asia'"))(
    lambda ctx: ctx.client.post(f"/local-sandbox/{ctx.acquire()}/upload-url?region=eu")
)
case("http-is-ttl-not-bool", Answers(422, "valid boolean"))(
    lambda ctx: ctx.client.delete(f"/local-sandbox/{ctx.acquire()}?is_ttl=perhaps")
)
case("http-log-cursor-negative", Answers(422, "greater than or equal to 0"))(
    lambda ctx: ctx.client.get(
        f"/local-sandbox/{ctx.acquire()}/execution-logs",
        params={"execution_name": "run", "cursor": -1},
    )
)
case("http-server-not-in-sandbox", Answers(400, "does not hold the 'canvas' server"))(
    lambda ctx: ctx.client.post(
        f"/local-sandbox/canvas/{ctx.acquire(['filesystem'])}/initialize", json={"courses": []}
    )
)


def _document(server: str, body: object) -> Callable[[Ctx], httpx.Response]:
    def run(ctx: Ctx) -> httpx.Response:
        sandbox_id = ctx.acquire([server])
        response = ctx.client.post(f"/local-sandbox/{server}/{sandbox_id}/initialize", json=body)
        dump = ctx.client.get(f"/local-sandbox/{server}/{sandbox_id}/dump")
        if dump.status_code == 503 and "dovecot" in dump.text:
            return response  # no mail server on this machine: nothing can have been stored
        assert dump.status_code == 200, dump.text
        data = dump.json()["data"]
        if server == "poste_email_toolathlon":  # its mail server: the sandbox's own account
            assert not any(user["emails"] for user in data["users"].values()), "stored"
        else:
            assert not any(data.values()), "a refused document was stored"
        return response

    return run


case("http-canvas-course-without-code", Answers(422, "Field required"))(
    _document("canvas", {"courses": [{"name": "no code"}]})
)
case("http-poste-users-not-a-mapping", Answers(422, "valid dictionary"))(
    _document("poste_email_toolathlon", {"users": ["a@b.c"]})
)

# --------------------------------------------------------------------------- emulator: archives


def _initialize(make: Callable[[Ctx], bytes]) -> Callable[[Ctx], httpx.Response]:
    return lambda ctx: ctx.initialize_with(make(ctx))


case("http-initialize-before-upload", Answers(409, "No archive was uploaded"))(
    lambda ctx: ctx.client.post(f"/local-sandbox/{ctx.acquire()}/initialize")
)
for _id, _archive, _status, _fragment in [
    ("http-archive-not-gzip", lambda ctx: b"just text", 400, "not gzip-compressed"),
    (
        "http-archive-dotdot",
        lambda ctx: tar_gz([member(f"../../{ctx.escaped}")]),
        400,
        "contains a '..' component",
    ),
    (
        "http-archive-absolute",
        lambda ctx: tar_gz([member(str(ctx.sentinel / ctx.escaped))]),
        400,
        "has an absolute path",
    ),
    (
        "http-archive-symlink-absolute",
        lambda ctx: tar_gz([member("link", tarfile.SYMTYPE, str(ctx.sentinel))]),
        400,
        "symbolic link to an absolute path",
    ),
    (
        "http-archive-symlink-escape",
        lambda ctx: tar_gz([member("a/link", tarfile.SYMTYPE, "../../..")]),
        400,
        "leading outside the workspace",
    ),
    (
        "http-archive-hardlink-escape",
        lambda ctx: tar_gz([member("hard", tarfile.LNKTYPE, "../../etc/passwd")]),
        400,
        "hard link leading outside",
    ),
    ("http-archive-device", lambda ctx: tar_gz([member("d", tarfile.BLKTYPE)]), 400, "device"),
    ("http-archive-fifo", lambda ctx: tar_gz([member("f", tarfile.FIFOTYPE)]), 400, "FIFO"),
    (
        "http-archive-truncated",
        lambda ctx: build_tar_gz({"a.bin": os.urandom(50_000)})[:20_000],
        400,
        "truncated or corrupt",
    ),
]:
    case(_id, Answers(_status, _fragment))(_initialize(_archive))

# --------------------------------------------------------------------------- emulator: signed URLs


def _put(url: str, content_type: str = "application/gzip") -> httpx.Response:
    return httpx.put(
        url,
        content=build_tar_gz({"a.txt": "a"}),
        headers={"Content-Type": content_type},
        timeout=30,
    )


def _tampered(ctx: Ctx) -> httpx.Response:
    url = httpx.URL(ctx.upload_url(ctx.acquire()))
    signature = url.params["signature"]
    flipped = ("0" if signature[0] != "0" else "1") + signature[1:]
    return _put(str(url.copy_set_param("signature", flipped)))


def _unsigned(ctx: Ctx) -> httpx.Response:
    return _put(str(httpx.URL(ctx.upload_url(ctx.acquire())).copy_with(query=None)))


def _longer_expiry(ctx: Ctx) -> httpx.Response:
    url = httpx.URL(ctx.upload_url(ctx.acquire()))
    return _put(str(url.copy_set_param("expires", str(int(url.params["expires"]) + 3600))))


def _other_object(ctx: Ctx) -> httpx.Response:
    first, second = ctx.acquire(), ctx.acquire()
    url = httpx.URL(ctx.upload_url(first))
    return _put(str(url.copy_with(path=url.path.replace(first, second))))


def _expired(ctx: Ctx) -> httpx.Response:
    # Moving the clock 31 minutes would age every other test's sandbox on the session emulator:
    # this case has an emulator of its own (signing URLs for 30 minutes, as the session's does).
    with (
        EmulatorServer() as own,
        httpx.Client(
            base_url=own.base_url, headers={"Authorization": f"Bearer {ctx.token}"}, timeout=30
        ) as client,
    ):
        own_ctx = Ctx(own, client, ctx.token, ctx.tmp)
        url = own_ctx.upload_url(own_ctx.acquire())
        moved = client.post("/_emulator/clock/advance", json={"seconds": 31 * 60})
        assert moved.status_code == 200, moved.text
        return _put(url)


def _released_upload(ctx: Ctx) -> httpx.Response:
    sandbox_id = ctx.acquire()
    url = ctx.upload_url(sandbox_id)
    assert ctx.client.delete(f"/local-sandbox/{sandbox_id}").status_code == 200
    return _put(url)


def _released_download(ctx: Ctx) -> httpx.Response:
    sandbox_id = ctx.acquire()
    url = ctx.client.get(f"/local-sandbox/{sandbox_id}/dump").json()["download_url"]
    assert ctx.client.delete(f"/local-sandbox/{sandbox_id}").status_code == 200
    return httpx.get(url, timeout=30)


def _upload_url_used_for_download(ctx: Ctx) -> httpx.Response:
    url = httpx.URL(ctx.upload_url(ctx.acquire()))
    return httpx.get(
        str(url.copy_with(path=url.path.replace("/upload/", "/download/"))), timeout=30
    )


case("url-tampered-signature", Answers(403, "does not match"))(_tampered)
case("url-without-signature", Answers(403, "is not signed"))(_unsigned)
case("url-expiry-extended", Answers(403, "does not match"))(_longer_expiry)
case("url-pointed-at-other-object", Answers(403, "does not match"))(_other_object)
case("url-expired", Answers(403, "has expired"))(_expired)
case("url-upload-after-release", Answers(404, "no longer exists"))(_released_upload)
case("url-download-after-release", Answers(404, "no longer exists"))(_released_download)
case("url-put-signature-used-for-get", Answers(403, "does not match"))(
    _upload_url_used_for_download
)
case("url-wrong-content-type", Answers(400, "Content-Type: application/gzip"))(
    lambda ctx: _put(ctx.upload_url(ctx.acquire()), "application/zip")
)

# --------------------------------------------------------------------------- the test


@pytest.fixture
def ctx(
    emulator: EmulatorServer,
    client: httpx.Client,
    token: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Ctx]:
    """A private ledger, no key in the environment, a sentinel folder; releases set-up."""
    monkeypatch.setenv("KLAVIS_SANDBOX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("KLAVIS_API_KEY", raising=False)
    monkeypatch.delenv("KLAVIS_BASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)  # no stray .env file supplies a key
    stamina.set_testing(True, attempts=1)
    world = Ctx(emulator, client, token, tmp_path / "case")
    world.tmp.mkdir()
    world.sentinel.mkdir()
    try:
        yield world
    finally:
        stamina.set_testing(False)


def _detail(response: httpx.Response) -> str:
    detail = response.json()["detail"]
    if isinstance(detail, list):  # FastAPI's HTTPValidationError
        return "; ".join(f"{item['loc']}: {item['msg']}" for item in detail)
    assert isinstance(detail, str)
    return detail


def test_the_corpus_is_large_and_ids_are_unique() -> None:
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("bad", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_and_nothing_leaks(bad: Case, ctx: Ctx) -> None:
    expect = bad.expect
    if isinstance(expect, Raises):
        with pytest.raises(BaseException) as caught:  # noqa: PT011 - the exact type is checked
            bad.run(ctx)
        assert type(caught.value) is expect.error, repr(caught.value)
        message = str(caught.value)
    else:
        response = bad.run(ctx)
        assert isinstance(response, httpx.Response)
        assert response.status_code == expect.status, response.text
        message = _detail(response)
    assert expect.fragment in message, message
    assert ctx.token not in message

    ctx.release_setup()
    listed = ctx.client.get("/local-sandbox").json()["local_sandboxes"]
    assert listed == [], "sandboxes leaked"
    assert workflows.default_ledger().held() == [], "the ledger still holds sandboxes"
    assert list(ctx.sentinel.iterdir()) == [], "something was written outside its folder"
    assert not list(ctx.emulator.data_dir.rglob(ctx.escaped)), "an archive member escaped"
