"""The BM25 lane's exact top ``k`` without scoring every matching row (MaxScore, see
:mod:`docgraph.store.bm25`): over random small posting indexes with term-major lists, an
unindexed tail, tombstones, compactions, two row kinds, namespaces and caller row masks,
every way of answering returns what a brute-force BM25 written out here returns (scores to
rounding, ranking with ties by row id), the ways agree bit for bit with each other, and the
pruned way leaves the long list of a common word unread."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from docgraph.model import DocumentRecord
from docgraph.sources.urn import normalize_urn
from docgraph.store import bm25, bm25_bounds, bm25_impact, bm25_parts, topk
from docgraph.store.lexical import PostingIndex, count_terms, term_ids
from docgraph.store.restricted import RestrictedRows
from docgraph.store.sidecar import read_arrays, write_arrays
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog
from docgraph.store.sqlite.index import sidecar_path
from docgraph.store.sqlite.query_view import EmbeddedQueryView
from docgraph.text import query_terms
from tests.store import test_store_sidecar as sidecar_tests
from tests.store.test_store import _write

VOCABULARY = 12  # term ids 0..11; queries may also ask for an id no row has
STRATEGIES: tuple[bm25.Strategy, ...] = ("auto", "pruned", "exhaustive", "rows")
# Pools that split a query into 2-4 row ranges (kept: each starts its threads once).
_SPLITTING = {parts: bm25_parts.Helpers(lambda p=parts - 1: p) for parts in (2, 3, 4)}


@dataclass
class Row:
    namespace: int
    kind: int
    tf: dict[int, float]
    length: float
    alive: bool = True


@dataclass
class Model:
    """The rows as plain Python, and BM25 over them computed the textbook way."""

    rows: dict[int, Row] = field(default_factory=dict)

    def scores(self, terms: list[int], kind: int) -> dict[int, float]:
        live = [r for r in self.rows.values() if r.alive and r.kind == kind]
        if not live:
            return {}
        total = sum(r.length for r in live)
        average = total / len(live) if total > 0 else 1.0
        out: dict[int, float] = {}
        for term in dict.fromkeys(terms):
            df = sum(1 for r in live if term in r.tf)
            if df == 0:
                continue
            idf = max(math.log((len(live) - df + 0.5) / (df + 0.5)), 1e-6)
            for rowid, r in self.rows.items():
                if r.alive and r.kind == kind and term in r.tf:
                    tf = r.tf[term]
                    norm = bm25.K1 * (1 - bm25.B + bm25.B * r.length / average)
                    out[rowid] = out.get(rowid, 0.0) + idf * tf * (bm25.K1 + 1) / (tf + norm)
        return out


def _blob(tf: dict[int, float]) -> bytes:
    ids = sorted(tf)
    return (np.array(ids, np.int32).tobytes()
            + np.array([tf[t] for t in ids], np.float32).tobytes())


def _append(index: PostingIndex, model: Model, rows: dict[int, Row]) -> None:
    ids = sorted(rows)
    index.append(np.array(ids, np.int64), np.array([rows[i].namespace for i in ids], np.int32),
                 np.array([rows[i].kind for i in ids], np.int8),
                 [_blob(rows[i].tf) for i in ids],
                 np.array([rows[i].length for i in ids], np.float32))
    model.rows.update(rows)


# Zipf-like: term 0 in most rows, term 11 in few (so common terms have long lists)
_term = st.integers(0, 39).map(lambda x: min(40 // (x + 1) - 1, VOCABULARY - 1))
_row = st.builds(
    lambda ns, kind, words, extra: Row(
        ns, kind, {t: float(words.count(t)) for t in set(words)}, float(len(words) + extra)),
    st.integers(1, 3), st.integers(0, 1), st.lists(_term, min_size=0, max_size=12),
    st.integers(0, 5))


@st.composite
def _histories(draw: st.DrawFn) -> tuple[PostingIndex, Model]:
    """An index grown by batches: some rebuild the term-major copy, some stay in the tail,
    some rows are deleted (sometimes enough to compact)."""
    index, model = PostingIndex(), Model()
    next_id = 1
    for _ in range(draw(st.integers(1, 4))):
        rows = draw(st.lists(_row, min_size=1, max_size=40))
        gap = draw(st.integers(0, 3))  # row ids need not be dense
        batch = {next_id + gap + i: r for i, r in enumerate(rows)}
        next_id += gap + len(rows)
        index.tail_postings = 0 if draw(st.booleans()) else 10**9
        _append(index, model, batch)
        alive = [i for i, r in model.rows.items() if r.alive]
        dead = draw(st.lists(st.sampled_from(alive), max_size=len(alive) // 2 + 1,
                             unique=True)) if alive and draw(st.booleans()) else []
        index.remove(np.array(sorted(dead), np.int64))
        for i in dead:
            model.rows[i].alive = False
    return index, model


def _mask_filter(allowed: set[int]):  # type: ignore[no-untyped-def]
    def keep(rowids: npt.NDArray[np.int64], n: int) -> npt.NDArray[np.bool_]:
        return np.isin(rowids[:n], np.array(sorted(allowed), np.int64))
    return keep


def _check_top_k(got: list[tuple[int, float]], want: dict[int, float], k: int) -> None:
    """``got`` is a top ``k`` of ``want`` (to rounding), best first, ties by row id."""
    assert len(got) == min(k, len(want))
    for (r1, s1), (r2, s2) in itertools.pairwise(got):
        assert (-s1, r1) < (-s2, r2)
    for rowid, score in got:
        assert score == pytest.approx(want[rowid], rel=1e-6)
    if got:
        last = got[-1][1]
        chosen = {r for r, _ in got}
        missing = [r for r, s in want.items() if s > last * (1 + 1e-6) and r not in chosen]
        assert not missing


Query = tuple[list[int], int, int, list[int], set[int] | None, Any, dict[int, float]]


def _query(data: st.DataObject, model: Model) -> Query:
    """A drawn query: (terms, k, kind, namespaces, the rows the caller may read or None,
    its row filter, the brute-force scores of what it may see)."""
    terms = data.draw(st.lists(st.integers(0, VOCABULARY), min_size=1, max_size=5))
    k = data.draw(st.integers(1, 8))
    kind = data.draw(st.integers(0, 1))
    namespaces = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3, unique=True))
    everyone = list(model.rows)
    allowed = (set(data.draw(st.lists(st.sampled_from(everyone), unique=True)))
               if everyone and data.draw(st.booleans()) else None)
    keep = _mask_filter(allowed) if allowed is not None else None
    want = {r: s for r, s in model.scores(terms, kind).items()
            if model.rows[r].namespace in namespaces and (allowed is None or r in allowed)}
    return terms, k, kind, namespaces, allowed, keep, want


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=_histories(), data=st.data())
def test_every_way_returns_the_exact_top_k(history: tuple[PostingIndex, Model],
                                           data: st.DataObject) -> None:
    index, model = history
    for _ in range(4):
        terms, k, kind, namespaces, allowed, keep, want = _query(data, model)
        everyone = list(model.rows)
        costs = {strategy: bm25.Cost() for strategy in STRATEGIES}
        parts = data.draw(st.integers(1, 4))
        with pytest.MonkeyPatch.context() as patch:
            if data.draw(st.booleans()):  # every walked list cut by its floor
                patch.setattr(bm25, "FLOOR_MIN_ROWS", 0)
            if parts > 1:  # in up to ``parts`` row ranges at once
                patch.setattr(bm25_parts, "SPLIT_MIN_POSTINGS", 0)
                patch.setattr(bm25_parts, "HELPERS", _SPLITTING[parts])
            answers = {strategy: index.search(terms, k, namespaces, kind, keep=keep,
                                              strategy=strategy, cost=costs[strategy])
                       for strategy in STRATEGIES}
        event(f"pruning skipped postings: "
              f"{costs['pruned'].postings_read < costs['exhaustive'].postings_read}")
        event(f"pruned in {costs['pruned'].parts} row ranges")
        note(f"query {terms} k {k} kind {kind} namespaces {namespaces} readable {allowed}: "
             f"{answers}")
        _check_top_k(answers["auto"], want, k)
        assert all(a == answers["exhaustive"] for a in answers.values())
        asked = np.array([*everyone, 10**6], np.int64)
        rescored = index.scores_for(terms, asked, namespaces, kind, keep=keep)
        assert rescored.keys() == want.keys()
        assert all(rescored[r] == pytest.approx(s, rel=1e-6) for r, s in want.items())


def _add(index: PostingIndex, first: int, tfs: list[dict[int, float]],
         lengths: Sequence[float] | float) -> None:
    """Append rows ``first``.. with these term frequencies and lengths (one for all, or one
    a row) in namespace 1, kind 0."""
    n = len(tfs)
    index.append(np.arange(first, first + n, dtype=np.int64), np.ones(n, np.int32),
                 np.zeros(n, np.int8), [_blob(tf) for tf in tfs],
                 np.broadcast_to(np.asarray(lengths, np.float32), (n,)).copy())


def _one_namespace(tfs: list[dict[int, float]]) -> PostingIndex:
    """An index of rows 1.. with these term frequencies (namespace 1, kind 0, length 8),
    answered by its term-major lists (no tail)."""
    index = PostingIndex()
    index.tail_postings = 0
    _add(index, 1, tfs, 8.0)
    return index


def test_a_lookup_that_rules_out_every_row_of_a_walked_list_leaves_the_search_whole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Four words; a row appended since the term-major copy holds all four (its score is
    the threshold before any list is walked); the walked list's 50 rows hold only their
    own word, so the first lookup (the next word, absent from all) drops every one of them
    with two lookups still to come. The search answers (it raised on an empty array)."""
    monkeypatch.setattr(bm25, "FLOOR_MIN_ROWS", 0)
    rows = ([{0: 5.0}] * 50 + [{1: 5.0}] * 100 + [{2: 1.0}] * 300 + [{3: 1.0}] * 300)
    index = PostingIndex()
    index.tail_postings = 0
    n = len(rows)
    _add(index, 1, rows, 10.0)
    index.tail_postings = 10**9  # the next row stays in the tail
    _add(index, n + 1, [{0: 5.0, 1: 5.0, 2: 1.0, 3: 1.0}], 10.0)
    cost = bm25.Cost()
    got = index.search([0, 1, 2, 3], 1, [1], strategy="pruned", cost=cost)
    assert got == index.search([0, 1, 2, 3], 1, [1], strategy="exhaustive")
    assert got[0][0] == n + 1 and cost.lookups == 50  # looked up once, then none was left


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_words_alone_in_their_rows_with_strong_rows_in_the_tail_answer_exactly(
        data: st.DataObject) -> None:
    """Where the pruned lane's rarer branches are: 3-6 words, each in a run of rows alone
    (or with one other), rows appended since the term-major copy that hold most of the
    words at high frequencies (their scores are thresholds before any list is walked), so
    whole walked lists are dropped at once, with every walked list cut by its floor; k 1-5;
    lists in impact order or not, one search or row ranges. Every way answers as the
    exhaustive one (the lane raised on such a query once)."""
    words = data.draw(st.integers(3, 6))
    main: list[dict[int, float]] = []
    lengths: list[float] = []
    for word in range(words):
        tf, length = data.draw(st.sampled_from([1.0, 2.0, 5.0])), data.draw(
            st.sampled_from([5.0, 10.0, 40.0]))
        for _ in range(data.draw(st.integers(1, 60))):
            row = {word: tf}
            if data.draw(st.integers(0, 9)) == 0:  # now and then a second word
                row[data.draw(st.integers(0, words - 1))] = 1.0
            main.append(row)
            lengths.append(length)
    tail = data.draw(st.lists(st.dictionaries(st.integers(0, words - 1), st.sampled_from(
        [1.0, 5.0, 9.0]), min_size=1), min_size=1, max_size=3))
    index = PostingIndex()
    index.tail_postings = 0
    n = len(main)
    with pytest.MonkeyPatch.context() as patch:  # lists of 1+ postings in impact order, or none
        patch.setattr(bm25_bounds, "IMPACT_MIN", data.draw(st.sampled_from([1, 10**9])))
        patch.setattr(bm25_bounds, "IMPACT_BLOCK", data.draw(st.integers(1, 3)))
        _add(index, 1, main, lengths)
    index.tail_postings = 10**9  # these stay in the tail
    _add(index, n + 1, tail, 10.0)
    query = data.draw(st.permutations(range(words)))[:data.draw(st.integers(3, words))]
    k = data.draw(st.integers(1, 5))
    parts = data.draw(st.integers(1, 3))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bm25, "FLOOR_MIN_ROWS", 0)
        patch.setattr(bm25_impact, "SEED", data.draw(st.integers(1, 4)))
        if parts > 1:
            patch.setattr(bm25_parts, "SPLIT_MIN_POSTINGS", 0)
            patch.setattr(bm25_parts, "HELPERS", _SPLITTING[parts])
        answers = {way: index.search(query, k, [1], strategy=way) for way in STRATEGIES}
    note(f"query {query} k {k} tail {tail} parts {parts}: {answers}")
    assert all(a == answers["exhaustive"] for a in answers.values())


