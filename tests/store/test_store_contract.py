"""The store contract, run against every backend in ``tests/store_backends.py``.

Search results (dense, BM25, hybrid through DocGraph), the namespace pre-filter, atomic
document replace, delete cascade, incremental re-index and query-text safety must hold for
the embedded default and every server backend alike.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from docgraph import DocGraph
from docgraph.config import load_settings
from docgraph.errors import InvalidQuery, StoreError
from docgraph.model import ChunkDraft, EntityLink, SourceRecord
from docgraph.sources.urn import document_id, normalize_urn
from docgraph.store.base import DocumentWrite
from docgraph.store.graph import CappedEntity, EntityInfo
from docgraph.store.sql import graph_reads
from docgraph.store.sql.graph import SqlGraphStore
from tests.helpers import CountingEmbedder, write_files
from tests.pg import pgvector_server  # noqa: F401  (fixture used by the postgres backend)
from tests.store_backends import BACKENDS, Backend, StoreHandle

DIM = 16


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    made = BACKENDS[request.param](request, tmp_path)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def store(backend: Backend) -> StoreHandle:
    handle = backend.open_store(DIM)
    handle.catalog.set_embedding_model("test-model", DIM)
    return handle


def _unit(rng: np.random.Generator, n: int, d: int = DIM) -> np.ndarray:
    m = rng.normal(size=(n, d)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def _draft(source: SourceRecord, path: str, texts: list[str], vectors: np.ndarray,
           indexes: list[int] | None = None) -> DocumentWrite:
    indexes = indexes if indexes is not None else list(range(len(texts)))
    chunks = [ChunkDraft(i, t, (), len(t.split()), None, None, None)
              for i, t in zip(indexes, texts, strict=True)]
    return DocumentWrite(
        source=source, path=path, doc_id=document_id(source.urn, path), title=path,
        content_hash=str(hash(tuple(texts))), change_token="t", media_type="text/plain",
        chunks=chunks, breadcrumbs=[f"[{path}]"] * len(texts), embedded_texts=texts,
        vectors=vectors,
    )


def _write(store: StoreHandle, source: SourceRecord, path: str, texts: list[str],
           vectors: np.ndarray, indexes: list[int] | None = None) -> object:
    return store.catalog.write_document(_draft(source, path, texts, vectors, indexes))


def _texts(store: StoreHandle, rows: list) -> list[str]:  # type: ignore[type-arg]
    chunks = store.catalog.chunks_by_rowid([r.rowid for r in rows])
    return [chunks[r.rowid].text for r in rows]


# -- search results ---------------------------------------------------------------------


def test_dense_search_ranks_by_cosine(store: StoreHandle, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    source = store.catalog.add_source(normalize_urn(tmp_path / "a"), "ns")
    vectors = _unit(rng, 40)
    _write(store, source, "a.txt", [f"chunk {i}" for i in range(40)], vectors)
    query = vectors[7] + 0.05 * _unit(rng, 1)[0]
    query = (query / np.linalg.norm(query)).astype(np.float32)
    rows = store.index.dense_search(query, 5, frozenset({"ns"}))
    expected = np.argsort(-(vectors @ query))[:5]
    assert _texts(store, rows) == [f"chunk {i}" for i in expected]
    assert rows[0].score == pytest.approx(float(vectors[7] @ query), abs=1e-4)
    assert [r.score for r in rows] == sorted((r.score for r in rows), reverse=True)


def test_lexical_search_is_bm25_with_idf(store: StoreHandle, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    source = store.catalog.add_source(normalize_urn(tmp_path / "a"), "ns")
    texts = [f"common words in filler chunk number {i}" for i in range(12)]
    texts += ["common zebra", "common common filler"]
    _write(store, source, "a.txt", texts, _unit(rng, len(texts)))
    rows = store.index.lexical_search("zebra common", 5, frozenset({"ns"}))
    # The rare term outweighs the common one (ts_rank, without IDF, would tie them).
    assert _texts(store, rows)[0] == "common zebra"
    assert {*_texts(store, rows)} <= set(texts)
    assert [r.score for r in rows] == sorted((r.score for r in rows), reverse=True)
    assert all(r.score > 0 for r in rows)
    assert store.index.lexical_search("absentword", 5, frozenset({"ns"})) == []


def test_term_statistics_follow_writes_and_deletes(store: StoreHandle, tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    source = store.catalog.add_source(normalize_urn(tmp_path / "a"), "ns")
    texts = ["the quokka sleeps", *(f"a tree grows {i}" for i in range(10))]
    _write(store, source, "a.txt", texts, _unit(rng, len(texts)))
    alone = store.index.lexical_search("quokka", 1, frozenset({"ns"}))[0].score
    other = _write(store, source, "b.txt", [f"quokka number {i}" for i in range(6)],
                   _unit(rng, 6))
    crowded = next(r for r in store.index.lexical_search("quokka", 10, frozenset({"ns"}))
                   if _texts(store, [r]) == ["the quokka sleeps"]).score
    if not store.global_bm25_statistics:
        return  # Milvus Lite: the new segment has its own statistics (docs/milvus.md)
    assert crowded < alone  # the term got common: lower IDF
    store.catalog.delete_document(other)  # type: ignore[arg-type]
    again = store.index.lexical_search("quokka", 1, frozenset({"ns"}))[0].score
    assert again == pytest.approx(alone, rel=1e-5)


def test_docgraph_hybrid_and_dense_search(backend: Backend, tmp_path: Path) -> None:
    corpus = write_files(tmp_path / "docs", {
        "outage.md": "# Rotterdam outage\n\nThe Rotterdam outage was caused by a failed "
                     "cooling pump in hall B.\n",
        "errors.md": "# Error codes\n\nError E-417 means the badge reader lost its "
                     "certificate.\n",
        "leave.md": "# Parental leave\n\nEmployees get sixteen weeks of parental leave.\n",
    })
    with _graph(backend) as graph:
        report = graph.index(corpus, namespace="ops")
        assert len(report.added) == 3
        hybrid = graph.search("What does error E-417 mean?", namespaces={"ops"}, k=3)
        assert hybrid[0].source_path == "errors.md"
        assert hybrid[0].score_label == "rrf"
        assert "bm25" in hybrid[0].lanes and hybrid[0].dense_similarity is not None
        dense = graph.search("parental leave weeks", namespaces={"ops"}, k=2, mode="dense")
        assert dense[0].source_path == "leave.md"
        assert dense[0].score <= dense[1].score  # L2 distance, nearest first
        chunk = graph.store.chunks_by_rowid([hybrid[0].rowid])[hybrid[0].rowid]
        assert chunk.chunk_id == hybrid[0].chunk_id and "E-417" in chunk.text
        docs = graph.documents({"ops"})
        assert sorted(d.path for d in docs) == ["errors.md", "leave.md", "outage.md"]


# -- namespace pre-filter ---------------------------------------------------------------


def test_selective_namespace_filter_still_returns_k_rows(store: StoreHandle,
                                                         tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    big = store.catalog.add_source(normalize_urn(tmp_path / "big"), "big")
    small = store.catalog.add_source(normalize_urn(tmp_path / "small"), "small")
    big_vectors = _unit(rng, 1500)
    for part in range(3):
        rows = slice(part * 500, (part + 1) * 500)
        _write(store, big, f"b{part}.txt", [f"shared big {i}" for i in range(500)],
               big_vectors[rows])
    small_vectors = _unit(rng, 8)
    _write(store, small, "s.txt", [f"shared small {i}" for i in range(8)], small_vectors)

    query = big_vectors[3]  # nearest neighbours are all in "big"
    rows = store.index.dense_search(query, 8, frozenset({"small"}))
    assert len(rows) == 8
    expected = np.argsort(-(small_vectors @ query))
    assert _texts(store, rows) == [f"shared small {i}" for i in expected]
    lexical = store.index.lexical_search("shared", 20, frozenset({"small"}))
    assert sorted(_texts(store, lexical)) == sorted(f"shared small {i}" for i in range(8))
    assert store.index.dense_search(query, 5, frozenset({"nowhere"})) == []


@pytest.mark.parametrize("bad", [None, set(), frozenset(), "small"])
def test_missing_or_empty_namespace_set_is_refused(store: StoreHandle, bad: object) -> None:
    with pytest.raises(InvalidQuery):
        store.index.dense_search(np.ones(DIM, dtype=np.float32) / 4, 3, bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidQuery):
        store.index.lexical_search("anything", 3, bad)  # type: ignore[arg-type]


def test_docgraph_search_never_leaves_the_namespace_set(backend: Backend, tmp_path: Path) -> None:
    write_files(tmp_path / "hr", {"a.md": "Salary bands for engineers and the bonus plan.\n"})
    write_files(tmp_path / "ops", {"b.md": "Salary of the pump operators in hall B.\n"})
    with _graph(backend) as graph:
        graph.index(tmp_path / "hr", namespace="hr")
        graph.index(tmp_path / "ops", namespace="ops")
        for mode in ("hybrid", "dense"):
            hits = graph.search("salary", namespaces={"ops"}, k=10, mode=mode)  # type: ignore[arg-type]
            assert hits and {h.namespace for h in hits} == {"ops"}
        for bad in (None, set(), "ops"):
            with pytest.raises(InvalidQuery):
                graph.search("salary", namespaces=bad, k=3)  # type: ignore[arg-type]


# -- atomic replace and delete cascade --------------------------------------------------


@pytest.mark.parametrize("failure", ["invalid_vector", "duplicate_chunk_index"])
def test_failure_mid_write_keeps_old_version_searchable(store: StoreHandle, tmp_path: Path,
                                                        failure: str) -> None:
    rng = np.random.default_rng(4)
    source = store.catalog.add_source(normalize_urn(tmp_path / "a"), "ns")
    old = _unit(rng, 2)
    _write(store, source, "a.txt", ["alpha original text", "beta original text"], old)
    new = _unit(rng, 3)
    indexes = [0, 1, 2]
    if failure == "invalid_vector":
        new[2, 0] = np.nan
    else:
        indexes = [0, 1, 1]  # the database's unique constraint fails on the third chunk
    with pytest.raises(Exception) as caught:
        _write(store, source, "a.txt", ["alpha new", "beta new", "gamma new"], new, indexes)
    if failure == "invalid_vector":
        assert isinstance(caught.value, StoreError)

    rows = store.index.lexical_search("original", 10, frozenset({"ns"}))
    assert sorted(_texts(store, rows)) == ["alpha original text", "beta original text"]
    assert store.index.lexical_search("gamma", 10, frozenset({"ns"})) == []
    top = store.index.dense_search(old[0], 1, frozenset({"ns"}))
    assert _texts(store, top) == ["alpha original text"]
    assert store.catalog.documents_for_source(source)["a.txt"].chunk_count == 2
    # The connection is usable after the failed transaction.
    _write(store, source, "a.txt", ["alpha fixed"], _unit(rng, 1))
    assert _texts(store, store.index.lexical_search("fixed", 5, frozenset({"ns"}))) == [
        "alpha fixed"]


def _batch_of_three(store: StoreHandle, tmp_path: Path) -> tuple[SourceRecord,
                                                                  list[DocumentWrite]]:
    """a.txt, b.txt and c.txt stored in their old version; returns their new versions."""
    rng = np.random.default_rng(11)
    source = store.catalog.add_source(normalize_urn(tmp_path / "a"), "ns")
    for name in "abc":
        _write(store, source, f"{name}.txt", [f"{name} old text"], _unit(rng, 1))
    return source, [_draft(source, f"{name}.txt", [f"{name} new text", f"{name} more new"],
                           _unit(rng, 2)) for name in "abc"]


def _stored_texts(store: StoreHandle, source: SourceRecord) -> dict[str, list[str]]:
    """Each document's stored chunk texts, by path."""
    ids = {document_id(source.urn, f"{name}.txt"): f"{name}.txt" for name in "abc"}
    out: dict[str, list[str]] = {}
    for chunk in store.catalog.document_chunks(list(ids), {"ns"}):
        out.setdefault(ids[chunk.doc_id], []).append(chunk.text)
    return out


