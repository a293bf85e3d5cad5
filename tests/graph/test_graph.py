"""Entity graph and communities: per-namespace, incremental, cascading, deterministic."""

from __future__ import annotations

import os
import shutil

import pytest

from docgraph.graph.communities import detect_communities
from docgraph.store.sql.dialect import run
from tests import backend_graphs
from tests.helpers import write_files

# Every DocGraph test here runs on the embedded file and on PostgreSQL.
make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

OPS = {
    "incident.md": "# Rotterdam outage\n\nMei Tanaka led INC-2025-007 at Nordhaven Logistics. "
    "Every Tern T3 raised E-417 after firmware 5.3.0.\n\n## Fix\n\nTomasz Nowak shipped firmware "
    "5.3.1 to Nordhaven Logistics; E-417 stopped.\n",
    "tickets.csv": "key,summary,site\n"
    "SUP-4471,Tern T3 lost localisation E-417,Nordhaven Logistics\n"
    "SUP-4502,Plover P2 dock overheating E-508,Brightwell Grocers\n"
    "SUP-4503,Plover P2 spring kit fitted for E-508,Brightwell Grocers\n",
    "dock.txt": "Lukas Becker replaced the Plover P2 spring kit at Brightwell Grocers.\n\n"
    "The E-508 alarm cleared after Plover P2 firmware 1.4.3.\n",
}
HR = {
    "leave.md": "# Leave\n\nSofia Marchetti approves parental leave. Sofia Marchetti also runs "
    "Compass, the HR portal.\n\nCompass stores leave requests for Sofia Marchetti.\n",
}


def _bump(path):
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 7_000_000_000))


@pytest.fixture
def built(tmp_path, make_graph):
    graph = make_graph()
    graph.index(write_files(tmp_path / "ops", OPS), namespace="ops")
    graph.index(write_files(tmp_path / "hr", HR), namespace="hr")
    return graph


def test_entities_edges_and_communities_are_built_per_namespace(built):
    ops_keys = {e.key for e in built.entities({"ops"}, limit=500)}
    hr_keys = {e.key for e in built.entities({"hr"}, limit=500)}
    assert {"e-417", "tern t3", "nordhaven logistic", "sup-4502"} <= ops_keys
    assert "sofia marchetti" in hr_keys and "sofia marchetti" not in ops_keys
    assert not ops_keys & {"compass"}
    neighbours = {n.entity.key for n in built.neighbors("E-417", {"ops"})}
    assert "tern t3" in neighbours
    assert built.neighbors("E-417", {"hr"}) == []
    ops_communities = built.communities({"ops"})
    assert ops_communities and all(c.namespace == "ops" for c in ops_communities)
    assert all(c.namespace == "hr" for c in built.communities({"hr"}))


def test_entity_query_filters_by_name_and_type(built):
    codes = built.entities({"ops"}, entity_type="code")
    assert {e.key for e in codes} == {"e-417", "e-508"}
    assert [e.key for e in built.entities({"ops"}, query="plover")] == ["plover p2"]
    assert built.entities({"ops"}, query="100%_") == []  # LIKE wildcards are literal


def test_community_reports_are_searchable_chunks_kept_out_of_ordinary_search(built):
    communities = built.communities({"ops"})
    with_report = [c for c in communities if c.report_doc_id]
    assert with_report
    index = built.chunk_index()
    reports = index.lexical_search("Plover", 20, frozenset({"ops"}), kind="community_report")
    texts = built.store.chunks_by_rowid([r.rowid for r in reports])
    assert texts and all(c.doc_id.startswith("community://ops/") for c in texts.values())
    ordinary = built.search("Plover P2 E-508 Brightwell", namespaces={"ops"}, k=50)
    assert ordinary and not any(h.doc_id.startswith("community://") for h in ordinary)
    assert index.lexical_search("Plover", 20, frozenset({"hr"}), kind="community_report") == []


def test_rebuilding_one_namespace_never_touches_another(tmp_path, built):
    before = built.graph_store.community_signature("hr"), built.graph_store.edge_signature("hr")
    hr_ids = {c.id for c in built.communities({"hr"})}
    (tmp_path / "ops" / "dock.txt").write_text("Lukas Becker visited Castellan Pharma.\n")
    _bump(tmp_path / "ops" / "dock.txt")
    built.index(tmp_path / "ops", namespace="ops")
    assert [r.namespace for r in built.last_graph_reports] == ["ops"]
    after = built.graph_store.community_signature("hr"), built.graph_store.edge_signature("hr")
    assert before == after
    assert {c.id for c in built.communities({"hr"})} == hr_ids  # same rows, not rewritten


