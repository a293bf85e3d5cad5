"""The dense lane's inverted-file partition (``docgraph.store.dense_lists``) on a small,
clustered catalog forced above its row threshold: the same top k as the exact scan, deleted
rows never returned, filters (a small namespace, a restricted caller) filled with k readable
rows, the file a cache rebuilt when deleted, new rows assigned without new centroids, and a
vector filled in after its chunk was stored found by a reader that opened before."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from docgraph.sources.urn import document_id, normalize_urn
from docgraph.store import dense_lists, lists_build
from docgraph.store.base import DocumentWrite
from docgraph.store.dense_lists import DenseLists, lists_path
from docgraph.store.quantized import int8_codes
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog
from tests.store.test_store import _write

DIM = 16
DOCS = 24  # of 25 chunks: 600 rows in namespace "big", 25 in "small" (4%)
CLUSTERS = 20
K = 10
BOTH = frozenset({"big", "small"})
CENTRES = np.random.default_rng(11).standard_normal((CLUSTERS, DIM)).astype(np.float32)


def _unit(m: np.ndarray) -> np.ndarray:
    return (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)


def _clustered(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` unit vectors, each near one of ``CLUSTERS`` centres (an easy store: the true
    neighbours of a point share its cluster)."""
    return _unit(CENTRES[rng.integers(CLUSTERS, size=n)]
                 + 0.15 * rng.standard_normal((n, DIM)).astype(np.float32))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A catalog of 625 chunk rows (written once for the module; tests copy it)."""
    db = tmp_path_factory.mktemp("lists") / "c.db"
    rng = np.random.default_rng(3)
    catalog = SQLiteCatalog(db)
    big = catalog.add_source(normalize_urn(db.parent / "big"), "big")
    small = catalog.add_source(normalize_urn(db.parent / "small"), "small")
    for i in range(DOCS):
        _write(catalog, big, f"d{i}.txt", [f"big {i} part {j}" for j in range(25)],
               _clustered(rng, 25))
    _write(catalog, small, "s.txt", [f"small part {j}" for j in range(25)],
           _clustered(rng, 25))
    catalog.close()
    return db


def _copy(built: Path, tmp_path: Path) -> Path:
    db = tmp_path / "c.db"
    db.write_bytes(built.read_bytes())
    return db


def _open(db: Path) -> tuple[EmbeddedChunkIndex, SQLiteCatalog, DenseLists]:
    """An index whose partition is built above 100 rows (waited for), with the Hamming pool
    shrunk so a query of this small catalog reaches the lists instead of scoring every
    allowed row."""
    catalog = SQLiteCatalog(db)
    index = EmbeddedChunkIndex(catalog, DIM, sidecar=False, graph_min_rows=100)
    lists = index.graph
    assert isinstance(lists, DenseLists)
    lists.wait()
    lists.min_share = 0.1
    index.dense.min_pool = 80  # type: ignore[union-attr]
    index.dense.pool_per_k = 1  # type: ignore[union-attr]
    return index, catalog, lists


def _queries(seed: int, n: int) -> np.ndarray:
    return _clustered(np.random.default_rng(seed), n)


def test_the_lists_return_the_exact_scans_top_k(built: Path, tmp_path: Path) -> None:
    db = _copy(built, tmp_path)
    index, catalog, lists = _open(db)
    assert lists.status == "loaded" and lists_path(db).exists()
    assert lists.lists is not None and len(lists.lists.members) == 625
    assert lists.lists.nprobe < len(lists.lists.centroids)  # tuned: not every list
    exact_catalog = SQLiteCatalog(db)
    exact = EmbeddedChunkIndex(exact_catalog, DIM, exact=True)
    for q in _queries(8, 20):
        got = [(r.rowid, round(r.score, 5)) for r in index.dense_search(q, K, BOTH)]
        want = [(r.rowid, round(r.score, 5)) for r in exact.dense_search(q, K, BOTH)]
        assert got == want
    assert lists.answered == 20  # every query went through the lists
    assert lists.probed < 20 * len(lists.lists.centroids)  # and read only some of them
    exact_catalog.close()
    catalog.close()


def test_a_deleted_row_never_returns(built: Path, tmp_path: Path) -> None:
    db = _copy(built, tmp_path)
    index, catalog, lists = _open(db)
    rowids = [r for (r,) in catalog.connection().execute(
        "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id"
        " WHERE d.doc_id LIKE '%d5.txt' ORDER BY c.id")]
    vectors = [index.vectors([r])[r] for r in rowids]
    assert index.dense_search(vectors[0], 1, BOTH)[0].rowid == rowids[0]
    with catalog.transaction() as tx:
        tx.execute("DELETE FROM documents WHERE doc_id LIKE '%d5.txt'")
    assert lists.lists is not None and set(rowids) <= set(lists.lists.members.tolist())
    answered = lists.answered
    for v in vectors:  # still in their lists, never in an answer
        assert not {r.rowid for r in index.dense_search(v, K, BOTH)} & set(rowids)
    assert lists.answered == answered + len(vectors)
    catalog.close()


def test_a_small_namespace_and_a_restricted_caller_get_k_readable_rows(
        built: Path, tmp_path: Path) -> None:
    db = _copy(built, tmp_path)
    index, catalog, lists = _open(db)
    small = {int(r) for (r,) in catalog.connection().execute(
        "SELECT c.id FROM chunks c JOIN namespaces n ON n.id = c.namespace_id"
        " WHERE n.name = 'small'")}
    # bob may read 4 of the 24 big documents (100 of 625 rows: the lists, read further)
    docs = dict(catalog.connection().execute("SELECT doc_id, id FROM documents").fetchall())
    bobs = {docs[d] for d in docs if d.endswith(("/d1.txt", "/d2.txt", "/d3.txt", "/d4.txt"))}
    catalog.set_document_access({doc: frozenset({"user:bob"}) if doc in bobs
                                 else frozenset({"group:finance"}) for doc in docs.values()})
    readable = {int(r) for (r,) in catalog.connection().execute(
        f"SELECT id FROM chunks WHERE document_id IN ({','.join(map(str, bobs))})")}
    bob = frozenset({"user:bob"})
    exact_catalog = SQLiteCatalog(db)
    exact = EmbeddedChunkIndex(exact_catalog, DIM, exact=True)
    for q in _queries(4, 10):
        answered = lists.answered
        rows = [r.rowid for r in index.dense_search(q, K, frozenset({"small"}))]
        assert len(rows) == K and set(rows) <= small  # 4% of the rows: the exact scan
        assert lists.answered == answered
        got = [r.rowid for r in index.for_query(bob).dense_search(q, K, BOTH)]
        assert lists.answered == answered + 1
        assert len(got) == K and set(got) <= readable
        assert got == [r.rowid for r in exact.for_query(bob).dense_search(q, K, BOTH)]
    exact_catalog.close()
    catalog.close()


def test_a_deleted_lists_file_is_rebuilt(built: Path, tmp_path: Path) -> None:
    db = _copy(built, tmp_path)
    catalog = _open(db)[1]
    catalog.close()
    lists_path(db).unlink()
    again, catalog, built_lists = _open(db)
    assert built_lists.status == "loaded" and built_lists.last_build_s > 0  # built
    assert lists_path(db).exists()
    mapped, other, mapped_lists = _open(db)
    assert mapped_lists.last_build_s == 0  # mapped, not built
    q = _queries(1, 1)[0]
    assert mapped.dense_search(q, K, BOTH) == again.dense_search(q, K, BOTH)
    other.close()
    lists_path(db).write_bytes(b"not a partition")  # corrupt: ignored, then rebuilt
    corrupt, other, corrupt_lists = _open(db)
    assert corrupt_lists.last_build_s > 0 and len(corrupt.dense_search(q, K, BOTH)) == K
    other.close()
    catalog.close()


def test_new_rows_are_assigned_and_a_quarter_dead_retrains(built: Path, tmp_path: Path
                                                          ) -> None:
    db = _copy(built, tmp_path)
    index, catalog, lists = _open(db)
    before = lists.lists
    assert before is not None
    lists.update_rows = 20  # a tail of 20 rows is due for an update
    source = catalog.add_source(normalize_urn(db.parent / "big"), "big")
    late = _queries(12, 25)
    _write(catalog, source, "late.txt", [f"late {j}" for j in range(25)], late)
    index.sync()
    lists.wait()
    after = lists.lists
    assert after is not None and len(after.members) == 650
    assert np.array_equal(after.centroids, before.centroids)  # assigned, not trained
    assert after.nprobe == before.nprobe
    placed = lists.placement(index.dense._snap.rowids, index.dense._snap.n, after)  # type: ignore[union-attr]
    assert len(placed.tail) == 0
    top = index.dense_search(late[3], 1, BOTH)
    assert catalog.chunks_by_rowid([top[0].rowid])[top[0].rowid].text == "late 3"
    with catalog.transaction() as tx:  # 10 of 25 big documents: 250 of 650 rows dead
        tx.execute("DELETE FROM documents WHERE doc_id LIKE '%/d1_.txt'")
    index.sync()
    lists.wait()
    retrained = lists.lists
    assert retrained is not None and len(retrained.members) == 650 - 250
    assert not np.array_equal(retrained.centroids, before.centroids)
    catalog.close()


def test_a_vector_filled_after_its_chunk_is_found(built: Path, tmp_path: Path) -> None:
    """Embed-behind: the chunk is stored pending (no vector: not in the dense lane), its
    vector filled later (a new row id), and a reader that opened before finds it through
    the lists' tail, and after the next update through its list."""
    db = _copy(built, tmp_path)
    index, catalog, lists = _open(db)
    source = catalog.add_source(normalize_urn(db.parent / "big"), "big")
    texts = ["late arrival"]
    catalog.write_document(DocumentWrite(
        source=source, path="late.txt", doc_id=document_id(source.urn, "late.txt"),
        title="late.txt", content_hash="h", change_token="t", media_type="text/plain",
        chunks=[_draft(texts[0])], breadcrumbs=["[late.txt]"], embedded_texts=texts,
        vectors=np.zeros((1, DIM), dtype=np.float32), missing=[True]))
    q = _queries(21, 1)[0]
    index.sync()
    assert "late arrival" not in _texts(catalog, index.dense_search(q, K, BOTH))
    pending = catalog.pending_chunks(None, 10)
    assert [c.text for c in pending] == texts
    assert catalog.fill_vectors([(pending[0].rowid, q)]) == 1
    answered = lists.answered
    top = index.dense_search(q, K, BOTH)
    assert lists.answered == answered + 1  # the lists answered, with their tail
    assert _texts(catalog, top)[0] == "late arrival"
    assert top[0].score == pytest.approx(1.0, abs=1e-3)
    lists.update_rows = 1
    index.dense.maintain_graph()  # type: ignore[union-attr]  # as the next sync does
    lists.wait()
    assert lists.lists is not None and top[0].rowid in set(lists.lists.members.tolist())
    assert _texts(catalog, index.dense_search(q, K, BOTH))[0] == "late arrival"
    catalog.close()


