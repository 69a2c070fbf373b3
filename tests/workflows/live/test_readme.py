"""Every Python snippet of README.md runs, as written, against the session emulator.

The snippets are taken from the README's ```python blocks and run one by one in a fresh
namespace, each as a reader would paste it into a script: the library finds the emulator
through ``KLAVIS_BASE_URL`` / ``KLAVIS_API_KEY``, as it finds the service. The working folder
holds the ``./project`` folder the first snippet seeds from. A snippet passes when it runs
without an error, prints, and leaves no sandbox acquired. (The README's shell blocks are the
CLI's and the emulator's commands, covered by their own tests; the shell block of "Offline in
five minutes" runs here, with the snippet after it, as a newcomer runs them.)
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from workflows import LocalSandbox, PoolResults

README = Path(__file__).resolve().parents[3] / "README.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def python_snippets(text: str) -> list[tuple[int, str]]:
    """The ```python blocks of a Markdown text: (line of the opening fence, code)."""
    return [
        (text.count("\n", 0, found.start()) + 1, found.group(1)) for found in _BLOCK.finditer(text)
    ]


SNIPPETS = python_snippets(README.read_text(encoding="utf-8"))


def test_the_readme_has_snippets() -> None:
    assert len(SNIPPETS) >= 3


@pytest.mark.parametrize(("line", "code"), SNIPPETS, ids=[f"README.md:{n}" for n, _ in SNIPPETS])
def test_snippet_runs(
    line: int,
    code: str,
    emulator_url: str,
    token: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("KLAVIS_BASE_URL", emulator_url)
    monkeypatch.setenv("KLAVIS_API_KEY", token)
    # the venv activated, as a reader's: EmulatorProcess finds its klavis-emulator on PATH
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "app.py").write_text("print('app')\n")
    (project / "build.log").write_text("ignored\n")

    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(code, f"README.md:{line}", "exec"), namespace)

    printed = capsys.readouterr().out
    assert printed.strip(), "the snippet printed nothing"
    results = namespace.get("results")
    if isinstance(results, PoolResults):  # the pool's snippet: every task must have passed
        assert [r.ok and r.value == {"passed": True} for r in results] == [True] * 6, printed
    assert LocalSandbox.list() == [], "the snippet left a sandbox acquired"


def test_offline_in_five_minutes_runs_as_written(tmp_path: Path) -> None:
    """The section's shell block (but its ``pip install``: the venv running this test is that
    install), then its first snippet, in bash with the venv's commands on PATH and no
    ``KLAVIS_`` variable of the test's: start the emulator by command, export, acquire, seed,
    one MCP tool call, dump, release. Port 8000 becomes one the kernel just gave as free."""
    section = README.read_text(encoding="utf-8").split("\n## Offline in five minutes\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    shell = section.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert shell[0].startswith("pip install '.[emulator,mcp]'")
    [(_, snippet), *_] = python_snippets(section)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    up = (  # the reader waits for the emulator's line; the script polls its health route
        "import time, urllib.request as r\n"
        "deadline = time.monotonic() + 120\n"
        "while True:\n"
        "    try:\n"
        f"        r.urlopen('http://127.0.0.1:{port}/_emulator/health', timeout=5); break\n"
        "    except OSError:\n"
        "        assert time.monotonic() < deadline, 'the emulator did not start'\n"
        "        time.sleep(0.2)\n"
    )
    script = "\n".join(shell[1:]).replace("8000", str(port))
    script += f"\npython - <<'UP'\n{up}UP\npython - <<'SNIPPET'\n{snippet}SNIPPET\n"
    script += "kill %1\nwait %1 || true\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KLAVIS_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["KLAVIS_SANDBOX_STATE_DIR"] = str(tmp_path / "state")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()  # the emulator's own lines (it runs with &) among them
    shown = textwrap.shorten(done.stdout + done.stderr, 2000)
    assert "Hello, offline!" in lines, shown  # the filesystem server read the seeded file
    assert "['notes/hello.txt']" in lines, shown  # the dump
