"""Compact dense codes (sign + int8, exact re-scoring): recall against exact search on
clustered and on real MiniLM vectors, under a selective namespace filter, and the index
following the catalog through adds, replaces and deletes, in this process and another."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import numpy.typing as npt
import pytest

from docgraph.embedding.embedders import MiniLMEmbedder
from docgraph.sources.urn import normalize_urn
from docgraph.store import quantized
from docgraph.store.dense import DenseMatrix
from docgraph.store.quantized import QuantizedDenseMatrix, int8_codes, sign_words
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog
from tests.conftest import REPO, SAMPLE_CORPUS
from tests.store.test_store import _write

K = 10


def _unit(m: np.ndarray) -> np.ndarray:
    return (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)


def _clustered(rng: np.random.Generator, n: int, d: int, clusters: int) -> np.ndarray:
    """Unit vectors around random centres (cosine ~0.5 within a cluster, as real
    embeddings; uniform noise has no neighbours worth finding)."""
    centres = _unit(rng.standard_normal((clusters, d)))
    return _unit(centres[rng.integers(clusters, size=n)]
                 + rng.standard_normal((n, d)) / np.sqrt(d))


def _fetch_from(rowids: np.ndarray, vectors: np.ndarray):  # type: ignore[no-untyped-def]
    """A ``VectorFetch`` over arrays, counting the rows it is asked for."""
    position = {int(r): i for i, r in enumerate(rowids)}
    asked: list[int] = []

    def fetch(ids: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], np.ndarray]:
        asked.append(len(ids))
        found = np.array([r for r in ids if int(r) in position], dtype=np.int64)
        return found, vectors[[position[int(r)] for r in found]].reshape(-1, vectors.shape[1])

    fetch.asked = asked  # type: ignore[attr-defined]
    return fetch


def _recall(codes: QuantizedDenseMatrix, exact: DenseMatrix, queries: np.ndarray,
            namespaces: list[int]) -> float:
    hits = 0
    for q in queries:
        want = {r.rowid for r in exact.search(q, K, namespaces)}
        got = codes.search(q, K, namespaces)
        hits += len(want & {r.rowid for r in got})
    return hits / (K * len(queries))


def _pair(vectors: np.ndarray, namespaces: np.ndarray, **pool: int
          ) -> tuple[QuantizedDenseMatrix, DenseMatrix]:
    rowids = np.arange(1, len(vectors) + 1, dtype=np.int64)
    codes = QuantizedDenseMatrix(vectors.shape[1], _fetch_from(rowids, vectors), **pool)
    exact = DenseMatrix(vectors.shape[1])
    for matrix in (codes, exact):
        matrix.append(rowids, namespaces, vectors)
    return codes, exact


def test_codes_round_trip_within_int8_error():
    rng = np.random.default_rng(0)
    v = _unit(rng.standard_normal((50, 384)))
    codes, scales = int8_codes(v)
    assert np.abs(codes.astype(np.float32) * scales[:, None] - v).max() <= scales.max() / 2 + 1e-7
    words = sign_words(v)
    assert words.shape == (50, 6)
    assert int(np.bitwise_count(words[0] ^ sign_words(-v[:1])[0]).sum()) == 384


def test_clustered_recall_and_exact_scores_with_a_one_percent_namespace():
    rng = np.random.default_rng(1)
    n, d = 20_000, 384
    vectors = _clustered(rng, n, d, clusters=n // 500)
    namespaces = np.where(np.arange(n) % 100 == 0, 2, 1).astype(np.int32)  # ns 2: 1%
    codes, exact = _pair(vectors, namespaces, min_pool=800)  # 4% of the rows
    queries = _unit(vectors[rng.choice(n, 40, replace=False)]
                    + 0.5 * rng.standard_normal((40, d)) / np.sqrt(d))
    assert _recall(codes, exact, queries, [1, 2]) >= 0.98
    assert _recall(codes, exact, queries, [2]) == 1.0  # 200 rows: no Hamming stage
    # The scores are exact cosines, and at most max(2k, k + 50) rows are read back.
    got = codes.search(queries[0], K, [1, 2])
    for row in got:
        assert row.score == pytest.approx(float(vectors[row.rowid - 1] @ queries[0]), abs=1e-6)
    assert max(codes.fetch.asked) <= K + 50  # type: ignore[attr-defined]
    assert {r.rowid for r in got} <= {r.rowid for r in exact.search(queries[0], 50, [1, 2])}


def test_a_tiny_pool_loses_recall_so_the_recall_test_can_fail():
    rng = np.random.default_rng(1)
    vectors = _clustered(rng, 20_000, 384, clusters=40)
    codes, exact = _pair(vectors, np.ones(20_000, dtype=np.int32), min_pool=100, pool_per_k=1)
    queries = vectors[rng.choice(20_000, 20, replace=False)]
    assert _recall(codes, exact, queries, [1]) < 0.98


def _sentences() -> list[str]:
    out: list[str] = []
    for path in sorted(SAMPLE_CORPUS.rglob("*.md")):
        for line in path.read_text(encoding="utf-8").splitlines():
            words = line.strip("#-* ").split()
            if len(words) >= 6:
                out.append(" ".join(words))
    return list(dict.fromkeys(out))


@pytest.mark.e2e  # embeds with the real model
def test_real_minilm_vectors_recall_with_small_pools():
    texts = _sentences()
    assert len(texts) >= 300, "the sample corpus should give a few hundred sentences"
    vectors = np.asarray(MiniLMEmbedder().embed_documents(texts), dtype=np.float32)
    n = len(vectors)
    rng = np.random.default_rng(2)
    namespaces = np.where(rng.random(n) < 0.1, 2, 1).astype(np.int32)
    # Pools far below the defaults, so that every stage cuts on a few hundred rows.
    codes, exact = _pair(vectors, namespaces, min_pool=60, pool_per_k=6)
    queries = vectors[rng.choice(n, 60, replace=False)]
    assert _recall(codes, exact, queries, [1, 2]) >= 0.95
    assert _recall(codes, exact, queries, [2]) == 1.0


def _chunks(rng: np.random.Generator, n: int) -> np.ndarray:
    return _unit(rng.standard_normal((n, 16)))


def _same_as_exact(catalog: SQLiteCatalog, queries: np.ndarray) -> None:
    """The codes index (fresh and long-lived alike) answers as an exact index built now."""
    exact = EmbeddedChunkIndex(catalog, 16, exact=True)
    for index in (_same_as_exact.live, EmbeddedChunkIndex(catalog, 16)):  # type: ignore[attr-defined]
        for q in queries:
            for ns in ({"a"}, {"b"}, {"a", "b"}):
                got = index.dense_search(q, 5, frozenset(ns))
                want = exact.dense_search(q, 5, frozenset(ns))
                assert [r.rowid for r in got] == [r.rowid for r in want]
                assert [r.score for r in got] == pytest.approx([r.score for r in want])
        assert len(index) == len(exact)


def test_adds_replaces_deletes_between_queries(tmp_path):
    rng = np.random.default_rng(3)
    catalog = SQLiteCatalog(tmp_path / "c.db")
    sources = {ns: catalog.add_source(normalize_urn(tmp_path / ns), ns) for ns in "ab"}
    live = EmbeddedChunkIndex(catalog, 16)
    _same_as_exact.live = live  # type: ignore[attr-defined]
    queries = _chunks(rng, 5)
    docs = {}
    for i in range(12):
        ns = "ab"[i % 2]
        docs[i] = _write(catalog, sources[ns], f"d{i}.txt", [f"text {i} {j}" for j in range(30)],
                         _chunks(rng, 30))
    _same_as_exact(catalog, queries)
    old = live.dense_search(queries[0], 1, frozenset({"a", "b"}))[0]
    for i in (0, 3, 5):  # replace: new vectors, new row ids; the old ones are tombstoned
        _write(catalog, sources["ab"[i % 2]], f"d{i}.txt", [f"new {i} {j}" for j in range(20)],
               _chunks(rng, 20))
    for i in (7, 8):
        catalog.delete_document(docs[i])
    _same_as_exact(catalog, queries)
    assert live.vectors([old.rowid]) == {} or old.rowid in {
        r.rowid for r in live.dense_search(queries[0], 400, frozenset({"a", "b"}))}
    assert len(live.vectors(
        [r.rowid for r in live.dense_search(queries[1], 5, frozenset({"a"}))])) == 5


def test_writes_of_another_process_are_visible_to_a_running_index(tmp_path):
    rng = np.random.default_rng(4)
    db = tmp_path / "c.db"
    catalog = SQLiteCatalog(db)
    source = catalog.add_source(normalize_urn(tmp_path / "a"), "a")
    catalog.add_source(normalize_urn(tmp_path / "b"), "b")
    _write(catalog, source, "one.txt", ["first text here"], _chunks(rng, 1))
    live = EmbeddedChunkIndex(catalog, 16)
    _same_as_exact.live = live  # type: ignore[attr-defined]
    assert len(live) == 1
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        import numpy as np
        sys.path.insert(0, {str(REPO)!r})
        from docgraph.sources.urn import normalize_urn
        from docgraph.store.sqlite import SQLiteCatalog
        from tests.store.test_store import _write
        tmp = Path({str(tmp_path)!r})
        catalog = SQLiteCatalog(tmp / "c.db")
        rng = np.random.default_rng(5)
        for ns in "ab":
            source = catalog.add_source(normalize_urn(tmp / ns), ns)
            for i in range(3):
                m = rng.standard_normal((40, 16)).astype(np.float32)
                m /= np.linalg.norm(m, axis=1, keepdims=True)
                _write(catalog, source, f"{{ns}}{{i}}.txt", [f"t {{j}}" for j in range(40)], m)
        m = rng.standard_normal((2, 16)).astype(np.float32)
        _write(catalog, catalog.add_source(normalize_urn(tmp / "a"), "a"), "one.txt",
               ["replaced", "twice"], m / np.linalg.norm(m, axis=1, keepdims=True))
        catalog.close()
    """)
    subprocess.run([sys.executable, "-c", script], check=True)
    assert len(live) == 1  # not synced yet: the next query follows the catalog
    _same_as_exact(catalog, _chunks(rng, 4))
    assert len(live) == 6 * 40 + 2


