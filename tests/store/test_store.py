"""The embedded store: atomic replace, dense matrix upkeep, namespace pre-filter."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading

import numpy as np
import pytest

from docgraph.errors import InvalidQuery, StoreError, UnknownNamespace
from docgraph.model import ChunkDraft
from docgraph.sources.urn import document_id, normalize_urn
from docgraph.store.base import DocumentWrite
from docgraph.store.dense import DenseMatrix
from docgraph.store.lexical import count_terms, decode_terms
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog
from tests import backend_graphs
from tests.helpers import write_files

# Every DocGraph test here runs on the embedded file and on PostgreSQL.
make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    m = rng.normal(size=(n, d)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def _write(catalog, source, path, texts, vectors):
    chunks = [ChunkDraft(i, t, (), len(t.split()), None, None, None) for i, t in enumerate(texts)]
    return catalog.write_document(DocumentWrite(
        source=source, path=path, doc_id=document_id(source.urn, path), title=path,
        content_hash=str(hash(tuple(texts))), change_token="t", media_type="text/plain",
        chunks=chunks, breadcrumbs=[f"[{path}]"] * len(texts), embedded_texts=texts,
        vectors=vectors,
    ))


def test_failure_mid_document_keeps_old_version_searchable(tmp_path):
    rng = np.random.default_rng(0)
    catalog = SQLiteCatalog(tmp_path / "c.db")
    source = catalog.add_source(normalize_urn(tmp_path), "ns")
    old = _unit(rng, 2, 8)
    _write(catalog, source, "a.txt", ["alpha original text", "beta original text"], old)
    index = EmbeddedChunkIndex(catalog, 8)

    bad = _unit(rng, 3, 8)
    bad[2, 0] = np.nan  # the third chunk fails inside the transaction, after two inserts
    with pytest.raises(StoreError, match=r"a\.txt#chunk-2"):
        _write(catalog, source, "a.txt", ["alpha new", "beta new", "gamma new"], bad)

    rows = index.lexical_search("original", 10, frozenset({"ns"}))
    assert len(rows) == 2
    chunks = catalog.chunks_by_rowid([r.rowid for r in rows])
    assert sorted(c.text for c in chunks.values()) == ["alpha original text", "beta original text"]
    assert index.lexical_search("new", 10, frozenset({"ns"})) == []
    top = index.dense_search(old[0], 1, frozenset({"ns"}))
    assert chunks[top[0].rowid].text == "alpha original text"
    docs = catalog.documents_for_source(source)
    assert docs["a.txt"].chunk_count == 2
    catalog.close()


def _draft(source, path, texts, vectors):
    chunks = [ChunkDraft(i, t, (), len(t.split()), None, None, None) for i, t in enumerate(texts)]
    return DocumentWrite(
        source=source, path=path, doc_id=document_id(source.urn, path), title=path,
        content_hash=str(hash(tuple(texts))), change_token="t", media_type="text/plain",
        chunks=chunks, breadcrumbs=[f"[{path}]"] * len(texts), embedded_texts=texts,
        vectors=vectors,
    )


def test_batch_write_failure_keeps_that_document_old_and_earlier_ones_new(tmp_path):
    rng = np.random.default_rng(2)
    catalog = SQLiteCatalog(tmp_path / "c.db")
    source = catalog.add_source(normalize_urn(tmp_path), "ns")
    for path in ("a.txt", "b.txt", "c.txt"):
        _write(catalog, source, path, [f"{path} original"], _unit(rng, 1, 8))
    index = EmbeddedChunkIndex(catalog, 8)
    catalog.connection().execute("UPDATE namespaces SET graph_dirty = 0")

    bad = _unit(rng, 2, 8)
    bad[1, 3] = np.inf
    writes = [_draft(source, "a.txt", ["a.txt renewed"], _unit(rng, 1, 8)),
              _draft(source, "b.txt", ["b.txt renewed", "b.txt second"], bad),
              _draft(source, "c.txt", ["c.txt renewed"], _unit(rng, 1, 8))]
    with pytest.raises(StoreError, match=r"b\.txt#chunk-1"):
        catalog.write_documents(writes)
    # validation happens before anything is written: every document keeps its old version
    ns = frozenset({"ns"})
    assert len(index.lexical_search("original", 10, ns)) == 3
    assert index.lexical_search("renewed", 10, ns) == []

    # a failure inside the transaction (here: b.txt's identity claimed under an unknown
    # source id) rolls back only that document; c.txt after it is not written
    orphan = _draft(source, "b.txt", ["b.txt renewed"], _unit(rng, 1, 8))
    writes[1] = dataclasses.replace(orphan, source=dataclasses.replace(source, id=10**6))
    with pytest.raises(sqlite3.IntegrityError, match="constraint failed"):
        catalog.write_documents(writes)
    texts = sorted(c.text for c in catalog.chunks_by_rowid(
        [r.rowid for r in index.lexical_search("txt", 10, ns)]).values())
    assert texts == ["a.txt renewed", "b.txt original", "c.txt original"]
    dirty = catalog.connection().execute("SELECT graph_dirty FROM namespaces").fetchone()[0]
    assert dirty == 1
    _assert_terms_consistent(catalog)
    catalog.close()


def _assert_terms_consistent(catalog):
    """Every chunk's stored BM25 terms are exactly the terms of its breadcrumb and text."""
    db = catalog.connection()
    names = dict(db.execute("SELECT id, term FROM terms").fetchall())
    for blob, crumb, text in db.execute("SELECT terms, breadcrumb, text FROM chunks"):
        ids, weights = decode_terms(blob)
        ((tf, _),) = count_terms([(crumb, text)])
        assert {names[int(i)]: float(w) for i, w in zip(ids, weights, strict=True)} == tf