def test_unchanged_rerun_changes_nothing(tmp_path, built, embedder):
    store = built.graph_store
    signature = store.edge_signature("ops"), store.community_signature("ops")
    ids = [c.id for c in built.communities({"ops"})]
    embedded = embedder.embedded
    built.index(tmp_path / "ops", namespace="ops")
    assert built.last_graph_reports == []
    assert embedder.embedded == embedded
    assert (built.graph_store.edge_signature("ops"),
            built.graph_store.community_signature("ops")) == signature
    assert [c.id for c in built.communities({"ops"})] == ids


def test_incremental_update_equals_a_fresh_build(tmp_path, make_graph):
    folder = write_files(tmp_path / "ops", OPS)
    incremental = make_graph("incremental.db")
    incremental.index(folder, namespace="ops")
    (folder / "dock.txt").write_text(
        "Lukas Becker replaced the Plover P2 spring kit at Castellan Pharma.\n\n"
        "Mei Tanaka confirmed E-508 cleared on the Plover P2.\n", encoding="utf-8")
    _bump(folder / "dock.txt")
    (folder / "tickets.csv").unlink()
    write_files(folder, {"new.md": "# Heron\n\nThe Heron H7 carries 1,400 kg at Castellan "
                                   "Pharma with Lukas Becker.\n"})
    incremental.index(folder, namespace="ops")
    copy = shutil.copytree(folder, tmp_path / "ops-copy")
    fresh = make_graph("fresh.db")
    fresh.index(copy, namespace="ops")
    assert incremental.graph_store.edge_signature("ops") == fresh.graph_store.edge_signature("ops")
    assert (incremental.graph_store.community_signature("ops")
            == fresh.graph_store.community_signature("ops"))
    assert ({e.key: e.chunk_count for e in incremental.entities({"ops"}, limit=1000)}
            == {e.key: e.chunk_count for e in fresh.entities({"ops"}, limit=1000)})
    assert _report_texts(incremental) == _report_texts(fresh)  # row ids break no tie


def _report_texts(graph) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {doc: text for doc, text in run(
        graph.store, "SELECT d.doc_id, c.text FROM chunks c JOIN documents d"
        " ON d.id = c.document_id WHERE c.kind = 'community_report'")}


