"""Long posting lists in impact order (:mod:`docgraph.store.bm25_impact`): MaxScore seeds
its threshold from their top postings and walks each only down to where it can still lift a
row to it; the answer is bit for bit the exhaustive way's (random indexes with a tail,
tombstones, namespaces and caller masks, lists in impact order in blocks of one to three),
and a long list of a common word is read only down to its ``k``-th best."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from docgraph.store import bm25, bm25_bounds, bm25_impact, bm25_parts
from docgraph.store.lexical import PostingIndex
from docgraph.store.sidecar import read_arrays, write_arrays
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog
from docgraph.store.sqlite.index import sidecar_path
from tests.store import test_store_sidecar as sidecar_tests
from tests.store.test_bm25_topk import _SPLITTING, _add, _check_top_k, _histories, _query

WAYS: tuple[bm25.Strategy, ...] = ("auto", "pruned", "exhaustive")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_lists_in_impact_order_give_the_exact_top_k(data: st.DataObject) -> None:
    with pytest.MonkeyPatch.context() as patch:  # lists of 1-6+ postings, blocks of 1-3
        patch.setattr(bm25_bounds, "IMPACT_MIN", data.draw(st.integers(1, 6)))
        patch.setattr(bm25_bounds, "IMPACT_BLOCK", data.draw(st.integers(1, 3)))
        patch.setattr(bm25_impact, "SEED", data.draw(st.integers(1, 4)))
        patch.setattr(bm25_impact, "PREFIX_SHARE", data.draw(st.sampled_from([0.5, 1.0])))
        index, model = data.draw(_histories())
        for _ in range(4):
            terms, k, kind, namespaces, allowed, keep, want = _query(data, model)
            if data.draw(st.booleans()):  # every read cut by its floor
                patch.setattr(bm25, "FLOOR_MIN_ROWS", 0)
            parts = data.draw(st.integers(1, 3))
            if parts > 1:  # in up to ``parts`` row ranges at once, each its part of the orders
                patch.setattr(bm25_parts, "SPLIT_MIN_POSTINGS", 0)
                patch.setattr(bm25_parts, "HELPERS", _SPLITTING[parts])
            costs = {way: bm25.Cost() for way in WAYS}
            answers = {way: index.search(terms, k, namespaces, kind, keep=keep, strategy=way,
                                         cost=costs[way]) for way in WAYS}
            note(f"query {terms} k {k} kind {kind} namespaces {namespaces} readable "
                 f"{allowed}: {answers}")
            event(f"pruned read less than every list: "
                  f"{costs['pruned'].postings_read < costs['exhaustive'].postings_read}")
            _check_top_k(answers["pruned"], want, k)
            assert answers["auto"] == answers["exhaustive"] == answers["pruned"]


@pytest.fixture(autouse=True)
def _short_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A seed of 64 postings a list, for lists of thousands here."""
    monkeypatch.setattr(bm25_impact, "SEED", 64)


def _ordered(tfs: list[dict[int, float]], lengths: list[float],
             impact_min: int = 64) -> PostingIndex:
    """Rows 1.. with these frequencies and lengths (namespace 1, kind 0) in term-major
    lists, every list of ``impact_min`` postings or more in impact order (blocks of 16)."""
    index = PostingIndex()
    index.tail_postings = 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bm25_bounds, "IMPACT_MIN", impact_min)
        patch.setattr(bm25_bounds, "IMPACT_BLOCK", 16)
        _add(index, 1, tfs, lengths)
    return index


def test_one_common_word_is_read_down_to_its_kth_best_only() -> None:
    """A word in each of 20,000 rows of varied lengths, ``k`` = 10: without the impact order
    MaxScore reads the whole list; with it, the seed and the blocks that reach the 10th
    best of the seed, and finds the same rows."""
    rng = np.random.default_rng(5)
    lengths = rng.integers(5, 400, 20_000).astype(float).tolist()
    tfs = [{0: float(1 + i % 3)} for i in range(20_000)]
    impact, whole = bm25.Cost(), bm25.Cost()
    got = _ordered(tfs, lengths).search([0], 10, [1], strategy="pruned", cost=impact)
    unordered = _ordered(tfs, lengths, impact_min=10**9)
    assert got == unordered.search([0], 10, [1], strategy="pruned", cost=whole)
    assert got == unordered.search([0], 10, [1], strategy="exhaustive")
    assert whole.postings_read == 20_000
    assert impact.postings_read <= 64 + 128


