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

import json
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from docgraph import DocGraph
from docgraph.config import load_settings
from docgraph.embedding.embedders import Embedder
from tests.helpers import CountingEmbedder
from tests.pg import PostgresServer, pgvector_server

__all__ = ["embedded_only", "graph_on_backend", "make_graph", "pgvector_server",
           "point_the_cli_at"]

BACKEND_NAMES = ("embedded", "postgres")

_TEMPLATES: dict[Path, str] = {}  # server directory -> its migrated template database


def fresh_database(server: PostgresServer) -> tuple[str, str]:
    """A new database (name, URL) on ``server`` that already holds docgraph's schema: a copy
    of a template migrated once per server, so a test does not pay for the migrations (the
    schema itself is tested by the store tests, on empty databases)."""
    template = _TEMPLATES.get(server.base)
    if template is None:
        template = f"docgraph_template_{uuid.uuid4().hex[:8]}"
        settings = load_settings()
        settings.store.backend = "postgres"
        settings.store.url = server.create_database(template)
        DocGraph(settings, CountingEmbedder()).close()  # migrates; no session stays open
        _TEMPLATES[server.base] = template
    database = f"t_{uuid.uuid4().hex[:12]}"
    server.execute(f'CREATE DATABASE "{database}" TEMPLATE "{template}"')
    return database, server.url(database)


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
                databases[name] = fresh_database(server)
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


@contextmanager
def graph_on_backend(backend: str, request: pytest.FixtureRequest, path: Path,
                     embedder: Embedder) -> Iterator[DocGraph]:
    """A DocGraph with the default settings only (no docgraph.toml or DOCGRAPH_* variable of
    the machine is read, so it suits module-scoped fixtures) on ``backend``: the SQLite file
    ``path``, or a fresh PostgreSQL database dropped afterwards. For a module-scoped fixture
    parametrized over :data:`BACKEND_NAMES`."""
    with pytest.MonkeyPatch.context() as patch:
        for key in list(os.environ):
            if key.startswith("DOCGRAPH_"):
                patch.delenv(key)
        patch.setenv("DOCGRAPH_CONFIG", str(path.parent / "absent-docgraph.toml"))
        settings = load_settings()
    settings.store.path = path
    server: PostgresServer | None = None
    database = ""
    if backend == "postgres":
        server = request.getfixturevalue("pgvector_server")
        database, settings.store.url = fresh_database(server)
        settings.store.backend = "postgres"
    graph = DocGraph(settings, embedder)
    try:
        yield graph
    finally:
        graph.close()
        if server is not None:
            server.drop_database(database)


def point_the_cli_at(graph: DocGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``docgraph --index PATH ...`` (the CLI) open ``graph``'s index on its backend."""
    monkeypatch.setenv("DOCGRAPH_STORE__BACKEND", graph.backend)
    if graph.settings.store.url is not None:
        monkeypatch.setenv("DOCGRAPH_STORE__URL", graph.settings.store.url)


def cli_status(graph: DocGraph, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What ``docgraph status --json`` tells the owner of ``graph``'s index (no
    ``[governance]``), run through the real CLI."""
    from typer.testing import CliRunner

    from docgraph.serve.cli import app

    point_the_cli_at(graph, monkeypatch)
    monkeypatch.setenv("DOCGRAPH_EMBED__MODEL", graph.embedder.name)
    shown = CliRunner().invoke(app, ["--index", str(graph.settings.store.path), "status",
                                     "--json"])
    assert shown.exit_code == 0, shown.output
    status: dict[str, Any] = json.loads(shown.stdout)
    return status