def test_the_long_list_of_a_common_word_is_not_read() -> None:
    """A rare word and a word in every row, ``k`` = 5: the five rows with the rare word
    outscore anything the common word alone can add, so its 20,000 postings stay unread."""
    index = _one_namespace([{0: 1.0, 1: 1.0} if i % 1000 == 0 else {0: 1.0 + i % 3}
                            for i in range(20_000)])
    cost = bm25.Cost()
    got = index.search([0, 1], 5, [1], strategy="pruned", cost=cost)
    assert got == index.search([0, 1], 5, [1], strategy="exhaustive")
    assert [r for r, _ in got] == [1, 1001, 2001, 3001, 4001]
    assert cost.postings_read == 20 and cost.rows_scored == 20
    auto = bm25.Cost()
    assert index.search([0, 1], 5, [1], cost=auto) == got and auto.postings_read == 20


def test_rows_of_the_first_list_that_cannot_reach_the_top_k_are_not_looked_up() -> None:
    """A word in 2,000 of 20,000 rows, five of them saying it three times, and a word in
    every row (idf at its floor), ``k`` = 5: the five rows' own addends already outscore
    what any other row of the first list can reach with the common word's bound, so only
    those five are looked up in the common word's list, not all 2,000 (at 10M chunks that
    lookup was 735k binary searches in a 5.6M list, the lane's slowest query)."""
    index = _one_namespace([{0: 1.0, 1: (3.0 if i % 4000 == 0 else 1.0)} if i % 10 == 0
                            else {0: 1.0} for i in range(20_000)])
    cost = bm25.Cost()
    with pytest.MonkeyPatch.context() as patch:  # the rule for long lists, on a short one
        patch.setattr(bm25, "FLOOR_MIN_ROWS", 1_000)
        got = index.search([0, 1], 5, [1], strategy="pruned", cost=cost)
    assert got == index.search([0, 1], 5, [1], strategy="exhaustive")
    assert [r for r, _ in got] == [1, 4001, 8001, 12001, 16001]
    assert cost.postings_read == 2_000 and cost.rows_scored == 5


