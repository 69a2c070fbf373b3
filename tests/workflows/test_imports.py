"""``import workflows`` imports the two faces and what defines them, nothing a feature needs:
the HTTP layer, archives, MCP, pools, recipes, templates, tracing's engine, the CLI and the
distribution's metadata wait for their first use. Each public name is still there, the same
object, for ``from workflows import``, ``dir()`` and type checkers. (Fresh interpreters: the
test process has imported everything. The time it takes is the bench's ``import_time_s`` and
``import_time_plain_s``, never asserted here.)"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import subprocess
import sys
import textwrap

import pytest

import workflows

# What ``import workflows`` must not import: each is a feature's, or costs more than the rest.
HEAVY = [
    # the HTTP layer: the first request imports it
    "httpx",
    "httpcore",
    "klavis_sandbox_client",
    "attr",
    "stamina",
    "tenacity",
    "ssl",
    # httpx's command line (rich, click, pygments where installed)
    "rich",
    "click",
    "pygments",
    # the async face's engine, the metadata lookups, the progress bars, tracing, the extras
    "asyncio",
    "concurrent.futures",
    "importlib.metadata",
    "email",
    "tqdm",
    "opentelemetry",
    "mcp",
    "ray",
    "pandas",
    "platformdirs",
    # archives: seeding and dumping
    "klavis_archive",
    "isal",
    "tarfile",
    # the library's own features
    "workflows._cli",
    "workflows._drivers",
    "workflows._emulator_process",
    "workflows._execution",
    "workflows._flows",
    "workflows._host_limits",
    "workflows._mcp",
    "workflows._reap",
    "workflows._pool",
    "workflows._recipes",
    "workflows._snapshot",
    "workflows._template",
    "workflows._transport",
    "workflows.ray",
]
# Everything of the library that ``import workflows`` imports: a module joins this list only if
# the faces cannot be defined without it.
EAGER = {
    "workflows",
    "workflows._acquire",
    "workflows._async_sandbox",
    "workflows._config",
    "workflows._dump",
    "workflows._dump._limits",
    "workflows._errors",
    "workflows._handle",
    "workflows._models",
    "workflows._ownership",
    "workflows._ownership._ledger",
    "workflows._ownership._reconcile",
    "workflows._ownership._registry",
    "workflows._redaction",
    "workflows._sandbox",
    "workflows._sandbox_base",
    "workflows._state_files",
    "workflows._tracing",
}


def _python(program: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(program)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _imported_by(program: str) -> set[str]:
    """The modules ``program`` imports (those already there when it starts left out: a
    ``.pth`` file of the venv may import some)."""
    first = "import json, sys\nbefore = set(sys.modules)\n"
    last = "\nprint(json.dumps(sorted(set(sys.modules) - before)))\n"
    return set(json.loads(_python(first + textwrap.dedent(program) + last)))


def _within(names: set[str], module: str) -> list[str]:
    return sorted(n for n in names if n == module or n.startswith(module + "."))


def test_import_workflows_leaves_every_feature_to_its_first_use() -> None:
    imported = _imported_by("import workflows")
    assert "workflows._sandbox" in imported  # the walk sees what it checks
    found = {module: _within(imported, module) for module in HEAVY}
    assert {module: names for module, names in found.items() if names} == {}
    assert {n for n in imported if n.split(".")[0] == "workflows"} == EAGER


def test_owning_a_sandbox_imports_what_the_release_at_exit_needs() -> None:
    # The release at exit and the SIGTERM handler import nothing: own() (a normal call, never
    # a handler) imports the HTTP layer before it registers the sandbox.
    out = _python(
        """
        import sys, workflows
        from workflows._config import resolve_settings
        from workflows._ownership import forget, own
        settings = resolve_settings("k", "http://127.0.0.1:9")
        print("workflows._transport" in sys.modules, "httpx" in sys.modules)
        own("sb-1", settings, None)
        print("workflows._transport" in sys.modules, "httpx" in sys.modules)
        forget("sb-1", settings)
        """
    )
    assert out.split() == ["False", "False", "True", "True"]


def test_every_public_name_is_the_object_of_its_module() -> None:
    for name in workflows.__all__:
        obj = getattr(workflows, name)
        where = workflows._LAZY.get(name)
        if where is not None:
            assert obj is getattr(importlib.import_module(f"workflows.{where}"), name), name
    assert set(workflows._LAZY) <= set(workflows.__all__)


def test_each_public_name_imports_in_a_fresh_interpreter() -> None:
    program = """
        import workflows
        for name in workflows.__all__:
            exec(f"from workflows import {name}")
        print(workflows.__version__)
        """
    assert _python(program).strip() == workflows.__version__


def test_dir_lists_every_public_name_before_it_is_loaded() -> None:
    names = json.loads(_python("import json, workflows; print(json.dumps(dir(workflows)))"))
    assert set(workflows.__all__) | {"__version__"} <= set(names)
    assert names == sorted(set(names))


def test_an_unknown_name_is_an_attribute_error_as_for_any_module() -> None:
    with pytest.raises(AttributeError, match="module 'workflows' has no attribute 'Nope'"):
        workflows.Nope  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(ImportError, match="cannot import name 'Nope' from 'workflows'"):
        exec("from workflows import Nope")


def test_type_checkers_see_exactly_the_lazy_names() -> None:
    """The ``if TYPE_CHECKING:`` imports of ``workflows/__init__.py`` (what mypy and editors
    read) name each lazy name from the module ``_LAZY`` loads it from, and nothing else."""
    tree = ast.parse(inspect.getsource(workflows))
    (block,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "typing.TYPE_CHECKING"
    ]
    seen = {
        alias.name: (statement.module or "")
        for statement in block.body
        if isinstance(statement, ast.ImportFrom)
        for alias in statement.names
    }
    assert seen == workflows._LAZY


def test_the_lazy_map_takes_whole_packages_whole() -> None:
    """A module whose every public name ``workflows`` exports lazily (the pools, the recipes)
    is named in ``_LAZY`` with exactly its ``__all__``: a lazy map must name each name before
    its module is imported, so the two lists are written twice, and this keeps them one."""
    for module in ("_pool", "_recipes", "_reap", "_snapshot"):
        names = {name for name, where in workflows._LAZY.items() if where == module}
        assert names == set(importlib.import_module(f"workflows.{module}").__all__), module
