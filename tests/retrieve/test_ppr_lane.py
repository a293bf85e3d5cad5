"""The personalized-PageRank lane of cohort search: a bridge it finds through an entity,
determinism, and namespace isolation, on the embedded file and on PostgreSQL."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from docgraph import DocGraph
from docgraph.retrieve.cohort import CohortSettings
from docgraph.retrieve.ppr import LocalGraph, personalized_pagerank
from tests import backend_graphs
from tests.helpers import write_files

# Every DocGraph test here runs on the embedded file and on PostgreSQL.
make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

# "Moonrise Harbour" names the film; its director's page shares no word with the query and
# is reachable only through the entity "Ilse Varga".
FILMS = {
    "moonrise.md": "# Moonrise Harbour\n\nMoonrise Harbour is a drama directed by Ilse Varga "
                   "with music by Pavel Dusek.\n",
    "varga.md": "# Ilse Varga\n\nIlse Varga grew up in Szeged and studied painting there "
                "before her first feature.\n",
    "dusek.md": "# Pavel Dusek\n\nPavel Dusek writes for string quartets in Brno.\n",
    "tides.md": "# Tides\n\nHarbour tides rise twice a day along the northern coast.\n",
    "lights.md": "# Lights\n\nA lighthouse keeper watches the moonrise over the sea.\n",
}
QUERY = "Who directed Moonrise Harbour?"
# One seed, every other lane off: whatever else is returned was brought by the walk.
SEED_ONLY = CohortSettings(seed_pool=1, seed_pool_grows_with_k=False, entity_lane=False,
                           completeness=False, ppr_lane=False)
WALK = replace(SEED_ONLY, ppr_lane=True, ppr_from_seeds=1, ppr_min_similarity=-1.0)


def _corpus(graph: DocGraph, root: Path, board: str | None = None) -> DocGraph:
    graph.index(write_files(root / "films", FILMS), namespace="films")
    if board is not None:
        graph.index(write_files(root / "board", {"memo.md": board}), namespace="board")
    return graph


def _hits(graph: DocGraph, settings: CohortSettings, k: int = 5
          ) -> list[tuple[str, int, float, tuple[str, ...]]]:
    """(file name, chunk index, score, lanes) of each hit: comparable across indexes."""
    result = graph.cohort_engine(settings).search(QUERY, namespaces={"films"}, k=k)
    return [(h.source_path.rsplit("/", 1)[-1], h.chunk_index, h.score, h.lanes)
            for h in result.hits]


def test_the_walk_finds_a_bridge_the_seed_lane_cannot(tmp_path, make_graph):
    graph = _corpus(make_graph(), tmp_path)
    alone = graph.cohort_engine(SEED_ONLY).search(QUERY, namespaces={"films"}, k=5)
    assert [h.source_path for h in alone.hits] == ["moonrise.md"]
    walked = graph.cohort_engine(WALK).search(QUERY, namespaces={"films"}, k=5,
                                              return_trace=True)
    lanes = {h.source_path: h.lanes for h in walked.hits}
    assert lanes["moonrise.md"][0] == "seed"
    assert lanes["varga.md"][0] == "ppr"
    # Only chunks linked to the seed's or the query's entities can be reached.
    assert "tides.md" not in lanes and "lights.md" not in lanes
    trace = walked.trace
    assert trace is not None and "ppr" in trace.timings_ms
    assert trace.final_provenance[next(h.chunk_id for h in walked.hits
                                       if h.source_path == "varga.md")] == "ppr"


def test_the_lane_reaches_evidence_blocks_as_provenance(tmp_path, make_graph):
    graph = _corpus(make_graph(), tmp_path)
    graph.cohort_settings = WALK
    hits = graph.retrieve(QUERY, namespaces={"films"}, k=5).hits
    assert any(h.lanes[0] == "ppr" for h in hits)


def test_the_walk_is_deterministic(tmp_path, make_graph):
    first = _corpus(make_graph("a.db"), tmp_path / "a")
    second = _corpus(make_graph("b.db"), tmp_path / "b")
    settings = replace(WALK, entity_lane=True, completeness=True, seed_pool=3)
    runs = [_hits(first, settings), _hits(first, settings), _hits(second, settings)]
    assert runs[0] and runs[0] == runs[1] == runs[2]
    assert any("ppr" in lanes for _, _, _, lanes in runs[0])


def test_another_namespace_linked_to_the_same_entity_neither_appears_nor_moves_scores(
        tmp_path, make_graph):
    # The board memo names the bridge entity (and the film): a walk that crossed the
    # namespace filter would reach it, and its mass would change the films' scores.
    linked = _corpus(make_graph("linked.db"), tmp_path / "linked",
                     board="Ilse Varga and Moonrise Harbour: a private bonus of 9,000 EUR.\n")
    # The same memo with other names (same length, no query word): the control.
    control = _corpus(make_graph("control.db"), tmp_path / "control",
                      board="Jana Kolar and Riverbend Castle: a private bonus of 9,000 EUR.\n")
    settings = replace(WALK, ppr_budget=100, seed_pool=5, entity_lane=True,
                       completeness=True)
    result = linked.cohort_engine(settings).search(QUERY, namespaces={"films"}, k=10,
                                                   return_trace=True)
    assert result.hits and all(h.namespace == "films" for h in result.hits)
    assert result.trace is not None
    seen = {c for lane in result.trace.candidates.values() for c in lane}
    assert not any("memo" in c for c in seen), seen
    assert _hits(linked, settings, k=10) == _hits(control, settings, k=10)
    # Both namespaces asked for: the memo is reachable (the test can fail).
    both = linked.cohort_engine(settings).search(QUERY, namespaces={"films", "board"}, k=10)
    assert any(h.source_path == "memo.md" for h in both.hits)


def test_personalized_pagerank_ranks_the_chunk_between_two_restart_nodes():
    # chunks 1 and 2 each mention one restart entity; chunk 3 mentions both.
    graph = LocalGraph.from_links({1: [(10, 1.0, 0)], 2: [(20, 1.0, 0)],
                                   3: [(10, 1.0, 0), (20, 1.0, 0)], 4: [(30, 1.0, 0)]},
                                  entities=[10, 20, 30])
    scores = personalized_pagerank(graph, {("entity", 10): 1.0, ("entity", 20): 1.0}, 0.5)
    assert max(scores, key=lambda c: scores[c]) == 3
    assert scores[4] == pytest.approx(0.0, abs=1e-12)  # not connected to a restart node
    assert personalized_pagerank(graph, {("entity", 99): 1.0}, 0.5) == {}