def _draft(text: str):  # type: ignore[no-untyped-def]
    from docgraph.model import ChunkDraft

    return ChunkDraft(0, text, (), len(text.split()), None, None, None)


def _texts(catalog: SQLiteCatalog, rows: list) -> list[str]:  # type: ignore[type-arg]
    chunks = catalog.chunks_by_rowid([r.rowid for r in rows])
    return [chunks[r.rowid].text for r in rows]


def test_the_store_setting_chooses_the_lists(built: Path, tmp_path: Path) -> None:
    from docgraph.config.indexing import StoreSettings
    from docgraph.store.sqlite.ports import SQLitePorts

    db = _copy(built, tmp_path)
    default = SQLitePorts(StoreSettings(path=db))  # the exact scan: no ANN cache at all
    small = default.chunk_index(DIM)
    assert small.graph is None  # type: ignore[attr-defined]
    small.dense_search(_queries(2, 1)[0], K, BOTH)
    assert not lists_path(db).exists()
    default.close()
    at = SQLitePorts(StoreSettings(path=db, dense_graph_min_rows=250_000))
    large_only = at.chunk_index(DIM)  # lists from 250k rows: none built for 625
    assert isinstance(large_only.graph, DenseLists)  # type: ignore[attr-defined]
    assert large_only.graph.lists is None  # type: ignore[attr-defined]
    large_only.dense_search(_queries(2, 1)[0], K, BOTH)
    assert not large_only.graph.busy() and not lists_path(db).exists()  # type: ignore[attr-defined]
    at.close()
    on = SQLitePorts(StoreSettings(path=db, dense_graph_min_rows=100))
    index = on.chunk_index(DIM)
    assert isinstance(index.graph, DenseLists)  # type: ignore[attr-defined]
    index.graph.wait()  # type: ignore[attr-defined]
    assert lists_path(db).exists()
    on.close()


