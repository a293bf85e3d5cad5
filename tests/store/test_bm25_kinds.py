"""BM25 statistics are kept per chunk kind, on every backend: community reports written,
rewritten or deleted by a graph build never move a text chunk's BM25 score or the hybrid
ranking, and the report lane scores reports with the reports' own statistics (text chunks
added elsewhere do not move them). A PostgreSQL index written before the statistics were
split is upgraded to the same scores as a fresh one."""

from __future__ import annotations

from pathlib import Path

import pytest

from docgraph import DocGraph
from docgraph.model import ChunkKind
from tests import backend_graphs, pg
from tests.graph.test_graph import HR, OPS
from tests.helpers import write_files

make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

QUERIES = ("Plover P2 spring kit Brightwell Grocers", "Nordhaven Logistics E-417 firmware",
           "Tern T3 lost localisation", "Mei Tanaka Tomasz Nowak", "E-508 alarm cleared")
NAMESPACE = frozenset({"ops"})


def bm25(graph: DocGraph, kind: ChunkKind = "text",
         namespaces: frozenset[str] = NAMESPACE) -> dict[str, dict[str, float]]:
    """Per query, the BM25 score of every matching chunk of ``kind``, by chunk id."""
    index = graph.chunk_index()
    out: dict[str, dict[str, float]] = {}
    for query in QUERIES:
        rows = index.lexical_search(query, 1000, namespaces, kind=kind)
        chunks = graph.store.chunks_by_rowid([r.rowid for r in rows])
        out[query] = {chunks[r.rowid].chunk_id: r.score for r in rows}
    return out


def hybrid(graph: DocGraph) -> dict[str, list[tuple[str, float | None]]]:
    """Per query, the hybrid ranking: chunk ids with their BM25 lane scores."""
    return {q: [(h.chunk_id, h.lexical_score)
                for h in graph.search(q, namespaces=NAMESPACE, k=10)] for q in QUERIES}


def report_texts(graph: DocGraph) -> list[str]:
    rows = graph.chunk_index().lexical_search(" ".join(QUERIES), 1000, NAMESPACE,
                                              kind="community_report")
    return sorted(c.text for c in graph.store.chunks_by_rowid([r.rowid for r in rows]).values())


def assert_same_scores(got: dict[str, dict[str, float]],
                       want: dict[str, dict[str, float]]) -> None:
    assert got.keys() == want.keys()
    for query, scores in want.items():
        assert got[query].keys() == scores.keys(), query
        for chunk_id, score in scores.items():
            assert got[query][chunk_id] == pytest.approx(score, rel=1e-9, abs=1e-12), query


def assert_same_hybrid(got: dict[str, list[tuple[str, float | None]]],
                       want: dict[str, list[tuple[str, float | None]]]) -> None:
    for query, ranking in want.items():
        assert [c for c, _ in got[query]] == [c for c, _ in ranking], query
        assert [s or 0.0 for _, s in got[query]] == pytest.approx(
            [s or 0.0 for _, s in ranking], rel=1e-9), query


@pytest.fixture
def plain(tmp_path: Path, make_graph) -> tuple[DocGraph, Path]:
    """The OPS corpus indexed without a graph (no report rows), and its folder."""
    folder = write_files(tmp_path / "ops", OPS)
    graph = make_graph("plain", graph={"enabled": False})
    graph.index(folder, namespace="ops")
    assert report_texts(graph) == []
    return graph, folder


def test_writing_rewriting_and_deleting_reports_leaves_text_bm25_and_hybrid_alone(
        plain, make_graph):
    without_reports, folder = plain
    want, want_hybrid = bm25(without_reports), hybrid(without_reports)
    assert all(want.values())

    built = make_graph("built")
    built.index(folder, namespace="ops")  # indexes, then builds the graph: reports written
    written = report_texts(built)
    assert written
    assert_same_scores(bm25(built), want)
    assert_same_hybrid(hybrid(built), want_hybrid)
    built.close()

    shorter = make_graph("built", graph={"report_sentences": 1})
    assert shorter.build_graph(["ops"])  # every report rewritten, shorter
    rewritten = report_texts(shorter)
    assert rewritten and rewritten != written
    assert_same_scores(bm25(shorter), want)
    assert_same_hybrid(hybrid(shorter), want_hybrid)
    shorter.close()

    none = make_graph("built", graph={"max_reports": 0})
    assert none.build_graph(["ops"])  # every report deleted
    assert report_texts(none) == []
    assert_same_scores(bm25(none), want)
    assert_same_hybrid(hybrid(none), want_hybrid)


def test_report_search_scores_reports_with_report_statistics(tmp_path, make_graph):
    built = make_graph()
    built.index(write_files(tmp_path / "ops", OPS), namespace="ops")
    reports = bm25(built, "community_report")
    assert any(reports.values())
    global_hits = built.retrieve("Plover P2 spring kit", namespaces={"ops"}, k=5,
                                 mode="global").hits
    assert global_hits and all(h.doc_id.startswith("community://ops/") for h in global_hits)
    built.close()

    # Many text chunks added to another namespace (no graph built there): the reports' BM25
    # statistics hold reports only, so their scores do not move.
    texts_only = make_graph("index.db", graph={"enabled": False})
    hr = {**HR, **{f"more{i}.md": f"# Plover {i}\n\nThe Plover P2 spring kit {i} shipped to "
                   f"Brightwell Grocers after E-508; Nordhaven Logistics firmware.\n"
                   for i in range(30)}}
    texts_only.index(write_files(tmp_path / "hr", hr), namespace="hr")
    assert bm25(texts_only, namespaces=frozenset({"hr"}))[QUERIES[0]]
    assert_same_scores(bm25(texts_only, "community_report"), reports)


@pytest.mark.parametrize("make_graph", ["postgres"], indirect=True)
def test_a_postgres_index_from_before_kind_statistics_upgrades_to_the_same_scores(
        plain, make_graph):
    without_reports, folder = plain
    want = bm25(without_reports)
    fresh = make_graph("old")
    fresh.index(folder, namespace="ops")
    want_reports, want_hybrid = bm25(fresh, "community_report"), hybrid(fresh)
    assert any(want_reports.values())
    db = fresh.store.connection()  # type: ignore[attr-defined]
    pg.roll_back_migrations(db, 16)  # document frequencies over every kind, old triggers
    columns = {r[0] for r in db.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'terms'")}
    assert columns == {"term", "df"}
    fresh.close()

    upgraded = make_graph("old")
    assert_same_scores(bm25(upgraded), want)
    assert_same_scores(bm25(upgraded, "community_report"), want_reports)
    assert_same_hybrid(hybrid(upgraded), want_hybrid)
    db = upgraded.store.connection()  # type: ignore[attr-defined]
    assert db.execute("SELECT kind, term, df FROM terms ORDER BY 1, 2").fetchall() == \
        db.execute("SELECT c.kind, u.lexeme, count(*) FROM chunks c, unnest(c.lexemes) u"
                   " GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
    assert db.execute("SELECT kind, n, total_len FROM corpus_kind_stats ORDER BY 1"
                      ).fetchall() == db.execute(
        "SELECT c.kind, count(*), coalesce(sum(l.len), 0) FROM chunks c CROSS JOIN LATERAL"
        " (SELECT sum(array_length(u.positions, 1)) AS len FROM unnest(c.lexemes) u) l"
        " GROUP BY 1 ORDER BY 1").fetchall()
