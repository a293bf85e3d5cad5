"""The entity graph on every relational backend: the same corpus indexed into the embedded
SQLite catalog and into PostgreSQL gives the same entities, edges, communities, reports and
neighbours, and cohort search (every mode) and ``context`` return the same evidence. On
PostgreSQL an incremental rebuild equals a fresh one and deleting a document removes its
links (cascade)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from docgraph import DocGraph
from docgraph.config import load_settings
from tests.graph.test_graph import HR, OPS
from tests.helpers import CountingEmbedder, write_files
from tests.pg import pgvector_server  # noqa: F401  (fixture used by the postgres backend)
from tests.store_backends import Backend, EmbeddedBackend, PostgresBackend

# every test opens a PostgreSQL index through open_on("postgres")
pytestmark = pytest.mark.postgres

QUERIES = ("What caused E-417 on the Tern T3 at Nordhaven Logistics?",
           "Who replaced the Plover P2 spring kit?",
           "Sofia Marchetti parental leave Compass")

Open = Callable[[str], DocGraph]


@pytest.fixture
def open_on(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., DocGraph]]:
    """Open a DocGraph on a fresh backend (``embedded`` or ``postgres``)."""
    made: list[tuple[Backend, DocGraph]] = []

    def make(name: str) -> DocGraph:
        folder = tmp_path / f"{name}-{len(made)}"
        folder.mkdir()
        backend: Backend = (PostgresBackend(request, folder) if name == "postgres"
                            else EmbeddedBackend(request, folder))
        graph = DocGraph(load_settings(store=backend.store_settings()), CountingEmbedder())
        made.append((backend, graph))
        return graph

    yield make
    for backend, graph in made:
        graph.close()
        backend.close()


def _bump(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 7_000_000_000))


def graph_state(graph: DocGraph, namespace: str) -> dict[str, Any]:
    """Everything graph-derived a user can observe, keyed without internal row ids."""
    store = graph.graph_store
    entities = graph.entities({namespace}, limit=1000)
    return {
        "entities": [(e.key, e.name, e.type, e.chunk_count) for e in entities],
        "edges": store.edge_signature(namespace),
        "communities": store.community_signature(namespace),
        "listing": [(c.level, c.ordinal, c.size, c.title, c.report_doc_id, c.members)
                    for c in graph.communities({namespace})],
        "reports": sorted((h.doc_id, h.text) for h in graph.retrieve(
            "report", namespaces={namespace}, k=50, mode="global").hits),
        "neighbours": {e.key: [(n.entity.key, round(n.weight, 6), n.chunks)
                               for n in graph.neighbors(e.key, {namespace})]
                       for e in entities[:8]},
        "stats": [(s.entities, s.communities) for s in graph.status().namespaces
                  if s.namespace == namespace],
    }


def evidence(graph: DocGraph, namespaces: set[str]) -> dict[str, list[str]]:
    """The evidence keys of every cohort mode and of ``context`` for each query."""
    out: dict[str, list[str]] = {}
    for query in QUERIES:
        for mode in ("vector_first", "graph_first", "global"):
            hits = graph.retrieve(query, namespaces=namespaces, k=5, mode=mode).hits  # type: ignore[arg-type]
            out[f"{mode}: {query}"] = [h.chunk_id for h in hits]
        out[f"context: {query}"] = graph.context(query, namespaces=namespaces,
                                                 token_budget=800).chunk_ids
    return out


def _index_corpus(graph: DocGraph, root: Path) -> None:
    graph.index(write_files(root / "ops", OPS), namespace="ops")
    graph.index(write_files(root / "hr", HR), namespace="hr")


def test_postgres_holds_the_same_graph_as_the_embedded_catalog(open_on, tmp_path):
    embedded, postgres = open_on("embedded"), open_on("postgres")
    _index_corpus(embedded, tmp_path / "a")
    _index_corpus(postgres, tmp_path / "a")
    assert postgres.extractor is not None
    for namespace in ("ops", "hr"):
        want = graph_state(embedded, namespace)
        assert want["edges"] and want["communities"] and want["reports"], namespace
        got = graph_state(postgres, namespace)
        for key in want:
            assert got[key] == want[key], f"{namespace}: {key} differs"
    want_evidence = evidence(embedded, {"ops", "hr"})
    assert all(want_evidence.values())
    got_evidence = evidence(postgres, {"ops", "hr"})
    # The embedded catalog stores vectors as float16, PostgreSQL as float32: chunks that do
    # not answer a query have near-equal low similarities, and their order may swap. The
    # best hit and the set of evidence must be the same.
    for key, want in want_evidence.items():
        got = got_evidence[key]
        assert got[:1] == want[:1], f"{key}: best hit differs"
        assert sorted(got) == sorted(want), f"{key}: evidence differs"


def test_incremental_rebuild_on_postgres_equals_a_fresh_build(open_on, tmp_path):
    folder = write_files(tmp_path / "ops", OPS)
    incremental = open_on("postgres")
    incremental.index(folder, namespace="ops")
    (folder / "dock.txt").write_text(
        "Lukas Becker replaced the Plover P2 spring kit at Castellan Pharma.\n\n"
        "Mei Tanaka confirmed E-508 cleared on the Plover P2.\n", encoding="utf-8")
    _bump(folder / "dock.txt")
    incremental.index(folder, namespace="ops")
    assert [r.namespace for r in incremental.last_graph_reports] == ["ops"]
    fresh = open_on("postgres")
    fresh.index(shutil.copytree(folder, tmp_path / "ops-copy"), namespace="ops")
    got, want = graph_state(incremental, "ops"), graph_state(fresh, "ops")
    # neighbours of equal strength rank by entity id, which records write order
    assert ({k: sorted(v) for k, v in got.pop("neighbours").items()}
            == {k: sorted(v) for k, v in want.pop("neighbours").items()})
    assert got == want
    assert "castellan pharma" in {e[0] for e in graph_state(fresh, "ops")["entities"]}


def test_deleting_a_document_on_postgres_removes_its_links(open_on, tmp_path):
    graph = open_on("postgres")
    _index_corpus(graph, tmp_path)
    assert "sup-4502" in {e.key for e in graph.entities({"ops"}, limit=500)}
    (tmp_path / "ops" / "tickets.csv").unlink()
    graph.index(tmp_path / "ops", namespace="ops")
    keys = {e.key for e in graph.entities({"ops"}, limit=500)}
    assert "sup-4502" not in keys and "e-417" in keys
    db = graph.store.connection()  # type: ignore[attr-defined]
    orphans = db.execute(
        "SELECT count(*) FROM chunk_entities ce LEFT JOIN chunks c ON c.id = ce.chunk_id"
        " WHERE c.id IS NULL").fetchone()[0]
    assert orphans == 0
    stale = db.execute("SELECT count(*) FROM entities WHERE key = 'sup-4502'").fetchone()[0]
    assert stale == 0  # the graph rebuild dropped the entity no chunk mentions any more
    assert "sup-4502" not in str(graph_state(graph, "ops"))
    dirty = db.execute("SELECT name FROM namespaces WHERE graph_dirty").fetchall()
    assert dirty == []  # the rebuild after the delete left every graph clean


def test_migrate_copies_the_graph_and_reports_without_re_embedding(open_on, tmp_path):
    from typer.testing import CliRunner

    from docgraph.serve.cli import app

    embedded = open_on("embedded")
    _index_corpus(embedded, tmp_path)
    want = {ns: graph_state(embedded, ns) for ns in ("ops", "hr")}
    want_evidence = evidence(embedded, {"ops", "hr"})
    index_path = embedded.settings.store.path
    embedded.close()
    target = open_on("postgres")
    url = target.settings.store.url
    target.close()

    result = CliRunner().invoke(app, ["--index", str(index_path), "migrate", "--to", url])
    assert result.exit_code == 0, result.output
    communities = sum(len(state["communities"]) for state in want.values())
    assert f"{communities} communities" in result.output

    embedder = CountingEmbedder()
    moved = DocGraph(load_settings(store={"backend": "postgres", "url": url}), embedder)
    try:
        assert moved.graph_store.dirty_namespaces() == []  # no rebuild needed
        for namespace, state in want.items():
            got = graph_state(moved, namespace)
            # neighbours of equal strength rank by entity id: ids are the target's own
            assert ({k: sorted(v) for k, v in got.pop("neighbours").items()}
                    == {k: sorted(v) for k, v in state["neighbours"].items()}), namespace
            for key in got:
                assert got[key] == state[key], f"{namespace}: {key} differs"
        assert evidence(moved, {"ops", "hr"}) == want_evidence
        queried = embedder.embedded  # the hashing embedder counts query embeddings too
        assert moved.build_graph(["ops"])  # a rebuild there reproduces the copied graph
        assert embedder.embedded == queried  # reports kept their vectors, even when rebuilt
        rebuilt = graph_state(moved, "ops")
        assert rebuilt["communities"] == want["ops"]["communities"]
        assert rebuilt["reports"] == want["ops"]["reports"]
    finally:
        moved.close()
