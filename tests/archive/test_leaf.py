"""The archive core is a leaf: it imports neither ``workflows`` nor ``klavis_emulator``, only the
standard library and the project's declared dependencies."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import klavis_archive

_CORE = Path(klavis_archive.__file__).parent
# what the core may import besides the standard library: declared dependencies, and the
# typing-only names (under TYPE_CHECKING)
_ALLOWED = {"isal", "typing_extensions", "_typeshed"}


def _imported(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_core_imports_only_the_standard_library_and_its_dependencies() -> None:
    modules = sorted(_CORE.glob("*.py"))
    assert len(modules) > 5
    for module in modules:
        outside = _imported(module) - set(sys.stdlib_module_names) - _ALLOWED
        assert outside == set(), f"{module.name} imports {sorted(outside)}"


def test_importing_the_core_loads_neither_package() -> None:
    code = (
        "import sys, klavis_archive\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('workflows', 'klavis_emulator', 'klavis_sandbox_client')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_both_packages_use_the_one_core() -> None:
    import klavis_emulator._archive as emulator
    import workflows._dump._archive as library
    import workflows._paths as paths

    assert emulator.ArchiveRejected is klavis_archive.ArchiveRejected
    assert emulator.WORKSPACE_MOUNT == paths.SANDBOX_WORKSPACE == klavis_archive.WORKSPACE_MOUNT
    assert paths.link_escapes is klavis_archive.link_escapes
    assert library.CHUNK_SIZE == klavis_archive.CHUNK_SIZE
