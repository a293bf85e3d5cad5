"""The embedded store's BM25 lane: MaxScore top-k (``auto``) against the exhaustive scoring
it replaced, alternating query by query in one process (issue 36, section 1).

    python bench/bm25_lane.py [--n 1000000] [--db bench/.cache/store_scale_<n>/catalog.db]
        [--queries 300] [--name bm25_lane_<n>]

Uses the catalog of ``bench/store_scale.py`` (built there when missing: Zipf SciFact words,
60 a chunk; its 300 query texts of 2-6 Zipf words). Opens it (sidecar mapped when current,
else rebuilt and written), then for each scenario times every query both ways, the order
flipping each query, and checks the answers are identical (ids and scores):

- ``all``: both namespaces, ``k`` 100 (hybrid's lane depth) and 10;
- ``side``: the 10 % namespace, ``k`` 100;
- ``readable_10pct`` / ``readable_1pct``: a caller who may read 10 % / 1 % of the rows
  (the rest restricted, :class:`~docgraph.store.restricted.RestrictedRows`), ``k`` 100;
- ``hybrid``: the hybrid searcher (dense + BM25 lists 100 deep, RRF, chunk fetch) over
  everything, its lane switched between the two ways.

Also: open seconds, RSS after open, the sidecar's size (and the share the term bounds
add), the seconds the bounds add to building the term-major lists, which way ``auto``
took and the postings it read against the exhaustive way. Wrap in ``flock``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from backends import DIM, EVERYTHING, FixedQueries  # noqa: E402
from common import log, percentile, write_result  # noqa: E402
from dense_codes import rss_mb  # noqa: E402
from docgraph.config import IndexSettings  # noqa: E402
from docgraph.retrieve.hybrid import HybridSearcher  # noqa: E402
from docgraph.store import bm25, bm25_bounds  # noqa: E402
from docgraph.store.restricted import RestrictedRows  # noqa: E402
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog  # noqa: E402
from docgraph.store.sqlite.index import sidecar_path  # noqa: E402
from docgraph.store.sqlite.query_view import EmbeddedQueryView  # noqa: E402
from store_scale import build, truth_path  # noqa: E402

WAYS: tuple[bm25.Strategy, ...] = ("exhaustive", "auto", "pruned", "rows")


def _summary(times: dict[str, list[float]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for way, values in sorted(times.items(), key=lambda item: WAYS.index(item[0])):
        out[f"{way}_p50_ms"] = round(1000 * percentile(values, 50), 2)
        out[f"{way}_p95_ms"] = round(1000 * percentile(values, 95), 2)
    out["p50_ratio"] = round(out["auto_p50_ms"] / out["exhaustive_p50_ms"], 3)
    out["p95_ratio"] = round(out["auto_p95_ms"] / out["exhaustive_p95_ms"], 3)
    return out


def alternate(index: EmbeddedChunkIndex, queries: Sequence[str], run: Callable[[str], Any],
              ways: Sequence[bm25.Strategy] = WAYS[:2]) -> dict[str, Any]:
    """Time ``run(query)`` each way per query (the order rotating query by query); the
    answers must be identical."""
    times: dict[str, list[float]] = {way: [] for way in ways}
    for i, query in enumerate(queries):
        answers = {}
        for way in [*ways[i % len(ways):], *ways[:i % len(ways)]]:
            index.postings.strategy = way
            t0 = time.perf_counter()
            answers[way] = run(query)
            times[way].append(time.perf_counter() - t0)
        if any(answer != answers["exhaustive"] for answer in answers.values()):
            raise SystemExit(f"answers differ for {query!r}")
    index.postings.strategy = "auto"
    return {"queries": len(queries), **_summary(times)}


def ways_taken(index: EmbeddedChunkIndex, queries: Sequence[str], k: int,
               namespaces: frozenset[str]) -> dict[str, Any]:
    """Which way ``auto`` took per query, and the postings it read against exhaustive."""
    ns_ids = index._namespace_ids(namespaces)
    taken: Counter[str] = Counter()
    read = full = 0
    for query in queries:
        ids = index._term_ids(query)
        costs = {way: bm25.Cost() for way in WAYS[:2]}
        for way in WAYS[:2]:
            index.postings.search(ids, k, ns_ids, strategy=way, cost=costs[way])
        taken[costs["auto"].way] += 1
        read += costs["auto"].postings_read
        full += costs["exhaustive"].postings_read
    return {"ways": dict(taken), "postings_read_ratio": round(read / max(full, 1), 4)}


def restricted_view(index: EmbeddedChunkIndex, readable_share: float) -> EmbeddedQueryView:
    """A query view for a caller who may read ``readable_share`` of the rows (every other
    row restricted to a group it is not in)."""
    s = index.postings._snap
    rowids = np.asarray(s.rowids[: s.n])
    rng = np.random.default_rng(5)
    restricted = rowids[rng.random(len(rowids)) >= readable_share]
    rows = RestrictedRows([(frozenset({"group:other"}), restricted)])
    return EmbeddedQueryView(index, rows.row_filter(frozenset({"user:reader"})))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--db", type=Path)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--name", default=None)
    args = parser.parse_args(argv)
    db = args.db or BENCH_DIR / ".cache" / f"store_scale_{args.n}" / "catalog.db"
    if not db.exists():
        log(f"building {args.n} chunks at {db}")
        build(db, args.n, args.queries)
    truth = np.load(truth_path(db))
    qtexts = [str(t) for t in truth["qtexts"]][: args.queries]
    qvectors = truth["qvectors"][: args.queries]

    t0 = time.perf_counter()
    catalog = SQLiteCatalog(db)
    index = EmbeddedChunkIndex(catalog, DIM, sidecar=True, sidecar_after_rows=10**12)
    opened = time.perf_counter() - t0
    rss_open, _ = rss_mb()
    status = index.sidecar_status
    if status != "loaded":
        index.save_sidecar()
    s = index.postings._snap
    t1 = time.perf_counter()
    bm25_bounds.term_bounds(s.term_ptr, s.term_rows, s.term_weights, s.lengths[: s.n],
                     s.bound_average)
    bounds_s = time.perf_counter() - t1
    sidecar_bytes = sidecar_path(db).stat().st_size
    log(f"open {opened:.2f} s ({status}), rss {rss_open:.0f} MB, bounds {bounds_s:.2f} s")

    everything, side = EVERYTHING, frozenset({"side"})
    scenarios: dict[str, Any] = {}
    for name, k, namespaces, view in (
        ("all_k100", 100, everything, None), ("all_k10", 10, everything, None),
        ("side_k100", 100, side, None),
        ("readable_10pct_k100", 100, everything, restricted_view(index, 0.10)),
        ("readable_1pct_k100", 100, everything, restricted_view(index, 0.01)),
    ):
        searcher = view if view is not None else index

        def lane(query: str, searcher: Any = searcher, k: int = k,
                 namespaces: frozenset[str] = namespaces) -> Any:
            return searcher.lexical_search(query, k, namespaces)

        for query in qtexts[:10]:  # warm up
            lane(query)
        scenarios[name] = alternate(index, qtexts, lane,
                                    WAYS if view is not None else WAYS[:3])
        if view is None:
            scenarios[name].update(ways_taken(index, qtexts, k, namespaces))
        log(f"  {name}: {scenarios[name]}")
    hybrid = HybridSearcher(catalog, index, FixedQueries(dict(zip(qtexts, qvectors,
                                                                   strict=True))),
                            IndexSettings())
    for query in qtexts[:10]:
        hybrid.search(query, namespaces=everything, k=10)
    scenarios["hybrid_k10"] = alternate(
        index, qtexts, lambda q: [h.rowid for h in hybrid.search(q, namespaces=everything,
                                                                 k=10)])
    log(f"  hybrid_k10: {scenarios['hybrid_k10']}")
    rss_end, peak = rss_mb()
    catalog.close()
    write_result(args.name or f"bm25_lane_{args.n}", {
        "settings": {"n": args.n, "queries": len(qtexts)},
        "loadavg_1_end": round(os.getloadavg()[0], 2),
        "chunks": len(index), "open_s": round(opened, 2), "sidecar_status": status,
        "rss_after_open_mb": round(rss_open), "rss_end_mb": round(rss_end),
        "rss_peak_mb": round(peak),
        "sidecar_mb": round(sidecar_bytes / 2**20, 1),
        "term_bounds_mb": round(s.term_bound.nbytes / 2**20, 3),
        "term_bounds_build_s": round(bounds_s, 2),
        "postings": int(s.nnz), "vocabulary": int(len(s.term_ptr) - 1),
        "results": [{"scenario": name, **row} for name, row in scenarios.items()],
    })


if __name__ == "__main__":
    main()
