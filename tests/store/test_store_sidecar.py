"""The chunk index's sidecar file, and float16 vectors in the catalog (schema 6).

Sidecar: used when it reflects the catalog (no chunk row read), caught up with writes made
after it, and ignored (rebuilt from the catalog) when stale, foreign, truncated or corrupt,
including after a writer killed mid-write. Schema 6: vectors stored as float16, a schema-5
file upgraded in place."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from docgraph.sources.urn import normalize_urn
from docgraph.store.sidecar import read_arrays, write_arrays
from docgraph.store.sqlite import SCHEMA_VERSION, EmbeddedChunkIndex, SQLiteCatalog
from docgraph.store.sqlite.index import sidecar_path
from docgraph.store.sqlite.vectors import decode_vector
from tests.conftest import REPO
from tests.store.test_store import _write

DIM = 16
ROOT = REPO


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    m = rng.standard_normal((n, DIM)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def _catalog(path: Path, docs: int = 6, seed: int = 0) -> SQLiteCatalog:
    rng = np.random.default_rng(seed)
    catalog = SQLiteCatalog(path)
    for ns in "ab":
        source = catalog.add_source(normalize_urn(path.parent / ns), ns)
        for i in range(docs // 2):
            _write(catalog, source, f"{ns}{i}.txt",
                   [f"word{j % 7} common {ns} doc{i} part{j}" for j in range(25)], _unit(rng, 25))
    return catalog


def _saved(path: Path) -> None:
    """Open an index over ``path`` and persist its sidecar."""
    catalog = SQLiteCatalog(path)
    index = EmbeddedChunkIndex(catalog, DIM)
    assert index.save_sidecar() > 0
    catalog.close()


def _answers(index: EmbeddedChunkIndex, seed: int = 9,
             texts: tuple[str, ...] = ("word3 common", "doc1 part4", "replaced"),
             k: int = 8) -> list[object]:
    """Dense and BM25 results (``k`` deep) over both namespaces and each one alone."""
    rng = np.random.default_rng(seed)
    out: list[object] = [len(index)]
    for ns in ({"a"}, {"b"}, {"a", "b"}):
        names = frozenset(ns)
        for q in _unit(rng, 3):
            out.append([(r.rowid, round(r.score, 5)) for r in index.dense_search(q, k, names)])
        for text in texts:
            out.append([(r.rowid, round(r.score, 5))
                        for r in index.lexical_search(text, k, names)])
    return out


def _rebuilt(path: Path) -> list[object]:
    """The answers of an index built from the catalog alone (no sidecar read or written)."""
    catalog = SQLiteCatalog(path)
    try:
        return _answers(EmbeddedChunkIndex(catalog, DIM, sidecar=False))
    finally:
        catalog.close()


def _opened(path: Path) -> tuple[EmbeddedChunkIndex, SQLiteCatalog]:
    catalog = SQLiteCatalog(path)
    return EmbeddedChunkIndex(catalog, DIM, sidecar_after_rows=10**9), catalog


def test_a_valid_sidecar_is_mapped_and_no_chunk_row_is_read(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    _catalog(db).close()
    first, catalog = _opened(db)
    assert first.sidecar_status == "missing" and first.rows_read == 150
    want = _answers(first)
    first.save_sidecar()
    catalog.close()
    mode = sidecar_path(db).stat().st_mode & 0o777
    assert mode == db.stat().st_mode & 0o777  # readable like the catalog, not mkstemp's 0600

    index, catalog = _opened(db)
    assert index.sidecar_status == "loaded"
    assert index.rows_read == 0  # nothing re-read from the catalog's chunk rows
    assert _answers(index) == want == _rebuilt(db)
    catalog.close()


def test_opening_without_a_sidecar_writes_one_once_enough_rows_were_read(
        tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    catalog = _catalog(db)
    index = EmbeddedChunkIndex(catalog, DIM, sidecar_after_rows=100)
    index.wait_for_sidecar()
    assert sidecar_path(db).exists()
    catalog.close()
    again = EmbeddedChunkIndex(catalog := SQLiteCatalog(db), DIM)
    assert again.sidecar_status == "loaded" and again.rows_read == 0
    catalog.close()
    small = tmp_path / "small.db"
    _catalog(small, docs=2).close()
    catalog = SQLiteCatalog(small)
    EmbeddedChunkIndex(catalog, DIM, sidecar_after_rows=100).wait_for_sidecar()
    assert not sidecar_path(small).exists()  # 50 rows: cheaper to re-read than to persist
    catalog.close()


def test_writes_of_another_process_after_the_sidecar_are_caught_up(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    _catalog(db).close()
    _saved(db)
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        import numpy as np
        sys.path.insert(0, {str(ROOT)!r})
        from docgraph.sources.urn import normalize_urn
        from docgraph.store.sqlite import SQLiteCatalog
        from tests.store.test_store import _write
        tmp = Path({str(tmp_path)!r})
        catalog = SQLiteCatalog(tmp / "c.db")
        rng = np.random.default_rng(5)
        def unit(n):
            m = rng.standard_normal((n, {DIM})).astype(np.float32)
            return m / np.linalg.norm(m, axis=1, keepdims=True)
        a = catalog.add_source(normalize_urn(tmp / "a"), "a")
        b = catalog.add_source(normalize_urn(tmp / "b"), "b")
        _write(catalog, a, "a0.txt", ["replaced text", "replaced again"], unit(2))
        _write(catalog, b, "new.txt", [f"word3 fresh {{j}}" for j in range(7)], unit(7))
        db = catalog.connection()
        doc = db.execute("SELECT id FROM documents WHERE doc_id LIKE '%b1.txt'").fetchone()[0]
        with catalog.transaction() as tx:
            tx.execute("DELETE FROM documents WHERE id = ?", (doc,))
        catalog.close()
    """)
    subprocess.run([sys.executable, "-c", script], check=True)
    index, catalog = _opened(db)
    assert index.sidecar_status == "loaded"
    assert index.rows_read == 9  # only the rows written after the sidecar
    assert _answers(index) == _rebuilt(db)
    assert len(index) == 150 - 25 + 2 - 25 + 7
    catalog.close()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "header", "uneven"])