def test_a_read_only_index_reads_the_lists_beside_it_and_writes_none(built: Path,
                                                                     tmp_path: Path) -> None:
    """``store.read_only`` promises nothing is written beside the file: the lists it
    builds (none found) are kept in memory and answer, and a lists file copied with the
    index (the way to spare a replica that build at every start) is mapped, not rebuilt."""
    from docgraph.config import StoreSettings
    from docgraph.store.sqlite.ports import SQLitePorts

    db = _copy(built, tmp_path)
    replica = SQLitePorts(StoreSettings(path=db, read_only=True, dense_graph_min_rows=100))
    index = replica.chunk_index(DIM)
    index.graph.wait()  # type: ignore[attr-defined]
    assert index.dense_ann_state()[:2] == ("lists", "loaded")  # type: ignore[attr-defined]
    index.graph.min_share = 0.1  # type: ignore[attr-defined]
    index.dense.min_pool, index.dense.pool_per_k = 80, 1  # type: ignore[attr-defined]
    assert len(index.dense_search(_queries(4, 1)[0], K, BOTH)) == K
    assert index.graph.answered == 1  # type: ignore[attr-defined]
    assert not lists_path(db).exists()
    beside = {p.name for p in db.parent.iterdir()} - {"c.db", "c.db-shm", "c.db-wal"}
    assert not beside  # not even the sidecar
    replica.close()
    writable = SQLitePorts(StoreSettings(path=db, dense_graph_min_rows=100))
    writable.chunk_index(DIM).graph.wait()  # type: ignore[attr-defined]
    writable.close()
    assert lists_path(db).exists()
    replica = SQLitePorts(StoreSettings(path=db, read_only=True, dense_graph_min_rows=100))
    assert replica.chunk_index(DIM).dense_ann_state() == (  # type: ignore[attr-defined]
        "lists", "loaded", 0.0)  # mapped from the copied file
    replica.close()


