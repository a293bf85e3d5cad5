"""The Milvus chunk index, against a real Milvus Lite: it follows the SQLite catalog, keeps
the namespace pre-filter, takes hostile query text as data and ranks like the embedded index."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from milvus_lite.server_manager import server_manager_instance

from docgraph import DocGraph
from docgraph.config import load_settings
from docgraph.errors import ConfigError, InvalidQuery, StoreError
from docgraph.model import ChunkDraft, SourceRecord
from docgraph.retrieve.fusion import rrf_fuse
from docgraph.sources.urn import document_id, normalize_urn
from docgraph.store.base import DocumentWrite
from docgraph.store.milvus.index import MilvusChunkIndex
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog
from docgraph.store.sqlite.vectors import decode_vector
from tests.conftest import SAMPLE_CORPUS
from tests.helpers import CountingEmbedder

DIM = 8


def _unit(rng: np.random.Generator, n: int, d: int = DIM) -> np.ndarray:
    m = rng.normal(size=(n, d)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def _write(catalog: SQLiteCatalog, source: SourceRecord, path: str, texts: list[str],
           vectors: np.ndarray) -> object:
    chunks = [ChunkDraft(i, t, (), len(t.split()), None, None, None) for i, t in enumerate(texts)]
    return catalog.write_document(DocumentWrite(
        source=source, path=path, doc_id=document_id(source.urn, path), title=path,
        content_hash=str(hash(tuple(texts))), change_token="t", media_type="text/plain",
        chunks=chunks, breadcrumbs=[f"[{path}]"] * len(texts), embedded_texts=texts,
        vectors=vectors,
    ))


@pytest.fixture
def lite_uri(tmp_path: Path) -> Iterator[str]:
    """A Milvus Lite file; its in-process server is stopped after the test."""
    uri = str(tmp_path / "milvus.db")
    yield uri
    server_manager_instance.release_server(uri)


def _two_namespaces(tmp_path: Path, uri: str) -> tuple[SQLiteCatalog, MilvusChunkIndex,
                                                         np.ndarray]:
    rng = np.random.default_rng(3)
    catalog = SQLiteCatalog(tmp_path / "c.db")
    big = catalog.add_source(normalize_urn(tmp_path / "big"), "big")
    small = catalog.add_source(normalize_urn(tmp_path / "small"), "small")
    target = _unit(rng, 1)[0]
    # "big" holds 200 chunks that match the query better than anything in "small".
    near = target + 0.01 * _unit(rng, 200)
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    for i in range(0, 200, 50):
        _write(catalog, big, f"b{i}.txt", [f"lidar sensor report {j}" for j in range(50)],
               near[i:i + 50].astype(np.float32))
    _write(catalog, small, "s.txt", ["lidar calibration", "unrelated words", "more lidar"],
           _unit(rng, 3))
    return catalog, MilvusChunkIndex.over(catalog, DIM, uri), target


def test_namespace_filter_is_applied_before_ranking(tmp_path, lite_uri):
    catalog, index, target = _two_namespaces(tmp_path, lite_uri)
    dense = index.dense_search(target, 3, frozenset({"small"}))
    lexical = index.lexical_search("lidar", 3, frozenset({"small"}))
    assert len(dense) == 3  # a post-filter of the global top 3 would return nothing
    assert len(lexical) == 2
    chunks = catalog.chunks_by_rowid([r.rowid for r in dense + lexical])
    assert {c.namespace for c in chunks.values()} == {"small"}
    assert len(index.dense_search(target, 300, frozenset({"small", "big"}))) == 203
    assert len(index.lexical_search("lidar", 300, frozenset({"small", "big"}))) == 202
    assert index.dense_search(target, 3, frozenset({"no-such-namespace"})) == []
    assert index.lexical_search("lidar", 3, frozenset({"no-such-namespace"})) == []
    assert len(index) == 203
    index.close()
    catalog.close()


@pytest.mark.parametrize("bad", [None, frozenset(), set(), "small"])
def test_missing_or_empty_namespace_set_is_refused(tmp_path, lite_uri, bad):
    catalog, index, target = _two_namespaces(tmp_path, lite_uri)
    with pytest.raises(InvalidQuery):
        index.dense_search(target, 3, bad)
    with pytest.raises(InvalidQuery):
        index.lexical_search("lidar", 3, bad)
    with pytest.raises(InvalidQuery):
        index.hybrid_search("lidar", target, 3, bad)
    index.close()
    catalog.close()


def test_document_replace_and_delete_are_visible_after_sync(tmp_path, lite_uri):
    rng = np.random.default_rng(4)
    writer = SQLiteCatalog(tmp_path / "c.db")
    source = writer.add_source(normalize_urn(tmp_path), "ns")
    reader = SQLiteCatalog(tmp_path / "c.db")  # the index follows another connection's writes
    index = MilvusChunkIndex.over(reader, DIM, lite_uri)
    ns = frozenset({"ns"})
    old = _unit(rng, 2)
    _write(writer, source, "a.txt", ["alpha original text", "beta original text"], old)
    assert len(index.lexical_search("original", 10, ns)) == 2
    top = index.dense_search(old[1], 1, ns)[0]
    assert reader.chunks_by_rowid([top.rowid])[top.rowid].text == "beta original text"

    new = _unit(rng, 3)
    doc = _write(writer, source, "a.txt", ["alpha new", "beta new", "gamma new"], new)
    assert index.lexical_search("original", 10, ns) == []
    rows = index.lexical_search("new", 10, ns)
    assert sorted(reader.chunks_by_rowid([r.rowid for r in rows])[r.rowid].text
                  for r in rows) == ["alpha new", "beta new", "gamma new"]
    assert len(index.dense_search(old[0], 10, ns)) == 3  # the old chunks are gone
    assert len(index) == 3

    writer.delete_document(doc)  # type: ignore[arg-type]
    assert index.lexical_search("new", 10, ns) == []
    assert index.dense_search(new[0], 10, ns) == []
    assert len(index) == 0
    index.close()
    writer.close()
    reader.close()


def test_reopening_resumes_from_the_cursor_and_refuses_a_foreign_collection(tmp_path, lite_uri):
    rng = np.random.default_rng(5)
    catalog = SQLiteCatalog(tmp_path / "c.db")
    source = catalog.add_source(normalize_urn(tmp_path), "ns")
    vectors = _unit(rng, 2)
    _write(catalog, source, "a.txt", ["first chunk", "second chunk"], vectors)
    MilvusChunkIndex.over(catalog, DIM, lite_uri).close()
    _write(catalog, source, "b.txt", ["third chunk"], _unit(rng, 1))  # while no index runs

    index = MilvusChunkIndex.over(catalog, DIM, lite_uri)
    assert len(index.lexical_search("chunk", 10, frozenset({"ns"}))) == 3  # no duplicates
    index.close()

    other = SQLiteCatalog(tmp_path / "other.db")
    with pytest.raises(StoreError, match="not built from the catalog"):
        MilvusChunkIndex.over(other, DIM, lite_uri)
    other.close()

    # The embedding model changed dimension: the collection is rebuilt from the catalog.
    with pytest.raises(StoreError, match="dimension 16"):
        MilvusChunkIndex.over(catalog, 16, lite_uri)
    catalog.clear_all_chunks()
    _write(catalog, source, "c.txt", ["wide vectors"], _unit(rng, 1, 16))
    wide = MilvusChunkIndex.over(catalog, 16, lite_uri)
    assert len(wide.lexical_search("wide chunk", 10, frozenset({"ns"}))) == 1
    assert len(wide) == 1
    wide.close()
    catalog.close()


def _old_layout_collection(index: MilvusChunkIndex, catalog: SQLiteCatalog) -> None:
    """Replace the index's collection by one as docgraph built it before the text layout
    property existed: raw breadcrumb + text under Milvus' English analyzer (which Milvus Lite
    applies without its stemmer), same generation, fully synced."""
    from pymilvus import DataType, Function, FunctionType

    from docgraph.store.milvus.index import GENERATION_PROPERTY

    cursor = index.feed.cursor()
    assert cursor is not None
    client, name = index.client, index.collection
    client.drop_collection(name)
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("namespace_id", DataType.INT64, is_partition_key=True)
    schema.add_field("kind", DataType.INT8)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("text", DataType.VARCHAR, max_length=65_535, enable_analyzer=True,
                     analyzer_params={"tokenizer": "standard", "filter": [
                         "lowercase", {"type": "stemmer", "language": "english"}]})
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    schema.add_function(Function(name="text_bm25", function_type=FunctionType.BM25,
                                 input_field_names=["text"], output_field_names=["sparse"]))
    params = client.prepare_index_params()
    params.add_index("vector", index_type="HNSW", metric_type="COSINE")
    params.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    client.create_collection(name, schema=schema, index_params=params)
    client.alter_collection_properties(name, properties={GENERATION_PROPERTY: cursor.generation})
    rows = catalog.connection().execute(
        "SELECT id, namespace_id, breadcrumb, text, vector FROM chunks").fetchall()
    client.insert(name, data=[{"id": r[0], "namespace_id": r[1], "kind": 0,
                               "vector": decode_vector(r[4]).tolist(),
                               "text": f"{r[2]}\n{r[3]}"} for r in rows])
    client.flush(name)


def test_terms_match_the_embedded_tokenizer_and_an_old_layout_is_rebuilt(tmp_path, lite_uri):
    rng = np.random.default_rng(9)
    catalog = SQLiteCatalog(tmp_path / "c.db")
    source = catalog.add_source(normalize_urn(tmp_path), "ns")
    texts = ["The runners were running late", "Café crème menu", "plain words only"]
    _write(catalog, source, "a.txt", texts, _unit(rng, 3))
    ns = frozenset({"ns"})
    embedded = EmbeddedChunkIndex(catalog, DIM)

    def found(index: object, query: str) -> set[str]:
        rows = index.lexical_search(query, 10, ns)  # type: ignore[attr-defined]
        return {catalog.chunks_by_rowid([r.rowid])[r.rowid].text for r in rows}

    index = MilvusChunkIndex.over(catalog, DIM, lite_uri)
    _old_layout_collection(index, catalog)
    index.close()
    # Before the rebuild Milvus Lite matched neither a stem nor a folded diacritic.
    index = MilvusChunkIndex.over(catalog, DIM, lite_uri)   # detects the old layout: rebuilds
    for query, text in (("run", texts[0]), ("the runner", texts[0]), ("cafe", texts[1]),
                        ("CAFÉS", texts[1])):
        assert found(index, query) == found(embedded, query) == {text}, query
    assert found(index, "the were") == set()             # stopwords only: no terms
    # Same terms, same k1/b: the same ranking and (up to the IDF variant) ordering of scores.
    for query in ("running menu words", "crème runner plain"):
        m = index.lexical_search(query, 10, ns)
        e = embedded.lexical_search(query, 10, ns)
        assert [r.rowid for r in m] == [r.rowid for r in e], query
    assert len(index) == 3
    index.close()
    catalog.close()


HOSTILE = [
    '"; DROP TABLE chunks; --',
    "namespace_id in [1, 2] or 1 == 1",
    "' or ''='",
    "100% of *",
    "NEAR(lidar calibration, 2)",
    "lidar AND NOT report",
    'kind == 1 || "x"',
    "Straße ünïcodé 日本語 🚀",
    "*",
    "%",
    ";",
    "\x00\\",
]


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_query_text_is_only_ever_data(tmp_path, lite_uri, query):
    catalog, index, target = _two_namespaces(tmp_path, lite_uri)
    small = frozenset({"small"})
    rows = index.lexical_search(query, 10, small)
    rows += index.hybrid_search(query, target, 10, small)
    chunks = catalog.chunks_by_rowid([r.rowid for r in rows])
    assert {c.namespace for c in chunks.values()} <= {"small"}
    # The index is intact afterwards.
    assert len(index.lexical_search("lidar", 10, small)) == 2
    assert len(index) == 203
    index.close()
    catalog.close()


def test_engine_rrf_hybrid_search_matches_docgraph_fusion(tmp_path, lite_uri):
    # Spread-out random vectors and one lexical match: no near-ties, so every rank is unique
    # (chunks clustered around the query would swap places on float noise).
    rng = np.random.default_rng(8)
    catalog = SQLiteCatalog(tmp_path / "c.db")
    source = catalog.add_source(normalize_urn(tmp_path), "ns")
    vectors = _unit(rng, 60)
    _write(catalog, source, "a.txt", [f"note {i}" for i in range(59)] + ["lidar calibration"],
           vectors)
    index = MilvusChunkIndex.over(catalog, DIM, lite_uri)
    ns = frozenset({"ns"})
    query = _unit(rng, 1)[0]
    dense = index.dense_search(query, 50, ns)
    lexical = index.lexical_search("calibration", 50, ns)
    assert len(lexical) == 1
    ours = rrf_fuse([dense, lexical], k=60)[:10]
    engine = index.hybrid_search("calibration", query, 10, ns, depth=50, rrf_k=60)
    assert [r.rowid for r in engine] == [r.rowid for r in ours]
    assert [r.score for r in engine] == pytest.approx([r.score for r in ours], rel=1e-5)
    index.close()
    catalog.close()


@pytest.fixture(scope="module")
def twin_graphs(tmp_path_factory) -> Iterator[tuple[DocGraph, DocGraph]]:
    """The sample corpus in one catalog, searched through the embedded and the Milvus index."""
    root = tmp_path_factory.mktemp("twins")
    embedder = CountingEmbedder()
    embedded = DocGraph(load_settings(store={"path": root / "index.db"}), embedder)
    embedded.index(SAMPLE_CORPUS / "engineering", namespace="eng")
    embedded.index(SAMPLE_CORPUS / "people", namespace="people")
    uri = str(root / "milvus.db")
    milvus = DocGraph(load_settings(store={"path": root / "index.db", "index": "milvus",
                                           "milvus_uri": uri}), embedder)
    yield embedded, milvus
    milvus.close()
    embedded.close()
    server_manager_instance.release_server(uri)


QUERIES = [
    ("What caused the Rotterdam outage?", "eng"),
    ("What does error E-417 mean?", "eng"),
    ("firmware release process", "eng"),
    ("security advisory", "eng"),
    ("parental leave policy", "people"),
    ("travel expenses", "people"),
]


def test_docgraph_selects_the_milvus_index(twin_graphs):
    _, milvus = twin_graphs
    assert isinstance(milvus.chunk_index(), MilvusChunkIndex)
    hits = milvus.search("What does error E-417 mean?", namespaces={"eng"}, k=3)
    assert hits and all(h.namespace == "eng" for h in hits)
    assert any("E-417" in h.text for h in hits)
    assert all(h.dense_similarity is not None for h in hits)
    cohort = milvus.search("What caused the Rotterdam outage?", namespaces={"eng"}, k=5,
                           mode="vector_first")
    assert cohort and all(h.namespace == "eng" for h in cohort)
    # The leave policy lives in "people": searching "eng" for it never returns it.
    assert all(h.namespace == "eng"
               for h in milvus.search("parental leave policy", namespaces={"eng"}, k=10))


@pytest.mark.parametrize(("query", "namespace"), QUERIES)
def test_milvus_agrees_with_the_embedded_index(twin_graphs, query, namespace):
    # One namespace per query: Milvus Lite keeps BM25 statistics per sealed segment, and
    # each namespace (partition key) is sealed apart, so BM25 scores of two namespaces are not
    # on one scale there (see docs/milvus.md); FTS5 and a Milvus server use global statistics.
    embedded, milvus = twin_graphs
    ns = frozenset({namespace})
    e_index, m_index = embedded.chunk_index(), milvus.chunk_index()
    assert isinstance(e_index, EmbeddedChunkIndex)
    vector = embedded.embedder.embed_query(query)
    e_dense = [r.rowid for r in e_index.dense_search(vector, 10, ns)]
    m_dense = [r.rowid for r in m_index.dense_search(vector, 10, ns)]
    assert len(set(e_dense) & set(m_dense)) >= 9  # HNSW vs exact on a small corpus
    e_lex = [r.rowid for r in e_index.lexical_search(query, 10, ns)]
    m_lex = [r.rowid for r in m_index.lexical_search(query, 10, ns)]
    # Both rank docgraph's own terms with k1 1.2, b 0.75; Milvus' IDF is log(1 + ...) and
    # its document length omits stopwords, so the order may differ in detail.
    assert len(set(e_lex[:5]) & set(m_lex[:10])) >= 4
    e_hits = [h.chunk_id for h in embedded.search(query, namespaces=ns, k=5)]
    m_hits = [h.chunk_id for h in milvus.search(query, namespaces=ns, k=5)]
    assert e_hits[0] in m_hits[:3]
    assert len(set(e_hits) & set(m_hits)) >= 3
    assert len(m_index) == len(e_index)


def test_store_settings_choose_and_validate_the_milvus_uri(tmp_path):
    settings = load_settings(store={"path": tmp_path / "x" / "index.db", "index": "milvus"})
    assert settings.store.resolved_milvus_uri() == str(tmp_path / "x" / "index.milvus.db")
    remote = load_settings(store={"index": "milvus", "milvus_uri": "http://127.0.0.1:19530"})
    assert remote.store.resolved_milvus_uri() == "http://127.0.0.1:19530"
    with pytest.raises(ConfigError, match="milvus_uri"):
        load_settings(store={"index": "milvus", "milvus_uri": "milvus.sqlite"})
    with pytest.raises(ConfigError, match="milvus_collection"):
        load_settings(store={"milvus_collection": "chunks; drop"})
    with pytest.raises(ConfigError, match="index"):
        load_settings(store={"index": "faiss"})


def test_an_unreachable_server_is_a_store_error_naming_it(tmp_path):
    catalog = SQLiteCatalog(tmp_path / "c.db")
    with pytest.raises(StoreError, match=r"cannot connect to Milvus at http://127\.0\.0\.1:9"):
        MilvusChunkIndex.over(catalog, DIM, "http://127.0.0.1:9", timeout_s=3)
    catalog.close()