def test_nearest_keeps_exactly_the_smallest_distances_and_breaks_ties_by_position():
    from docgraph.store.quantized import nearest

    rng = np.random.default_rng(7)
    distances = rng.integers(0, 40, 5000).astype(np.uint16)
    for count in (1, 17, 500, 4999):
        picked = nearest(distances, count)
        assert len(picked) == count
        want = np.sort(distances)[:count]
        assert np.array_equal(np.sort(distances[picked]), want)
        cut = int(want[-1])
        ties = np.flatnonzero(distances == cut)
        kept = np.intersect1d(picked, ties)
        assert np.array_equal(kept, ties[: len(kept)])  # the first tied rows, by position


def test_in_namespaces_matches_isin_including_ids_beyond_the_requested_ones():
    from docgraph.store.rows import in_namespaces

    namespaces = np.array([1, 2, 3, 7, 2, 9, 1], dtype=np.int32)
    for ids in ([1], [2, 9], [3, 7], [4], [9]):
        assert np.array_equal(in_namespaces(namespaces, ids), np.isin(namespaces, ids)), ids


@pytest.mark.parametrize("dimension", [64, 100, 384])
def test_the_blocked_masked_hamming_scan_equals_a_plain_popcount(monkeypatch, dimension):
    from docgraph.store import quantized
    from docgraph.store.quantized import NOT_ALLOWED, hamming, sign_words

    rng = np.random.default_rng(dimension)
    vectors = rng.standard_normal((70_001, dimension)).astype(np.float32)
    words = sign_words(vectors)
    query = sign_words(rng.standard_normal((1, dimension)).astype(np.float32))[0]
    plain = np.unpackbits((words ^ query).view(np.uint8), axis=1).sum(axis=1)
    allowed = rng.random(len(words)) < 0.7
    for block in (1_000, 16_384, 100_000):  # several blocks per thread's range, and one
        monkeypatch.setattr(quantized, "HAMMING_BLOCK", block)
        assert np.array_equal(hamming(words, query), plain)
        masked = hamming(words, query, allowed)
        assert np.array_equal(masked[allowed], plain[allowed])
        assert (masked[~allowed] == NOT_ALLOWED).all()


