"""Helpers shared by test modules and fixtures: test modules import them from here, never from a
conftest."""

from __future__ import annotations

import ast
import asyncio
import base64
import builtins
import contextlib
import errno
import functools
import hashlib
import importlib.util
import inspect
import io
import os
import pkgutil
import re
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Callable, Collection, Coroutine, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import pytest

import workflows

# the Ray clusters' helpers live in tests/ray_helpers.py; test modules import them from here
from tests.ray_helpers import RAY_TEST_TIMEOUT as RAY_TEST_TIMEOUT
from tests.ray_helpers import RayCluster as RayCluster
from tests.ray_helpers import end_ray_children as end_ray_children
from tests.ray_helpers import start_cluster as start_cluster
from workflows import EmulatorProcess

# The emulator is imported where it is used: the MCP tests also run in a venv with mcp 1.x and
# without the emulator's dependencies, against an emulator process of the main venv.
if TYPE_CHECKING:
    from klavis_emulator import Confinement, EmulatorServer

MakeTarGz = Callable[[Mapping[str, bytes | str]], bytes]


def build_tar_gz(files: Mapping[str, bytes | str]) -> bytes:
    """A tar.gz holding ``files`` (name -> content); names ending in ``/`` become folders."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
                continue
            data = content.encode() if isinstance(content, str) else content
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class Executions:
    """Helpers to upload, start and await executions on an in-process emulator."""

    def __init__(self, emulator: EmulatorServer, http: httpx.Client, token: str) -> None:
        from klavis_emulator._state import tenant_for_token

        self.emulator = emulator
        self.http = http
        self.tenant = tenant_for_token(token)

    def acquire(self, servers: str | Collection[str] = ("filesystem",)) -> str:
        """A new sandbox of this test's tenant (``servers``: names, or ``"ALL"``)."""
        names = servers if isinstance(servers, str) else list(servers)
        response = self.http.post("/local-sandbox", json={"server_names": names})
        assert response.status_code == 201, response.text
        sandbox_id: str = response.json()["local_sandbox_id"]
        return sandbox_id

    def upload(
        self,
        sandbox_id: str,
        name: str,
        files: Mapping[str, bytes | str],
        region: str = "us",
    ) -> None:
        """PUT a tar.gz of ``files`` to the execution's signed upload URL."""
        response = self.http.post(
            f"/local-sandbox/{sandbox_id}/execution-upload-url",
            params={"region": region},
            json={"execution_name": name},
        )
        assert response.status_code == 200, response.text
        put = httpx.put(
            response.json()["upload_url"],
            content=build_tar_gz(files),
            headers={"Content-Type": "application/gzip"},
            timeout=30,
        )
        assert put.status_code == 200, put.text

    def execute(self, sandbox_id: str, name: str) -> httpx.Response:
        """POST execute."""
        return self.http.post(f"/local-sandbox/{sandbox_id}/execute", json={"execution_name": name})

    def start(self, sandbox_id: str, name: str, files: Mapping[str, bytes | str]) -> None:
        """Upload ``files`` and start the execution."""
        self.upload(sandbox_id, name, files)
        response = self.execute(sandbox_id, name)
        assert response.status_code == 200, response.text
        assert response.json()["execution_name"] == name

    def wait(
        self,
        sandbox_id: str,
        name: str,
        statuses: Collection[str] = ("completed", "failed"),
    ) -> str:
        """Block (on the state's condition, no polling) until the status is in ``statuses``."""
        return self.emulator.state.wait_for_execution(
            self.tenant, sandbox_id, name, statuses=statuses, timeout=60
        )

    def run(self, sandbox_id: str, name: str, files: Mapping[str, bytes | str]) -> str:
        """Upload, start and await an execution; its final status."""
        self.start(sandbox_id, name, files)
        return self.wait(sandbox_id, name)

    def logs(self, sandbox_id: str, name: str, cursor: int = 0) -> dict[str, Any]:
        """GET execution-logs."""
        response = self.http.get(
            f"/local-sandbox/{sandbox_id}/execution-logs",
            params={"execution_name": name, "cursor": cursor},
        )
        assert response.status_code == 200, response.text
        data: dict[str, Any] = response.json()
        return data

    def status(self, sandbox_id: str, name: str) -> httpx.Response:
        """GET execution-status."""
        return self.http.get(
            f"/local-sandbox/{sandbox_id}/execution-status", params={"execution_name": name}
        )

    def artifacts(self, sandbox_id: str, name: str) -> dict[str, bytes | None]:
        """Export the artifacts and return member name -> content (None for folders)."""
        response = self.http.post(
            f"/local-sandbox/{sandbox_id}/export-artifacts", json={"execution_name": name}
        )
        assert response.status_code == 200, response.text
        download = httpx.get(response.json()["download_url"], timeout=30)
        assert download.status_code == 200, download.text
        return read_tar_gz(download.content)