@backend_graphs.embedded_only  # drops and rebuilds the SQLite file's edge indexes
def test_bulk_edge_write_rebuilds_the_edge_indexes_with_the_same_graph(
        tmp_path, make_graph, monkeypatch):
    folder = write_files(tmp_path / "ops", OPS)
    row_by_row = make_graph("row-by-row.db")
    row_by_row.index(folder, namespace="ops")
    monkeypatch.setattr("docgraph.store.sqlite.graph.INDEX_REBUILD_MIN_EDGES", 0)
    bulk = make_graph("bulk.db")
    bulk.index(folder, namespace="ops")
    bulk.index(write_files(tmp_path / "hr", HR), namespace="hr")  # fewer edges: row by row
    assert bulk.graph_store.edge_signature("ops") == row_by_row.graph_store.edge_signature("ops")
    indexes = {r[0] for r in bulk.catalog.connection().execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'entity_edges'")}
    assert {"entity_edges_target", "entity_edges_namespace"} <= indexes
    ops = bulk.entities({"ops"}, query="nordhaven")[0]
    assert bulk.graph_store.neighbors([ops.id])  # edges are reachable from either end


def test_deleting_a_document_cascades_to_links_edges_and_reports(tmp_path, built):
    assert "sup-4502" in {e.key for e in built.entities({"ops"}, limit=500)}
    (tmp_path / "ops" / "tickets.csv").unlink()
    (tmp_path / "ops" / "dock.txt").unlink()
    built.index(tmp_path / "ops", namespace="ops")
    keys = {e.key for e in built.entities({"ops"}, limit=500)}
    assert "sup-4502" not in keys and "plover p2" not in keys
    orphans = run(built.store, "SELECT count(*) FROM entities e WHERE NOT EXISTS"
                  " (SELECT 1 FROM chunk_entities ce WHERE ce.entity_id = e.id)").fetchone()[0]
    assert orphans == 0
    reports = run(built.store, "SELECT text FROM chunks WHERE kind = 'community_report'"
                  ).fetchall()
    assert not any("Plover" in r[0] for r in reports)


def test_removing_a_folder_removes_its_graph(tmp_path, built):
    built.remove_folder(tmp_path / "hr", namespace="hr")
    assert "hr" not in built.namespaces()
    assert built.entities({"hr"}, strict=False) == []
    assert built.communities({"hr"}, strict=False) == []


def test_vocabulary_change_relinks_without_re_embedding(tmp_path, make_graph, embedder):
    folder = write_files(tmp_path / "ops", OPS)
    graph = make_graph("v.db")
    graph.index(folder, namespace="ops")
    assert not [e for e in graph.entities({"ops"}, limit=500) if e.type == "customer"]
    embedded = embedder.embedded
    updated = make_graph("v.db", graph={"vocabulary": {"customer": ["Nordhaven Logistics",
                                                                     "Brightwell"]}})
    reports = updated.build_graph(["ops"])
    assert reports[0].relinked_chunks > 0
    customers = [e for e in updated.entities({"ops"}, limit=500) if e.type == "customer"]
    # A vocabulary term wins over an overlapping heuristic name ("Brightwell Grocers").
    assert sorted(e.key for e in customers) == ["brightwell", "nordhaven logistic"]
    assert "brightwell grocer" not in {e.key for e in updated.entities({"ops"}, limit=500)}
    chunk_embeddings = embedder.embedded - embedded - reports[0].reports_embedded
    assert chunk_embeddings == 0


def test_leiden_is_deterministic_and_hierarchical():
    import numpy as np

    # Two 8-cliques joined by one edge; each clique is split again at level 1 when small
    # groups are requested.
    edges = [(a, b) for block in (range(8), range(8, 16)) for a in block for b in block if a < b]
    edges.append((7, 8))
    src = np.array([a for a, _ in edges])
    dst = np.array([b for _, b in edges])
    w = np.ones(len(edges))
    first = detect_communities(16, src, dst, w, levels=2, split_above=4)
    second = detect_communities(16, src, dst, w, levels=2, split_above=4)
    assert first == second
    top = [c for c in first if c.level == 0]
    assert sorted(c.nodes for c in top) == [tuple(range(8)), tuple(range(8, 16))]
    for child in (c for c in first if c.level == 1):
        assert child.parent is not None
        assert set(child.nodes) <= set(first[child.parent].nodes)


def test_the_graph_and_its_communities_do_not_depend_on_chunk_row_ids():
    # A build resumed after a crash writes the same chunks under other row ids (issue 34:
    # "same_communities: false" after kills). Same links, chunk row ids in another order:
    # the same edges (ties under max_edges_per_entity included) and the same communities.
    import numpy as np

    from docgraph.graph.cooccurrence import build_cooccurrence

    rng = np.random.default_rng(1)
    links = sorted({(chunk, int(entity)) for chunk in range(400)
                    for entity in rng.choice(300, size=int(rng.integers(1, 8)), replace=False)})
    chunks = np.array([c for c, _ in links])
    entities = np.array([e for _, e in links])

    def build(rowid_of: np.ndarray) -> tuple[list[tuple[int, int, float]], set[frozenset[int]]]:
        graph = build_cooccurrence(rowid_of[chunks], entities, np.arange(300), 1, 8)
        found = detect_communities(300, graph.sources, graph.targets, graph.weights)
        edges = list(zip(graph.sources.tolist(), graph.targets.tolist(),
                         graph.weights.tolist(), strict=True))
        return edges, {frozenset(c.nodes) for c in found}

    fresh = build(np.arange(400) + 1)
    resumed = build(rng.permutation(400) + 1)
    assert fresh[0] == resumed[0]
    assert fresh[1] == resumed[1]


def test_document_listing_leaves_out_community_reports(built):
    docs = built.documents({"ops"})
    assert docs and not any(d.doc_id.startswith("community://") for d in docs)
    assert {d.path for d in docs} == {"incident.md", "tickets.csv", "dock.txt"}


def test_new_extraction_heuristics_relink_an_existing_index(tmp_path, make_graph, monkeypatch):
    # Without key phrases a build re-extracts only when the extractor changed (with them every
    # build re-extracts and counts the chunks whose links changed: tests/graph/test_keyphrases.py).
    graph = make_graph("h.db", graph={"keyphrases": False})
    graph.index(write_files(tmp_path / "ops", OPS), namespace="ops")
    assert graph.build_graph(["ops"])[0].relinked_chunks == 0
    monkeypatch.setattr("docgraph.graph.build.EXTRACTION_VERSION", 999)
    assert graph.build_graph(["ops"])[0].relinked_chunks > 0
    assert graph.build_graph(["ops"])[0].relinked_chunks == 0


def test_report_passages_do_not_depend_on_the_order_files_were_indexed(tmp_path, make_graph):
    line = "Nordhaven Logistics and Castellan Freight met Brightwell Grocers at dock {}."
    folder = write_files(tmp_path / "ops", {f"z{i}.md": f"# Z{i}\n\n{line.format(i)}\n"
                                            for i in range(8)})
    incremental = make_graph("incremental.db")
    incremental.index(folder, namespace="ops")
    write_files(folder, {f"a{i}.md": f"# A{i}\n\n{line.format(100 + i)}\n" for i in range(8)})
    incremental.index(folder, namespace="ops")  # the a*.md chunks get the higher row ids
    fresh = make_graph("fresh.db")
    fresh.index(shutil.copytree(folder, tmp_path / "copy"), namespace="ops")
    reports = _report_texts(fresh)
    assert reports and _report_texts(incremental) == reports