def test_search_over_a_mostly_allowed_filter_matches_search_over_its_rows_alone():
    """The scan that masks excluded rows (most rows allowed) and the one that gathers the
    allowed rows (a selective filter) pick the same pool, ties included."""
    rng = np.random.default_rng(3)
    vectors = _clustered(rng, 30_000, 32, 40)
    namespaces = (rng.random(30_000) < 0.2).astype(np.int32)  # 80 % in namespace 0
    codes = QuantizedDenseMatrix(32, _fetch_from(np.arange(1, 30_001), vectors), min_pool=300)
    codes.append(np.arange(1, 30_001, dtype=np.int64), namespaces, vectors)
    only = np.flatnonzero(namespaces == 0)
    alone = QuantizedDenseMatrix(32, _fetch_from(only + 1, vectors[only]), min_pool=300)
    alone.append((only + 1).astype(np.int64), np.zeros(len(only), np.int32), vectors[only])
    for q in _unit(rng.standard_normal((20, 32)).astype(np.float32)):
        assert codes.search(q, 10, [0]) == alone.search(q, 10, [0])


def _sparse_namespace(d: int = 128) -> tuple[QuantizedDenseMatrix, DenseMatrix, np.ndarray]:
    """A 10 % namespace with 5 rows in each cluster of 50 (as a 1 % namespace of 10M with
    clusters of 500): a query's 10 nearest there are half its own cluster's rows and half
    far ones, which signs rank poorly; the pool is 200 of its 4,000 rows."""
    rng = np.random.default_rng(3)
    n = 40_000
    vectors = _clustered(rng, n, d, clusters=n // 50)
    namespaces = np.where(np.arange(n) % 10 == 0, 2, 1).astype(np.int32)
    codes, exact = _pair(vectors, namespaces, min_pool=200, pool_per_k=1)
    members = np.flatnonzero(namespaces == 2)
    queries = _unit(vectors[rng.choice(members, 30, replace=False)]
                    + 0.5 * rng.standard_normal((30, d)) / np.sqrt(d))
    return codes, exact, queries


def test_a_selective_filter_widens_its_pool_until_the_far_nearest_are_in_it(monkeypatch):
    """With the pool fixed (no margin) a tenth of the nearest rows are lost; widened while
    the best lie within ``SIGN_MARGIN`` bits of the pool's edge, they are found."""
    codes, exact, queries = _sparse_namespace()
    assert _recall(codes, exact, queries, [2]) >= 0.97
    monkeypatch.setattr(quantized, "SIGN_MARGIN", 0)
    assert _recall(codes, exact, queries, [2]) < 0.95


def _count_scored(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of rows each int8 scoring step scores, appended as searches run."""
    scored: list[int] = []
    real = quantized._approx

    def counting(s, rows, q):  # type: ignore[no-untyped-def]
        scored.append(len(rows))
        return real(s, rows, q)

    monkeypatch.setattr(quantized, "_approx", counting)
    return scored


def test_a_selective_filter_with_near_neighbours_scores_only_its_first_pool(monkeypatch):
    """Clusters of 500 with 50 rows each in the namespace: the nearest are close, clear of
    the pool's edge, and no query scores more rows than the pool (widening costs nothing
    where it is not needed)."""
    rng = np.random.default_rng(4)
    n = 40_000
    vectors = _clustered(rng, n, 384, clusters=n // 500)
    namespaces = np.where(np.arange(n) % 10 == 0, 2, 1).astype(np.int32)
    codes, exact = _pair(vectors, namespaces, min_pool=200, pool_per_k=1)
    scored = _count_scored(monkeypatch)
    members = np.flatnonzero(namespaces == 2)
    queries = _unit(vectors[rng.choice(members, 20, replace=False)]
                    + 0.5 * rng.standard_normal((20, 384)) / np.sqrt(384))
    assert _recall(codes, exact, queries, [2]) == 1.0
    assert scored == [200] * len(queries)


def test_asked_for_a_hundred_the_pool_widens_for_the_top_ten_only(monkeypatch):
    """The hybrid asks for 100: the widening serves the 10 best (``SIGN_TOP``), so the top
    10 of a 100 are as found as when 10 are asked for, without scoring every row."""
    codes, exact, queries = _sparse_namespace(384)
    scored = _count_scored(monkeypatch)
    hits, totals = 0, []
    for q in queries:
        scored.clear()
        got = [r.rowid for r in codes.search(q, 100, [2])[:K]]
        hits += len(set(got) & {r.rowid for r in exact.search(q, K, [2])})
        totals.append(sum(scored))
    assert hits / (K * len(queries)) >= 0.97
    assert np.median(totals) < 3000  # of the namespace's 4,000 (all, widened for the 100th)