def test_a_query_split_in_row_ranges_reads_each_range_down_to_the_kth_best_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The common word of 20,000 rows answered in two row ranges at once: each range seeds
    from the list's top that lies in it and reads only its part of the prefix, not its
    whole half of the list (without the orders: 20,000 postings between them)."""
    rng = np.random.default_rng(5)
    lengths = rng.integers(5, 400, 20_000).astype(float).tolist()
    tfs = [{0: float(1 + i % 3)} for i in range(20_000)]
    index, unordered = _ordered(tfs, lengths), _ordered(tfs, lengths, impact_min=10**9)
    want = unordered.search([0], 10, [1], strategy="exhaustive")
    monkeypatch.setattr(bm25_parts, "SPLIT_MIN_POSTINGS", 0)
    monkeypatch.setattr(bm25_parts, "HELPERS", _SPLITTING[2])
    impact, whole = bm25.Cost(), bm25.Cost()
    assert index.search([0], 10, [1], strategy="pruned", cost=impact) == want
    assert unordered.search([0], 10, [1], strategy="pruned", cost=whole) == want
    assert impact.parts == whole.parts == 2
    assert whole.postings_read == 20_000
    assert impact.postings_read <= 2 * 64 + 128  # two seeds, the prefix shared out


def test_two_common_words_stop_where_maxscore_reads_everything() -> None:
    """Two words in most of 20,000 rows with alike bounds (neither can be left to MaxScore:
    it reads one whole list and looks every row up in the other); in impact order both are
    read only down to where their addends together could reach the 10th best."""
    rng = np.random.default_rng(6)
    lengths = rng.integers(5, 400, 20_000).astype(float).tolist()
    tfs = [{t: float(rng.integers(1, 4)) for t in (0, 1) if rng.random() < 0.8}
           for _ in range(20_000)]
    impact, pruned = bm25.Cost(), bm25.Cost()
    got = _ordered(tfs, lengths).search([0, 1], 10, [1], strategy="pruned", cost=impact)
    unordered = _ordered(tfs, lengths, impact_min=10**9)
    assert got == unordered.search([0, 1], 10, [1], strategy="pruned", cost=pruned)
    assert got == unordered.search([0, 1], 10, [1], strategy="exhaustive")
    assert pruned.rows_scored > 10_000
    assert impact.postings_read < pruned.postings_read / 4
    assert impact.rows_scored < pruned.rows_scored / 4


def test_a_row_best_by_two_middling_addends_is_found_deep_in_both_lists() -> None:
    """Two words in 10,000 rows each (100 saying it ten times, the rest once; lengths 5 to
    400), one row with both, once each, at length 100: its two addends of the second rank
    outscore the best single one by a little, so it is found only if the list read in part
    stays looked up for the rows the other list meets, and the second list is cut, not
    read whole."""
    tfs, lengths = [], []
    for term in (0, 1):
        for i in range(10_000):
            tfs.append({term: 10.0 if i < 100 else 1.0})
            lengths.append(5.0 + 395.0 * ((i * 7919) % 10_000) / 10_000)
    index = _ordered([*tfs, {0: 1.0, 1: 1.0}], [*lengths, 100.0])
    impact = bm25.Cost()
    got = index.search([0, 1], 1, [1], strategy="pruned", cost=impact)
    assert got == index.search([0, 1], 1, [1], strategy="exhaustive")
    assert got[0][0] == 20_001
    assert impact.postings_read < 0.6 * 20_001


def test_impact_orders_survive_export_and_an_old_state_loads_without_them() -> None:
    rng = np.random.default_rng(9)
    lengths = rng.integers(5, 400, 3_000).astype(float).tolist()
    index = _ordered([{0: float(1 + i % 3)} for i in range(3_000)], lengths)
    arrays, scalars = index.export_state()
    assert len(arrays["impact_terms"]) == 1 and scalars["impact_block"] == 16
    restored = PostingIndex()
    restored.restore_state(arrays, scalars)
    cost = bm25.Cost()
    assert restored.search([0], 5, [1], cost=cost) == index.search([0], 5, [1])
    assert cost.postings_read < 3_000 / 2
    old = {k: v for k, v in arrays.items() if not k.startswith("impact_")}
    older = PostingIndex()  # a state saved before impact orders: read whole, same answer
    older.restore_state(old, {k: v for k, v in scalars.items() if k != "impact_block"})
    cost = bm25.Cost()
    assert older.search([0], 5, [1], cost=cost) == index.search([0], 5, [1])
    assert cost.postings_read == 3_000
    broken = dict(arrays, impact_order=arrays["impact_order"][:-1])
    with pytest.raises(ValueError, match="do not match"):
        PostingIndex().restore_state(broken, scalars)


def test_a_corpus_of_thousands_answers_like_the_exhaustive_way() -> None:
    """6,000 rows of 1-40 Zipf words and lengths 5-400, every list of 64+ postings in
    impact order (blocks of 16, seeds of 64): 300 queries of 1-5 words at ``k`` 1-20
    answer exactly as the exhaustive way, and read fewer postings in all (stopping the
    loop, or cutting a list, 5 % early fails here)."""
    rng = np.random.default_rng(10)
    weights = 1.0 / np.arange(1, 41)
    tfs = []
    for _ in range(6_000):
        words = rng.choice(40, size=int(rng.integers(1, 12)), p=weights / weights.sum())
        tfs.append({int(w): float(np.count_nonzero(words == w)) for w in set(words.tolist())})
    index = _ordered(tfs, rng.integers(5, 400, 6_000).astype(float).tolist())
    read = {"pruned": 0, "exhaustive": 0}
    for _ in range(300):
        terms = rng.choice(40, size=int(rng.integers(1, 6)), replace=False).tolist()
        k = int(rng.integers(1, 21))
        answers = {}
        for way in read:
            cost = bm25.Cost()
            answers[way] = index.search(terms, k, [1], strategy=way, cost=cost)
            read[way] += cost.postings_read
        assert answers["pruned"] == answers["exhaustive"], (terms, k)
    assert read["pruned"] < read["exhaustive"] / 2


def test_a_sidecar_saved_before_impact_orders_gets_them_and_is_written_anew(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An index upgraded over a sidecar written before impact orders maps it (no chunk row
    read), orders its long lists at open, answers as a rebuild does, and writes the
    sidecar anew with the orders (as after reading its 150 rows anew)."""
    monkeypatch.setattr(bm25_bounds, "IMPACT_MIN", 20)  # "common" is in all 150 rows
    monkeypatch.setattr(PostingIndex, "tail_postings", 0)  # the load builds term-major lists
    db = tmp_path / "c.db"
    sidecar_tests._catalog(db).close()
    sidecar_tests._saved(db)
    meta, arrays = read_arrays(sidecar_path(db))
    assert len(arrays["posting.impact_terms"]) > 0
    posting = {k: v for k, v in meta["posting"].items() if k != "impact_block"}
    write_arrays(sidecar_path(db), {**meta, "posting": posting},
                 {k: a for k, a in arrays.items() if not k.startswith("posting.impact_")})
    catalog = SQLiteCatalog(db)
    index = EmbeddedChunkIndex(catalog, sidecar_tests.DIM, sidecar_after_rows=150)
    assert index.sidecar_status == "loaded" and index.rows_read == 0
    assert len(index.postings._snap.impact_terms) == len(arrays["posting.impact_terms"])
    assert sidecar_tests._answers(index) == sidecar_tests._rebuilt(db)
    assert index._sidecar_writer is not None
    index._sidecar_writer.join()
    catalog.close()
    _, again = read_arrays(sidecar_path(db))
    for name in ("impact_terms", "impact_order", "impact_bound"):
        assert np.array_equal(again[f"posting.{name}"], arrays[f"posting.{name}"])
