"""What ``import workflows`` costs, in the venv the tests run in and in a venv as a user has it.

Figures:

* ``import_time_s``: the median wall time of ``python -c "import workflows"`` minus the median of
  ``python -c "pass"``, fresh interpreters of this venv (the dev venv: every extra, and the
  tools the tests use), 7 runs of each, interleaved.
* ``import_time_plain_s``: the same in a venv holding only the plain install of a wheel built
  from this checkout (``uv build``, then ``uv pip install`` of the wheel with its dependencies
  from the index, as a user's ``pip install klavis-sandbox`` gets them), made in the run's
  scratch folder; run from that folder, so the checkout's sources are not on ``sys.path``.

Each figure's detail says, beside the load average before and after, what the first request
adds (``http_layer_s``: httpx, the generated client, stamina and the flows, which ``import
workflows`` leaves to it) and what httpx's own import costs, its command-line module apart
(``httpx_cli_s``: ``import httpx`` imports ``httpx._main``, which imports rich, click and
pygments whenever they are installed, as they are in the dev venv; measured as ``import httpx``
with and without ``httpx._main`` blocked in ``sys.modules``). That part is a dependency's, paid
by the first request, not by ``import workflows``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from benchmarks._common import REPO_ROOT, BenchContext, Figure, load_average, median

__all__ = ["run"]

RUNS = 7
IMPORT = "import workflows"
# what the first request imports besides (a driver runs a flow)
HTTP_LAYER = "import workflows, workflows._drivers, workflows._flows"
HTTPX = "import httpx"
HTTPX_WITHOUT_CLI = "import sys; sys.modules['httpx._main'] = None; import httpx"
COUNT = (
    "import sys; before = set(sys.modules); import workflows; print(len(sys.modules) - len(before))"
)


@dataclass(frozen=True)
class Interpreter:
    """A venv's python, run in ``cwd`` with an environment free of the user's settings."""

    python: str
    cwd: Path

    @property
    def env(self) -> Mapping[str, str]:
        """This process's environment without ``PYTHON*`` (a ``PYTHONPATH`` would add
        modules) and ``KLAVIS_*`` (``KLAVIS_TRACING`` would import OpenTelemetry)."""
        return {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KLAVIS_"))}

    def run(self, code: str) -> str:
        """Run ``code`` in a fresh interpreter; its standard output."""
        done = subprocess.run(
            [self.python, "-c", code],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout

    def wall(self, code: str) -> float:
        """Seconds a fresh interpreter takes to run ``code``."""
        started = time.perf_counter()
        subprocess.run([self.python, "-c", code], cwd=self.cwd, env=self.env, check=True)
        return time.perf_counter() - started

    def heaviest_imports(self, limit: int = 8) -> list[str]:
        """Import time of ``import workflows`` by top-level package (``-X importtime`` self
        times summed), heaviest first: where a slow import comes from."""
        done = subprocess.run(
            [self.python, "-X", "importtime", "-c", IMPORT],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        totals: dict[str, int] = {}
        for line in done.stderr.splitlines():
            found = re.match(r"import time:\s+(\d+) \|\s+\d+ \| *(\S+)", line)
            if found:
                package = found.group(2).split(".")[0]
                totals[package] = totals.get(package, 0) + int(found.group(1))
        heaviest = sorted(totals.items(), key=lambda item: item[1], reverse=True)[:limit]
        return [f"{name} {us / 1e6:.3f} s" for name, us in heaviest]


def _measure(name: str, target: float, interpreter: Interpreter, **extra: object) -> Figure:
    """The figure ``name`` for one venv: fresh processes of each program, interleaved."""
    programs = ["pass", IMPORT, HTTP_LAYER, HTTPX, HTTPX_WITHOUT_CLI]
    for code in programs:  # warm the file-system cache and write the .pyc files
        interpreter.wall(code)
    load_before = load_average()
    times: dict[str, list[float]] = {code: [] for code in programs}
    for _ in range(RUNS):
        for code in programs:
            times[code].append(interpreter.wall(code))
    load_after = load_average()
    medians = {code: median(values) for code, values in times.items()}
    bare = medians["pass"]
    return Figure(
        name,
        medians[IMPORT] - bare,
        "s",
        "<=",
        target,
        {
            "bare_interpreter_s": bare,
            "with_import_s": medians[IMPORT],
            "runs": RUNS,
            "load_before": load_before,
            "load_after": load_after,
            "modules_imported": int(interpreter.run(COUNT)),
            "http_layer_s": medians[HTTP_LAYER] - medians[IMPORT],
            "httpx_s": medians[HTTPX] - bare,
            "httpx_cli_s": medians[HTTPX] - medians[HTTPX_WITHOUT_CLI],
            "self_time_by_package": interpreter.heaviest_imports(),
            **extra,
        },
    )


def _uv() -> str:
    """The uv of this venv (``scripts/_setup.sh`` puts it there), else the one on ``PATH``."""
    beside = Path(sys.executable).with_name("uv")
    found = str(beside) if beside.exists() else shutil.which("uv")
    if found is None:
        raise RuntimeError("import_time_plain_s needs uv: pip install uv")
    return found


def plain_venv(folder: Path) -> Path:
    """A venv in ``folder`` holding only the plain install of a wheel built from the checkout
    (its dependencies resolved from the index; uv's cache makes it a few seconds); its python."""
    uv = _uv()
    dist, venv = folder / "dist", folder / "venv"
    python = venv / "bin" / "python"

    def quiet(*args: str | Path) -> None:
        subprocess.run([uv, *args], check=True, capture_output=True, timeout=600)

    quiet("build", "--quiet", "--wheel", "--out-dir", dist, REPO_ROOT)
    (wheel,) = dist.glob("klavis_sandbox-*.whl")
    quiet("venv", "--quiet", "--python", sys.executable, venv)
    quiet("pip", "install", "--quiet", "--python", python, wheel)
    return python


def run(ctx: BenchContext) -> list[Figure]:
    """Measure the import time in this venv, then in a venv with only the plain install."""
    dev = _measure("import_time_s", 0.35, Interpreter(sys.executable, REPO_ROOT))
    folder = ctx.folder("plain-venv")
    began = time.perf_counter()
    python = plain_venv(folder)
    made_s = time.perf_counter() - began
    plain = _measure(
        "import_time_plain_s", 0.25, Interpreter(str(python), folder), venv_made_in_s=made_s
    )
    return [dev, plain]
