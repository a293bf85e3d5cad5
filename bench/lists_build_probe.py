"""The lists build's two costly steps at a row count too large to build here in full:
k-means iterations and the assignment of rows, flat against the product-quantizer fast
scan (``docgraph.store.lists_build``), on ``bench/store_scale.py``'s synthetic vectors.

    python bench/lists_build_probe.py [--n 10000000] [--iterations 2] [--flat-iterations 1]
        [--assign 200000] [--hnsw-ef 16,64]
        [--name lists_build_probe_<n>]

The partition of ``n`` rows has ``list_count(n)`` centroids trained on ``TRAIN_PER_LIST``
rows each: this probe draws that sample from the first slices of the generator (rows pick
their cluster at random, so a prefix is a uniform sample), runs ``--iterations`` k-means
iterations through the fast scan and ``--flat-iterations`` flat (both start from the same
random rows), then assigns ``--assign`` later rows to the fast-scan centroids each way
(seconds and how many rows got the same centroid), and through an HNSW graph over the
centroids at ``--hnsw-ef`` (the lever that did not pay). The projection of a full build: 16 x
one iteration, plus ``n / assign`` x the assignment; the tuning (200 queries over every row,
~4 % of the 1M build) is not probed. Run timed under ``flock /tmp/docgraph-bench.lock``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from backends import DIM  # noqa: E402
from common import log, write_result  # noqa: E402
from dense_codes import rss_mb  # noqa: E402
from docgraph.store import lists_build  # noqa: E402
from store_scale import SLICE, Synthetic  # noqa: E402


def _rows(data: Synthetic, start: int, count: int) -> np.ndarray:
    """``count`` consecutive synthetic vectors from row ``start``."""
    parts, at = [], start - start % SLICE
    while sum(len(p) for p in parts) < count + start % SLICE:
        parts.append(data.vectors(at))
        at += SLICE
    return np.ascontiguousarray(np.concatenate(parts)[start % SLICE:][:count])


def _kmeans(faiss: Any, x: np.ndarray, nlist: int, iterations: int, fast: bool
            ) -> tuple[np.ndarray, float]:
    """Centroids after ``iterations`` and seconds a iteration (the build's settings)."""
    kmeans = faiss.Kmeans(DIM, nlist, niter=iterations, spherical=True, seed=lists_build.SEED,
                          max_points_per_centroid=lists_build.TRAIN_PER_LIST,
                          min_points_per_centroid=1, verbose=False)
    t = time.perf_counter()
    if fast:
        kmeans.index = lists_build.nearest_index(faiss, x)
    kmeans.train(x)
    return np.asarray(kmeans.centroids, np.float32), (time.perf_counter() - t) / iterations


def _assign(faiss: Any, centroids: np.ndarray, x: np.ndarray, fast: bool
            ) -> tuple[np.ndarray, float]:
    t = time.perf_counter()
    index = (lists_build.nearest_index(faiss, centroids) if fast
             else faiss.IndexFlatIP(DIM))
    index.add(centroids)
    out = np.empty(len(x), np.int64)
    for start in range(0, len(x), lists_build.ASSIGN_BATCH):
        _, nearest = index.search(x[start:start + lists_build.ASSIGN_BATCH], 1)
        out[start:start + len(nearest)] = nearest[:, 0]
    return out, time.perf_counter() - t


def _hnsw(faiss: Any, centroids: np.ndarray, x: np.ndarray, flat: np.ndarray,
          efs: str) -> dict[str, Any]:
    """The rejected lever: an HNSW graph (M 32, efConstruction 80) over the centroids,
    assigning the same rows: seconds (graph build included) and rows that got the flat
    scan's centroid, per efSearch."""
    out: dict[str, Any] = {}
    for ef in [int(e) for e in efs.split(",") if e]:
        t = time.perf_counter()
        graph = faiss.IndexHNSWFlat(DIM, 32, faiss.METRIC_INNER_PRODUCT)
        graph.hnsw.efConstruction = 80
        graph.add(centroids)
        graph.hnsw.efSearch = ef
        _, nearest = graph.search(x, 1)
        out[f"hnsw_ef{ef}_assign_s"] = round(time.perf_counter() - t, 1)
        out[f"hnsw_ef{ef}_same_centroid"] = round(float(np.mean(nearest[:, 0] == flat)), 4)
        log(f"  hnsw ef {ef}: {out[f'hnsw_ef{ef}_assign_s']} s, "
            f"{out[f'hnsw_ef{ef}_same_centroid']} same")
    return out


def _misses(x: np.ndarray, centroids: np.ndarray, fast: np.ndarray, flat: np.ndarray
            ) -> dict[str, Any]:
    """What the rows the fast scan put elsewhere lose: the exact inner product with the
    flat's centroid minus with the fast scan's (a near tie costs nothing), and how near
    those rows are to any centroid at all (a row near none has no good list either way)."""
    miss = np.flatnonzero(fast != flat)
    if not len(miss):
        return {"assign_miss_gap_p50": 0.0, "assign_miss_gap_p95": 0.0}
    best = np.einsum("nd,nd->n", x[miss], centroids[flat[miss]])
    got = np.einsum("nd,nd->n", x[miss], centroids[fast[miss]])
    hit = np.setdiff1d(np.arange(len(x)), miss)[:len(miss)]
    return {"assign_miss_gap_p50": round(float(np.median(best - got)), 4),
            "assign_miss_gap_p95": round(float(np.quantile(best - got, 0.95)), 4),
            "assign_miss_best_ip_p50": round(float(np.median(best)), 3),
            "assign_same_best_ip_p50": round(float(np.median(np.einsum(
                "nd,nd->n", x[hit], centroids[flat[hit]]))), 3)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--flat-iterations", type=int, default=1)
    parser.add_argument("--assign", type=int, default=200_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--refine", default="",
                        help="other ASSIST_REFINE values to assign with ('' none)")
    parser.add_argument("--hnsw-ef", default="16,64",
                        help="efSearch values of the HNSW assignment to compare ('' none)")
    parser.add_argument("--name", default=None)
    args = parser.parse_args(argv)
    import faiss

    faiss.omp_set_num_threads(args.threads)
    data = Synthetic(args.n)
    nlist = lists_build.list_count(args.n)
    take = nlist * lists_build.TRAIN_PER_LIST
    t = time.perf_counter()
    sample = _rows(data, 0, take)
    later = _rows(data, take, args.assign)
    log(f"{nlist} lists, {take} training rows generated in {time.perf_counter() - t:.0f} s")
    result: dict[str, Any] = {"lists": nlist, "training_rows": take,
                              "loadavg_1_before": round(os.getloadavg()[0], 2)}
    fast_c, fast_iter = _kmeans(faiss, sample, nlist, args.iterations, True)
    log(f"  fast-scan k-means: {fast_iter:.1f} s an iteration")
    flat_iter = float("nan")
    if args.flat_iterations:
        _, flat_iter = _kmeans(faiss, sample, nlist, args.flat_iterations, False)
        log(f"  flat k-means: {flat_iter:.1f} s an iteration")
    fast_a, fast_s = _assign(faiss, fast_c, later, True)
    flat_a, flat_s = _assign(faiss, fast_c, later, False)
    log(f"  assign {args.assign}: fast {fast_s:.1f} s, flat {flat_s:.1f} s")
    result.update(_hnsw(faiss, fast_c, later, flat_a, args.hnsw_ef))
    saved = lists_build.ASSIST_REFINE
    for refine in [int(r) for r in args.refine.split(",") if r]:
        lists_build.ASSIST_REFINE = refine
        got, seconds = _assign(faiss, fast_c, later, True)
        result[f"refine{refine}_assign_s"] = round(seconds, 1)
        result[f"refine{refine}_same_centroid"] = round(float(np.mean(got == flat_a)), 4)
        log(f"  fast scan, best {refine} re-ranked: {seconds:.1f} s, "
            f"{result[f'refine{refine}_same_centroid']} same")
    lists_build.ASSIST_REFINE = saved
    scale = args.n / args.assign
    iterations = lists_build.KMEANS_ITERATIONS
    result.update({
        "kmeans_iteration_s_fast": round(fast_iter, 1),
        "kmeans_iteration_s_flat": round(flat_iter, 1) if args.flat_iterations else None,
        "assign_s_fast": round(fast_s, 1), "assign_s_flat": round(flat_s, 1),
        "assign_same_centroid": round(float(np.mean(fast_a == flat_a)), 4),
        **_misses(later, fast_c, fast_a, flat_a),
        "projected_train_s_fast": round(iterations * fast_iter),
        "projected_train_s_flat": round(iterations * flat_iter) if args.flat_iterations else None,
        "projected_assign_s_fast": round(scale * fast_s),
        "projected_assign_s_flat": round(scale * flat_s),
        "rss_peak_mb": round(rss_mb()[1]),
        "loadavg_1_after": round(os.getloadavg()[0], 2)})
    log(f"  {result}")
    write_result(args.name or f"lists_build_probe_{args.n}", {
        "settings": {"n": args.n, "iterations": args.iterations,
                     "flat_iterations": args.flat_iterations,
                     "hnsw_ef": args.hnsw_ef, "refine": args.refine,
                     "assign": args.assign,
                     "threads": args.threads, "dimension": DIM}, **result})


if __name__ == "__main__":
    main()
