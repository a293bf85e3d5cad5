"""The one-way rules between docgraph's packages ("Layers" in ``docs/ARCHITECTURE.md``: one
direction, the ground floor at the bottom), read from the source with :mod:`ast`.

Every ``import`` counts, at module level, inside a function (a lazy import) and under
``TYPE_CHECKING``: a lazy import is still a dependency, only one that hides a cycle.

- The **ground floor** (model types, errors, settings, text analysis, text budgets, the
  caller-facing limits and search modes, the embedders, the version, the two small
  utilities ``llm`` and ``parallel``, and ``telemetry``: request ids, spans, metrics)
  imports nothing of docgraph above it.
- Every other package may import the ground floor and the packages below it in
  :data:`BELOW` (and what those may import); an import of anything else is a *back-up
  import*. The ones the code still has are listed in :data:`KNOWN_BACK_UP_IMPORTS`, each
  with why it is there. A new one fails this test; so does an entry whose import is gone,
  so the list stays true and can only shrink.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "docgraph"

GROUND_FLOOR = frozenset({"model", "errors", "config", "text", "languages", "budgets",
                          "limits", "embedding", "llm", "parallel", "version", "telemetry"})

# What each package may import besides the ground floor: the packages directly below it
# (the test closes this transitively). "__init__" is the package's own ``__init__.py`` (the
# public names, re-exporting ``__version__``), "root" the composition root, "app" the
# facade over it.
BELOW: dict[str, frozenset[str]] = {
    "store": frozenset(),  # the ports and their backends
    "sources": frozenset({"store"}),  # the source registry is stored through a port
    "graph": frozenset({"store"}),  # entities and communities, written through GraphStore
    "ingest": frozenset({"sources", "graph", "store"}),
    "retrieve": frozenset({"graph", "store"}),  # reads ports; entity keys for the query
    "evidence": frozenset({"retrieve"}),
    "lifecycle": frozenset({"ingest"}),  # the refresher drives builds
    "governance": frozenset({"evidence", "sources"}),  # sources: agent-visible ids (naming)
    # The composition root builds the engines and the lifecycle objects once and hands
    # governance, evidence and the lifecycle the narrow protocols they own.
    "root": frozenset({"governance", "lifecycle"}),
    "app": frozenset({"root"}),  # DocGraph: the owner's API over the root
    "serve": frozenset({"app"}),
    "__init__": frozenset({"serve"}),
}

# importer module -> imported module: why the back-up import is still there. Only shrinks.
KNOWN_BACK_UP_IMPORTS: dict[str, str] = {}


def _modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    found: dict[str, Path] = {}
    for path in sorted((SRC / ROOT).rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str:
    """The longest docgraph module that ``name`` (a module, or a name in one) lies in."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports_of(module: str, path: Path) -> Iterator[str]:
    """The docgraph modules ``module`` imports, wherever in the file (functions included)."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == ROOT or alias.name.startswith(ROOT + "."):
                    yield _resolve(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target != ROOT and not target.startswith(ROOT + "."):
                continue
            for alias in node.names:  # `from docgraph.store import lexical` names a module
                yield _resolve(f"{target}.{alias.name}")


def unit(module: str) -> str:
    """The package (or top-level module) a module belongs to: ``docgraph.store.sql.graph``
    -> ``store``, ``docgraph.app`` -> ``app``, ``docgraph`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def import_edges() -> set[tuple[str, str]]:
    """(importer module, imported module) for every import between two packages."""
    return {(module, imported)
            for module, path in MODULES.items()
            for imported in imports_of(module, path)
            if unit(imported) != unit(module)}


def may_import(package: str) -> frozenset[str]:
    """The ground floor and everything below ``package`` (transitively)."""
    seen: set[str] = set()
    todo = list(BELOW.get(package, ()))
    while todo:
        below = todo.pop()
        if below not in seen:
            seen.add(below)
            todo.extend(BELOW[below])
    return GROUND_FLOOR | seen


def back_up_imports(edges: set[tuple[str, str]]) -> set[str]:
    """``importer -> imported`` for every edge that breaks the one-way rules."""
    return {f"{a} -> {b}" for a, b in edges
            if unit(a) not in GROUND_FLOOR and unit(b) not in may_import(unit(a))}


def cycles(edges: set[tuple[str, str]], among: frozenset[str]) -> list[list[str]]:
    """The package cycles (strongly connected sets of two or more) among ``among``."""
    graph = {p: {unit(b) for a, b in edges if unit(a) == p and unit(b) in among} for p in among}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(p: str) -> None:  # Tarjan
        index[p] = low[p] = len(index)
        stack.append(p)
        for q in sorted(graph[p]):
            if q not in index:
                visit(q)
                low[p] = min(low[p], low[q])
            elif q in stack:
                low[p] = min(low[p], index[q])
        if low[p] == index[p]:
            component: list[str] = []
            while True:
                q = stack.pop()
                component.append(q)
                if q == p:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for p in sorted(among):
        if p not in index:
            visit(p)
    return found


EDGES = import_edges()


def test_every_package_has_a_place_in_the_rules():
    units = {unit(m) for m in MODULES}
    assert units == GROUND_FLOOR | set(BELOW), "a new package needs a place in BELOW"


def test_the_ground_floor_imports_nothing_above_it():
    above = sorted(f"{a} -> {b}" for a, b in EDGES
                   if unit(a) in GROUND_FLOOR and unit(b) not in GROUND_FLOOR)
    assert not above, "the ground floor imports above it:\n" + "\n".join(above)


def test_store_ingest_graph_and_sources_form_no_cycle():
    assert cycles(EDGES, frozenset({"store", "ingest", "graph", "sources"})) == []


def test_no_package_forms_a_cycle():
    """Not only store/ingest/graph/sources: no two packages import each other at all (the
    {app, lifecycle} cycle went with the composition root)."""
    assert cycles(EDGES, frozenset(unit(m) for m in MODULES)) == []


def test_no_new_back_up_import():
    new = sorted(back_up_imports(EDGES) - set(KNOWN_BACK_UP_IMPORTS))
    assert not new, ("imports against the one-way rules (ARCHITECTURE.md, Layers); import "
                     "downward, or move the shared part to the ground floor:\n"
                     + "\n".join(new))


def test_every_known_back_up_import_still_exists():
    gone = sorted(set(KNOWN_BACK_UP_IMPORTS) - back_up_imports(EDGES))
    assert not gone, ("no longer a back-up import: remove from KNOWN_BACK_UP_IMPORTS:\n"
                      + "\n".join(gone))


def test_the_rules_see_lazy_and_relative_imports(tmp_path):
    """The parser finds an import inside a function and a relative one, and the rules call
    a store module importing ingest a back-up import (what the lazy text_hash imports were)."""
    source = tmp_path / "catalog.py"
    source.write_text("def write():\n    from docgraph.ingest.pipeline import IngestReport\n"
                      "from ..sql import dialect\n", encoding="utf-8")
    found = set(imports_of("docgraph.store.sqlite.catalog", source))
    assert found == {"docgraph.store.sql.dialect", "docgraph.ingest.pipeline"}
    edges = {("docgraph.store.sqlite.catalog", m) for m in found if unit(m) != "store"}
    assert back_up_imports(edges) == {"docgraph.store.sqlite.catalog -> docgraph.ingest.pipeline"}
    assert cycles(edges | {("docgraph.ingest.pipeline", "docgraph.store.base")},
                  frozenset({"store", "ingest"})) == [["ingest", "store"]]


MAX_MODULE_LINES = 500


def test_no_module_is_over_500_lines():
    """A module past 500 lines is usually two things (DESIGN.md's habits aim at ~400)."""
    long = sorted(f"{name}: {n} lines" for name, path in MODULES.items()
                  if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES)
    assert not long, "split these by responsibility:\n" + "\n".join(long)