def tiny_wheel() -> bytes:
    """A pure-Python wheel of the package ``tinypkg`` 0.1, built by hand (no network)."""
    files = {
        "tinypkg/__init__.py": "VALUE = 42\n",
        "tinypkg-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n",
        "tinypkg-0.1.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
            digest = hashlib.sha256(text.encode()).digest()
            encoded = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
            record.append(f"{name},sha256={encoded},{len(text)}")
        record.append("tinypkg-0.1.dist-info/RECORD,,")
        wheel.writestr("tinypkg-0.1.dist-info/RECORD", "\n".join(record) + "\n")
    return buffer.getvalue()


def tree_of_every_header(root: Path) -> Path:
    """A folder under ``root`` whose archive needs every kind of tar header: plain files in
    folders, an empty folder, an executable, a symbolic link, a hard link, a non-ASCII name and
    a name over 100 bytes (both PAX records)."""
    tree = root / "tree"
    (tree / "src" / "pkg").mkdir(parents=True)
    (tree / "empty").mkdir()
    for i in range(20):
        (tree / "src" / "pkg" / f"mod_{i}.py").write_text(f"x = {i}\n" * i)
    (tree / "café.txt").write_text("non-ASCII name: a PAX record")
    (tree / ("long" * 40)).write_text("a name over 100 bytes: a PAX record")
    (tree / "run.sh").write_text("#!/bin/sh\n")
    (tree / "run.sh").chmod(0o755)
    (tree / "link").symlink_to("café.txt")
    os.link(tree / "café.txt", tree / "hard")
    return tree


def make_chain(root: Path, depth: int, name: str = "d") -> None:
    """Make ``root/name/name/...`` ``depth`` folders deep, each with a file ``f`` holding its
    level, relative to descriptors (deeper than PATH_MAX allows by path, as a sandbox's
    process can by entering each folder it makes)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(depth):
            os.mkdir(name, dir_fd=fd)
            with open(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=fd), "w") as out:
                out.write(str(level))
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


_GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
    "PATH": "/usr/local/bin:/usr/bin:/bin",
}


def git(repo: Path, *args: str) -> str:
    """Run the git program in ``repo`` (no user or system configuration); its output."""
    return subprocess.run(
        ["git", "-C", str(repo), *args], env=_GIT_ENV, check=True, capture_output=True, text=True
    ).stdout


def git_repo(folder: Path, *, object_format: str = "sha1") -> Path:
    """A repository in ``folder`` with one commit of five files (shared path prefixes, a name of
    16 bytes, an executable); ``folder`` is made."""
    folder.mkdir()
    git(folder, "init", "-q", f"--object-format={object_format}")
    for rel in ["a.txt", "src/pkg/module_one.py", "src/pkg/module_two.py", "x" * 16, "run.sh"]:
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{rel}\n")
    (folder / "run.sh").chmod(0o755)
    git(folder, "add", ".")
    git(folder, "commit", "-qm", "first")
    return folder


def descriptors_into(root: Path) -> int:
    """This process's descriptors open on ``root`` or below it. Counted by what they point
    at, not in all: the test process's other threads (a session's emulator, a loop thread)
    open and close descriptors of their own meanwhile (a full run saw 113 before a walk and
    109 after). A path deeper than the kernel will spell is one of the walk's."""
    prefix = f"{root}/"
    found = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except FileNotFoundError:  # closed meanwhile, or listdir's own
            continue
        except OSError as exc:
            if exc.errno != errno.ENAMETOOLONG:
                raise
            found += 1
            continue
        found += target == str(root) or target.startswith(prefix)
    return found


