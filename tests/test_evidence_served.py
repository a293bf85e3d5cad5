"""The evidence contract on the served path: ``DocgraphTools.call("lookup_knowledge")`` over
governance, whose searches are the cohort engine in ``vector_first`` mode.

The cohort engine labels its hits ``hybrid`` and scores them with its composite (relevance,
lane priority, coverage, redundancy), which is relative to the batch; quality must come from
each hit's own cosine similarity to the query instead, as on the plain hybrid path."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from docgraph import DocGraph
from docgraph.governance import Caller
from tests.test_mcp_tools import build_corpus, make_tools, open_isolated_graph

ALICE = Caller("alice")
EXACT = "Nordhaven Logistics lost its Rotterdam Tern T3 fleet for two hours because of E-417"
OFF_TOPIC = "sourdough bread needs flour water salt and a long cold proof"


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DocGraph]:
    root = tmp_path_factory.mktemp("served")
    graph = build_corpus(open_isolated_graph(root / "index.db"), root)
    yield graph
    graph.close()


def test_cohort_hits_carry_their_own_cosine_not_the_composite(graph):
    # What the evidence port of lookup_knowledge receives: the governed cohort search.
    hits = make_tools(graph).governance.search(ALICE, EXACT, k=10, mode="vector_first")
    assert len(hits) >= 3
    query = graph.embedder.embed_query(EXACT)
    vectors = graph.chunk_index().vectors([h.rowid for h in hits])
    for hit in hits:
        assert str(hit.score_label) == "hybrid"
        assert hit.dense_similarity == pytest.approx(
            float(np.dot(vectors[hit.rowid], query)), abs=1e-5)
    # the composite is a different number (batch-relative), never the similarity
    assert any(abs(h.score - (h.dense_similarity or 0.0)) > 0.05 for h in hits)


def test_served_lookup_grades_by_similarity(graph):
    tools = make_tools(graph)
    exact = tools.call("lookup_knowledge", ALICE, {"query": EXACT})
    assert exact["relevance_level"] == "PRECISE" and exact["is_low_quality"] is False
    assert exact["evidence"][0]["source"] == "postmortem.md"
    off = tools.call("lookup_knowledge", ALICE, {"query": OFF_TOPIC})
    assert off["relevance_level"] == "WEAK" and off["is_low_quality"] is True
