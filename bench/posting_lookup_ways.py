"""The four ways ``store/posting_lookup.py`` finds rows in a posting list (marks, stamps, a
binary search of each row in the list, a probe of each posting among the rows), each
forced, on random sorted arrays: where each is cheapest, and what the module's rule
(``PROBE_RATIO``, ``SCATTER_RATIO``, ``MARK_MAX_LIST``, ``MARK_SPARSE``) costs against the
best and against the rule before probes (``PROBE_RATIO`` infinite).

    flock /tmp/docgraph-bench.lock python bench/posting_lookup_ways.py \
        [--positions 10000000 1000000] [--name posting_lookup_ways]

The constants are chosen here, not on a benchmark's queries. For each index size (row
positions), each list length and each ratio list / rows asked about, a list and the rows
are drawn uniformly without replacement (fixed seed); each way runs five times, the ways
alternating, all four answers checked equal, the median kept. Reported per cell: each
way's milliseconds, the best way, the way the rule picks and its cost over the best; and
per index size the total time of the rule, of the rule before probes, of the best way in
each cell and of each single way, with the 1-minute load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from common import log, write_result  # noqa: E402
from docgraph.store import posting_lookup  # noqa: E402
from docgraph.store.posting_lookup import StampPool  # noqa: E402

LISTS = (1_000, 10_000, 30_000, 100_000, 300_000, 1_000_000, 2_000_000, 5_600_000)
RATIOS = (1 / 1024, 1 / 256, 1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 0.5, 1, 2, 4, 8, 16, 32, 64)
REPEATS = 5


def ways(pool: StampPool, marks: StampPool) -> dict[str, Callable[..., Any]]:
    """Each way forced (a pool that lends nothing never answers, so each has its own)."""
    return {"marks": lambda listed, rows: posting_lookup.marked(listed, rows, marks),
            "stamps": lambda listed, rows: posting_lookup.stamped(listed, rows, pool),
            "search": posting_lookup.searched, "probe": posting_lookup.probed}


def rule(listed: np.ndarray[Any, Any], rows_len: int, before: bool = False) -> str:
    """The way :func:`posting_lookup.find` takes when a mark and a stamp array are free
    (``before``: as before probes, which looked rows up in a short list by the other ways)."""
    if before:
        with mock.patch.object(posting_lookup, "PROBE_RATIO", float("inf")):
            return posting_lookup.way(listed, rows_len)
    return posting_lookup.way(listed, rows_len)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--positions", type=int, nargs="+", default=[10_000_000, 1_000_000])
    parser.add_argument("--name", default="posting_lookup_ways")
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    load_start = os.getloadavg()[0]
    cells = []
    for positions in args.positions:
        chosen = ways(StampPool(1), StampPool(1, np.bool_))
        for listed_len in (n for n in LISTS if n <= positions // 2):
            listed = np.sort(rng.choice(positions, listed_len, replace=False)).astype(np.int32)
            for ratio in RATIOS:
                rows_len = int(listed_len / ratio)
                if rows_len > positions // 2 or rows_len < 1:
                    continue
                rows = np.sort(rng.choice(positions, rows_len, replace=False)).astype(np.int64)
                times: dict[str, list[float]] = {way: [] for way in chosen}
                answer = None
                for _ in range(REPEATS):
                    for way, call in chosen.items():
                        t0 = time.perf_counter()
                        got = call(listed, rows)
                        times[way].append(1000 * (time.perf_counter() - t0))
                        pair = tuple(a.tolist() for a in got)
                        answer = pair if answer is None else answer
                        if pair != answer:
                            raise SystemExit(f"{way} answered differently at {listed_len} / "
                                             f"{rows_len} in {positions}")
                ms = {way: round(float(np.median(t)), 3) for way, t in times.items()}
                best = min(ms, key=lambda way: ms[way])
                picked = rule(listed, rows_len)
                cells.append({"positions": positions, "list": listed_len, "rows": rows_len,
                              "ratio": ratio, **{f"{w}_ms": v for w, v in ms.items()},
                              "best": best, "rule": picked,
                              "before": rule(listed, rows_len, before=True),
                              "rule_over_best": round(ms[picked] / ms[best], 2)})
                log(f"{positions} {listed_len:>8} / {rows_len:>8}: {ms} rule {picked}")
    totals = {}
    for positions in args.positions:
        mine = [c for c in cells if c["positions"] == positions]
        totals[str(positions)] = {
            **{key: round(sum(c[f"{c[key]}_ms"] for c in mine), 1)
               for key in ("rule", "before", "best")},
            **{way: round(sum(c[f"{way}_ms"] for c in mine), 1)
               for way in chosen}}
        log(f"{positions} positions, total ms: {totals[str(positions)]}")
    write_result(args.name, {"constants": {"PROBE_RATIO": posting_lookup.PROBE_RATIO,
                                           "SCATTER_RATIO": posting_lookup.SCATTER_RATIO,
                                           "MARK_MAX_LIST": posting_lookup.MARK_MAX_LIST,
                                           "MARK_SPARSE": posting_lookup.MARK_SPARSE},
                             "total_ms": totals,
                             "loadavg_1": [round(load_start, 2), round(os.getloadavg()[0], 2)],
                             "results": cells})


if __name__ == "__main__":
    main()
