"""lookup_knowledge end to end: the docgraph port, namespaces, retry, widths, trace, CLI."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest
from typer.testing import CliRunner

from docgraph.config import RagSettings
from docgraph.errors import InvalidQuery
from docgraph.evidence import (
    DocgraphSearchPort,
    EvidenceSettings,
    KnowledgeSearchRequest,
    KnowledgeService,
    QueryTransformer,
    RelevanceLevel,
    ScoreLabel,
)
from docgraph.evidence.quality import l2_from_cosine
from tests import backend_graphs
from tests.evidence.test_evidence_helpers import ScriptedPort, make_hit
from tests.helpers import write_files

# Every DocGraph test here runs on the embedded file and on PostgreSQL.
make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

HANDBOOK = {
    "leave.md": "# Leave policy\n\n## Parental leave\n\nParental leave is twenty weeks, paid in "
    "full. Partners get six weeks.\n\n## Annual leave\n\nAnnual leave is twenty-five days. "
    "Book annual leave two weeks ahead.\n\n## Care leave\n\nCare leave is ten days per year.\n",
    "travel.md": "# Travel\n\nBook trains for trips under six hours. Flights need approval.\n",
}
SUPPORT = {
    "faq.md": "# Robot FAQ\n\nError E-417 means the lidar window is dirty. Clean it and restart "
    "the robot. Parental mode is not a robot feature.\n",
}


@pytest.fixture
def graph(tmp_path, make_graph):
    g = make_graph(loader={"chunk_tokens": 16})
    g.index(write_files(tmp_path / "handbook", HANDBOOK), namespace="handbook")
    g.index(write_files(tmp_path / "support", SUPPORT), namespace="support")
    return g


# ---------------------------------------------------------------- the docgraph port

def test_port_keeps_hybrid_rank_and_fused_score(graph):
    port = DocgraphSearchPort(graph, ["handbook", "support"])
    hits = port.search(KnowledgeSearchRequest("parental leave weeks", top_k=5))
    plain = graph.search("parental leave weeks", namespaces={"handbook", "support"}, k=5)
    assert [h.id for h in hits] == [p.chunk_id for p in plain]
    assert [h.original_rank for h in hits] == [1, 2, 3, 4, 5]
    for hit, ref in zip(hits, plain, strict=True):
        assert hit.score_label is ScoreLabel.HYBRID
        assert hit.raw_score == hit.score == ref.score  # the fused score, not a distance
        assert (hit.doc_id, hit.chunk_index) == (ref.doc_id, ref.chunk_index)
        assert hit.vector_id == str(ref.rowid)
        assert hit.metadata["source"] == ref.source_path


def test_port_dense_score_is_the_l2_distance_in_ann_order(graph):
    port = DocgraphSearchPort(graph, ["handbook", "support"])
    hits = port.search(KnowledgeSearchRequest("annual leave days", top_k=4, mode="dense"))
    assert all(h.score_label is ScoreLabel.DENSE for h in hits)
    assert [h.score for h in hits] == sorted(h.score for h in hits)
    for hit in hits:
        assert hit.dense_similarity is not None
        assert hit.score == pytest.approx(l2_from_cosine(hit.dense_similarity), abs=1e-6)


def test_port_fills_the_similarity_of_bm25_only_hits(graph, monkeypatch):
    query = "leave weeks days"
    plain = graph.search(query, namespaces={"handbook", "support"}, k=5)
    exact = {h.chunk_id: h.dense_similarity for h in plain}
    # Ranks 2 and 4 come back as BM25-only hits (the dense lane did not return them).
    engine = [dataclasses.replace(h, dense_similarity=None, lanes=("bm25",))
              if h.original_rank in (2, 4) else h for h in plain]
    monkeypatch.setattr(graph, "search", lambda *a, **k: list(engine))
    hits = DocgraphSearchPort(graph, ["handbook", "support"]).search(
        KnowledgeSearchRequest(query, top_k=5))
    assert [h.id for h in hits] == [p.chunk_id for p in plain]  # order untouched
    for hit, ref in zip(hits, engine, strict=True):
        assert hit.dense_similarity == pytest.approx(exact[hit.id], abs=1e-5)
        assert hit.metadata["lanes"] == ref.lanes and hit.score == ref.score
    raw = DocgraphSearchPort(graph, ["handbook", "support"], fill_similarity=False).search(
        KnowledgeSearchRequest(query, top_k=5))
    assert [h.dense_similarity is None for h in raw] == [False, True, False, True, False]


def test_category_filter_narrows_and_never_widens(graph):
    port = DocgraphSearchPort(graph, ["handbook"])
    outside = KnowledgeSearchRequest("lidar error", top_k=5, category_filter=frozenset({"support"}))
    assert port.search(outside) == []
    both = KnowledgeSearchRequest("lidar error", top_k=5,
                                  category_filter=frozenset({"support", "handbook"}))
    assert {h.metadata["namespace"] for h in port.search(both)} == {"handbook"}


def test_empty_namespace_set_is_a_denial(graph):
    with pytest.raises(InvalidQuery):
        DocgraphSearchPort(graph, [])


# ---------------------------------------------------------------- lookup end to end

def test_lookup_knowledge_returns_chunk_scoped_evidence_and_a_trace(graph):
    result = KnowledgeService.for_graph(graph, {"handbook", "support"}).lookup_knowledge(
        "parental leave weeks")
    payload = result.to_dict()
    ids = [e["document_id"] for e in payload["evidence"]]
    assert ids and len(ids) == len(set(ids)) <= 5
    assert ids == [b.evidence_key for b in result.blocks]
    assert all(b.evidence_key == f"{b.doc_id}#chunk-{b.chunk_index}" for b in result.blocks)
    assert payload["evidence"][0]["source"] == "leave.md"
    assert "parental leave is twenty weeks" in payload["evidence"][0]["excerpt"].casefold()
    trace = result.trace.to_dict()
    assert trace["attempts"][0]["top_k"] == 20
    assert trace["attempts"][0]["category_filter"] is None
    assert trace["hints"]["keywords"] == ["parental", "leave", "weeks"]
    assert all(0.0 <= c["quality_score"] <= 1.0 for c in trace["candidates"])
    assert {d["reason"] for d in trace["dropped"]} <= {"duplicate", "per_document_cap",
                                                       "return_n", "payload_budget",
                                                       "projection_duplicate"}
    # every candidate is either returned or dropped with a reason
    cut = [d for d in trace["dropped"] if d["reason"] in ("per_document_cap", "return_n")]
    assert len(trace["candidates"]) == len(result.blocks) + len(cut)
    assert cut  # leave.md has more than two matching chunks
    json.dumps(trace)  # JSON-ready


def test_several_chunks_of_one_document_reach_the_agent_up_to_the_cap(graph):
    result = KnowledgeService.for_graph(graph, {"handbook"}).lookup_knowledge("leave")
    per_doc: dict[str | None, int] = {}
    for block in result.blocks:
        per_doc[block.doc_id] = per_doc.get(block.doc_id, 0) + 1
    assert max(per_doc.values()) == 2  # leave.md has more matching chunks, capped at 2
    capped = [d for d in result.trace.dropped if d.reason == "per_document_cap"]
    assert capped


def test_agent_tool_takes_only_the_query(graph):
    service = KnowledgeService.for_graph(graph, ["handbook"])
    assert list(inspect.signature(service.lookup_knowledge).parameters) == ["query"]
    with pytest.raises(InvalidQuery):
        service.lookup_knowledge("   ")


def test_lookup_never_leaves_the_allowed_namespaces(graph):
    result = KnowledgeService.for_graph(graph, {"handbook"}).lookup_knowledge(
        "lidar error E-417 robot")
    assert all(b.namespace == "handbook" for b in result.blocks)


# ---------------------------------------------------------------- widths

def test_retrieve_k_and_return_n_defaults_and_legacy_top_k():
    hits = [make_hit(r, f"d{r}") for r in range(1, 31)]
    for rag, width, blocks in [
        (RagSettings(), 20, 5),
        (RagSettings(top_k=7), 7, 7),
        (RagSettings.model_validate({"top-k": 7, "retrieve-k": 12}), 12, 7),
        (RagSettings(top_k=7, retrieve_k=12, return_n=3), 12, 3),
    ]:
        port = ScriptedPort(hits)
        result = KnowledgeService(port, rag=rag).lookup_knowledge("anything")
        assert port.requests[0].top_k == width
        assert len(result.blocks) == blocks


def test_graph_settings_legacy_top_k_reaches_the_lookup(tmp_path, make_graph):
    graph = make_graph("legacy.db", rag={"top-k": 3})
    graph.index(write_files(tmp_path / "hb", HANDBOOK), namespace="handbook")
    result = KnowledgeService.for_graph(graph, {"handbook"}).lookup_knowledge("leave")
    assert result.trace.attempts[0].request.top_k == 3
    assert len(result.blocks) <= 3


# ---------------------------------------------------------------- unfiltered retry

def dense_hits(l2s):
    return [make_hit(r, f"d{r}", label="dense", score=l2) for r, l2 in enumerate(l2s, 1)]


LOW = dense_hits([1.6, 1.7])     # quality 0.2, 0.15
GOOD = dense_hits([0.4, 0.9])    # quality 0.8


def test_retry_triggers_on_low_top_quality_with_a_category_filter():
    port = ScriptedPort(filtered=LOW, unfiltered=GOOD)
    result = KnowledgeService(port, evidence=EvidenceSettings(mode="dense"),
                              category_filter={"support"}).lookup_knowledge("q")
    assert [r.category_filter for r in port.requests] == [frozenset({"support"}), None]
    assert result.trace.retried
    assert [a.used for a in result.trace.attempts] == [False, True]
    assert result.relevance_level is RelevanceLevel.PRECISE
    assert result.top_quality == pytest.approx(0.8)


def test_retry_keeps_the_filtered_result_when_the_retry_is_not_better():
    port = ScriptedPort(filtered=LOW, unfiltered=dense_hits([1.9]))
    result = KnowledgeService(port, evidence=EvidenceSettings(mode="dense"),
                              category_filter={"support"}).lookup_knowledge("q")
    assert len(port.requests) == 2
    assert [a.used for a in result.trace.attempts] == [True, False]
    assert result.top_quality == pytest.approx(0.2)


def test_lookup_steps_are_driven_by_the_caller_one_way():
    """The governed service drives the steps: each request is yielded, the caller answers it
    and sends the hits; the result equals the port-driven lookup, and the trace's mode
    says what the caller searched."""
    service = KnowledgeService(None, evidence=EvidenceSettings(mode="dense"),
                               category_filter={"support"})
    script = ScriptedPort(filtered=LOW, unfiltered=GOOD)
    steps = service.lookup_steps("q", searched="vector_first")
    requests = [next(steps)]
    with pytest.raises(StopIteration) as done:
        while True:
            requests.append(steps.send(script.search(requests[-1])))
    driven = done.value.value
    assert [r.category_filter for r in requests] == [frozenset({"support"}), None]
    plain = KnowledgeService(ScriptedPort(filtered=LOW, unfiltered=GOOD),
                             evidence=EvidenceSettings(mode="dense"),
                             category_filter={"support"}).lookup_knowledge("q")
    assert driven.to_dict() == plain.to_dict()
    assert [a.used for a in driven.trace.attempts] == [a.used for a in plain.trace.attempts]
    assert [a.to_dict()["mode"] for a in driven.trace.attempts] == ["vector_first"] * 2
    assert [a.to_dict()["mode"] for a in plain.trace.attempts] == ["dense"] * 2
    with pytest.raises(InvalidQuery):
        service.lookup_steps("  ")


@pytest.mark.parametrize(
    ("filtered", "category", "retry"),
    [
        (GOOD, {"support"}, True),   # good quality: no retry
        (LOW, None, True),           # no category filter: nothing to drop
        (LOW, {"support"}, False),   # retry switched off
    ],
)
def test_no_retry_otherwise(filtered, category, retry):
    port = ScriptedPort(filtered=filtered, unfiltered=GOOD)
    KnowledgeService(port, evidence=EvidenceSettings(mode="dense", retry_unfiltered=retry),
                     category_filter=category).lookup_knowledge("q")
    assert len(port.requests) == 1


def test_retry_does_not_need_hint_support_and_hints_do_not_prevent_it():
    # Top block fully matches every hint but is low quality: still retried.
    filtered = [make_hit(1, "a", label="dense", score=1.8, content="kestrel lidar")]
    port = ScriptedPort(filtered=filtered, unfiltered=GOOD)
    transformer = QueryTransformer(["kestrel"], entity_vocabulary=lambda q: ["kestrel"])
    result = KnowledgeService(port, evidence=EvidenceSettings(mode="dense"),
                              transformer=transformer,
                              category_filter={"kestrel"}).lookup_knowledge("kestrel lidar")
    assert len(port.requests) == 2 and result.trace.retried
    # And a high-quality top block without any hint support is PRECISE.
    port = ScriptedPort(filtered=dense_hits([0.2]))
    plain = KnowledgeService(port, evidence=EvidenceSettings(mode="dense"),
                             transformer=transformer).lookup_knowledge("unrelated words")
    assert plain.relevance_level is RelevanceLevel.PRECISE


def test_retry_never_widens_beyond_the_allowed_namespaces(graph):
    # The category filter names a namespace the caller may not see: nothing is found,
    # the retry drops the filter and searches the allowed set only.
    svc = KnowledgeService.for_graph(graph, ["handbook"], category_filter={"support"},
                                     evidence=EvidenceSettings(mode="dense"))
    result = svc.lookup_knowledge("lidar window error")
    assert result.trace.retried
    assert result.trace.attempts[0].hit_count == 0
    assert result.blocks and all(b.namespace == "handbook" for b in result.blocks)


def test_domain_hints_can_serve_as_the_category_filter(graph):
    svc = KnowledgeService.for_graph(
        graph, ["handbook", "support"],
        evidence=EvidenceSettings(category_from_domain_hints=True),
        namespace_descriptions={"support": "robot errors and lidar"},
    )
    result = svc.lookup_knowledge("lidar error")
    assert result.trace.hints.domains == ("support",)
    assert result.trace.attempts[0].request.category_filter == frozenset({"support"})
    assert all(b.namespace == "support" for b in result.blocks)


# ---------------------------------------------------------------- CLI

def test_cli_lookup_prints_the_projected_json(graph, monkeypatch):
    from docgraph.serve.cli import app

    path = graph.settings.store.path
    graph.close()
    monkeypatch.setenv("DOCGRAPH_EMBED__MODEL", "hashing")
    backend_graphs.point_the_cli_at(graph, monkeypatch)
    runner = CliRunner()
    out = runner.invoke(app, ["--index", str(path), "lookup", "parental leave"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert payload["relevance_level"] in {level.value for level in RelevanceLevel}
    ids = [e["document_id"] for e in payload["evidence"]]
    assert ids and len(ids) == len(set(ids)) and all("#chunk-" in i for i in ids)
    assert "trace" not in payload
    traced = json.loads(runner.invoke(app, ["--index", str(path), "lookup", "parental leave",
                                            "--trace"]).stdout)
    assert traced["trace"]["candidates"]