def test_a_document_failing_mid_batch_keeps_its_old_version_and_stops_the_batch(
        store: StoreHandle, tmp_path: Path) -> None:
    """The port's batch semantics, alike on every backend: the documents before the failing
    one commit, it keeps its old version, the ones after it are not written."""
    source, writes = _batch_of_three(store, tmp_path)
    b = writes[1]  # the database's unique constraint fails on b.txt's second chunk
    writes[1] = dataclasses.replace(b, chunks=[dataclasses.replace(c, index=0)
                                               for c in b.chunks])
    with pytest.raises(Exception) as caught:
        store.catalog.write_documents(writes)
    assert not isinstance(caught.value, StoreError)  # the driver's integrity error
    assert _stored_texts(store, source) == {
        "a.txt": ["a new text", "a more new"], "b.txt": ["b old text"],
        "c.txt": ["c old text"]}
    documents = store.catalog.documents_for_source(source)
    assert [documents[p].chunk_count for p in ("a.txt", "b.txt", "c.txt")] == [2, 1, 1]
    rows = store.index.lexical_search("new", 10, frozenset({"ns"}))
    assert sorted(_texts(store, rows)) == ["a more new", "a new text"]
    # the connection is usable after the rolled-back savepoint
    assert len(store.catalog.write_documents([b, writes[2]])) == 2
    assert _stored_texts(store, source)["c.txt"] == ["c new text", "c more new"]


