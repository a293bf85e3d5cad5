"""The dense lane's graph ANN index (``docgraph.store.graph_ann``) on a small catalog forced
above its row threshold: the same top k as the exact scan, deleted rows never returned,
filters (a small namespace, a restricted caller) filled with k readable rows, the file a
cache rebuilt when deleted, and rows written by another process found by a reader that
mapped the graph before they existed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from docgraph.sources.urn import normalize_urn
from docgraph.store.graph_ann import graph_path
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog
from tests.conftest import REPO
from tests.store.test_store import _write

DIM = 16
DOCS = 24  # of 25 chunks: 600 rows in namespace "big", 25 in "small" (4%)
K = 10


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    m = rng.standard_normal((n, DIM)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A catalog of 625 chunk rows (written once for the module; tests copy it)."""
    db = tmp_path_factory.mktemp("graph") / "c.db"
    rng = np.random.default_rng(3)
    catalog = SQLiteCatalog(db)
    big = catalog.add_source(normalize_urn(db.parent / "big"), "big")
    small = catalog.add_source(normalize_urn(db.parent / "small"), "small")
    for i in range(DOCS):
        _write(catalog, big, f"d{i}.txt", [f"big {i} part {j}" for j in range(25)],
               _unit(rng, 25))
    _write(catalog, small, "s.txt", [f"small part {j}" for j in range(25)], _unit(rng, 25))
    catalog.close()
    return db


def _copy(built: Path, tmp_path: Path) -> Path:
    db = tmp_path / "c.db"
    db.write_bytes(built.read_bytes())
    return db


def _open(db: Path, graph: bool = True) -> tuple[EmbeddedChunkIndex, SQLiteCatalog]:
    """An index whose graph is built above 100 rows (waited for), with the Hamming pool
    shrunk so a query of this small catalog reaches the graph instead of scoring every
    allowed row."""
    catalog = SQLiteCatalog(db)
    index = EmbeddedChunkIndex(catalog, DIM, sidecar=False,
                               graph_min_rows=100 if graph else None, ann="hnsw")
    if index.graph is not None:
        index.graph.wait()
        index.graph.min_share = 0.1
    index.dense.min_pool = 20  # type: ignore[union-attr]
    index.dense.pool_per_k = 1  # type: ignore[union-attr]
    return index, catalog


BOTH = frozenset({"big", "small"})


def test_the_graph_returns_the_exact_scans_top_k(built: Path, tmp_path: Path) -> None:
    db = _copy(built, tmp_path)
    index, catalog = _open(db)
    assert index.graph is not None and index.graph.status == "loaded"
    assert graph_path(db).exists()
    exact_catalog = SQLiteCatalog(db)
    exact = EmbeddedChunkIndex(exact_catalog, DIM, exact=True)
    for q in _unit(np.random.default_rng(8), 20):
        got = [(r.rowid, round(r.score, 5)) for r in index.dense_search(q, K, BOTH)]
        want = [(r.rowid, round(r.score, 5)) for r in exact.dense_search(q, K, BOTH)]
        assert got == want
    assert index.graph.answered == 20  # every query went through the graph
    exact_catalog.close()
    catalog.close()


def test_a_deleted_row_never_returns(built: Path, tmp_path: Path) -> None:
    db = _copy(built, tmp_path)
    index, catalog = _open(db)
    db_conn = catalog.connection()
    rowids = [r for (r,) in db_conn.execute(
        "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id"
        " WHERE d.doc_id LIKE '%d5.txt' ORDER BY c.id")]
    vectors = [index.vectors([r])[r] for r in rowids]
    assert index.dense_search(vectors[0], 1, BOTH)[0].rowid == rowids[0]
    with catalog.transaction() as tx:
        tx.execute("DELETE FROM documents WHERE doc_id LIKE '%d5.txt'")
    assert index.graph is not None and set(rowids) <= set(index.graph.graph.keys.tolist())
    answered = index.graph.answered
    for v in vectors:  # still in the graph, never in an answer
        assert not {r.rowid for r in index.dense_search(v, K, BOTH)} & set(rowids)
    assert index.graph.answered == answered + len(vectors)
    catalog.close()


