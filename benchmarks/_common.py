"""Shared pieces of the benchmarks: figures, timing, emulator processes, raw API helpers.

Emulators run in their own process (``python -m klavis_emulator --port 0 ...``), never in the
measuring process: the emulator's CPU work (extracting archives, building dumps, FastAPI) must
not compete for the measured client's GIL, and on two cores the two processes each get one.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import secrets
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

__all__ = [
    "REPO_ROOT",
    "BenchContext",
    "EmulatorProcess",
    "Figure",
    "acquire_many",
    "api_client",
    "emulator_root",
    "file_create_ms",
    "write_mb_s",
    "load_average",
    "listed_ids",
    "machine_info",
    "median",
    "new_token",
    "run_child",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
_LISTENING = re.compile(r"listening on (http://\S+)")


@dataclass
class Figure:
    """One measured figure: ``value`` against ``goal`` (``op`` is ``>=``, ``<=`` or ``==``; or
    ``report`` for a figure shown without a goal)."""

    name: str
    value: float
    unit: str
    op: str
    target: float
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def goal(self) -> str:
        """The goal as text, e.g. ``>= 5`` (``-`` for a figure without one)."""
        if self.op == "report":
            return "-"
        return f"{self.op} {self.target:g}"

    @property
    def met(self) -> bool:
        """Whether the value meets the goal (always, for a figure without one)."""
        if self.op == "report":
            return True
        if self.op == ">=":
            return self.value >= self.target
        if self.op == "<=":
            return self.value <= self.target
        return self.value == self.target

    def to_json(self) -> dict[str, Any]:
        """The ``results.json`` entry of this figure."""
        return {
            "value": self.value,
            "unit": self.unit,
            "goal": self.goal,
            "met": self.met,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class BenchContext:
    """What every benchmark gets: the generated workspace, a scratch folder on the client's
    disk, and the folder the emulators keep their state in (see :func:`emulator_root`)."""

    workspace: Path
    workspace_info: dict[str, Any]
    scratch: Path
    emulator_root: Path
    repeats: int

    def folder(self, name: str) -> Path:
        """A fresh folder under the scratch folder."""
        return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.scratch))


def median(values: Sequence[float]) -> float:
    """The median of ``values``."""
    return float(statistics.median(values))


def new_token() -> str:
    """A fresh API key: every benchmark is its own tenant."""
    return f"bench-{secrets.token_hex(12)}"


def emulator_root(scratch: Path) -> Path:
    """Where the emulators keep their state: ``$KLAVIS_BENCH_EMULATOR_DIR``, else ``/dev/shm``
    (RAM) when writable, else the scratch folder.

    The emulator stands in for a remote service, whose disk is not the client's: in RAM, its
    writes (a 100 MiB workspace per initialize) neither compete with the client's own disk I/O
    (spool files, dump extraction) nor get charged this machine's disk latency. Its CPU work is
    still measured in full.
    """
    chosen = os.environ.get("KLAVIS_BENCH_EMULATOR_DIR")
    if chosen:
        base = Path(chosen)
    elif os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        base = Path("/dev/shm")
    else:
        base = scratch
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="klavis-bench-emulators-", dir=base))


class EmulatorProcess:
    """``python -m klavis_emulator --port 0 ...`` in a child process, stopped with SIGTERM.

    The URL is read from the line the emulator prints once its socket is bound; the data
    folder is a fresh temporary folder under ``root`` (never the per-user default). ``env``:
    variables set for the emulator beside this process's environment.
    """

    def __init__(
        self,
        root: Path,
        *,
        latency_ms: int = 0,
        fault_rate: float = 0.0,
        fault_mode: str = "mixed",
        fault_seed: int | None = None,
        acquire_delay: float = 0.0,
        mcp_at_acquire: bool = True,
        startup_timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._env = {**os.environ, **env} if env is not None else None
        self._data_dir = Path(tempfile.mkdtemp(prefix="emulator-", dir=root))
        self._log_path = self._data_dir.with_suffix(".log")
        self._args = [
            sys.executable,
            "-m",
            "klavis_emulator",
            "--port",
            "0",
            "--data-dir",
            str(self._data_dir),
            "--latency-ms",
            str(latency_ms),
            "--fault-rate",
            str(fault_rate),
            "--fault-mode",
            fault_mode,
            "--log-level",
            "warning",
        ]
        if fault_seed is not None:
            self._args += ["--fault-seed", str(fault_seed)]
        if acquire_delay:
            self._args += ["--acquire-delay", str(acquire_delay)]
        if not mcp_at_acquire:
            self._args.append("--no-mcp-at-acquire")
        self._startup_timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self.base_url = ""

    @property
    def pid(self) -> int:
        """The emulator's process id."""
        assert self._proc is not None
        return self._proc.pid

    def tenant_scratch(self) -> Path:
        """A scratch folder where the emulator keeps its tenants' files: inside its
        ``workspaces/.tmp``, reached as the emulator reaches it, i.e. through the overlay of
        its data folder where confinement made one (``/proc/<holder>/root/...``, the holder
        being the emulator's child that holds the overlays: see
        ``klavis_emulator/_exec/data_overlay.py``), else the plain folder. A limit of the
        emulator's own file work is measured there, on the same file system as the work."""
        folder = self._data_dir / "workspaces" / ".tmp"
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                status = (entry / "status").read_text()
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            parent = next(
                (line.split()[1] for line in status.splitlines() if line.startswith("PPid:")), ""
            )
            if parent == str(self.pid) and os.fsencode(self._data_dir) in argv and b"-c" in argv:
                view = Path(f"/proc/{entry.name}/root{folder}")
                if view.is_dir():
                    folder = view
                break
        scratch = Path(tempfile.mkdtemp(prefix="bench-", dir=folder))
        return scratch

    @staticmethod
    def to_read(path: Path) -> Path:
        """A path of :meth:`tenant_scratch` as the emulator reads its workspaces for a dump:
        the overlay's upper folder itself, i.e. the path without its ``/proc/<holder>/root``
        (``Folders.workspaces_to_read`` in ``klavis_emulator/_state/db.py``)."""
        parts = path.parts
        if parts[:2] == ("/", "proc") and len(parts) > 3 and parts[3] == "root":
            return Path("/", *parts[4:])
        return path

    def __enter__(self) -> EmulatorProcess:
        log = open(self._log_path, "wb")
        try:
            self._proc = subprocess.Popen(
                self._args, stdout=subprocess.PIPE, stderr=log, cwd=REPO_ROOT, env=self._env
            )
        finally:
            log.close()
        try:
            self.base_url = self._read_url()
            with httpx.Client(base_url=self.base_url, timeout=10) as client:
                client.get("/_emulator/health").raise_for_status()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _read_url(self) -> str:
        assert self._proc is not None
        assert self._proc.stdout is not None
        deadline = time.monotonic() + self._startup_timeout
        out = self._proc.stdout
        seen = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([out], [], [], 0.5)
            if ready:
                chunk = os.read(out.fileno(), 4096)
                if not chunk:
                    break
                seen += chunk
                found = _LISTENING.search(seen.decode(errors="replace"))
                if found:
                    return found.group(1)
            elif self._proc.poll() is not None:
                break
        raise RuntimeError(
            f"the emulator did not start ({' '.join(self._args[3:])}); its log:\n"
            + self._log_path.read_text(errors="replace")[-2000:]
        )

    def set_faults(self, **settings: Any) -> dict[str, Any]:
        """Change fault injection at run time (``POST /_emulator/faults``); return the settings
        (with ``injected``, the number of faults injected so far)."""
        with httpx.Client(base_url=self.base_url, timeout=10) as client:
            response = client.post("/_emulator/faults", json=settings)
            response.raise_for_status()
            current: dict[str, Any] = response.json()
            return current

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


