"""Opening a large catalog: rows are staged batch by batch into arrays reserved once, and
become visible all at once (issue 21: a 10M-chunk catalog must open in the memory it needs,
not three times that).

A load in many small batches answers exactly as one batch; it grows each array once, not
log-many times; a load that fails midway shows nothing of itself and the next sync loads
every row exactly once; the term-major posting copy built by scipy's CSR -> CSC equals the
stable argsort it replaced."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from docgraph.errors import StoreError
from docgraph.sources.urn import normalize_urn
from docgraph.store import lexical, rows
from docgraph.store.lexical import PostingIndex
from docgraph.store.quantized import QuantizedDenseMatrix
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog
from docgraph.store.sqlite import index as index_module
from docgraph.text import query_terms
from tests.store.test_store import _write
from tests.store.test_store_sidecar import DIM, _unit
from tests.store.test_store_sidecar import _answers as answers

DOCS = 40
CHUNKS = 50  # 2,000 rows: beyond the arrays' initial capacity of 1,024


def _catalog(path: Path, docs: int = DOCS, first: int = 0, seed: int = 0) -> SQLiteCatalog:
    rng = np.random.default_rng(seed + first)
    catalog = SQLiteCatalog(path)
    for ns in "ab":
        source = catalog.add_source(normalize_urn(path.parent / ns), ns)
        for i in range(first, first + docs // 2):
            _write(catalog, source, f"{ns}{i}.txt",
                   [f"word{j % 11} common {ns} doc{i} part{j} w{(i * j) % 97}"
                    for j in range(CHUNKS)], _unit(rng, CHUNKS))
    return catalog


def _answers(index: EmbeddedChunkIndex) -> list[object]:
    return answers(index, seed=3, texts=("word3 common", "doc7 part4", "w13 w50"), k=10)


def _open(path: Path, exact: bool = False) -> EmbeddedChunkIndex:
    return EmbeddedChunkIndex(SQLiteCatalog(path), DIM, exact=exact, sidecar=False)


@pytest.mark.parametrize("exact", [False, True])
def test_a_load_in_many_batches_answers_as_one_and_grows_each_array_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exact: bool) -> None:
    _catalog(tmp_path / "c.db").close()
    whole = _answers(_open(tmp_path / "c.db", exact))

    grown: list[int] = []
    real_grow = rows.grow

    def counting_grow(array: np.ndarray, capacity: int, n: int) -> np.ndarray:
        grown.append((capacity, array.dtype.str))
        return real_grow(array, capacity, n)

    monkeypatch.setattr(index_module, "SYNC_BATCH_ROWS", 64)
    monkeypatch.setattr(rows, "grow", counting_grow)
    monkeypatch.setattr(lexical, "grow", counting_grow)
    batched = _open(tmp_path / "c.db", exact)
    assert batched.rows_read == DOCS * CHUNKS
    assert _answers(batched) == whole
    # one reservation per dense array (7, or 5 exact) before the first batch; the 8
    # posting arrays grow for the first batch, then once for the rest (at the first
    # batch's postings per row). Without the reservations, 2,000 rows in batches of 64
    # grow every array again and again (24 times for the postings alone).
    assert len(grown) == (5 if exact else 7) + 2 * 8, str(grown)


def test_rows_staged_without_publishing_stay_invisible_until_published() -> None:
    rng = np.random.default_rng(1)
    vectors = _unit(rng, 40)

    def fetch(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return ids, vectors[ids - 1]

    dense = QuantizedDenseMatrix(DIM, fetch)
    dense.append(np.arange(1, 21, dtype=np.int64), np.zeros(20, np.int32), vectors[:20])
    before = dense.search(vectors[30], 5, [0])
    dense.reserve(20)
    dense.append(np.arange(21, 41, dtype=np.int64), np.zeros(20, np.int32), vectors[20:],
                 publish=False)
    assert len(dense) == 20 and dense.search(vectors[30], 5, [0]) == before
    dense.publish()
    assert len(dense) == 40 and dense.search(vectors[30], 1, [0])[0].rowid == 31

    postings = PostingIndex()
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.execute("CREATE TABLE terms (id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE)")
    terms = lexical.TermDictionary()
    db.execute("BEGIN")
    encoded, learnt = terms.encode(db, [("", f"alpha{i} shared") for i in range(10)])
    db.execute("COMMIT")
    terms.committed(learnt)
    found = lexical.term_ids(db, query_terms("alpha7 shared"))
    ids = list(found.values())
    assert len(ids) == 2
    blobs = [e.blob for e in encoded]
    lengths = np.array([e.length for e in encoded], np.float32)
    postings.append(np.arange(1, 6, dtype=np.int64), np.zeros(5, np.int32),
                    np.zeros(5, np.int8), blobs[:5], lengths[:5])
    postings.append(np.arange(6, 11, dtype=np.int64), np.zeros(5, np.int32),
                    np.zeros(5, np.int8), blobs[5:], lengths[5:], publish=False)
    assert len(postings) == 5 and 8 not in [r for r, _ in postings.search(ids, 10, [0])]
    postings.discard()  # a failed load: forgotten, and the same rows can come again
    postings.append(np.arange(6, 11, dtype=np.int64), np.zeros(5, np.int32),
                    np.zeros(5, np.int8), blobs[5:], lengths[5:], publish=False)
    postings.publish()
    assert len(postings) == 10 and postings.search(ids, 1, [0])[0][0] == 8


def test_a_load_failing_midway_shows_nothing_and_the_next_sync_loads_every_row_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_module, "SYNC_BATCH_ROWS", 64)
    path = tmp_path / "c.db"
    _catalog(path, docs=10).close()
    index = _open(path)
    first = _answers(index)
    assert first[0] == 10 * CHUNKS
    _catalog(path, docs=30, first=100).close()  # 1,500 more rows: many batches

    db = sqlite3.connect(path)
    victim, blob = db.execute("SELECT id, vector FROM chunks ORDER BY id LIMIT 1 OFFSET 1400"
                              ).fetchone()
    db.execute("UPDATE chunks SET vector = ? WHERE id = ?", (b"\x00\x01\x02", victim))
    db.commit()
    with pytest.raises(StoreError, match=r"c\.db"):
        index.sync()
    assert len(index) == 10 * CHUNKS and len(index.postings) == 10 * CHUNKS
    assert index.dense.max_rowid == index.postings.max_rowid < victim

    db.execute("UPDATE chunks SET vector = ? WHERE id = ?", (blob, victim))
    db.commit()
    db.close()
    index.sync()
    after = _answers(index)
    assert after[0] == 40 * CHUNKS
    assert after == _answers(_open(path))  # the same as a fresh load: no row twice


def _argsort_term_major(terms: np.ndarray, weights: np.ndarray, row_ptr: np.ndarray,
                        n: int, vocabulary: int) -> tuple[np.ndarray, ...]:
    """The term-major copy as it was built before (stable argsort)."""
    order = np.argsort(terms, kind="stable")
    row_of = np.repeat(np.arange(n, dtype=np.int32), np.diff(row_ptr[: n + 1]))
    term_ptr = np.zeros(vocabulary + 1, np.int64)
    np.cumsum(np.bincount(terms, minlength=vocabulary), out=term_ptr[1:])
    return term_ptr, row_of[order], weights[order]


def test_the_term_major_copy_equals_a_stable_argsort_including_empty_rows() -> None:
    rng = np.random.default_rng(5)
    n, vocabulary = 500, 300
    counts = rng.integers(0, 12, size=n)  # some rows without postings
    counts[[0, 17, n - 1]] = 0
    row_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=row_ptr[1:])
    terms = np.concatenate([rng.choice(vocabulary - 5, size=c, replace=False) for c in counts]
                           ).astype(np.int32)  # the last terms occur nowhere
    weights = rng.random(len(terms)).astype(np.float32)
    df = np.zeros((1, vocabulary), np.int32)
    snap = replace(lexical._empty(), n=n, nnz=len(terms), row_ptr=row_ptr, terms=terms,
                   weights=weights, df=df, lengths=counts.astype(np.float32))  # for the bounds
    built = lexical._reindex(snap)
    want = _argsort_term_major(terms, weights, row_ptr, n, vocabulary)
    assert built.main_rows == n
    assert built.term_ptr.dtype == np.int64 and built.term_rows.dtype == np.int32
    np.testing.assert_array_equal(built.term_ptr, want[0])
    np.testing.assert_array_equal(built.term_rows, want[1])
    np.testing.assert_array_equal(built.term_weights, want[2])


def test_the_reservation_follows_the_live_rows_not_the_row_ids_of_a_churned_catalog(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A catalog whose documents were replaced many times has row ids far beyond its live
    rows; reserving room for every id would ask for address space the machine may refuse."""
    monkeypatch.setattr(index_module, "SYNC_BATCH_ROWS", 64)
    path = tmp_path / "c.db"
    catalog = _catalog(path, docs=6)
    rng = np.random.default_rng(2)
    source = catalog.add_source(normalize_urn(path.parent / "a"), "a")
    for version in range(12):  # every chunk of a0..a2 replaced 12 times: ids x13
        for i in range(3):
            _write(catalog, source, f"a{i}.txt",
                   [f"word{j} version{version}" for j in range(CHUNKS)], _unit(rng, CHUNKS))
    catalog.close()
    reserved: list[int] = []
    real = rows.RowMatrix.reserve

    def spy(self: rows.RowMatrix, count: int) -> None:  # type: ignore[type-arg]
        reserved.append(count)
        real(self, count)

    monkeypatch.setattr(rows.RowMatrix, "reserve", spy)
    index = _open(path)
    assert len(index) == 6 * CHUNKS
    assert reserved == [6 * CHUNKS], reserved  # not the 2,100 row ids