def test_a_small_namespace_and_a_restricted_caller_get_k_readable_rows(
        built: Path, tmp_path: Path) -> None:
    db = _copy(built, tmp_path)
    index, catalog = _open(db)
    small = {int(r) for (r,) in catalog.connection().execute(
        "SELECT c.id FROM chunks c JOIN namespaces n ON n.id = c.namespace_id"
        " WHERE n.name = 'small'")}
    # bob may read 4 of the 24 big documents (100 of 625 rows: the graph, oversampled)
    docs = dict(catalog.connection().execute("SELECT doc_id, id FROM documents").fetchall())
    bobs = {docs[d] for d in docs if d.endswith(("/d1.txt", "/d2.txt", "/d3.txt", "/d4.txt"))}
    catalog.set_document_access({doc: frozenset({"user:bob"}) if doc in bobs
                                 else frozenset({"group:finance"}) for doc in docs.values()})
    readable = {int(r) for (r,) in catalog.connection().execute(
        f"SELECT id FROM chunks WHERE document_id IN ({','.join(map(str, bobs))})")}
    bob = frozenset({"user:bob"})
    exact_catalog = SQLiteCatalog(db)
    exact = EmbeddedChunkIndex(exact_catalog, DIM, exact=True)
    assert index.graph is not None
    for q in _unit(np.random.default_rng(4), 10):
        rows = [r.rowid for r in index.dense_search(q, K, frozenset({"small"}))]
        assert len(rows) == K and set(rows) <= small  # 4% of the rows: the exact scan
        answered = index.graph.answered
        got = [r.rowid for r in index.for_query(bob).dense_search(q, K, BOTH)]
        assert index.graph.answered == answered + 1
        assert len(got) == K and set(got) <= readable
        assert got == [r.rowid for r in exact.for_query(bob).dense_search(q, K, BOTH)]
    exact_catalog.close()
    catalog.close()


def test_a_deleted_graph_file_is_rebuilt(built: Path, tmp_path: Path) -> None:
    db = _copy(built, tmp_path)
    catalog = _open(db)[1]
    catalog.close()
    files = [graph_path(db), *db.parent.glob(graph_path(db).name + ".*.faiss")]
    assert len(files) == 2
    for f in files:
        f.unlink()
    again, catalog = _open(db)
    assert again.graph is not None and again.graph.status == "loaded"
    assert again.graph.last_build_s > 0  # built, not mapped
    assert graph_path(db).exists()
    mapped, other = _open(db)
    assert mapped.graph is not None and mapped.graph.last_build_s == 0  # mapped, not built
    q = _unit(np.random.default_rng(1), 1)[0]
    assert mapped.dense_search(q, K, BOTH) == again.dense_search(q, K, BOTH)
    other.close()
    # deleted under a running reader: its next update builds the graph anew
    for f in [graph_path(db), *db.parent.glob(graph_path(db).name + ".*.faiss")]:
        f.unlink()
    assert again.graph is not None
    again.graph.update_rows = 1
    source = catalog.add_source(normalize_urn(db.parent / "big"), "big")
    _write(catalog, source, "late.txt", ["late"], _unit(np.random.default_rng(2), 1))
    again.sync()
    again.graph.wait()
    assert graph_path(db).exists() and again.graph.graph is not None
    assert len(again.graph.graph.keys) == 626
    catalog.close()