def test_a_damaged_sidecar_is_ignored_rebuilt_and_rewritten(tmp_path: Path,
                                                            damage: str) -> None:
    db = tmp_path / "c.db"
    _catalog(db).close()
    want = _rebuilt(db)
    _saved(db)
    side = sidecar_path(db)
    data = side.read_bytes()
    if damage == "truncated":
        side.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        side.write_bytes(b"\x00" * len(data))
    elif damage == "empty":
        side.write_bytes(b"")
    elif damage == "uneven":  # one dense array without the room the others have
        meta, arrays = read_arrays(side)
        arrays["dense.codes"] = arrays["dense.codes"][: int(meta["dense"]["n"])]
        write_arrays(side, meta, arrays)
    else:  # a valid file whose arrays do not fit together
        meta, arrays = read_arrays(side)
        rows = int(meta["posting"]["n"])  # the arrays are mapped with room past their rows
        arrays["posting.rowids"] = arrays["posting.rowids"][: rows - 1]
        write_arrays(side, meta, arrays)
    catalog = SQLiteCatalog(db)
    index = EmbeddedChunkIndex(catalog, DIM, sidecar_after_rows=1)
    assert index.sidecar_status == "corrupt"
    assert index.rows_read == 150
    assert _answers(index) == want
    index.wait_for_sidecar()
    catalog.close()
    again, catalog = _opened(db)
    assert again.sidecar_status == "loaded" and _answers(again) == want
    catalog.close()


def test_a_sidecar_of_another_catalog_is_foreign(tmp_path: Path) -> None:
    one, other = tmp_path / "one" / "c.db", tmp_path / "other" / "c.db"
    _catalog(one, seed=1).close()
    _catalog(other, seed=2).close()  # same shape, same row ids, other vectors
    _saved(one)
    shutil.copy(sidecar_path(one), sidecar_path(other))
    index, catalog = _opened(other)
    assert index.sidecar_status == "foreign" and index.rows_read == 150
    assert _answers(index) == _rebuilt(other)
    catalog.close()