def test_rows_that_lack_the_next_term_are_not_looked_up_in_the_rest() -> None:
    """Three words: the rarest in 2,000 of 20,000 rows, the next in 5,000 rows of which
    100 share the rarest's, the third in every row; ``k`` = 5. Once the 2,000 rows are
    looked up in the second word's list, the 100 with both outscore what any row of the
    rarest word alone can reach with the third word's bound, so only those 100 are looked
    up in the third word's list (20,000 postings), not all 2,000."""
    tfs = []
    for i in range(20_000):
        tf = {2: 1.0}
        if i % 10 == 0:
            tf[0] = 1.0
        if (i % 10 == 0 and i % 200 == 0) or (i % 10 and i % 4 == 1):
            tf[1] = 1.0
        tfs.append(tf)
    index = _one_namespace(tfs)
    cost = bm25.Cost()
    with pytest.MonkeyPatch.context() as patch:  # the rule for long lists, on a short one
        patch.setattr(bm25, "FLOOR_MIN_ROWS", 1_000)
        got = index.search([0, 1, 2], 5, [1], strategy="pruned", cost=cost)
    assert got == index.search([0, 1, 2], 5, [1], strategy="exhaustive")
    assert [r for r, _ in got] == [1, 201, 401, 601, 801]
    assert cost.postings_read == 2_000 and cost.rows_scored == 2_000
    assert cost.lookups == 2_000 + 100