class _FailingCommit:
    """A catalog connection whose next COMMIT commits, then raises (an interrupt or an I/O
    error reported after the reads)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db, self.armed = db, True

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        if sql == "COMMIT" and self.armed:
            self.armed = False
            self.db.execute(sql)
            raise sqlite3.OperationalError("interrupted")
        return self.db.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self.db, name)


def _consistent(index: EmbeddedChunkIndex, path: Path) -> None:
    """Every row once, in order, in both indexes, answering as a fresh load."""
    dense = index.dense._snap
    ids = dense.rowids[: dense.n]
    assert bool((np.diff(ids) > 0).all())
    assert len(index.dense) == len(index.postings)
    assert _answers(index) == _answers(_open(path))


def test_a_sync_whose_commit_fails_after_its_reads_loads_every_row_once_next_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_module, "SYNC_BATCH_ROWS", 64)
    path = tmp_path / "c.db"
    _catalog(path, docs=4).close()
    index = _open(path)
    _catalog(path, docs=4, first=100).close()
    failing = _FailingCommit(index.catalog.connection())
    monkeypatch.setattr(index.catalog, "connection", lambda: failing)
    with pytest.raises(sqlite3.OperationalError, match="interrupted"):
        index.sync()
    assert len(index) == 4 * CHUNKS  # nothing of the failed sync is visible
    index.sync()
    assert len(index) == 8 * CHUNKS
    _consistent(index, path)


def test_a_posting_publish_that_runs_out_of_memory_publishes_neither_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The term-major rebuild at publish is the memory-hungry step of a large load: if it
    fails, the dense matrix must not show rows the posting lists lack."""
    monkeypatch.setattr(index_module, "SYNC_BATCH_ROWS", 64)
    path = tmp_path / "c.db"
    _catalog(path, docs=4).close()
    index = _open(path)
    _catalog(path, docs=30, first=100).close()  # enough postings to rebuild the copy
    real = lexical._maybe_reindex
    calls = {"n": 0}

    def failing_once(s: object, *rest: object) -> object:
        calls["n"] += 1
        if calls["n"] == 1:
            raise MemoryError("term-major copy")
        return real(s, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(lexical, "_maybe_reindex", failing_once)
    with pytest.raises(MemoryError):
        index.sync()
    assert len(index.dense) == len(index.postings) == 4 * CHUNKS
    index.sync()
    assert len(index) == 34 * CHUNKS
    _consistent(index, path)


def test_a_large_load_and_the_sidecar_it_writes_are_logged_with_why_and_how_long(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Opening 10M chunks without a usable sidecar takes minutes: a server's log says so
    when it starts, why (the sidecar's state), and when it is done."""
    monkeypatch.setattr(index_module, "SYNC_BATCH_ROWS", 64)
    monkeypatch.setattr(index_module, "LARGE_LOAD_ROWS", 1000)
    path = tmp_path / "c.db"
    _catalog(path).close()
    caplog.set_level("INFO", logger="docgraph.store.sqlite.index")
    index = EmbeddedChunkIndex(SQLiteCatalog(path), DIM, sidecar_after_rows=1)
    index.wait_for_sidecar()
    text = caplog.text
    assert f"reading ~{DOCS * CHUNKS} chunk rows from the catalog (sidecar missing)" in text
    assert f"{DOCS * CHUNKS} rows loaded in" in text
    assert f"written: {DOCS * CHUNKS} rows" in text
    caplog.clear()
    EmbeddedChunkIndex(SQLiteCatalog(path), DIM)  # mapped: nothing to read, nothing logged
    assert "reading" not in caplog.text
