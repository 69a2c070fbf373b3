"""The ``ray`` extra: ``import workflows`` never imports Ray, and ``import workflows.ray``
without Ray says which extra to install (fresh interpreters, Ray hidden from the second)."""

from __future__ import annotations

import subprocess
import sys

HIDDEN = """
import sys
sys.modules["ray"] = None  # what an interpreter without ray finds: ImportError
try:
    import workflows.ray
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def _run(program: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.strip()


def test_import_workflows_does_not_import_ray() -> None:
    program = "import sys, workflows; print('ray' in sys.modules, 'workflows.ray' in sys.modules)"
    assert _run(program) == "False False"


def test_import_workflows_ray_without_ray_names_the_extra() -> None:
    out = _run(HIDDEN)
    assert out.startswith("MissingExtraError workflows.ray needs the ray extra"), out
    assert "pip install 'klavis-sandbox[ray]'" in out