def test_a_partition_of_another_or_an_older_catalog_is_not_used(built: Path, tmp_path: Path
                                                                 ) -> None:
    db = _copy(built, tmp_path)
    catalog = _open(db)[1]
    assert DenseLists(db, DIM, "another catalog", min_rows=100).open(10**6) == "foreign"
    stale = DenseLists(db, DIM, catalog.catalog_id(), min_rows=100)
    assert stale.open(5) == "stale" and stale.lists is None  # names rows beyond row id 5
    catalog.close()


def test_a_reopened_file_places_its_members_by_its_digest_and_an_older_one_still_opens(
        built: Path, tmp_path: Path) -> None:
    """The file keeps each member's rank and the digest of its sorted members, so a process
    opening it places the members without gathering them; a file written before those were
    kept (no rank, no digest) opens and places them the old way, the same placement."""
    db = _copy(built, tmp_path)
    index, catalog, _ = _open(db)
    snap = index.dense._snap  # type: ignore[union-attr]
    again = DenseLists(db, DIM, catalog.catalog_id(), min_rows=100)
    assert again.open(10**6) == "loaded" and again.lists is not None
    assert again.lists.rank is not None and again.lists.digest
    placed = again.placement(snap.rowids, snap.n, again.lists)
    assert placed.pos is again.lists.rank  # the digest matched: the ranks are the positions
    older = lists_path(db)
    _, arrays = dense_lists.read_arrays(older)
    meta = {"format": dense_lists.LISTS_FORMAT, "catalog_id": catalog.catalog_id(),
            "dimension": DIM, "nprobe": again.lists.nprobe,
            "trained_rows": again.lists.trained_rows}
    dense_lists.write_arrays(older, meta, {k: np.array(a) for k, a in arrays.items()
                                           if k != "rank"})
    old = DenseLists(db, DIM, catalog.catalog_id(), min_rows=100)
    assert old.open(10**6) == "loaded" and old.lists is not None and old.lists.rank is None
    placed_old = old.placement(snap.rowids, snap.n, old.lists)
    assert placed_old.pos.tolist() == placed.pos.tolist()
    assert placed_old.tail.tolist() == placed.tail.tolist()
    catalog.close()


