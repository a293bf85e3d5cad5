"""Cohort search: lanes, provenance, namespace isolation, modes, trace, context assembly."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from typing import Any

import pytest

from docgraph import DocGraph
from docgraph.config import RetrievalSettings
from docgraph.errors import InvalidQuery
from docgraph.retrieve.cohort import TUNING_KNOBS, VECTOR_FIRST, CohortSearch, CohortSettings
from docgraph.retrieve.lanes import LANE_NAMES, LANES
from docgraph.store.sql.logs import SqlAuditStore, SqlTraceLog
from docgraph.store.sqlite.index import EmbeddedChunkIndex
from docgraph.store.sqlite.query_view import EmbeddedQueryView
from tests import backend_graphs
from tests.helpers import CountingEmbedder, write_files

# Every DocGraph test here runs on the embedded file and on PostgreSQL.
make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

OPS = {
    "postmortem.md": "# Rotterdam outage\n\n## Cause\n\nA memory leak in firmware 5.3.0 made every "
    "Tern T3 lose localisation at Nordhaven Logistics.\n\n## Follow-up\n\nThe follow-up "
    "actions are tracked by Tomasz Nowak.\n",
    "people.md": "# Directory\n\nTomasz Nowak works in Gdansk and owns the release calendar. "
    "He approves every rollout wave.\n",
    "leak.txt": "Engineering ticket ENG-2291 describes the locd map-tile cache growth in detail.\n",
    "faq.md": "# FAQ\n\nSUP-4502 concerned dock D-14 at Daventry.\n",
}
OTHER = {
    "secret.md": "# Board\n\nTomasz Nowak will receive a retention bonus of 50,000 EUR.\n",
}


@pytest.fixture
def graph(tmp_path, make_graph):
    g = make_graph()
    g.index(write_files(tmp_path / "ops", OPS), namespace="ops")
    g.index(write_files(tmp_path / "board", OTHER), namespace="board")
    return g


def test_every_hit_records_the_lane_that_brought_it(graph):
    result = graph.retrieve("memory leak firmware 5.3.0", namespaces={"ops"}, k=6,
                            return_trace=True)
    assert result.hits
    for hit in result.hits:
        assert hit.lanes[0] in {"seed", "structural", "entity_adjacent", "graph",
                                "cluster_adjacent", "ppr"}
    trace = result.trace
    assert trace.final_provenance == {h.chunk_id: h.lanes[0] for h in result.hits}
    assert trace.pool_size >= len(result.hits)
    assert {"seed", "rank", "total"} <= set(trace.timings_ms)
    assert trace.candidates["seed"]
    assert [h.original_rank for h in result.hits] == list(range(1, len(result.hits) + 1))


def test_entity_lane_bridges_to_a_chunk_without_query_words(graph):
    # "Tomasz Nowak" links the follow-up section to the directory entry; the directory entry
    # shares no content word with the query.
    # One seed only, so everything else must come from an expansion lane.
    # The hashing test embedder gives such a chunk ~0 similarity, so the gate is opened here;
    # a strict gate must keep it out.
    base = {"seed_pool": 1, "seed_pool_grows_with_k": False, "structural_lane": False}
    engine = graph.cohort_engine(CohortSettings(**base, entity_min_similarity=-1.0,
                                                cluster_lane=False))
    result = engine.search("Who tracks the follow-up actions?", namespaces={"ops"}, k=5,
                           return_trace=True)
    lanes = {h.source_path: h.lanes for h in result.hits}
    assert result.hits[0].lanes[0] == "seed"
    assert lanes.get("people.md", ("",))[0] == "entity_adjacent"
    gated = graph.cohort_engine(CohortSettings(**base, entity_min_similarity=0.99,
                                               cluster_lane=False, completeness=False))
    strict = gated.search("Who tracks the follow-up actions?", namespaces={"ops"}, k=5)
    assert "people.md" not in {h.source_path for h in strict.hits}


def test_lanes_never_cross_the_namespace_filter(graph):
    # "Tomasz Nowak" also occurs in the board namespace; no lane may follow it there.
    for mode in ("vector_first", "graph_first", "global"):
        result = graph.retrieve("Tomasz Nowak bonus", namespaces={"ops"}, k=10, mode=mode,
                                return_trace=True)
        assert all(h.namespace == "ops" for h in result.hits), mode
        assert not any("secret.md" in c for lane in result.trace.candidates.values()
                       for c in lane), mode
    context = graph.context("Tomasz Nowak bonus", namespaces={"ops"}, token_budget=2000)
    assert "50,000" not in context.text and "retention bonus" not in context.text


def test_structural_lane_brings_the_neighbouring_section(graph):
    settings = CohortSettings(structural_lane=True, entity_lane=False, cluster_lane=False,
                              completeness=False)
    engine = graph.cohort_engine(settings)
    result = engine.search("memory leak localisation", namespaces={"ops"}, k=10,
                           return_trace=True)
    assert result.trace.candidates.get("structural") is not None
    without = graph.cohort_engine(CohortSettings(structural_lane=False, entity_lane=False,
                                                 cluster_lane=False, completeness=False))
    plain = without.search("memory leak localisation", namespaces={"ops"}, k=10,
                           return_trace=True)
    assert "structural" not in plain.trace.candidates


def test_completeness_finds_each_named_entity(graph):
    result = graph.retrieve("ENG-2291 and SUP-4502", namespaces={"ops"}, k=4, return_trace=True)
    sources = {h.source_path for h in result.hits}
    assert {"leak.txt", "faq.md"} <= sources
    assert set(result.trace.query_entities_found) >= {"ENG-2291", "SUP-4502"}
    missing = graph.retrieve("what about SUP-9999", namespaces={"ops"}, k=3, return_trace=True)
    assert "SUP-9999" in missing.trace.query_entities_missing


def test_graph_first_returns_entity_paths(graph):
    result = graph.retrieve("How is Tomasz Nowak connected to the Rotterdam outage?",
                            namespaces={"ops"}, k=5, mode="graph_first", return_trace=True)
    assert result.hits
    assert any("graph" in h.lanes for h in result.hits)
    assert result.paths and all(isinstance(p, list) and p for p in result.paths.values())


def test_global_mode_ranks_community_reports_and_says_when_there_is_no_model(graph):
    result = graph.retrieve("themes", namespaces={"ops"}, k=3, mode="global", return_trace=True)
    assert result.hits and all(h.doc_id.startswith("community://ops/") for h in result.hits)
    assert any("no chat model" in note for note in result.trace.notes)
    assert result.answer is None


def test_global_mode_map_reduces_with_a_chat_model(graph):
    class Scripted:
        name = "scripted"

        def __init__(self) -> None:
            self.prompts: list[str] = []

        def complete(self, prompt: str, max_tokens: int = 400) -> str:
            self.prompts.append(prompt)
            if prompt.startswith("Rate"):
                score = 90 if "Nowak" in prompt.split("Report:")[1] else 10
                return f"SCORE: {score}\nkey point"
            return "Themes: releases and the outage."

    model = Scripted()
    graph.chat_model = model
    result = graph.retrieve("who is involved", namespaces={"ops"}, k=1, mode="global")
    assert result.answer == "Themes: releases and the outage."
    assert len(result.hits) == 1 and "Nowak" in result.hits[0].text
    assert all("50,000" not in p for p in model.prompts)


def test_context_sections_fit_their_budget(graph):
    context = graph.context("Rotterdam outage firmware", namespaces={"ops"}, token_budget=400)
    assert list(context.sections) == ["Entities", "Relationships", "Community Reports",
                                      "Source Text"]
    assert sum(context.tokens.values()) <= 400
    assert context.tokens["Entities"] <= 40
    assert "-----Source Text-----" in context.text
    assert context.chunk_ids and all(f"[{c}]" in context.text for c in context.chunk_ids)
    with pytest.raises(InvalidQuery):
        graph.context("x", namespaces={"ops"}, token_budget=10)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"k": 0}, "k must be"), ({"mode": "everything"}, "mode must be"),
    ({"query_text": " "}, "more than whitespace"),
])
def test_bad_arguments_are_rejected(graph, kwargs, message):
    args = {"query_text": "outage", "k": 3, "mode": "vector_first", **kwargs}
    with pytest.raises(InvalidQuery, match=message):
        graph.retrieve(args.pop("query_text"), namespaces={"ops"}, **args)
    with pytest.raises(InvalidQuery):
        graph.retrieve("outage", namespaces=set())


def test_traces_are_stored_by_the_governed_service_with_bounded_retention(graph):
    import hashlib

    from docgraph.serve.setup import local_governance

    graph.cohort_engine().search("outage", namespaces={"ops"}, k=2)
    assert graph.traces.count() == 0  # the engine itself stores nothing
    store = SqlTraceLog(graph.store)  # the backend's database, either backend
    # A governed request stores its traces with its audit record, in one write: the audit
    # store applies the trace retention bound.
    graph.ports.__dict__["audit"] = SqlAuditStore(graph.store, trace_retention=3)
    governance, caller = local_governance(graph)
    for i in range(5):
        governance.search(caller, f"outage {i}", k=2)
    assert store.count() == 3
    last = store.get("last")
    assert "query" not in last  # like the audit log: a hash, never the text
    assert last["query_hash"] == hashlib.sha256(b"outage 4").hexdigest()
    assert last["user_id"] == caller.user_id
    recent = store.recent(10)  # newest first, each with its id (the console's trace list)
    assert [t["query_hash"] for t in recent] == [
        hashlib.sha256(f"outage {i}".encode()).hexdigest() for i in (4, 3, 2)]
    assert recent[0] == {**last, "id": recent[0]["id"]}
    assert store.get(recent[1]["id"])["query_hash"] == recent[1]["query_hash"]
    assert len(store.recent(1)) == 1


def test_concurrent_searches_match_sequential_ones(graph):
    queries = ["memory leak", "Tomasz Nowak", "dock D-14", "release calendar"] * 4
    expected = [[h.chunk_id for h in graph.retrieve(q, namespaces={"ops"}, k=4).hits]
                for q in queries]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(
            lambda q: [h.chunk_id for h in graph.retrieve(q, namespaces={"ops"}, k=4).hits],
            queries))
    assert got == expected


def test_graph_first_fills_k_from_the_seeds_when_the_graph_adds_nothing(tmp_path, make_graph):
    graph = make_graph("plain.db")
    notes = {f"note{i}.md": f"# note {i}\n\nthe pump number {i} was cleaned and the valve "
                            f"pressure was checked on day {i}.\n" for i in range(14)}
    graph.index(write_files(tmp_path / "plain", notes), namespace="plain")
    hits = graph.retrieve("pump valve pressure", namespaces={"plain"}, k=10,
                          mode="graph_first").hits
    assert len(hits) == 10
    assert len({h.chunk_id for h in hits}) == 10


class _NotesLexicalStart:
    """The graph's real chunk index; sets ``started`` when a BM25 search begins."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.started = threading.Event()

    def lexical_search(self, *args: Any, **kwargs: Any) -> Any:
        self.started.set()
        return self.inner.lexical_search(*args, **kwargs)

    def for_query(self, readers: frozenset[str] | None = None) -> Any:
        return self  # its searches go through this wrapper

    def __len__(self) -> int:
        return len(self.inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _WaitsForLexicalStart(CountingEmbedder):
    """The hashing embedder; before embedding a query, waits (at most 5 s) for the BM25
    search to have started and records whether it had."""

    def __init__(self, started: threading.Event) -> None:
        super().__init__()
        self.started = started
        self.overlapped: list[bool] = []

    def embed_query(self, text):  # type: ignore[no-untyped-def]
        self.overlapped.append(self.started.wait(5))
        return super().embed_query(text)


def test_the_bm25_seed_list_runs_while_the_query_is_embedded(graph):
    # The seed lane costs the slower of its two lists, not their sum: BM25 starts before
    # (and so runs during) the query embedding and dense search, as in hybrid search.
    index = _NotesLexicalStart(graph.chunk_index())
    embedder = _WaitsForLexicalStart(index.started)
    engine = CohortSearch(graph.store, index, graph.graph_store, embedder, graph.extractor)
    hits = engine.search("memory leak firmware", namespaces={"ops"}, k=4).hits
    assert embedder.overlapped == [True]
    expected = graph.retrieve("memory leak firmware", namespaces={"ops"}, k=4).hits
    assert [h.chunk_id for h in hits] == [h.chunk_id for h in expected]


def test_every_engine_knob_is_a_setting_or_a_declared_tuning_knob():
    # [retrieval] reaches every CohortSettings field but the declared tuning knobs (the
    # benches vary them; see docgraph.retrieve.cohort_settings), with the same defaults.
    settings = set(RetrievalSettings.model_fields)
    assert {f.name for f in fields(CohortSettings)} == settings | TUNING_KNOBS
    assert not settings & TUNING_KNOBS
    defaults = CohortSettings()
    assert {n: getattr(defaults, n) for n in settings} == RetrievalSettings().model_dump()
    assert all(info.description for info in RetrievalSettings.model_fields.values())


def test_retrieval_settings_reach_the_engine(tmp_path, make_graph):
    graph = make_graph(retrieval={"ppr_lane": False, "seed_pool": 7, "rrf_k": 30})
    engine = graph.cohort_engine()
    assert (engine.settings.ppr_lane, engine.settings.seed_pool, engine.settings.rrf_k) == (
        False, 7, 30)
    assert engine.settings.entity_lane is CohortSettings().entity_lane


def test_one_lane_list_for_the_engine_trace_console_and_guidance(graph):
    from docgraph.serve.console.views import LANE_ORDER
    from docgraph.serve.tool_args import DESCRIPTIONS

    assert LANE_ORDER == LANE_NAMES
    assert [lane.name for lane in VECTOR_FIRST] == ["seed", "structural", "entity_adjacent",
                                                     "graph", "cluster_adjacent", "ppr"]
    assert set(LANE_NAMES) == {lane.name for lane in VECTOR_FIRST}
    guide = DESCRIPTIONS["search_documents"]
    assert all(f"{lane.name} = {lane.description}" in guide for lane in LANES
               if lane.name != "seed")
    every = CohortSettings(structural_lane=True, graph_lane=True, cluster_lane=True)
    result = graph.cohort_engine(every).search("Tomasz Nowak follow-up", namespaces={"ops"},
                                               k=10, return_trace=True)
    assert set(result.trace.candidates) <= set(LANE_NAMES)
    assert set(result.trace.final_provenance.values()) <= set(LANE_NAMES)


@backend_graphs.embedded_only
def test_a_cohort_query_syncs_the_embedded_index_once_and_sees_the_latest_build(
        graph, tmp_path, monkeypatch):
    # The searcher takes the index as one query reads it (ChunkIndex.for_query): the catalog
    # check runs once per query, not once per search of each lane, and a build made since
    # the previous query (here: another opening of the file, as a CLI build) is seen.
    checks: list[int] = []
    marks = EmbeddedChunkIndex._marks

    def counted(self: EmbeddedChunkIndex, db: Any) -> tuple[int, int]:
        checks.append(1)
        return marks(self, db)

    graph.retrieve("Rotterdam outage firmware", namespaces={"ops"}, k=5)
    monkeypatch.setattr(EmbeddedChunkIndex, "_marks", counted)
    for mode in ("vector_first", "graph_first", "global"):
        checks.clear()
        graph.retrieve("Rotterdam outage firmware", namespaces={"ops"}, k=5, mode=mode)
        assert len(checks) == 1, mode
    other = DocGraph(graph.settings, CountingEmbedder())
    other.index(write_files(tmp_path / "late", {"late.md": "# Walrus\n\nA walrus ate the "
                                                "Rotterdam outage report.\n"}),
                namespace="ops")
    other.close()
    hits = graph.retrieve("walrus Rotterdam outage report", namespaces={"ops"}, k=3).hits
    assert any("walrus" in h.text.casefold() for h in hits)


def test_a_query_view_reads_each_stored_vector_once(graph, monkeypatch):
    index = graph.chunk_index()
    rows = [r.rowid for r in index.lexical_search("Tomasz Nowak", 10, frozenset({"ops"}))]
    assert rows
    view = index.for_query()
    assert view.for_query() is view
    first = {r: v.tolist() for r, v in view.vectors(rows).items()}
    assert first == {r: v.tolist() for r, v in index.vectors(rows).items()}
    if isinstance(view, EmbeddedQueryView) and not index.exact:
        # the embedded index keeps what the query read: asked again, it reads nothing
        def unread(self: EmbeddedChunkIndex, rowids: Any) -> Any:
            raise AssertionError(f"read again: {rowids}")

        monkeypatch.setattr(EmbeddedChunkIndex, "_stored_vectors", unread)
        assert {r: v.tolist() for r, v in view.vectors(rows).items()} == first
