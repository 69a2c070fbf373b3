"""``ARCHITECTURE.md`` stays the map of the code: its code map names every module and package
under ``workflows/``, ``klavis_emulator/`` and ``klavis_archive/``, and nothing that is gone;
the arrows it states between the three packages hold.

A code map entry is a list item of the ``## Code map`` section whose text starts with a path in
backticks (``- `workflows/_flows.py`: ...``); a package is named by its folder, with a trailing
slash, which stands for its ``__init__.py``.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAP = ROOT / "ARCHITECTURE.md"
PACKAGES = ("workflows", "klavis_emulator", "klavis_archive")
_ENTRY = re.compile(r"^\s*[-*] `([^`]+)`(.*)$")
_FIX = (
    "fix ARCHITECTURE.md's code map: one list item per module or package folder, "
    "'- `path`: one line', under its package"
)


def code_map_entries(text: str) -> list[tuple[str, str]]:
    """The (path, rest of the line) of every entry of the ``## Code map`` section, in order."""
    entries: list[tuple[str, str]] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line.strip() == "## Code map"
            continue
        match = _ENTRY.match(line) if inside else None
        if match:
            entries.append((match.group(1), match.group(2)))
    return entries


def modules_on_disk() -> set[str]:
    """Every module and package folder of the three packages, as the code map spells them."""
    found: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            relative = path.relative_to(ROOT)
            if "__pycache__" in relative.parts:
                continue
            if path.name == "__init__.py":
                found.add(f"{relative.parent.as_posix()}/")
            else:
                found.add(relative.as_posix())
            for folder in relative.parents:
                if folder != Path("."):
                    found.add(f"{folder.as_posix()}/")
    return found


def _exists(path: str) -> bool:
    target = ROOT / path
    return target.is_dir() if path.endswith("/") else target.is_file()


def test_the_map_has_a_code_map_section() -> None:
    entries = code_map_entries(MAP.read_text(encoding="utf-8"))
    # the three packages and at least one module each
    assert len(entries) > 100, f"ARCHITECTURE.md's '## Code map' section has {len(entries)} entries"


def test_every_module_and_package_is_in_the_code_map() -> None:
    named = {path for path, _ in code_map_entries(MAP.read_text(encoding="utf-8"))}
    missing = sorted(modules_on_disk() - named)
    if missing:
        listed = "\n".join(f"  - `{path}`: ..." for path in missing)
        pytest.fail(f"{_FIX}. Missing ({len(missing)}):\n{listed}", pytrace=False)


def test_every_path_in_the_code_map_exists() -> None:
    entries = code_map_entries(MAP.read_text(encoding="utf-8"))
    stale = sorted(path for path, _ in entries if not _exists(path))
    if stale:
        listed = "\n".join(f"  - `{path}`" for path in stale)
        pytest.fail(
            f"{_FIX}. Stale: no such file (or folder, for a path ending in '/'); remove or "
            f"rename ({len(stale)}):\n{listed}",
            pytrace=False,
        )


def test_each_entry_is_named_once_and_says_what_it_holds() -> None:
    entries = code_map_entries(MAP.read_text(encoding="utf-8"))
    twice = sorted(path for path, count in Counter(p for p, _ in entries).items() if count > 1)
    bare = sorted(path for path, rest in entries if not re.match(r"^: \S", rest))
    assert not twice, f"{_FIX}. Named more than once: {twice}"
    assert not bare, f"{_FIX}. Entries without ': one line' after the path: {bare}"


def _imports(path: Path) -> set[str]:
    """The top-level packages a module imports, at its top, in a function or for type checkers."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_arrows_between_the_three_packages_are_those_the_map_states() -> None:
    # the library may import the emulator in one module only, lazily (the CLI's demo command)
    allowed = {
        "workflows": {"klavis_archive", "klavis_emulator"},
        "klavis_emulator": {"klavis_archive"},
        "klavis_archive": set[str](),
    }
    wrong: list[str] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            others = (_imports(path) & set(PACKAGES)) - {package}
            granted = allowed[package]
            if relative != "workflows/_cli/_demo.py":
                granted = granted - {"klavis_emulator"}
            wrong.extend(f"{relative} imports {name}" for name in sorted(others - granted))
    demo = ROOT / "workflows" / "_cli" / "_demo.py"
    for node in ast.parse(demo.read_text(encoding="utf-8")).body:  # the module's top only
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        if any(name.split(".")[0] == "klavis_emulator" for name in names):
            wrong.append("workflows/_cli/_demo.py imports klavis_emulator at its top, not lazily")
    if wrong:
        pytest.fail("imports against ARCHITECTURE.md's layers:\n" + "\n".join(wrong), pytrace=False)


MAX_MODULE_LINES = 600
"""The house's limit on a hand-written module (``generated/`` is the generator's)."""


def test_no_hand_written_module_is_over_600_lines() -> None:
    over = [
        f"{path.relative_to(ROOT).as_posix()}: {count} lines"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    if over:
        pytest.fail(
            f"modules over {MAX_MODULE_LINES} lines (split them by what they hold):\n"
            + "\n".join(over),
            pytrace=False,
        )