def test_a_row_written_by_another_process_reaches_a_long_lived_reader(
        built: Path, tmp_path: Path) -> None:
    db = _copy(built, tmp_path)
    index, catalog = _open(db)
    assert index.graph is not None
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        sys.path.insert(0, {str(REPO)!r})
        from docgraph.sources.urn import normalize_urn
        from docgraph.store.sqlite import SQLiteCatalog
        from tests.store.test_store import _write
        catalog = SQLiteCatalog({str(db)!r})
        source = catalog.add_source(normalize_urn({str(db.parent / "big")!r}), "big")
        v = np.zeros((1, {DIM}), dtype=np.float32)
        v[0, 0] = 1.0
        _write(catalog, source, "late.txt", ["late arrival"], v)
        catalog.close()
    """)
    subprocess.run([sys.executable, "-c", script], check=True)
    q = np.zeros(DIM, dtype=np.float32)
    q[0] = 1.0
    answered = index.graph.answered
    top = index.dense_search(q, K, BOTH)
    assert index.graph.answered == answered + 1  # the graph answered, with its tail
    assert catalog.chunks_by_rowid([top[0].rowid])[top[0].rowid].text == "late arrival"
    assert top[0].score == pytest.approx(1.0, abs=1e-3)
    catalog.close()


def test_the_store_setting_turns_the_graph_on(built: Path, tmp_path: Path) -> None:
    from docgraph.config.indexing import StoreSettings
    from docgraph.store.sqlite.ports import SQLitePorts

    db = _copy(built, tmp_path)
    off = SQLitePorts(StoreSettings(path=db, dense_graph_min_rows=0))
    assert off.chunk_index(DIM).graph is None  # type: ignore[attr-defined]
    off.close()
    on = SQLitePorts(StoreSettings(path=db, dense_graph_min_rows=100, dense_ann="hnsw"))
    index = on.chunk_index(DIM)
    assert index.graph is not None  # type: ignore[attr-defined]
    index.graph.wait()  # type: ignore[attr-defined]
    assert graph_path(db).exists()
    on.close()


def test_new_rows_are_added_to_the_graph_and_a_quarter_dead_rebuilds_it(
        built: Path, tmp_path: Path) -> None:
    db = _copy(built, tmp_path)
    index, catalog = _open(db)
    graph = index.graph
    assert graph is not None and graph.graph is not None
    before = graph.graph
    graph.update_rows = 20  # a tail of 20 rows is due for an update
    source = catalog.add_source(normalize_urn(db.parent / "big"), "big")
    rng = np.random.default_rng(12)
    late = _unit(rng, 25)
    _write(catalog, source, "late.txt", [f"late {j}" for j in range(25)], late)
    index.sync()
    graph.wait()
    after = graph.graph
    assert after is not None and after.token != before.token
    assert len(after.keys) == len(before.keys) + 25  # added: the old labels kept
    assert np.array_equal(after.keys[: len(before.keys)], before.keys)
    assert [p.name for p in db.parent.glob(graph_path(db).name + ".*.faiss")] == [
        f"{graph_path(db).name}.{after.token}.faiss"]  # the old graph file removed
    top = index.dense_search(late[3], 1, BOTH)
    assert catalog.chunks_by_rowid([top[0].rowid])[top[0].rowid].text == "late 3"
    with catalog.transaction() as tx:  # 10 of 25 big documents: 250 of 650 rows dead
        tx.execute("DELETE FROM documents WHERE doc_id LIKE '%/d1_.txt'")
    index.sync()
    graph.wait()
    rebuilt = graph.graph
    assert rebuilt is not None and len(rebuilt.keys) == 650 - 250
    catalog.close()


def test_without_faiss_the_graph_is_unavailable_and_the_scan_answers(
        built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "faiss", None)  # as if the 'ann' extra were missing
    db = _copy(built, tmp_path)
    index, catalog = _open(db)
    assert index.graph is not None and index.graph.status == "unavailable"
    assert "needs faiss-cpu" in caplog.text
    q = _unit(np.random.default_rng(5), 1)[0]
    assert len(index.dense_search(q, K, BOTH)) == K and index.graph.answered == 0
    assert not index.graph.busy() and not graph_path(db).exists()  # not tried again
    catalog.close()