def test_a_write_refused_by_its_checks_leaves_the_whole_batch_unwritten(
        store: StoreHandle, tmp_path: Path) -> None:
    """Every write of a batch is checked before anything is written."""
    source, writes = _batch_of_three(store, tmp_path)
    bad = writes[1].vectors.copy()
    bad[1, 0] = np.nan
    writes[1] = dataclasses.replace(writes[1], vectors=bad)
    with pytest.raises(StoreError, match=r"b\.txt#chunk-1: invalid vector"):
        store.catalog.write_documents(writes)
    assert _stored_texts(store, source) == {
        "a.txt": ["a old text"], "b.txt": ["b old text"], "c.txt": ["c old text"]}


def test_an_interrupted_batch_leaves_every_old_version(
        store: StoreHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch is one transaction: an interrupt (Ctrl-C, as a crash) before its commit
    leaves every document of the batch in its old version, those written before it too."""
    source, writes = _batch_of_three(store, tmp_path)
    upsert = store.catalog._upsert_document  # type: ignore[attr-defined]

    def interrupted(db: object, write: DocumentWrite, *args: object) -> object:
        if write.path == "b.txt":
            raise KeyboardInterrupt
        return upsert(db, write, *args)

    monkeypatch.setattr(store.catalog, "_upsert_document", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.catalog.write_documents(writes)
    monkeypatch.undo()
    assert _stored_texts(store, source) == {
        "a.txt": ["a old text"], "b.txt": ["b old text"], "c.txt": ["c old text"]}
    assert store.index.lexical_search("new", 10, frozenset({"ns"})) == []
    assert len(store.catalog.write_documents(writes)) == 3


def test_pages_ocr_and_metadata_are_stored_with_chunks_and_documents(
        store: StoreHandle, tmp_path: Path) -> None:
    source = store.catalog.add_source(normalize_urn(tmp_path / "a"), "ns")
    chunks = [ChunkDraft(0, "scanned page text", ("Scan",), 3, None, 1, None, (1, 1), True),
              ChunkDraft(1, "text across pages", ("Scan",), 3, 0, 2, 0, (1, 2), False),
              ChunkDraft(2, "text without pages", (), 3, 1, None, 0)]
    texts = [c.text for c in chunks]
    store.catalog.write_document(DocumentWrite(
        source=source, path="scan.pdf", doc_id=document_id(source.urn, "scan.pdf"),
        title="Scan", content_hash="h", change_token="t", media_type="application/pdf",
        chunks=chunks, breadcrumbs=["[Scan]"] * 3, embedded_texts=texts,
        vectors=_unit(np.random.default_rng(9), 3),
        metadata={"author": "Ada Lovelace", "pages": "2"}))
    rows = store.index.lexical_search("text", 10, frozenset({"ns"}))
    stored = store.catalog.chunks_by_rowid([r.rowid for r in rows])
    assert sorted((c.index, c.pages, c.ocr) for c in stored.values()) == [
        (0, (1, 1), True), (1, (1, 2), False), (2, None, False)]
    document = store.catalog.documents_for_source(source)["scan.pdf"]
    assert document.metadata == {"author": "Ada Lovelace", "pages": "2"}


def test_delete_cascades_to_every_search_path(store: StoreHandle, tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    source = store.catalog.add_source(normalize_urn(tmp_path / "a"), "ns")
    vectors = _unit(rng, 3)
    doc = _write(store, source, "a.txt", ["walrus one", "walrus two", "walrus three"], vectors)
    keep = _write(store, source, "b.txt", ["penguin"], _unit(rng, 1))
    ids = [r.rowid for r in store.index.lexical_search("walrus", 10, frozenset({"ns"}))]
    assert len(ids) == 3

    store.catalog.delete_document(doc)  # type: ignore[arg-type]
    assert store.index.lexical_search("walrus", 10, frozenset({"ns"})) == []
    assert all(r.rowid not in ids
               for r in store.index.dense_search(vectors[0], 10, frozenset({"ns"})))
    assert store.catalog.chunks_by_rowid(ids) == {}
    assert store.index.vectors(ids) == {}
    assert set(store.catalog.documents_for_source(source)) == {"b.txt"}

    assert store.catalog.remove_source(source) == 1
    assert store.index.lexical_search("penguin", 10, frozenset({"ns"})) == []
    assert store.catalog.list_sources() == []
    assert store.catalog.chunks_by_rowid([keep.id]) == {}  # type: ignore[attr-defined]
    assert [s.chunks for s in store.catalog.stats() if s.namespace == "ns"] in ([0], [])


def test_a_snapshot_reads_one_state_of_the_catalog(store: StoreHandle, tmp_path: Path) -> None:
    """A caller's counts are totals less what it may not read, two statements: inside
    ``snapshot()`` a document another thread commits between them is in neither."""
    import threading

    rng = np.random.default_rng(6)
    source = store.catalog.add_source(normalize_urn(tmp_path / "a"), "ns")
    _write(store, source, "a.txt", ["walrus"], _unit(rng, 1))

    def documents() -> int:
        return sum(s.documents for s in store.catalog.stats() if s.namespace == "ns")

    with store.catalog.snapshot():
        assert documents() == 1
        other = threading.Thread(target=_write, args=(store, source, "b.txt", ["penguin"],
                                                      _unit(rng, 1)))
        other.start()
        other.join(30)
        assert documents() == 1
    assert documents() == 2


# -- incremental re-index ---------------------------------------------------------------


def test_incremental_reindex_embeds_only_what_changed(backend: Backend, tmp_path: Path) -> None:
    corpus = write_files(tmp_path / "docs", {
        "a.md": "# A\n\nFirst paragraph about otters.\n\n## More\n\nSecond paragraph.\n",
        "b.md": "# B\n\nBadgers dig setts.\n",
        "c.md": "# C\n\nCranes fly south.\n",
    })
    embedder = CountingEmbedder()
    with _graph(backend, embedder) as graph:
        first = graph.index(corpus, namespace="zoo")
        assert first.chunks_embedded > 0
        embedded = embedder.embedded

        again = graph.index(corpus, namespace="zoo")
        assert again.chunks_embedded == 0 and again.unchanged == 3
        assert embedder.embedded == embedded

        (corpus / "a.md").write_text(
            "# A\n\nFirst paragraph about otters.\n\n## More\n\nA rewritten paragraph.\n")
        (corpus / "c.md").unlink()
        third = graph.index(corpus, namespace="zoo")
        assert third.updated == ["a.md"] and third.removed == ["c.md"]
        assert third.chunks_reused >= 1 and third.chunks_embedded < first.chunks_written
        assert not any(h.source_path == "c.md"
                       for h in graph.search("cranes fly south", namespaces={"zoo"}, k=5))
        assert graph.search("rewritten", namespaces={"zoo"}, k=1)[0].source_path == "a.md"


# -- query-text safety ------------------------------------------------------------------

HOSTILE = [
    "'", '"', "%", "_", ";", "*", "\\", "$$", "--", "/*", "NEAR(walrus penguin)",
    "walrus AND NOT penguin OR", "walrus:*", "walrus & !penguin | <->", '"walrus',
    "walrus'; DROP TABLE chunks; --", "\") OR 1=1 --", "x' UNION SELECT text FROM chunks --",
    "walrus\x00penguin", "Ünïcödé 東京 😀 walrus", "%walrus%", "{walrus}", "walrus^2",
]


def test_hostile_query_text_is_only_ever_data(backend: Backend, tmp_path: Path) -> None:
    write_files(tmp_path / "a", {"w.md": "# Walrus\n\nThe walrus naps on the ice floe.\n"})
    write_files(tmp_path / "b", {"p.md": "# Penguin\n\nSecret penguin walrus notes.\n"})
    with _graph(backend) as graph:
        graph.index(tmp_path / "a", namespace="a")
        graph.index(tmp_path / "b", namespace="b")
        before = [(s.namespace, s.chunks) for s in graph.status().namespaces]
        for query in HOSTILE:
            hits = graph.search(query, namespaces={"a"}, k=5)
            assert all(h.namespace == "a" for h in hits), query
            if "walrus" in query.lower():
                assert hits and hits[0].source_path == "w.md", query
        assert [(s.namespace, s.chunks) for s in graph.status().namespaces] == before
    handle = backend.open_store(CountingEmbedder().dimension)
    for query in HOSTILE:
        rows = handle.index.lexical_search(query, 5, frozenset({"a"}))
        assert all(c.namespace == "a"
                   for c in handle.catalog.chunks_by_rowid([r.rowid for r in rows]).values())


class _graph:
    """A DocGraph on the backend's data (context manager that closes it)."""

    def __init__(self, backend: Backend, embedder: CountingEmbedder | None = None) -> None:
        settings = load_settings(store=backend.store_settings())
        self.graph = DocGraph(settings, embedder or CountingEmbedder())

    def __enter__(self) -> DocGraph:
        return self.graph

    def __exit__(self, *exc: object) -> None:
        self.graph.close()


# -- the governed path and its logs -----------------------------------------------------------


def test_governed_plain_search_traces_and_audit(backend: Backend, tmp_path: Path) -> None:
    """Plain search through the one governed service works on every backend, and the trace
    and audit logs are the backend's own (shared by every process on that database)."""
    from docgraph.serve.setup import local_governance

    corpus = write_files(tmp_path / "docs", {
        "errors.md": "# Error codes\n\nError E-417 means the badge reader lost its "
                     "certificate.\n",
        "leave.md": "# Parental leave\n\nEmployees get sixteen weeks of parental leave.\n",
    })
    with _graph(backend) as graph:
        graph.index(corpus, namespace="ops")
        governance, caller = local_governance(graph)
        hits = governance.search(caller, "What does error E-417 mean?", k=2, mode="hybrid")
        assert hits[0].source_path == "errors.md"
        assert governance.search(caller, "parental leave", k=1, mode="dense")[0].source_path \
            == "leave.md"
        records = governance.audit.recent(2)
        assert [r["operation"] for r in records] == ["retrieve:dense", "retrieve:hybrid"]
        assert records[1]["evidence_keys"][0] == hits[0].chunk_id
        assert "E-417" not in str(records)  # the query is kept only as its hash
        lookup = governance.lookup(caller, "What does error E-417 mean?").to_dict()
        assert lookup["evidence"][0]["source"] == "errors.md"
        page = governance.documents(caller, limit=10)
        assert sorted(d.path for d in page.documents) == ["errors.md", "leave.md"]
        traces, later = graph.traces, time.time() + 3600  # newer than the lookup's own trace
        before = traces.count()
        for i in range(3):
            traces.save(f"t{i}", later + i, {"user_id": "alice" if i < 2 else "bob", "n": i})
        assert traces.get("last")["n"] == 2 and traces.get("last", user_id="alice")["n"] == 1
        assert traces.get("t0", user_id="bob") is None and traces.count() == before + 3
    with _graph(backend) as again:  # another process's view of the same database
        assert again.audit_store.recent(1)[0]["operation"] == "documents"
        assert again.traces.get("t1")["n"] == 1


# -- bounded graph reads ----------------------------------------------------------------


def _graph_store(store: StoreHandle) -> SqlGraphStore:
    from docgraph.store.sqlite.catalog import SQLiteCatalog
    from docgraph.store.sqlite.graph import SQLiteGraphStore

    if isinstance(store.catalog, SQLiteCatalog):
        return SQLiteGraphStore(store.catalog)
    from docgraph.store.postgres.catalog import PostgresCatalog
    from docgraph.store.postgres.graph import PostgresGraphStore

    assert isinstance(store.catalog, PostgresCatalog)
    return PostgresGraphStore(store.catalog)


def test_capped_reads_answer_per_entity_in_one_statement_per_batch(
        store: StoreHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The lanes' bounded reads (capped counts, capped chunks) and the mentions read take
    # every entity in one statement (per-entity LIMITed reads: a UNION ALL of them, or a
    # correlated subquery per entity), batched; the answer is each entity's own bounded
    # read: an entity with more links than the cap is cut at it, one that does not exist
    # is absent, ties are ordered as one entity's read orders.
    rng = np.random.default_rng(11)
    source = store.catalog.add_source(normalize_urn(tmp_path / "g"), "ns")
    _write(store, source, "g.txt", [f"chunk {i}" for i in range(12)], _unit(rng, 12))
    rowids = [c.rowid for c in store.catalog.document_chunks(
        [document_id(source.urn, "g.txt")], ["ns"])]
    # entity "hub" in all 12 chunks, "mid" in 5, "one" in 1; scores with ties
    plan = {"hub": rowids, "mid": rowids[3:8], "one": rowids[6:7]}
    written: dict[str, dict[int, tuple[float, int]]] = {key: {} for key in plan}
    links: dict[int, list[EntityLink]] = {r: [] for r in rowids}
    for key, chunks in plan.items():
        for i, rowid in enumerate(chunks):
            score, first = [0.25, 0.5, 0.5, 1.0][i % 4], (i * 5) % 7
            links[rowid].append(EntityLink(key, key.title(), "name", 1, first, score))
            written[key][rowid] = (score, first)
    graph = _graph_store(store)
    graph.replace_links("ns", sorted(links.items()), "v1")
    ids = {e.key: e.id for e in graph.find_entities({"ns"}, limit=10)}
    absent = max(ids.values()) + 1000  # no such entity: no links
    ns_id = store.catalog.namespace_ids(["ns"])["ns"]
    order = [ids["mid"], absent, ids["hub"], ids["one"]]

    def strongest(rows: dict[int, tuple[float, int]], chunks: list[int]) -> list[int]:
        return sorted(chunks, key=lambda r: (-rows[r][0], rows[r][1], r))

    def expected_capped(per_entity: int, scan: int) -> list[tuple[int, int, float, int]]:
        out = []
        for key, e in [(k, ids[k]) for k in ("mid", "hub", "one")]:
            rows = written[key]
            first_scanned = sorted(rows)[:scan]
            out += [(e, r, rows[r][0], rows[r][1])
                    for r in strongest(rows, first_scanned)[:per_entity]]
        return out

    def expected_mentions(per_entity: int) -> list[tuple[int, int, float, int]]:
        return [(ids[key], r, written[key][r][0], written[key][r][1])
                for key in ("mid", "hub", "one")
                for r in strongest(written[key], list(written[key]))[:per_entity]]

    for batch in (100, 2, 1):  # one statement, and batched past it
        monkeypatch.setattr(graph_reads, "_CAPPED_BATCH", batch)
        for cap, hub in ((4, 5), (20, 12)):
            assert graph.capped_entities(order, cap) == {
                ids["mid"]: CappedEntity("mid", ns_id, 5), ids["hub"]: CappedEntity(
                    "hub", ns_id, hub), ids["one"]: CappedEntity("one", ns_id, 1)}
        assert graph.capped_chunks(order, 3, 6) == expected_capped(3, 6)
        assert graph.capped_chunks(order, 50, 256) == expected_capped(50, 256)
        assert graph.chunks_for_entities(order, 4) == expected_mentions(4)
        assert graph.capped_entities([], 4) == {}
        assert graph.capped_chunks([], 3, 6) == []
    # the query's entities come with the same capped count, in the same statement
    assert sorted(graph.entities_in(["hub", "one", "nothing"], [ns_id], 4),
                  key=lambda found: found[0].id) == sorted([
        (EntityInfo(ids["hub"], "hub", "Hub", "name", "ns", 5), CappedEntity("hub", ns_id, 5)),
        (EntityInfo(ids["one"], "one", "One", "name", "ns", 1), CappedEntity("one", ns_id, 1)),
    ], key=lambda found: found[0].id)
    assert [(e.key, e.chunk_count) for e in graph.entities_by_key(["one", "mid", "hub"], {"ns"})
            ] == [("hub", 12), ("mid", 5), ("one", 1)]
    # with the entities of ids (any namespace; an id of no entity is absent) in the same
    # read, each entity once; batched past an IN list, the same answer
    for batch in (500, 1):
        monkeypatch.setattr(graph_reads, "_BATCH", batch)
        both = graph.entities_in(["hub", "nothing"], [ns_id], 4,
                                 [ids["one"], ids["hub"], absent])
        assert sorted((info.key, info.name, capped) for info, capped in both) == [
            ("hub", "Hub", CappedEntity("hub", ns_id, 5)),
            ("one", "One", CappedEntity("one", ns_id, 1))]
        assert [(info.key, capped.mentions)
                for info, capped in graph.entities_in([], [ns_id], 4, [ids["mid"]])] == [
            ("mid", 5)]
        assert graph.entities_in(["hub"], [], 4, []) == []
    # a chunk read with where it lives: the same chunk as chunks_by_rowid, its namespace
    # id, kind and document
    placed = store.catalog.placed_chunks([rowids[0], rowids[5], 10**9])
    plain = store.catalog.chunks_by_rowid([rowids[0], rowids[5]])
    assert sorted(placed) == sorted(plain) == sorted([rowids[0], rowids[5]])
    for rowid, (chunk, place) in placed.items():
        assert chunk == plain[rowid]
        assert (place.namespace_id, place.kind, place.title) == (ns_id, "text", chunk.title)
    assert placed[rowids[0]][1].document == placed[rowids[5]][1].document
    # without the text: the same places
    assert store.catalog.chunk_places([rowids[0], rowids[5], 10**9]) == {
        rowid: place for rowid, (_, place) in placed.items()}


def test_namespace_ids_are_kept_once_committed_and_misses_read_again(
        backend: Backend, store: StoreHandle, tmp_path: Path) -> None:
    # namespace_ids keeps the ids it read (a lookup asked four times); a name it does not
    # hold is read again, so a namespace another process creates is found, and a namespace
    # whose creating transaction rolled back never resolves (SQLite reuses its id).
    catalog = store.catalog
    assert catalog.namespace_ids(["a"]) == {}
    other = backend.open_store(DIM).catalog  # the same data opened again: another process
    other.add_source(normalize_urn(tmp_path / "a"), "a")
    a = catalog.namespace_ids(["a"])["a"]
    assert catalog.namespace_ids(["a", "absent"]) == {"a": a}

    with pytest.raises(RuntimeError), catalog.transaction() as db:
        ghost = catalog._namespace_id(db, "ghost")  # type: ignore[attr-defined]
        assert catalog.namespace_ids(["ghost"]) == {"ghost": ghost}
        raise RuntimeError("rolled back")
    assert catalog.namespace_ids(["ghost"]) == {}
    other.add_source(normalize_urn(tmp_path / "b"), "b")
    b = other.namespace_ids(["b"])["b"]
    assert catalog.namespace_ids(["ghost", "b", "a"]) == {"b": b, "a": a}
    assert other.namespace_ids(["ghost"]) == {}
