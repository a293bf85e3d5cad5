"""The evidence contract on the served path: ``DocgraphTools.call("lookup_knowledge")`` over
governance, whose searches are the cohort engine in ``vector_first`` mode.

The cohort engine labels its hits ``composite`` (read as the evidence contract's ``hybrid``)
and scores them with its composite (relevance,
lane priority, coverage, redundancy), which is relative to the batch; quality must come from
each hit's own cosine similarity to the query instead, as on the plain hybrid path."""

from __future__ import annotations

import numpy as np
import pytest

from docgraph.governance import Caller
from tests import backend_graphs
from tests.helpers import CountingEmbedder
from tests.serve.test_mcp_tools import build_corpus, make_tools

pgvector_server = backend_graphs.pgvector_server

ALICE = Caller("alice")
EXACT = "Nordhaven Logistics lost its Rotterdam Tern T3 fleet for two hours because of E-417"
OFF_TOPIC = "sourdough bread needs flour water salt and a long cold proof"


@pytest.fixture(scope="module", params=backend_graphs.BACKEND_NAMES)
def corpus_graph(request, tmp_path_factory):
    """The MCP tests' corpus, indexed once per backend (the tests here only read it)."""
    root = tmp_path_factory.mktemp("served-corpus")
    with backend_graphs.graph_on_backend(request.param, request, root / "index.db",
                                         CountingEmbedder()) as graph:
        yield build_corpus(graph, root)


def test_cohort_hits_carry_their_own_cosine_not_the_composite(corpus_graph):
    # What the evidence port of lookup_knowledge receives: the governed cohort search.
    hits = make_tools(corpus_graph).governance.search(ALICE, EXACT, k=10, mode="vector_first")
    assert len(hits) >= 3
    query = corpus_graph.embedder.embed_query(EXACT)
    vectors = corpus_graph.chunk_index().vectors([h.rowid for h in hits])
    for hit in hits:
        assert str(hit.score_label) == "composite"
        assert hit.dense_similarity == pytest.approx(
            float(np.dot(vectors[hit.rowid], query)), abs=1e-5)
    # the composite is a different number (batch-relative), never the similarity
    assert any(abs(h.score - (h.dense_similarity or 0.0)) > 0.05 for h in hits)


def test_served_lookup_grades_by_similarity(corpus_graph):
    tools = make_tools(corpus_graph)
    exact = tools.call("lookup_knowledge", ALICE, {"query": EXACT})
    assert exact["relevance_level"] == "PRECISE" and exact["is_low_quality"] is False
    assert exact["evidence"][0]["source"] == "postmortem.md"
    off = tools.call("lookup_knowledge", ALICE, {"query": OFF_TOPIC})
    assert off["relevance_level"] == "WEAK" and off["is_low_quality"] is True