@contextlib.contextmanager
def api_client(base_url: str, token: str, *, timeout: float = 120.0) -> Iterator[httpx.Client]:
    """A plain httpx client for one tenant, reused for many requests."""
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout
    ) as client:
        yield client


def listed_ids(base_url: str, token: str) -> list[str]:
    """The tenant's listed sandboxes (a plain GET, no retries)."""
    with api_client(base_url, token) as client:
        response = client.get("/local-sandbox")
        response.raise_for_status()
        return [item["local_sandbox_id"] for item in response.json()["local_sandboxes"]]


def acquire_many(
    base_url: str,
    token: str,
    count: int,
    *,
    servers: Sequence[str] = ("filesystem",),
    concurrency: int = 16,
) -> list[str]:
    """Acquire ``count`` sandboxes with plain httpx calls (set-up, never measured)."""
    with api_client(base_url, token) as client:

        def one(_: int) -> str:
            response = client.post(
                "/local-sandbox", json={"server_names": list(servers), "ttl_seconds": 3600}
            )
            response.raise_for_status()
            return str(response.json()["local_sandbox_id"])

        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            return list(pool.map(one, range(count)))


def run_child(module: str, *args: str, timeout: float = 600.0) -> dict[str, Any]:
    """Run ``python -m benchmarks.<module> args...`` and parse the JSON it prints last."""
    proc = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"benchmarks.{module} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    last = proc.stdout.strip().splitlines()[-1]
    result: dict[str, Any] = json.loads(last)
    return result


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    return None


def _git_commit() -> str | None:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def file_create_ms(folder: Path, count: int = 500) -> float:
    """Milliseconds to create (and write 1 KiB to) one file in ``folder``: the cost that
    extracting 2,000 files pays 2,000 times. Healthy disks take well under 0.1 ms."""
    return _probe(folder, count, 1024) * 1000 / count


def write_mb_s(folder: Path, count: int = 256, size: int = 256 * 1024) -> float:
    """MB/s writing ``count`` new files of ``size`` bytes in ``folder`` (64 MiB by default):
    what a dump of the 100 MiB workspace pays on top of creating its files. tmpfs writes
    about 2,000 MB/s on the benchmark machine; its ext4 disk, mounted with ``discard``, wrote
    540-950 MB/s on a day when a dump's 100 MiB took 0.37-0.9 s to write there against 0.06 s
    in tmpfs."""
    return count * size / 1e6 / _probe(folder, count, size)


def _probe(folder: Path, count: int, size: int) -> float:
    """Seconds to create ``count`` files of ``size`` bytes in a new folder under ``folder``."""
    probe = Path(tempfile.mkdtemp(prefix="fs-probe-", dir=folder))
    data = b"x" * size
    try:
        started = time.perf_counter()
        for i in range(count):
            fd = os.open(probe / f"f{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, data)
            os.close(fd)
        return time.perf_counter() - started
    finally:
        for i in range(count):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(probe / f"f{i}")
        probe.rmdir()


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (other work on the machine skews timings)."""
    with contextlib.suppress(OSError):
        return [round(x, 2) for x in os.getloadavg()]
    return None


def machine_info() -> dict[str, Any]:
    """Where the figures were measured."""
    from importlib.metadata import PackageNotFoundError, version

    versions: dict[str, str] = {}
    for package in ("httpx", "isal", "uvicorn", "fastapi", "stamina"):
        with contextlib.suppress(PackageNotFoundError):
            versions[package] = version(package)
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "packages": versions,
        "commit": _git_commit(),
    }