def sigint_state() -> tuple[bool, bool]:
    """Whether SIGINT is blocked in this thread, and whether this process ignores it
    (``SigIgn`` in ``/proc/self/status``: a handler set from C shows there too, where
    ``signal.getsignal`` says ``None``)."""
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    with open("/proc/self/status") as status:
        ignoring = next(int(line.split()[1], 16) for line in status if line.startswith("SigIgn"))
    return blocked, bool(ignoring & (1 << (signal.SIGINT - 1)))


def expect_children_to_get_sigint() -> None:
    """Fail, saying why, where a child started now from this thread could not answer Ctrl-C:
    SIGINT blocked in this thread (a child inherits the mask of the thread that forks it, and
    keeps it through ``exec``) or ignored in this process (``SIG_IGN`` outlives ``exec``, and
    Python then installs no ``KeyboardInterrupt`` handler). Called before starting a child the
    test sends SIGINT, so that a test process in such a state fails the test with its cause
    instead of hanging it.

    Why a check and not a reset in the child (the ``preexec_fn`` these tests had): one full run
    with Ray clusters in the test processes once saw every child sent SIGINT hang, printing
    nothing, while those sent SIGTERM ended. Measured since, with ray 2.60.0: in one pytest
    process, the Ray pool's and broker's tests on a cluster, then the SIGINT tests, each
    child's state read in it between fork and exec; and a driver's threads and children read
    after ``ray.init`` started a cluster, after a task, after ``ray.shutdown``. Every child was
    forked by the main thread, or a thread the driver started, with SIGINT neither blocked nor
    ignored, and each answered SIGINT: the hang was not reproduced, and its cause is not the
    signal state Ray leaves in the driver. Ray does block SIGINT, but elsewhere: in its
    own threads of the driver (``worker.io``, ``worker.user_obj``, ``task_event_buff``), which
    fork no child of ours, and in the processes it starts (``start_ray_process`` in
    ray/_private/services.py blocks it before ``exec``), whose children then cannot be
    interrupted (ray-project/ray#31805). A ``preexec_fn`` also makes Python fork and run Python
    code in the child of a process full of threads (Ray's, gRPC's, the emulator's) instead of
    ``vfork`` straight to ``exec``: Python's documentation warns that it may deadlock there.
    """
    blocked, ignored = sigint_state()
    if blocked or ignored:
        raise AssertionError(
            f"a child started now would not answer SIGINT: blocked in thread "
            f"{threading.current_thread().name}: {blocked}; ignored in this process: {ignored} "
            "(a shell without job control starts its background jobs with SIGINT ignored: "
            "run the tests in the foreground, or `set -m` before `&`)"
        )


def import_the_library() -> None:
    """Import every module of ``workflows`` (but the Ray extra's and the CLI's), before a test
    patches a function other modules import by name: ``import workflows`` leaves most modules
    to their first use, and one first imported while the patch is on would keep the patched
    function after the test."""
    for found in pkgutil.walk_packages(workflows.__path__, "workflows."):
        if not found.name.startswith(("workflows.ray", "workflows._cli", "workflows.__main__")):
            importlib.import_module(found.name)


def data_folder_paths(state: Any) -> set[Path]:
    """Every path of an emulator's data folder (an ``EmulatorState``'s), its tenant folders
    (``workspaces/``, ``executions/``) reached as the emulator reaches them: through their
    overlay where they have one (never the upper folders beneath it)."""
    data: Path = state.data_dir
    tenant = {
        data / "workspaces": state.folders.workspaces,
        data / "executions": state.folders.executions,
    }
    paths: set[Path] = set()
    for top in sorted(data.iterdir()):
        root = tenant.get(top, top)
        paths.add(root)
        if root.is_dir() and not root.is_symlink():
            paths.update(root.rglob("*"))
    return paths


def staging_leftovers(state: Any) -> list[str]:
    """What an emulator's staging folders hold (its spare servers' folder aside): the
    storage's ``tmp/`` and the tenant folders' own ``.tmp/``."""
    folders = state.folders
    left: list[str] = []
    for folder in (folders.tmp, folders.workspaces_tmp, folders.executions_tmp):
        left += [f"{folder.name}/{name}" for name in os.listdir(folder) if name != "spares"]
    return sorted(left)


