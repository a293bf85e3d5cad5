"""The BM25 lane of this checkout against another version of ``store/bm25.py``, query by
query in one process (a change to the lane measured before and after, on the same pages).

    flock /tmp/docgraph-bench.lock python bench/bm25_ab.py --db CATALOG --against OLD.py \
        [OLD_MODULE.py ...] [--k 100] [--half tune|test|all] [--one-thread] [--name bm25_ab]

``CATALOG`` is a ``bench/store_scale.py`` catalog with its sidecar; ``OLD.py`` a copy of
``src/docgraph/store/bm25.py`` as it was (``git show REV:src/docgraph/store/bm25.py``),
loaded as a module of its own; each further ``OLD_MODULE.py`` a module of
``docgraph.store`` as it was (``posting_lookup.py``, say), which the old lane imports
instead of this checkout's. ``--half``: every other query (tuning or test half, by position
after the warm-up), or all. Every query of the catalog's truth file after the first 20
(warm-up) runs three times each way, old then new, over both namespaces at ``k``; the
answers must be identical (ids and scores) and the best of the three is kept. Reported:
p50 / p95 / max per way, the median per-query ratio new / old, and that ratio on the old
way's slowest tenth (where a change to the tail shows), with the 1-minute load average.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from backends import DIM, EVERYTHING  # noqa: E402
from common import log, write_result  # noqa: E402
from docgraph.store import bm25, bm25_parts  # noqa: E402
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog  # noqa: E402

NAMESPACES = EVERYTHING
WARMUP = 20
REPEATS = 3


def load_other(path: Path, *others: Path) -> Any:
    """The module in ``path`` (another version of ``bm25.py``), under a name of its own,
    importing ``others`` (other versions of modules of ``docgraph.store``, by file name)
    instead of this checkout's."""
    store = sys.modules["docgraph.store"]
    mine = {}
    try:
        for other in others:
            name = other.stem
            if not isinstance(getattr(store, name, None), type(store)):
                raise SystemExit(f"--against {other}: docgraph.store has no module {name!r} "
                                 "(name the file as the module it stands for)")
            mine[name] = getattr(store, name)
            setattr(store, name, _module(other, f"{name}_against"))
        return _module(path, "bm25_against")
    finally:
        for name, module in mine.items():
            setattr(store, name, module)


def _module(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--against {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def store_queries(db: Path, half: str = "all") -> list[str]:
    """The queries of ``db``'s truth file (a ``bench/store_scale.py`` catalog) after the
    warm-up: all, or every other one (``tune``: from the first, ``test``: the others)."""
    truth = Path(str(db) + ".truth.npz")
    if not truth.exists():
        raise SystemExit(f"--db {db}: no {truth.name} beside it (a store_scale catalog?)")
    queries = [str(t) for t in np.load(truth)["qtexts"]][WARMUP:]
    return queries[0::2] if half == "tune" else queries[1::2] if half == "test" else queries


def adapted(top_k: Any) -> Any:
    """``top_k`` called with only the arguments it takes (an older one may take fewer)."""
    count = len(inspect.signature(top_k).parameters)
    return lambda *given: top_k(*given[:count])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--against", type=Path, nargs="+", required=True)
    parser.add_argument("--half", choices=("tune", "test", "all"), default="all")
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--name", default="bm25_ab")
    parser.add_argument("--one-thread", action="store_true",
                        help="no heavy query split into row ranges on idle threads (the "
                        "lane as it runs with the cores busy)")
    args = parser.parse_args()
    if args.one_thread:
        bm25_parts.HELPERS = bm25_parts.Helpers(lambda: 0)
    queries = store_queries(args.db)
    timed = store_queries(args.db, args.half)
    ways = {"old": adapted(load_other(*args.against).top_k), "new": bm25.top_k}
    index = EmbeddedChunkIndex(SQLiteCatalog(args.db), DIM, sidecar=True,
                               sidecar_after_rows=10**12)
    for query in queries:  # pages in, both ways
        for top_k in ways.values():
            bm25.top_k = top_k
            index.lexical_search(query, args.k, NAMESPACES)
    load_start = os.getloadavg()[0]
    times: dict[str, list[float]] = {way: [] for way in ways}
    for query in timed:
        best = {way: float("inf") for way in ways}
        answer = None
        for _ in range(REPEATS):
            for way, top_k in ways.items():
                bm25.top_k = top_k
                t0 = time.perf_counter()
                got = index.lexical_search(query, args.k, NAMESPACES)
                best[way] = min(best[way], time.perf_counter() - t0)
                answer = got if answer is None else answer
                if got != answer:
                    raise SystemExit(f"{way} answered {query!r} differently")
        for way in ways:
            times[way].append(1000 * best[way])
    bm25.top_k = ways["new"]
    old = np.array(times["old"])
    slowest = old >= np.percentile(old, 90)
    results = []
    for way, values in times.items():
        t = np.array(values)
        results.append({"way": way, "p50_ms": round(float(np.percentile(t, 50)), 2),
                        "p95_ms": round(float(np.percentile(t, 95)), 2),
                        "max_ms": round(float(t.max()), 2),
                        "ratio_median": round(float(np.median(t / old)), 3),
                        "ratio_slowest_tenth": round(float(np.median((t / old)[slowest])), 3)})
    log(f"{len(index)} rows: k {args.k}, {len(old)} queries")
    write_result(args.name, {"rows": len(index), "k": args.k, "queries": len(old),
                             "against": [path.name for path in args.against],
                             "half": args.half, "one_thread": args.one_thread,
                             "loadavg_1": [round(load_start, 2), round(os.getloadavg()[0], 2)],
                             "results": results})


if __name__ == "__main__":
    main()
