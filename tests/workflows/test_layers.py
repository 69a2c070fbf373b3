"""``workflows`` has no import cycle between any two of its modules, counting every import grimp
sees: at module level, inside functions, and under ``if TYPE_CHECKING:``. The import contracts of
``pyproject.toml`` (``lint-imports``, run by ``scripts/test``) check the layers and that siblings
of a package form no cycle; this test checks module by module, so a cycle through a package's
``__init__`` is caught too, and names the modules of each cycle it finds.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

import grimp
import pytest


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("workflows", include_external_packages=False, cache_dir=None)


def imports_within(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    """Every module of ``workflows`` and the modules of ``workflows`` it imports."""
    modules = {m for m in graph.modules if m == "workflows" or m.startswith("workflows.")}
    return {m: graph.find_modules_directly_imported_by(m) & modules for m in modules}


def cycles(edges: Mapping[str, Set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_ring_and_not_a_chain() -> None:
    # the checker itself: a three-module ring is found, a chain is not
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_graph_counts_deferred_and_type_only_imports(graph: grimp.ImportGraph) -> None:
    # _registry imports _host_limits inside disown(); _handle imports ArchiveLimits under
    # TYPE_CHECKING: both must be edges, or the check below would prove nothing
    edges = imports_within(graph)
    assert "workflows._host_limits" in edges["workflows._ownership._registry"]
    assert "workflows._dump._limits" in edges["workflows._handle"]


def test_workflows_has_no_import_cycle(graph: grimp.ImportGraph) -> None:
    found = cycles(imports_within(graph))
    assert found == [], "import cycles in workflows (each line one cycle's modules):\n" + "\n".join(
        ", ".join(component) for component in found
    )