def wait_until(check: Callable[[], bool], what: str, deadline: float = 60.0) -> None:
    """Poll ``check`` until it holds (a deadline, never a fixed sleep standing for an event)."""
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"still not {what} after {deadline} s")
        time.sleep(0.1)


def listed_sandboxes(base_url: str, token: str) -> list[str]:
    """The ids of the sandboxes the emulator lists for ``token``, read with plain httpx."""
    response = httpx.get(
        f"{base_url}/local-sandbox", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    response.raise_for_status()
    return [s["local_sandbox_id"] for s in response.json()["local_sandboxes"]]


class Poller:
    """Counts the emulator's sandboxes of the cluster's tenant in a thread, keeping the most."""

    def __init__(self, cluster: RayCluster) -> None:
        self.cluster, self.most, self._stop = cluster, 0, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            count = len(listed_sandboxes(self.cluster.base_url, self.cluster.token))
            self.most = max(self.most, count)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def read_tar_gz(archive: bytes) -> dict[str, bytes | None]:
    """Member name -> content (None for non-files) of a tar.gz."""
    members: dict[str, bytes | None] = {}
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for member in tar:
            data = tar.extractfile(member) if member.isreg() else None
            members[member.name] = data.read() if data else None
    return members


class SilentService:
    """A loopback listener standing in for the service: it accepts nothing, and counts."""

    def __init__(self) -> None:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._listener.setblocking(False)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._connected = 0

    def connections(self) -> int:
        """How many clients connected so far (each connection is closed at once)."""
        while True:
            try:
                conn, _ = self._listener.accept()
            except BlockingIOError:
                return self._connected
            conn.close()
            self._connected += 1

    def close(self) -> None:
        """Stop listening."""
        self._listener.close()

    def __enter__(self) -> SilentService:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@contextlib.contextmanager
def new_tenant(server: EmulatorServer, name: str, *, timeout: float = 60) -> Iterator[Executions]:
    """Execution helpers as a new tenant of ``server`` (a fresh random key named ``name``)."""
    token = f"{name}-{os.urandom(8).hex()}"
    with httpx.Client(
        base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout
    ) as http:
        yield Executions(server, http, token)


def require_confinement() -> Confinement:
    """The emulator's confinement decision, or skip the test where it is off: bwrap is not
    installed, or confinement is turned off on purpose (``KLAVIS_EMULATOR_CONFINE=0``). Where
    bwrap is installed but cannot confine, ``decide_confinement`` raises and the test fails, as
    the emulator's startup would."""
    from klavis_emulator._exec.confinement import decide_confinement

    confinement = decide_confinement()
    if not confinement.enabled:
        pytest.skip(confinement.reason)
    return confinement


def machine_cannot_overlay(folder: Path) -> str | None:
    """Why this machine cannot lay an overlay over a folder beside ``folder`` as the data
    folder's holder does (its own user and mount namespaces, ``userxattr``), asked of the
    system's own tools (util-linux ``unshare`` and ``mount``, ``nsenter``), not of the
    emulator: None when it can. A test skips only for such a reason; where the machine can
    and the emulator made no overlay, the test fails."""
    import shutil
    import tempfile

    for tool in ("unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) is not installed"
    probe = Path(tempfile.mkdtemp(prefix=".overlay-probe-", dir=folder))
    try:
        for name in ("lower", "upper", "work", "merged"):
            (probe / name).mkdir()
        script = (
            "mount -t overlay overlay -o userxattr,lowerdir=lower,upperdir=upper,workdir=work "
            "merged"
        )
        done = subprocess.run(
            ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
            cwd=probe,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    if done.returncode != 0:
        return f"the machine cannot mount an overlay in a user namespace: {done.stderr.strip()}"
    return None


def require_data_overlay(state: Any) -> Any:
    """The running holder of ``state``'s data folder overlays; skip where the machine cannot
    make them (:func:`machine_cannot_overlay`), fail where it can and the emulator did not."""
    holder = state.data_overlay
    if holder is not None:
        return holder
    reason = machine_cannot_overlay(Path(state.data_dir))
    if reason is not None:
        pytest.skip(f"the data folder's overlays cannot be made here: {reason}")
    problem = state.data_overlay_problem
    pytest.fail(f"the machine can mount overlays, the emulator made none: {problem}")


def isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No key or URL in the environment, a private ledger, an empty working folder (returned,
    and made the current one, so that no stray ``.env`` supplies a key)."""
    monkeypatch.delenv("KLAVIS_API_KEY", raising=False)
    monkeypatch.delenv("KLAVIS_BASE_URL", raising=False)
    monkeypatch.setenv("KLAVIS_SANDBOX_STATE_DIR", str(tmp_path / "state"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def run_cli(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, module: str = "workflows"
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m <module> argv...`` in a fresh process (the environment is this one's,
    without a key or URL, plus ``env``); its status, stdout and stderr."""
    full = {k: v for k, v in os.environ.items() if k not in ("KLAVIS_API_KEY", "KLAVIS_BASE_URL")}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", module, *argv],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
        check=False,
    )


def run_installed_cli(
    env: Mapping[str, str], *argv: str, cwd: Path | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``klavis-sandbox`` command (found on ``env``'s PATH, as a user's shell
    finds it) with exactly ``env`` as its environment; its status, stdout and stderr."""
    return subprocess.run(
        ["klavis-sandbox", *argv],
        capture_output=True,
        text=True,
        env=dict(env),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


@contextlib.contextmanager
def emulator_process(python: str, data_dir: Path) -> Iterator[str]:
    """``python -m klavis_emulator`` on a free port, its state in ``data_dir``: its base URL.

    The library's :class:`~workflows.EmulatorProcess` with an interpreter given (it reads the
    URL the command prints, drains the rest of its output, and stops it on exit).
    """
    with EmulatorProcess([python, "-m", "klavis_emulator"], data_dir=data_dir) as emulator:
        yield emulator.base_url


T = TypeVar("T")


class LoopThread:
    """An asyncio loop in a daemon thread; ``run(coro)`` waits for the result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=120)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class Blocking:
    """Wraps an async object: coroutine methods become blocking calls, the rest passes through."""

    def __init__(self, loop: LoopThread, target: Any) -> None:
        self._loop = loop
        self._target = target

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if inspect.iscoroutinefunction(attr):

            def call(*args: Any, **kwargs: Any) -> Any:
                return self._wrap(self._loop.run(attr(*args, **kwargs)))

            return call
        return attr

    def _wrap(self, value: Any) -> Any:
        if isinstance(
            value,
            workflows.AsyncLocalSandbox | workflows.AsyncSandboxBatch | workflows.AsyncExecution,
        ):
            return Blocking(self._loop, value)
        return value

    def __enter__(self) -> Any:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._loop.run(self._target.__aexit__(exc_type, exc, tb))

    def __iter__(self) -> Iterator[Any]:
        return iter(self._target)

    def __len__(self) -> int:
        return len(self._target)

    def __repr__(self) -> str:
        return repr(self._target)

    @property
    def sandboxes(self) -> list[Any]:
        return [Blocking(self._loop, s) for s in self._target.sandboxes]


class Face:
    """The library's entry points under their sync names, for one face."""

    def __init__(self, name: str, loop: LoopThread | None) -> None:
        self.name = name
        self._loop = loop

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None
        return self._loop.run(coro)

    def acquire(self, *args: Any, **kwargs: Any) -> Any:
        if self._loop is None:
            return workflows.LocalSandbox.acquire(*args, **kwargs)

        async def go() -> workflows.AsyncLocalSandbox:
            return await workflows.AsyncLocalSandbox.acquire(*args, **kwargs)

        return Blocking(self._loop, self._run(go()))

    def attach(self, *args: Any, **kwargs: Any) -> Any:
        if self._loop is None:
            return workflows.LocalSandbox.attach(*args, **kwargs)

        async def go() -> workflows.AsyncLocalSandbox:
            return await workflows.AsyncLocalSandbox.attach(*args, **kwargs)

        return Blocking(self._loop, self._run(go()))

    def list(self, **kwargs: Any) -> Any:
        """The face's ``LocalSandbox.list`` / ``AsyncLocalSandbox.list``."""
        if self._loop is None:
            return workflows.LocalSandbox.list(**kwargs)
        return self._run(workflows.AsyncLocalSandbox.list(**kwargs))

    def _twin(self, name: str) -> Callable[..., Any]:
        if self._loop is None:
            fn: Callable[..., Any] = getattr(workflows, name)
            return fn
        afn = getattr(workflows, f"async_{name}")

        def call(*args: Any, **kwargs: Any) -> Any:
            args = tuple(a._target if isinstance(a, Blocking) else a for a in args)
            if "sandbox_ids" in kwargs and kwargs["sandbox_ids"] is not None:
                kwargs["sandbox_ids"] = [
                    a._target if isinstance(a, Blocking) else a for a in kwargs["sandbox_ids"]
                ]
            if args and isinstance(args[0], list):
                args = ([a._target if isinstance(a, Blocking) else a for a in args[0]], *args[1:])
            value = self._run(afn(*args, **kwargs))
            if isinstance(value, workflows.AsyncSandboxBatch):
                return Blocking(self._loop, value)  # type: ignore[arg-type]
            return value

        return call

    def collect(self, iterable: Any) -> builtins.list[Any]:
        """Drain an iterator, or an async iterator on the face's loop."""
        if self._loop is None:
            return list(iterable)

        async def drain() -> list[Any]:
            return [item async for item in iterable]

        return self._run(drain())

    def call(self, method: Callable[..., Any], *args: Any) -> Any:
        """Call a method of a raw (unwrapped) object of this face."""
        value = method(*args)
        return self._run(value) if inspect.iscoroutine(value) else value

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name in {
            "seed_from_dict",
            "round_trip_dump",
            "bulk_acquire",
            "bulk_release",
            "list_sandboxes",
            "reap",
        }:
            return self._twin(name)
        raise AttributeError(name)


# --- the public surface ---------------------------------------------------------------------

_ANNOTATION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def public_callables(package: ModuleType) -> Iterator[tuple[str, Callable[..., Any]]]:
    """The public functions, methods and properties of what ``package`` exports."""
    prefix = f"{package.__name__}."
    for name in package.__all__:
        obj = getattr(package, name)
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj) and obj.__module__.startswith(prefix):
            members: dict[str, Any] = {}
            for klass in reversed(obj.__mro__):  # inherited ones too (the sandboxes' base)
                if klass.__module__.startswith(prefix):
                    members.update(vars(klass))
            for attr, member in members.items():
                if attr.startswith("_") and attr != "__init__":
                    continue
                fn = getattr(member, "__func__", member)  # classmethods, staticmethods
                if isinstance(member, property):
                    fn = member.fget
                if inspect.isfunction(fn):
                    yield f"{name}.{attr}", fn


