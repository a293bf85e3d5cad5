"""Where splitting a BM25 query into row ranges pays (``store/bm25_parts.py``'s
``SPLIT_MIN_POSTINGS``): each query of a half answered in one range and in as many as there
are idle threads, alternating in one process, by the size of its terms' posting lists.

    flock /tmp/docgraph-bench.lock python bench/bm25_split.py --db CATALOG \
        [--half tune|test] [--k 100] [--name bm25_split]

``CATALOG`` is a ``bench/store_scale.py`` catalog with its sidecar. The queries of its truth
file after the first 20 (warm-up) are split into halves by position (every other one); the
constant is chosen on the ``tune`` half and the ``test`` half reported. Every query runs
three times each way, one range then split (the threshold forced to 0 or past every query),
the answers checked identical; the best of three is kept, wall and CPU time (the CPU time of
the process: a split query's threads together). Reported per bucket of posting counts (from
2^17, a power of two each): queries, the median ratio split / one of wall and CPU time, and
the one-range median; and what each candidate threshold would give over the half (p50 / p95
wall, mean CPU), with the 1-minute load average.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from backends import DIM  # noqa: E402
from bm25_ab import NAMESPACES, REPEATS, store_queries  # noqa: E402
from common import log, write_result  # noqa: E402
from docgraph.store import bm25_parts  # noqa: E402
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog  # noqa: E402

NEVER = 1 << 62
THRESHOLDS = (0, 1 << 17, 1 << 18, 1 << 19, 1 << 20, 1 << 21, NEVER)


def _timed(index: EmbeddedChunkIndex, query: str, k: int, split: bool) -> tuple[float, float,
                                                                                   Any]:
    bm25_parts.SPLIT_MIN_POSTINGS = 0 if split else NEVER
    cpu, wall = time.process_time(), time.perf_counter()
    got = index.lexical_search(query, k, NAMESPACES)
    return time.perf_counter() - wall, time.process_time() - cpu, got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--half", choices=("tune", "test"), default="tune")
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--name", default="bm25_split")
    args = parser.parse_args()
    queries = store_queries(args.db, args.half)
    index = EmbeddedChunkIndex(SQLiteCatalog(args.db), DIM, sidecar=True,
                               sidecar_after_rows=10**12)
    postings: dict[str, int] = {}
    asked = bm25_parts.wanted

    def wanted(count: int, main_rows: int) -> int:  # (records each query's list postings)
        postings["last"] = count
        return asked(count, main_rows)

    bm25_parts.wanted = wanted
    for query in queries:  # pages in, both ways
        _timed(index, query, args.k, False)
        _timed(index, query, args.k, True)
    load_start = os.getloadavg()[0]
    rows = []
    for query in queries:
        wall = {False: float("inf"), True: float("inf")}
        cpu = dict(wall)
        answer = None
        for _ in range(REPEATS):
            for split in (False, True):
                postings.pop("last", None)
                took, used, got = _timed(index, query, args.k, split)
                wall[split], cpu[split] = min(wall[split], took), min(cpu[split], used)
                answer = got if answer is None else answer
                if got != answer:
                    raise SystemExit(f"split={split} answered {query!r} differently")
        rows.append((postings.get("last", 0), 1000 * wall[False], 1000 * wall[True],
                     1000 * cpu[False], 1000 * cpu[True]))
    bm25_parts.wanted = asked
    table = np.array(rows, np.float64)
    counts, one, split, one_cpu, split_cpu = table.T
    buckets = []
    edges = [0, *(1 << power for power in range(17, 40))]
    for low, high in itertools.pairwise(edges):
        inside = (counts >= low) & (counts < high)
        if inside.any():
            buckets.append({"postings_from": low, "postings_to": high,
                            "queries": int(inside.sum()),
                            "ratio_wall": round(float(np.median(split[inside] / one[inside])),
                                                3),
                            "ratio_cpu": round(float(np.median(split_cpu[inside]
                                                               / one_cpu[inside])), 3),
                            "one_p50_ms": round(float(np.median(one[inside])), 2)})
    results = []
    for threshold in THRESHOLDS:
        chosen = counts >= threshold
        took = np.where(chosen, split, one)
        results.append({"split_from_postings": "never" if threshold == NEVER else threshold,
                        "split_queries": int(chosen.sum()),
                        "p50_ms": round(float(np.percentile(took, 50)), 2),
                        "p95_ms": round(float(np.percentile(took, 95)), 2),
                        "max_ms": round(float(took.max()), 2),
                        "cpu_mean_ms": round(float(np.where(chosen, split_cpu, one_cpu).mean()),
                                             2)})
    log(f"{len(index)} rows, {args.half} half: {len(rows)} queries, k {args.k}; buckets:")
    for bucket in buckets:
        log(f"  {bucket}")
    write_result(args.name, {"rows": len(index), "k": args.k, "half": args.half,
                             "queries": len(rows), "threads": bm25_parts.HELPERS.threads + 1,
                             "loadavg_1": [round(load_start, 2), round(os.getloadavg()[0], 2)],
                             "buckets": buckets, "results": results})


if __name__ == "__main__":
    main()