def test_without_faiss_the_lists_are_unavailable_and_the_scan_answers(
        built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "faiss", None)  # as if the 'ann' extra were missing
    db = _copy(built, tmp_path)
    index, catalog, lists = _open(db)
    assert lists.status == "unavailable" and "needs faiss-cpu" in caplog.text
    assert len(index.dense_search(_queries(5, 1)[0], K, BOTH)) == K and lists.answered == 0
    assert not lists.busy() and not lists_path(db).exists()  # not tried again
    catalog.close()


def test_a_short_process_does_not_wait_at_exit_for_a_lists_build(built: Path,
                                                                  tmp_path: Path) -> None:
    """A CLI search opening an index with no partition file starts its build in the
    background and exits at once: the build (minutes at 1M) is the long-lived server's to
    finish, not a one-off command's. The child's k-means is held far past the parent's
    timeout, so a process that waited for it would be killed here."""
    import subprocess
    import textwrap

    db = _copy(built, tmp_path)
    script = textwrap.dedent(f"""
        import threading, time
        import numpy as np
        import docgraph.store.lists_build as lb
        from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog
        started = threading.Event()
        def held(*args, **kwargs):
            started.set()
            time.sleep(600)
        lb.train = held
        catalog = SQLiteCatalog({str(db)!r})
        index = EmbeddedChunkIndex(catalog, {DIM}, sidecar=False, graph_min_rows=100)
        assert started.wait(30), "no build started"
        query = np.ones({DIM}, dtype=np.float32) / np.sqrt({DIM})
        assert index.dense_search(query, 5, frozenset({{"big"}})), "the scan answers"
        print("answered", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "answered" in done.stdout
    assert not lists_path(db).exists()  # nothing half-written by the build cut short


def test_the_tuned_nprobe_holds_for_questions_between_passages(tmp_path: Path) -> None:
    """The build's nprobe must hold for questions, not only for the catalog's own rows: in a
    catalog of tight groups (a document's chunks), a row's 10 nearest other rows are its
    own group, in its own list, so tuning on them chose 2 lists; a question halfway between
    two passages has its neighbours in both groups and around them, and 2 lists lost a
    tenth of them (0.89). The question-like probes read enough lists."""
    dim, groups, per = 32, 200, 12
    rng = np.random.default_rng(5)
    centres = rng.standard_normal((groups, dim)).astype(np.float32)
    rows = _unit(np.repeat(centres, per, axis=0)
                 + 0.1 * rng.standard_normal((groups * per, dim)).astype(np.float32))
    codes, scales = int8_codes(rows)
    n = len(rows)
    rowids = np.arange(1, n + 1, dtype=np.int64)
    alive = np.ones(n, dtype=bool)
    lists = DenseLists(tmp_path / "c.db", dim, "catalog", min_rows=1)
    lists.update(rowids, alive, codes, scales, n, threads=1)
    assert lists.lists is not None
    pick = np.random.default_rng(9)
    questions = _unit(rows[pick.integers(0, n, 200)] + rows[pick.integers(0, n, 200)])
    decoded = codes.astype(np.float32) * scales[:, None]
    found = 0
    for q in questions:
        exact = np.argsort(-(decoded @ q), kind="stable")[:K]
        got = lists.candidates(rowids, n, n, alive, n, q, K, K)
        assert got is not None
        found += len(set(exact.tolist()) & set(np.concatenate(got).tolist()))
    assert found / (K * len(questions)) >= 0.98
    assert lists.lists.nprobe < len(lists.lists.centroids) // 4  # still a small share


def test_probes_of_duplicate_and_zero_rows_stay_finite() -> None:
    """A probe moves toward another row; where that row is the same vector (a duplicate,
    or the row itself) it moves toward a random direction instead, and a zero vector
    yields no NaN: the tuning never sees an undefined query."""
    rows = np.tile(_unit(np.ones((1, DIM), dtype=np.float32)), (50, 1))
    rows[7] = 0.0
    codes, scales = int8_codes(rows)
    probes = lists_build.probes(codes, scales, np.arange(50), np.random.default_rng(1))
    assert probes.shape == (50, DIM) and np.isfinite(probes).all()
    full = np.linalg.norm(probes, axis=1) > 0.9  # all but the zero row's
    assert full.sum() == 49
    assert np.allclose(np.linalg.norm(probes[full], axis=1), 1.0, atol=1e-3)
    assert np.allclose(probes[full] @ rows[0], lists_build.TUNING_COSINE, atol=1e-2)


@pytest.mark.parametrize("digest", [True, False], ids=["with_digest", "older_file"])
@pytest.mark.parametrize("change", ["none", "appended", "deleted", "deleted_and_appended",
                                    "replaced", "replaced_and_appended"])
def test_each_member_is_placed_at_its_rows_position(change: str, digest: bool) -> None:
    """Where each member of the lists sits among a snapshot's rows, and which rows no list
    holds (the tail every query scans): right whether the rows are the build's, rows were
    only appended since (the shortcuts that keep a 10M open fast: the file's digest of its
    sorted members, or in an older file without one the members compared), or some were
    deleted, or one was replaced by another row with the count and the last row unchanged
    (the digest must tell)."""
    rng = np.random.default_rng(3)
    members = np.sort(rng.choice(np.arange(1, 5000), size=1200, replace=False)).astype(np.int64)
    shuffled = rng.permutation(members)  # grouped by list, as the file holds them
    order = np.argsort(shuffled, kind="stable").astype(np.int32)
    rank = np.empty(len(order), np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    lists = dense_lists.Lists(np.eye(4, 8, dtype=np.float32), shuffled,
                              np.array([0, 300, 600, 900, 1200], dtype=np.int64), order, 2,
                              1200, *((rank, dense_lists.members_digest(members)) if digest
                                      else ()))
    rows = members
    if change in ("deleted", "deleted_and_appended"):
        rows = np.delete(rows, [0, 17, 600, 1199])
    if change.startswith("replaced"):  # a row no list holds, in a member's place
        stranger = next(r for r in range(int(rows[40]) + 1, int(rows[41])) if r not in rows)
        rows = np.sort(np.concatenate([np.delete(rows, 40), [stranger]])).astype(np.int64)
    if change.endswith("appended"):
        rows = np.concatenate([rows, np.arange(6000, 6050, dtype=np.int64)])
    part = DenseLists(Path("unused.db"), 8, "catalog", min_rows=1)
    placed = part.placement(rows, len(rows), lists)
    where = {int(r): i for i, r in enumerate(rows)}
    assert placed.pos.tolist() == [where.get(int(m), -1) for m in shuffled]
    assert placed.tail.tolist() == [i for i, r in enumerate(rows) if int(r) not in set(members)]


def test_the_dense_ann_state_says_which_way_answers(built: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``/metrics`` tells an operator who turned the lists on (minutes to build at
    10M): below the row threshold, building (the scan answers), loaded with the build's
    seconds, mapped again by the next process (no build), and unavailable without faiss.
    An index without the lists has no state."""
    db = _copy(built, tmp_path)
    catalog = SQLiteCatalog(db)
    assert EmbeddedChunkIndex(catalog, DIM, sidecar=False).dense_ann_state() is None
    waiting = EmbeddedChunkIndex(catalog, DIM, sidecar=False, graph_min_rows=10_000)
    assert waiting.dense_ann_state() == ("lists", "below_min_rows", 0.0)
    release, train = threading.Event(), lists_build.train

    def held(*args: Any, **kwargs: Any) -> Any:
        assert release.wait(60)
        return train(*args, **kwargs)

    monkeypatch.setattr(lists_build, "train", held)
    index = EmbeddedChunkIndex(catalog, DIM, sidecar=False, graph_min_rows=100)
    assert index.dense_ann_state() == ("lists", "building", 0.0)
    release.set()
    index.graph.wait()  # type: ignore[union-attr]
    kind, state, seconds = index.dense_ann_state() or ("", "", 0.0)
    assert (kind, state) == ("lists", "loaded") and seconds > 0
    again = EmbeddedChunkIndex(catalog, DIM, sidecar=False, graph_min_rows=100)
    assert again.dense_ann_state() == ("lists", "loaded", 0.0)  # mapped, not built
    catalog.close()
    monkeypatch.setitem(sys.modules, "faiss", None)
    lists_path(db).unlink()
    catalog = SQLiteCatalog(db)
    without = EmbeddedChunkIndex(catalog, DIM, sidecar=False, graph_min_rows=100)
    without.graph.wait()  # type: ignore[union-attr]
    assert without.dense_ann_state() == ("lists", "unavailable", 0.0)
    catalog.close()