def test_a_write_between_two_searches_is_seen_through_the_kept_mask() -> None:
    """The mask of the rows a query's filters let in is kept per snapshot
    (``store/matching.py``): a row deleted, one appended and a namespace asked anew between
    searches are each seen by the next search, through the mask (every list filtered by
    it here), not through a mask of the snapshot before."""
    index = _one_namespace([{0: 1.0 + i % 3} for i in range(3_000)])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bm25, "FLOOR_MIN_ROWS", 1)
        first = index.search([0], 5, [1], strategy="pruned")
        index.remove(np.array([first[0][0]], np.int64))
        second = index.search([0], 5, [1], strategy="pruned")
        assert first[0][0] not in [r for r, _ in second]
        assert second == index.search([0], 5, [1], strategy="exhaustive")
        index.append(np.array([5_000], np.int64), np.array([2], np.int32),
                     np.zeros(1, np.int8), [_blob({0: 9.0})], np.full(1, 1.0, np.float32))
        assert index.search([0], 5, [1, 2], strategy="pruned")[0][0] == 5_000
        assert 5_000 not in [r for r, _ in index.search([0], 5, [1], strategy="pruned")]
        assert index.search([0], 5, [2], strategy="pruned") == [
            (5_000, index.search([0], 1, [1, 2], strategy="exhaustive")[0][1])]