def test_terms_rolled_back_with_a_failed_document_get_fresh_ids_later(tmp_path):
    rng = np.random.default_rng(5)
    catalog = SQLiteCatalog(tmp_path / "c.db")
    source = catalog.add_source(normalize_urn(tmp_path), "ns")
    # b.txt fails inside the transaction after its new terms were inserted (two chunks with
    # one index violate UNIQUE): its terms roll back with it and must not stay cached.
    broken = _draft(source, "b.txt", ["another zeppelin airship", "twice"], _unit(rng, 2, 8))
    broken = dataclasses.replace(broken, chunks=[dataclasses.replace(c, index=0)
                                                 for c in broken.chunks])
    writes = [_draft(source, "a.txt", ["kestrel zeppelin"], _unit(rng, 1, 8)), broken]
    with pytest.raises(sqlite3.IntegrityError):
        catalog.write_documents(writes[1:])
    assert catalog.connection().execute("SELECT count(*) FROM terms").fetchone()[0] == 0
    catalog.write_documents(writes[:1])
    _write(catalog, source, "c.txt", ["airship hangar"], _unit(rng, 1, 8))
    index = EmbeddedChunkIndex(catalog, 8)
    ns = frozenset({"ns"})
    assert [catalog.chunks_by_rowid([h.rowid])[h.rowid].text
            for h in index.lexical_search("airship", 5, ns)] == ["airship hangar"]
    assert len(index.lexical_search("zeppelin", 5, ns)) == 1
    _assert_terms_consistent(catalog)
    catalog.close()


def test_a_failed_document_never_deletes_terms_committed_before_its_batch(tmp_path):
    rng = np.random.default_rng(6)
    catalog = SQLiteCatalog(tmp_path / "c.db")
    source = catalog.add_source(normalize_urn(tmp_path), "ns")
    _write(catalog, source, "a.txt", ["kestrel zeppelin"], _unit(rng, 1, 8))
    catalog.close()
    # A new process: its term cache is empty, so 'zeppelin' is looked up, not inserted.
    catalog = SQLiteCatalog(tmp_path / "c.db")
    source = catalog.list_sources()[0]
    broken = _draft(source, "b.txt", ["zeppelin", "twice"], _unit(rng, 2, 8))
    broken = dataclasses.replace(broken, chunks=[dataclasses.replace(c, index=0)
                                                 for c in broken.chunks])
    good = _draft(source, "c.txt", ["airship hangar"], _unit(rng, 1, 8))
    with pytest.raises(sqlite3.IntegrityError):
        catalog.write_documents([good, broken])
    _assert_terms_consistent(catalog)
    index = EmbeddedChunkIndex(catalog, 8)
    ns = frozenset({"ns"})
    assert [catalog.chunks_by_rowid([h.rowid])[h.rowid].text
            for h in index.lexical_search("zeppelin", 5, ns)] == ["kestrel zeppelin"]
    assert len(index.lexical_search("hangar", 5, ns)) == 1
    catalog.close()


