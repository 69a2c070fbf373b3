"""Every Python snippet of README.md runs, as written, against the session emulator.

The snippets are taken from the README's ```python blocks and run one by one in a fresh
namespace, each as a reader would paste it into a script: the library finds the emulator
through ``KLAVIS_BASE_URL`` / ``KLAVIS_API_KEY``, as it finds the service. The working folder
holds the ``./project`` folder the first snippet seeds from. A snippet passes when it runs
without an error, prints, and leaves no sandbox acquired. (The README's shell blocks are the
CLI's and the emulator's commands, covered by their own tests.)
"""

from __future__ import annotations

import re
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
