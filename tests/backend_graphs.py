"""Run a test module on every backend that holds the whole product.

A module opts in by importing the fixture, which then overrides ``conftest.make_graph``::

    from tests import backend_graphs
    make_graph = backend_graphs.make_graph
    pgvector_server = backend_graphs.pgvector_server

Each test of the module then runs twice: on the embedded SQLite file and on a fresh
PostgreSQL database (the throwaway server of ``tests/pg.py``; skipped, or failed under
``DOCGRAPH_REQUIRE_SERVICES=1``, where it cannot start). ``make(name)`` opens one index per
name, as the conftest fixture does; the same name opens the same index again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from docgraph import DocGraph
from docgraph.config import load_settings
from tests.helpers import CountingEmbedder
from tests.pg import PostgresServer, pgvector_server

__all__ = ["embedded_only", "make_graph", "pgvector_server"]

BACKEND_NAMES = ("embedded", "postgres")


@pytest.fixture(params=BACKEND_NAMES)
def make_graph(request: pytest.FixtureRequest, tmp_path: Path,
               embedder: CountingEmbedder) -> Iterator[Callable[..., DocGraph]]:
    """Open DocGraph indexes on this test's backend (see the module docstring)."""
    opened: list[DocGraph] = []
    databases: dict[str, tuple[str, str]] = {}  # index name -> (database, url)
    server: PostgresServer | None = (request.getfixturevalue("pgvector_server")
                                     if request.param == "postgres" else None)

    def make(name: str = "index.db", **overrides: object) -> DocGraph:
        settings = load_settings(**overrides)  # type: ignore[arg-type]
        settings.store.path = tmp_path / name
        if server is not None:
            if name not in databases:
                database = f"t_{uuid.uuid4().hex[:12]}"
                databases[name] = (database, server.create_database(database))
            settings.store.backend = "postgres"
            settings.store.url = databases[name][1]
        graph = DocGraph(settings, embedder)
        opened.append(graph)
        return graph

    yield make
    for graph in opened:
        graph.close()
    if server is not None:
        for database, _ in databases.values():
            server.drop_database(database)


#: Marks a test of an opted-in module that is about the SQLite file itself (its indexes,
#: pragmas, migrations): it runs on the embedded backend only, not skipped on the others.
embedded_only = pytest.mark.parametrize("make_graph", ["embedded"], indirect=True)