# ---------------------------------------------------------------- through the embedded index


def _chunk_texts(rng: np.random.Generator, n: int) -> list[str]:
    vocabulary = [f"w{i}" for i in range(60)]
    weights = 1.0 / np.arange(1, 61)
    return [" ".join(rng.choice(vocabulary, size=int(rng.integers(3, 30)),
                                p=weights / weights.sum())) for _ in range(n)]


def _brute_force(catalog: SQLiteCatalog, written: dict[int, tuple[str, str, str]],
                 query: str) -> dict[str, dict[int, float]]:
    """BM25 of every live text chunk by namespace, from the texts written (tokenized by
    :func:`count_terms`, scored as :class:`Model` does)."""
    model = Model()
    ids = term_ids(catalog.connection(), query_terms(query))
    for rowid, (namespace, crumb, text) in written.items():
        (tf, length), = count_terms([(crumb, text)])
        model.rows[rowid] = Row(ord(namespace), 0, {ids.get(t, -1 - i): w for i, (t, w) in
                                                    enumerate(tf.items())}, float(length))
    return {"scores": model.scores(list(ids.values()), 0),
            "namespace": {r: row.namespace for r, row in model.rows.items()}}  # type: ignore[dict-item]


def test_the_embedded_index_answers_the_exact_top_k(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A real catalog and :class:`EmbeddedChunkIndex`: term-major lists built at load and
    mapped from the sidecar, documents written after (the tail) and deleted (tombstones),
    two namespaces and a caller who may read part of the rows: the lane returns the brute-
    force top ``k``, and the same as the exhaustive way."""
    rng = np.random.default_rng(3)
    catalog = SQLiteCatalog(tmp_path / "c.db")
    sources = {ns: catalog.add_source(normalize_urn(tmp_path / ns), ns) for ns in "ab"}
    written: dict[int, tuple[str, str, str]] = {}
    documents: dict[str, DocumentRecord] = {}

    def write(ns: str, path: str, count: int) -> None:
        texts = _chunk_texts(rng, count)
        vectors = rng.standard_normal((count, 8)).astype(np.float32)
        documents[path] = _write(catalog, sources[ns], path, texts, vectors / np.linalg.norm(
            vectors, axis=1, keepdims=True))
        rowids = [r for (r,) in catalog.connection().execute(
            "SELECT id FROM chunks WHERE document_id = ? ORDER BY chunk_index",
            (documents[path].id,))]
        for rowid, text in zip(rowids, texts, strict=True):
            written[rowid] = (ns, f"[{path}]", text)

    for i in range(16):
        write("ab"[i % 2], f"d{i}.txt", 40)
    monkeypatch.setattr(PostingIndex, "tail_postings", 0)  # the load builds term-major lists
    first = EmbeddedChunkIndex(catalog, 8)
    assert first.postings._snap.main_rows == len(written) and first.save_sidecar() > 0
    monkeypatch.setattr(PostingIndex, "tail_postings", 10**9)  # later writes stay in the tail
    index = EmbeddedChunkIndex(catalog, 8)
    assert index.sidecar_status == "loaded"
    write("a", "late.txt", 30)
    catalog.delete_document(documents["d3.txt"])
    written = {r: w for r, w in written.items() if w[1] != "[d3.txt]"}
    index.sync()
    snap = index.postings._snap
    assert snap.main_rows < snap.n and snap.dead == 40  # a tail and tombstones

    readable = {r for r in written if r % 3}
    keep = RestrictedRows([(frozenset({"group:x"}), sorted(set(written) - readable))]
                          ).row_filter(frozenset({"user:y"}))
    views = {"all": (index.for_query(), set(written)),
             "some": (EmbeddedQueryView(index, keep), readable)}
    for query in ("w0 w7", "w45 w1 w2", "w59", "w3 w30 w31 w0 late", "d5 w9"):
        truth = _brute_force(catalog, written, query)
        for namespaces in ("a", "b", "ab"):
            for name, (view, allowed) in views.items():
                want = {r: s for r, s in truth["scores"].items()
                        if chr(truth["namespace"][r]) in namespaces and r in allowed}
                for k in (1, 5, 50):
                    got = view.lexical_search(query, k, frozenset(namespaces))
                    pairs = [(r.rowid, r.score) for r in got]
                    _check_top_k(pairs, want, k)
                    index.postings.strategy = "exhaustive"
                    try:
                        again = view.lexical_search(query, k, frozenset(namespaces))
                    finally:
                        index.postings.strategy = "auto"
                    assert [(r.rowid, r.score) for r in again] == pairs, (query, name, k)
    catalog.close()


def test_a_sidecar_without_the_term_bounds_is_rebuilt_not_misread(tmp_path: Path) -> None:
    """Pruning trusts the bounds: a sidecar of format 3 (none) is foreign, and one whose
    bounds do not match its lists is corrupt; both are rebuilt from the catalog."""
    db = tmp_path / "c.db"
    sidecar_tests._catalog(db).close()
    sidecar_tests._saved(db)
    meta, arrays = read_arrays(sidecar_path(db))
    assert "posting.term_bound" in arrays and meta["format"] == 4
    write_arrays(sidecar_path(db), {**meta, "format": 3},
                 {k: a for k, a in arrays.items() if k != "posting.term_bound"})
    index, catalog = sidecar_tests._opened(db)
    assert index.sidecar_status == "foreign" and index.rows_read == 150
    catalog.close()
    sidecar_tests._saved(db)
    meta, arrays = read_arrays(sidecar_path(db))
    write_arrays(sidecar_path(db), meta, {**arrays, "posting.term_bound": np.zeros(3, np.float32)})
    index, catalog = sidecar_tests._opened(db)
    assert index.sidecar_status == "corrupt"
    assert sidecar_tests._answers(index) == sidecar_tests._rebuilt(db)
    catalog.close()


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.sampled_from([0.5, 1.25, 2.0, 2.0000001, 3.5])
                       | st.floats(0.0, 10.0, allow_nan=False), max_size=300),
       k=st.integers(1, 40), direct=st.sampled_from([2, 16, 1 << 16]),
       sample=st.sampled_from([1, 7, 4096]), sort_max=st.sampled_from([4, 1 << 18]))
def test_the_k_largest_scores_are_exact_whatever_their_ties(
        values: list[float], k: int, direct: int, sample: int, sort_max: int) -> None:
    """The threshold of the pruned way and the cut of every ranking come from
    ``topk.largest``: the k largest scores as a multiset, whichever path it takes (partition
    of a small array, a sampled cut then a sort, a cut the sample placed too high, a vast
    tie above the cut), on arrays of a few distinct values as a query of common words gives
    (the case that made ``np.partition`` slow at 10M chunks)."""
    array = np.asarray(values, dtype=np.float64)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(topk, "LARGEST_DIRECT", direct)
        patch.setattr(topk, "LARGEST_SAMPLE", sample)
        patch.setattr(topk, "LARGEST_SORT", sort_max)
        got = np.sort(topk.largest(array, k))
    assert np.array_equal(got, np.sort(array)[max(0, len(array) - k):])


@settings(max_examples=300, deadline=None)
@given(met=st.lists(st.sampled_from([0.5, 2.0, 3.5]) | st.floats(0.0, 10.0), max_size=40),
       addends=st.lists(st.sampled_from([0.5, 1.25, 2.0, 2.0000001, 3.5])
                        | st.floats(0.0, 10.0, allow_nan=False), max_size=300),
       k=st.integers(1, 40), sample=st.sampled_from([1, 7, 4096]))
def test_the_floor_from_a_walked_list_never_passes_the_kth_best(
        met: list[float], addends: list[float], k: int, sample: int) -> None:
    """The pruned way drops a list's rows that cannot reach a floor before looking their
    other terms up; the floor must have ``k`` scores (met, or addends of rows whose full
    score is at least that) at or above it, so it never passes the final ``k``-th best; from
    a sample holding every addend it is found."""
    scores, parts = np.asarray(met, np.float64), np.asarray(addends, np.float64)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(topk, "LARGEST_SAMPLE", sample)
        floor = topk.floor(scores, parts, k)
    both = np.concatenate([scores, parts])
    if floor > -math.inf:
        assert np.count_nonzero(both >= floor) >= k
    elif sample >= len(parts) and len(parts) >= 8 * k:
        raise AssertionError("no floor from a full sample")