def test_a_sidecar_newer_than_the_catalog_or_past_the_tombstone_log_is_stale(
        tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    _catalog(db, docs=4).close()
    backup = tmp_path / "backup.db"
    shutil.copy(db, backup)
    catalog = SQLiteCatalog(db)
    source = catalog.add_source(normalize_urn(tmp_path / "a"), "a")
    _write(catalog, source, "late.txt", ["late text"], _unit(np.random.default_rng(3), 1))
    catalog.close()
    _saved(db)
    shutil.copy(backup, db)  # the catalog restored from a copy older than the sidecar
    index, catalog = _opened(db)
    assert index.sidecar_status == "stale" and _answers(index) == _rebuilt(db)
    catalog.close()

    _saved(db)
    catalog = SQLiteCatalog(db)
    _write(catalog, source, "a0.txt", ["replaced"], _unit(np.random.default_rng(4), 1))
    with catalog.transaction() as tx:  # the tombstone log pruned past the sidecar
        tx.execute("DELETE FROM chunk_tombstones")
    catalog.close()
    index, catalog = _opened(db)
    assert index.sidecar_status == "stale" and _answers(index) == _rebuilt(db)
    catalog.close()


def test_a_writer_killed_mid_write_leaves_the_previous_sidecar_usable(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    _catalog(db).close()
    _saved(db)
    before = sidecar_path(db).read_bytes()
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        import numpy as np
        from pathlib import Path
        from docgraph.sources.urn import normalize_urn
        from docgraph.store.sqlite import SCHEMA_VERSION, EmbeddedChunkIndex, SQLiteCatalog
        from tests.store.test_store import _write
        tmp = Path({str(tmp_path)!r})
        catalog = SQLiteCatalog(tmp / "c.db")
        source = catalog.add_source(normalize_urn(tmp / "a"), "a")
        m = np.ones((3, {DIM}), dtype=np.float32) / 4.0
        _write(catalog, source, "killed.txt", ["word3 killed", "two", "three"], m)
        index = EmbeddedChunkIndex(catalog, {DIM}, sidecar_after_rows=10**9)
        def killed(src, dst):  # data written and fsynced, the rename never happens
            os.kill(os.getpid(), signal.SIGKILL)
        os.replace = killed
        index.save_sidecar()
    """)
    run = subprocess.run([sys.executable, "-c", script], check=False)
    assert run.returncode == -9
    assert list(tmp_path.glob("c.db.chunk-index.*.tmp"))  # the torn write, beside it
    assert sidecar_path(db).read_bytes() == before
    index, catalog = _opened(db)
    assert index.sidecar_status == "loaded" and index.rows_read == 3
    assert _answers(index) == _rebuilt(db)
    catalog.close()


def _as_schema_5(path: Path) -> None:
    """Rewrite a catalog as docgraph wrote it before schema 6: float32 vector blobs, no
    ``vector_dtype`` mark, schema number 5."""
    db = sqlite3.connect(path, isolation_level=None)
    rows = db.execute("SELECT id, vector FROM chunks").fetchall()
    db.execute("BEGIN")
    for rowid, blob in rows:
        db.execute("UPDATE chunks SET vector = ? WHERE id = ?",
                   (decode_vector(blob).astype("<f4").tobytes(), rowid))
    db.execute("DELETE FROM meta WHERE key = 'vector_dtype'")
    db.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    db.execute("COMMIT")
    db.close()


def test_a_schema_5_file_is_upgraded_in_place_to_float16_vectors(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    _catalog(db).close()
    want = _rebuilt(db)
    _saved(db)  # a sidecar of the file as it is now
    _as_schema_5(db)
    raw = sqlite3.connect(db)
    (width,) = raw.execute("SELECT DISTINCT length(vector) FROM chunks").fetchone()
    assert width == 4 * DIM
    raw.close()

    catalog = SQLiteCatalog(db)  # the upgrade: no re-embedding, vectors converted
    meta = dict(catalog.connection().execute("SELECT key, value FROM meta").fetchall())
    assert meta["schema_version"] == str(SCHEMA_VERSION) == "7"  # through 6 (float16) to 7
    widths = {w for (w,) in catalog.connection().execute(
        "SELECT DISTINCT length(vector) FROM chunks")}
    assert widths == {2 * DIM}
    index = EmbeddedChunkIndex(catalog, DIM, sidecar=False)
    assert _answers(index) == want  # the same vectors, so the same results
    mapped = EmbeddedChunkIndex(catalog, DIM, sidecar_after_rows=10**9)
    assert mapped.sidecar_status == "foreign"  # written for schema 5: rebuilt
    assert _answers(mapped) == want
    catalog.close()
    catalog = SQLiteCatalog(db)  # opening again converts nothing twice
    assert {w for (w,) in catalog.connection().execute(
        "SELECT DISTINCT length(vector) FROM chunks")} == {2 * DIM}
    catalog.close()


def test_vectors_are_stored_as_float16_and_read_back_as_float32(tmp_path: Path) -> None:
    catalog = SQLiteCatalog(tmp_path / "c.db")
    source = catalog.add_source(normalize_urn(tmp_path / "a"), "a")
    vector = _unit(np.random.default_rng(1), 1)
    record = _write(catalog, source, "one.txt", ["one text"], vector)
    assert record.chunk_count == 1
    (blob,) = catalog.connection().execute("SELECT vector FROM chunks").fetchone()
    assert len(blob) == 2 * DIM
    index = EmbeddedChunkIndex(catalog, DIM)
    (got,) = index.vectors([index.dense_search(vector[0], 1, frozenset({"a"}))[0].rowid]
                           ).values()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, vector[0], atol=1e-3)
    assert not np.array_equal(got, vector[0])  # rounded to float16, not float32
    catalog.close()


def _mapped(index: EmbeddedChunkIndex) -> dict[str, bool]:
    """Whether the arrays appends write into are still the sidecar's mapping."""
    dense, postings = index.dense._snap, index.postings._snap
    return {"codes": isinstance(dense.codes, np.memmap),
            "words": isinstance(dense.words, np.memmap),
            "terms": isinstance(postings.terms, np.memmap),
            "rowids": isinstance(postings.rowids, np.memmap)}


def test_rows_written_after_a_mapped_open_fill_the_sidecars_room_without_copying(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that mapped the sidecar indexes a new document: the rows go into the room
    left after each mapped array (a hole in the file), not into a copy of the arrays (27 s
    and 7.7 GB at 10M chunks); past the room the arrays are copied, answers unchanged."""
    from docgraph.store.sqlite import index as index_module

    monkeypatch.setattr(index_module, "SIDECAR_ROOM", 0.2)  # 150 rows: room for 30 more
    monkeypatch.setattr(index_module, "SIDECAR_ROOM_MIN", 0)
    db = tmp_path / "c.db"
    _catalog(db).close()
    _saved(db)
    index, catalog = _opened(db)
    assert index.sidecar_status == "loaded" and all(_mapped(index).values())
    rng = np.random.default_rng(4)
    source = catalog.add_source(normalize_urn(tmp_path / "a"), "a")
    _write(catalog, source, "new.txt", [f"fresh word3 row{j}" for j in range(25)], _unit(rng, 25))
    index.sync()
    assert index.rows_read == 25
    assert all(_mapped(index).values()), _mapped(index)  # 25 rows fit the room of 30
    assert _answers(index) == _rebuilt(db)
    _write(catalog, source, "more.txt", [f"fresh word5 row{j}" for j in range(40)],
           _unit(rng, 40))
    index.sync()
    assert not _mapped(index)["codes"]  # 65 rows do not: copied into memory
    assert _answers(index) == _rebuilt(db)
    catalog.close()


def test_a_sidecar_of_the_previous_format_is_rebuilt(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    _catalog(db).close()
    _saved(db)
    meta, arrays = read_arrays(sidecar_path(db))
    write_arrays(sidecar_path(db), {**meta, "format": 2}, arrays)
    index, catalog = _opened(db)
    assert index.sidecar_status == "foreign" and index.rows_read == 150
    catalog.close()