def test_batch_write_equals_one_by_one(tmp_path):
    rng = np.random.default_rng(3)
    vectors = [_unit(rng, 2, 8) for _ in range(3)]
    dumps = []
    for name, batched in (("one.db", False), ("many.db", True)):
        catalog = SQLiteCatalog(tmp_path / name)
        source = catalog.add_source(normalize_urn(tmp_path), "ns")
        writes = [_draft(source, f"{i}.txt", [f"doc {i} first", f"doc {i} second"], v)
                  for i, v in enumerate(vectors)]
        records = (catalog.write_documents(writes) if batched
                   else [catalog.write_document(w) for w in writes])
        assert [r.chunk_count for r in records] == [2, 2, 2]
        dumps.append(catalog.connection().execute(
            "SELECT d.path, c.chunk_index, c.text, c.breadcrumb, c.embed_hash, c.vector"
            " FROM chunks c JOIN documents d ON d.id = c.document_id ORDER BY c.id").fetchall())
        catalog.close()
    assert dumps[0] == dumps[1]


def test_dense_index_follows_writes_from_another_connection(tmp_path):
    rng = np.random.default_rng(1)
    writer = SQLiteCatalog(tmp_path / "c.db")
    source = writer.add_source(normalize_urn(tmp_path), "ns")
    reader = SQLiteCatalog(tmp_path / "c.db")
    index = EmbeddedChunkIndex(reader, 8)
    assert index.dense_search(_unit(rng, 1, 8)[0], 5, frozenset({"ns"})) == []

    vectors = _unit(rng, 3, 8)
    doc = _write(writer, source, "a.txt", ["one", "two", "three"], vectors)
    hits = index.dense_search(vectors[1], 1, frozenset({"ns"}))
    assert reader.chunks_by_rowid([hits[0].rowid])[hits[0].rowid].text == "two"

    writer.delete_document(doc)
    assert index.dense_search(vectors[1], 5, frozenset({"ns"})) == []
    writer.close()
    reader.close()


def test_dense_matrix_tombstones_and_compaction_keep_results_exact():
    rng = np.random.default_rng(2)
    matrix = DenseMatrix(16)
    vectors = _unit(rng, 5000, 16)
    ns = np.where(np.arange(5000) % 2 == 0, 1, 2).astype(np.int32)
    rowids = np.arange(1, 5001, dtype=np.int64)
    matrix.append(rowids[:3000], ns[:3000], vectors[:3000])
    matrix.append(rowids[3000:], ns[3000:], vectors[3000:])
    dead = rowids[rng.choice(5000, 2000, replace=False)]
    matrix.remove(np.sort(dead))
    assert len(matrix) == 3000
    query = vectors[7]
    got = [r.rowid for r in matrix.search(query, 10, [1])]
    alive = np.isin(rowids, dead, invert=True) & (ns == 1)
    scores = vectors @ query
    expected = rowids[alive][np.argsort(-scores[alive])[:10]]
    assert got == expected.tolist()
    matrix.remove(np.array([999_999], dtype=np.int64))  # unknown ids are ignored
    assert len(matrix) == 3000


def _two_namespace_index(tmp_path):
    rng = np.random.default_rng(3)
    catalog = SQLiteCatalog(tmp_path / "c.db")
    big = catalog.add_source(normalize_urn(tmp_path / "big"), "big")
    small = catalog.add_source(normalize_urn(tmp_path / "small"), "small")
    target = _unit(rng, 1, 8)[0]
    # "big" holds 200 chunks that match the query better than anything in "small".
    near = target + 0.01 * _unit(rng, 200, 8)
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    for i in range(0, 200, 50):
        _write(catalog, big, f"b{i}.txt", [f"lidar sensor report {j}" for j in range(50)],
               near[i:i + 50].astype(np.float32))
    _write(catalog, small, "s.txt", ["lidar calibration", "unrelated words", "more lidar"],
           _unit(rng, 3, 8))
    return catalog, EmbeddedChunkIndex(catalog, 8), target


