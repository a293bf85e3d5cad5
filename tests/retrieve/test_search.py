"""Hybrid and dense search through the Python API: fields, fusion, query safety."""

from __future__ import annotations

import pytest

from docgraph.errors import InvalidQuery
from docgraph.model import ScoredRow
from docgraph.retrieve.fusion import rrf_fuse
from tests import backend_graphs
from tests.helpers import write_files

# Every DocGraph test here runs on the embedded file and on PostgreSQL.
make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

CORPUS = {
    "security/advisory.md": "# Advisory\n\n## Summary\n\nCVE-2025-31337 lets an attacker reset the "
    "Kestrel controller.\n\n## Fix\n\nUpgrade firmware to 4.2.2 before March.\n",
    "support/faq.txt": "What does error E-417 mean?\n\nE-417 means the lidar window is dirty or "
    "blocked. Clean it and restart.\n",
    "hr/leave.md": "# Leave\n\nParental leave is twenty weeks, paid in full.\n",
}

HOSTILE = [
    '"', "'", '""', "%", ";", "*", "NEAR(lidar error)", "lidar AND error", "OR", "NOT lidar",
    "text:lidar", "^lidar", "lidar*", "'; DROP TABLE chunks; --", "\x00", "(", ")", "-lidar",
    "😀 lidar", "激光雷达", "ليدار", "a" * 3000,
]


@pytest.fixture
def graph(tmp_path, make_graph):
    g = make_graph()
    g.index(write_files(tmp_path / "docs", CORPUS), namespace="ops")
    return g


def test_rrf_matches_the_formula_and_breaks_ties_deterministically():
    a = [ScoredRow(1, 0.9), ScoredRow(2, 0.8), ScoredRow(3, 0.7)]
    b = [ScoredRow(3, 10.0), ScoredRow(4, 9.0)]
    fused = rrf_fuse([a, b], k=60)
    scores = {r.rowid: r.score for r in fused}
    assert scores[3] == pytest.approx(1 / 63 + 1 / 61)
    assert scores[1] == pytest.approx(1 / 61)
    # 2 and 4 tie (1/62 each, best rank 2): the lower row id comes first.
    assert [r.rowid for r in fused] == [3, 1, 2, 4]


def test_weighted_rrf_lets_the_heavier_list_win_a_tie_of_ranks():
    dense = [ScoredRow(1, 0.9), ScoredRow(2, 0.8)]
    lexical = [ScoredRow(2, 5.0), ScoredRow(1, 4.0)]
    assert [r.rowid for r in rrf_fuse([dense, lexical], k=10)] == [1, 2]  # tie: row id
    fused = rrf_fuse([dense, lexical], k=10, weights=(1.0, 1.25))
    assert [r.rowid for r in fused] == [2, 1]
    assert fused[0].score == pytest.approx(1 / 12 + 1.25 / 11)
    with pytest.raises(ValueError, match="1 weights for 2 ranked lists"):
        rrf_fuse([dense, lexical], weights=(1.0,))


def test_hybrid_hits_carry_identity_rank_and_label(graph):
    hits = graph.search("what does E-417 mean", namespaces={"ops"}, k=3)
    top = hits[0]
    assert top.source_path == "support/faq.txt"
    assert top.score_label == "rrf"  # what the score is: the fused RRF score
    assert [h.original_rank for h in hits] == [1, 2, 3]
    k = graph.settings.index.rrf_k
    weight = graph.settings.index.lexical_weight
    assert top.score == pytest.approx((1 + weight) / (k + 1))  # first in both lists
    assert set(top.lanes) == {"dense", "bm25"}
    assert top.chunk_id == f"{top.doc_id}#chunk-{top.chunk_index}"
    assert top.namespace == "ops"


def test_exact_identifier_is_found_by_the_lexical_lane(graph):
    hits = graph.search("CVE-2025-31337", namespaces={"ops"}, k=1)
    assert hits[0].source_path == "security/advisory.md"
    assert hits[0].section_path == ("Advisory", "Summary")
    assert "bm25" in hits[0].lanes


def test_dense_mode_reports_l2_distance_in_ann_order(graph):
    hits = graph.search("parental leave", namespaces={"ops"}, k=3, mode="dense")
    assert all(h.score_label == "dense" for h in hits)
    distances = [h.score for h in hits]
    assert distances == sorted(distances)
    for h in hits:
        assert h.score == pytest.approx((2 - 2 * h.dense_similarity) ** 0.5, abs=1e-5)
    assert hits[0].source_path == "hr/leave.md"


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_query_text_is_only_ever_data(graph, query):
    hits = graph.search(query, namespaces={"ops"}, k=5)
    assert all(h.namespace == "ops" for h in hits)
    # The index is intact afterwards.
    assert graph.search("parental leave", namespaces={"ops"}, k=1)[0].source_path == "hr/leave.md"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"query": ""}, "more than whitespace"),
        ({"query": "   "}, "more than whitespace"),
        ({"query": "x", "k": 0}, "k must be"),
        ({"query": "x", "k": 100_000}, "k must be"),
        ({"query": "x", "mode": "fuzzy"}, "mode must be"),
        ({"query": "x" * 5000}, "limit"),
    ],
)
def test_bad_requests_are_rejected_with_a_clear_message(graph, kwargs, message):
    with pytest.raises(InvalidQuery, match=message):
        graph.search(namespaces={"ops"}, **kwargs)


def test_every_hybrid_hit_reports_its_dense_similarity(graph):
    hits = graph.search("CVE-2025-31337 E-417 parental", namespaces={"ops"}, k=3)
    assert hits and all(h.dense_similarity is not None for h in hits)
