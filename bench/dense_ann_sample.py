"""Which dense ANN structure reaches recall@10 >= 0.98 on store_scale's clustered vectors, and
at what build cost: a denser HNSW graph (M 32, efConstruction 128) against the inverted-file
partition (``docgraph.store.lists_build``), on the same sample of an existing synthetic store.

    python bench/dense_ann_sample.py --db <store_scale catalog> [--sample 200000]
        [--name dense_ann_sample_200k]

Both are built from the sidecar's int8 codes of every ``n / sample``-th row (2 threads). The
queries are ``bench/store_scale.py``'s (a chunk's vector plus noise), answered over the
sample; the truth is the exact top 10 of the sample by the same decoded vectors. HNSW:
its 400 nearest (the lane's candidate count) re-ranked exactly, efSearch 400, and the top
10 straight from the walk. Lists: the share of true neighbours inside the ``nprobe`` lists
the query reads (the lane then ranks those rows exactly). Build seconds are wall time on
this shared machine, with the 1-min load average beside them; untimed against other runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from common import log, write_result  # noqa: E402
from docgraph.store import lists_build  # noqa: E402
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog  # noqa: E402
from store_scale import truth_path  # noqa: E402

K = 10
CANDIDATES = 400
DIM = 384


def main() -> None:
    import faiss

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--sample", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--name", default=None)
    parser.add_argument("--lists-only", action="store_true", help="skip the HNSW build")
    parser.add_argument("--lists-per-sqrt", type=float, default=lists_build.LISTS_PER_SQRT)
    args = parser.parse_args()
    faiss.omp_set_num_threads(2)
    lists_build.LISTS_PER_SQRT = args.lists_per_sqrt
    catalog = SQLiteCatalog(args.db)
    index = EmbeddedChunkIndex(catalog, DIM, sidecar_after_rows=10**12)
    s = index.dense._snap  # type: ignore[union-attr]
    step = max(1, s.n // args.sample)
    rows = np.arange(0, s.n, step)[: args.sample]
    base = lists_build.floats(s.codes, s.scales, rows)
    queries = np.load(truth_path(args.db))["qvectors"][: args.queries].astype(np.float32)
    _, truth = faiss.knn(queries, base, K, metric=faiss.METRIC_INNER_PRODUCT)
    out: dict[str, object] = {"settings": {"sample": len(rows), "of_rows": int(s.n),
                                           "queries": len(queries), "threads": 2}}

    load0 = os.getloadavg()[0]
    t = time.perf_counter()
    live = np.arange(len(rows))
    codes, scales = s.codes[rows], s.scales[rows]
    centroids = lists_build.train(faiss, codes, scales, live, DIM)
    train_s = time.perf_counter() - t
    assigned = lists_build.assign(faiss, centroids, codes, scales, live)
    assign_s = time.perf_counter() - t - train_s
    nprobe = lists_build.tune(faiss, centroids, codes, scales, live, assigned, live)
    lists_s = time.perf_counter() - t
    order = np.argsort(-(queries @ centroids.T), axis=1)
    hits = {p: 0 for p in (1, 2, 3, 4, 8, 16, nprobe)}
    for q in range(len(queries)):
        rank = np.empty(len(centroids), dtype=np.int64)
        rank[order[q]] = np.arange(len(centroids))
        r = rank[assigned[truth[q]]]
        for p in hits:
            hits[p] += int((r < p).sum())
    out["lists"] = {"lists": len(centroids), "lists_per_sqrt": args.lists_per_sqrt,
                    "nprobe_tuned": nprobe,
                    "train_s": round(train_s, 1), "assign_s": round(assign_s, 1),
                    "build_s": round(lists_s, 1), "loadavg_1": round(load0, 2),
                    "mean_list_rows": round(len(rows) / len(centroids), 1),
                    **{f"recall@10_nprobe_{p}": round(h / (K * len(queries)), 4)
                       for p, h in sorted(hits.items())}}
    log(f"  lists {out['lists']}")
    if args.lists_only:
        write_result(args.name or f"dense_ann_sample_{len(rows) // 1000}k", out)
        catalog.close()
        return

    load0 = os.getloadavg()[0]
    t = time.perf_counter()
    hnsw = faiss.IndexHNSWSQ(DIM, faiss.ScalarQuantizer.QT_8bit, 32,
                             faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = 128
    hnsw.train(base[:: max(1, len(base) // 65_536)])
    hnsw.add(base)
    hnsw_s = time.perf_counter() - t
    params = faiss.SearchParametersHNSW()
    params.efSearch = CANDIDATES
    _, found = hnsw.search(queries, CANDIDATES, params=params)
    reranked, walk = 0, 0
    for q in range(len(queries)):
        cand = found[q][found[q] >= 0]
        exact = cand[np.argsort(-(base[cand] @ queries[q]))[:K]]
        reranked += len(set(exact.tolist()) & set(truth[q].tolist()))
        walk += len(set(found[q][:K].tolist()) & set(truth[q].tolist()))
    out["hnsw_m32_efc128"] = {
        "build_s": round(hnsw_s, 1), "loadavg_1": round(load0, 2),
        "loadavg_1_after": round(os.getloadavg()[0], 2),
        "recall@10_400_reranked": round(reranked / (K * len(queries)), 4),
        "recall@10_walk_top10": round(walk / (K * len(queries)), 4),
        "projected_1m_build_s": round(hnsw_s * (s.n / len(rows)) * 1.15, 0)}
    log(f"  hnsw {out['hnsw_m32_efc128']}")
    write_result(args.name or f"dense_ann_sample_{len(rows) // 1000}k", out)
    catalog.close()


if __name__ == "__main__":
    main()