def test_namespace_filter_is_applied_before_ranking(tmp_path):
    catalog, index, target = _two_namespace_index(tmp_path)
    dense = index.dense_search(target, 3, frozenset({"small"}))
    lexical = index.lexical_search("lidar", 3, frozenset({"small"}))
    assert len(dense) == 3  # a post-filter of the global top 3 would return nothing
    assert len(lexical) == 2
    chunks = catalog.chunks_by_rowid([r.rowid for r in dense + lexical])
    assert {c.namespace for c in chunks.values()} == {"small"}
    both = index.dense_search(target, 300, frozenset({"small", "big"}))
    assert len(both) == 203
    assert index.dense_search(target, 3, frozenset({"no-such-namespace"})) == []
    catalog.close()


@pytest.mark.parametrize("bad", [None, frozenset(), set(), "small"])
def test_missing_or_empty_namespace_set_is_refused(tmp_path, bad):
    catalog, index, target = _two_namespace_index(tmp_path)
    with pytest.raises(InvalidQuery):
        index.dense_search(target, 3, bad)
    with pytest.raises(InvalidQuery):
        index.lexical_search("lidar", 3, bad)
    catalog.close()


def test_search_api_refuses_missing_namespaces(tmp_path, make_graph):
    folder = write_files(tmp_path / "docs", {"a.md": "# A\n\nlidar text\n"})
    graph = make_graph()
    graph.index(folder, namespace="x")
    with pytest.raises(InvalidQuery):
        graph.search("lidar", namespaces=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidQuery):
        graph.search("lidar", namespaces=[])
    with pytest.raises(UnknownNamespace, match=r"'elsewhere'.*holds 'x'"):
        graph.search("lidar", namespaces=["elsewhere"])


def test_not_an_index_file_is_a_clear_error(tmp_path):
    bogus = tmp_path / "bogus.db"
    bogus.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match=r"bogus\.db"):
        SQLiteCatalog(bogus)


def _in_thread(fn):
    """``fn()`` run in a new thread that has ended when this returns; its result."""
    out = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join()
    return out[0]


def test_a_connection_outlives_its_thread_and_serves_the_next_one(tmp_path):
    """A thread that ended hands its connection to the next thread (no new connection, no
    PRAGMAs), and that thread reads what was written since (a fresh WAL snapshot)."""
    rng = np.random.default_rng(8)
    catalog = SQLiteCatalog(tmp_path / "c.db")
    source = catalog.add_source(normalize_urn(tmp_path), "ns")
    opened = []
    connect = catalog._connections._connect
    catalog._connections._connect = lambda: opened.append(1) or connect()

    def stored_paths():
        db = catalog.connection()
        return id(db), sorted(catalog.documents_for_source(source))

    first, paths = _in_thread(stored_paths)
    assert paths == [] and len(opened) == 1
    _write(catalog, source, "a.txt", ["written between the threads"], _unit(rng, 1, 8))
    second, paths = _in_thread(stored_paths)
    assert (second, paths) == (first, ["a.txt"]) and len(opened) == 1
    catalog.close()


def test_live_threads_never_share_a_connection(tmp_path):
    catalog = SQLiteCatalog(tmp_path / "c.db")
    ready, release = threading.Barrier(3), threading.Event()
    seen = []

    def hold():
        seen.append(catalog.connection())
        ready.wait()
        release.wait()

    workers = [threading.Thread(target=hold) for _ in range(2)]
    for worker in workers:
        worker.start()
    ready.wait()
    assert len({id(db) for db in [*seen, catalog.connection()]}) == 3
    release.set()
    for worker in workers:
        worker.join()
    catalog.close()


def test_a_thread_ending_inside_a_transaction_hands_on_no_connection(tmp_path):
    catalog = SQLiteCatalog(tmp_path / "c.db")

    def begin():
        db = catalog.connection()
        db.execute("BEGIN")
        return db

    left = _in_thread(begin)
    with pytest.raises(sqlite3.ProgrammingError):  # closed, not handed on
        left.execute("SELECT 1")
    assert _in_thread(catalog.connection) is not left
    catalog.close()
