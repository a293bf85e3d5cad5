"""Shared fixtures: a deterministic embedder and small on-disk corpora."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from docgraph import DocGraph
from docgraph.config import load_settings
from tests.helpers import CountingEmbedder

# The throwaway PostgreSQL (session, started only when a test asks for it), visible to every
# module: a module that imports a backend-parametrized fixture of another module (e.g.
# corpus_graph of test_mcp_tools) gets the server that fixture needs.
from tests.pg import pgvector_server  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPO / "examples" / "corpus"

# Read once, before any test runs: ``_isolated_config`` removes every DOCGRAPH_* variable while
# a test runs, and a skip raised in the test's body or a function fixture is reported then.
REQUIRE_SERVICES = os.environ.get("DOCGRAPH_REQUIRE_SERVICES") == "1"


@pytest.fixture(autouse=True)
def _isolated_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test reads a docgraph.toml or DOCGRAPH_* variable from the developer's machine."""
    for key in list(os.environ):
        if key.startswith("DOCGRAPH_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("DOCGRAPH_CONFIG", str(tmp_path / "absent-docgraph.toml"))
    # The CLI's messages wrap at the terminal's width, 80 columns in a pipe: a test's temporary
    # paths (longer under parallel workers) would be cut mid-name. Tests that check a layout
    # pass their own width.
    monkeypatch.setenv("COLUMNS", "400")


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


@pytest.fixture
def make_graph(tmp_path: Path, embedder: CountingEmbedder) -> Iterator[Callable[..., DocGraph]]:
    opened: list[DocGraph] = []

    def make(name: str = "index.db", **overrides: object) -> DocGraph:
        settings = load_settings(**overrides)  # type: ignore[arg-type]
        settings.store.path = tmp_path / name
        graph = DocGraph(settings, embedder)
        opened.append(graph)
        return graph

    yield make
    for graph in opened:
        graph.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # type: ignore[no-untyped-def]
    """With DOCGRAPH_REQUIRE_SERVICES=1 (set by .ci/run) a skipped test fails: CI installs every
    server the tests need, so a skip there means a missing install step, not an option."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and REQUIRE_SERVICES:
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = f"skipped under DOCGRAPH_REQUIRE_SERVICES=1: {reason}"


#: The fixtures of ``tests/pg.py`` that give a test a PostgreSQL server.
POSTGRES_FIXTURES = frozenset({"pgvector_server", "postgres_server", "postgres_url",
                               "postgres_db"})


def runs_on_postgres(item: pytest.Item) -> bool:
    """A test runs on PostgreSQL when it takes a server fixture of ``tests/pg.py``, or when a
    parameter picks a PostgreSQL backend: ``backend_graphs.make_graph``, the backends of
    ``store_backends`` and the modules' own backend fixtures take the server with
    ``request.getfixturevalue``, so there only the parameter id ("postgres", "postgresql",
    "milvus-postgres") shows it, the same id ``-k "not postgres"`` has always matched."""
    if POSTGRES_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "postgres" in callspec.id


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``postgres`` every test that runs on PostgreSQL, so ``-m "not postgres"`` runs the
    suite without a server. A test that reaches the server another way (a factory fixture,
    as ``tests/graph/test_graph_backends.py``'s) carries the mark itself; so does every test
    that runs the real embedding model (``e2e``: a module's ``pytestmark`` or its own)."""
    for item in items:
        if runs_on_postgres(item):
            item.add_marker(pytest.mark.postgres)