def types_named_by(fn: Callable[..., Any], package: str) -> set[str]:
    """The classes of ``package`` that ``fn``'s annotations name (read as written), whether its
    module imports them or imports them only for type checkers (``if TYPE_CHECKING:``)."""
    module = sys.modules[fn.__module__]
    found: set[str] = set()
    for param, annotation in fn.__annotations__.items():
        if param.startswith("_"):  # a private keyword (the batches' shared connection)
            continue
        for word in _ANNOTATION_NAME.findall(str(annotation)):
            obj = getattr(module, word, None)
            if obj is None:
                obj = names_for_type_checkers(module.__name__, package).get(word)
            if (inspect.isclass(obj) or _is_alias(obj)) and _module_of(obj).startswith(package):
                found.add(word)
    return found


@functools.cache
def names_for_type_checkers(module_name: str, package: str) -> dict[str, object]:
    """What ``module_name`` imports from ``package`` only for type checkers (``if
    TYPE_CHECKING:``, where the library keeps the names its annotations alone need), imported
    here: name -> object."""
    module = sys.modules[module_name]
    names: dict[str, object] = {}
    for node in ast.parse(inspect.getsource(module)).body:
        if not (
            isinstance(node, ast.If)
            and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        ):
            continue
        for statement in node.body:
            if not isinstance(statement, ast.ImportFrom):
                continue
            source = importlib.util.resolve_name(
                "." * statement.level + (statement.module or ""), module.__package__
            )
            if source.split(".")[0] != package:
                continue
            imported = importlib.import_module(source)
            for alias in statement.names:
                names[alias.asname or alias.name] = getattr(imported, alias.name)
    return names


def _is_alias(obj: object) -> bool:
    return type(obj).__name__ in ("_LiteralGenericAlias", "_UnionGenericAlias", "TypeAliasType")


def _module_of(obj: object) -> str:
    return str(getattr(obj, "__module__", ""))
