"""The dense lane's HNSW graph (``docgraph.store.graph_ann``) against the exact sign scan, on
``bench/store_scale.py``'s synthetic store (built there when missing).

    python bench/graph_ann.py [--n 1000000] [--variants build,exact,graph,exact,graph]
        [--name graph_ann_<n>]

One fresh process per variant, in order: ``build`` opens the catalog (mapping the sidecar,
written first if missing), deletes the graph files and times the graph's build and its
size (``build_lists`` the lists' instead, with its phases; ``build_lists_flat`` the lists as
built before the fast-scan assignment, flat at every size); ``exact`` opens with the graph
off, ``graph`` maps it. ``exact`` and ``graph`` report
open seconds and RSS, hybrid and dense-lane p50/p95 over everything and the 10 % "side"
namespace, dense recall@10 against the exact truth (all, side), a 1 % caller (a row filter
passing every 100th row: k filled from it, recall against the exact scan), the dense lane
at 6 concurrent queries (p50/p95), and (``graph``) the dense lane per filter share with the
graph forced and with the exact scan, alternating query by query (the share rule), and raw
faiss on the same graph (top 10 straight from the walk, no re-scoring). Run timed runs
under ``flock /tmp/docgraph-bench.lock``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from backends import DIM, EVERYTHING, K, latency  # noqa: E402
from common import log, percentile, write_result  # noqa: E402
from dense_codes import rss_mb  # noqa: E402
from docgraph.store import lists_build  # noqa: E402
from docgraph.store.dense_lists import lists_path  # noqa: E402
from docgraph.store.graph_ann import graph_path  # noqa: E402
from docgraph.store.rows import in_namespaces  # noqa: E402
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog  # noqa: E402
from docgraph.store.sqlite.index import sidecar_path  # noqa: E402
from store_scale import positions_of, recall, truth_path  # noqa: E402

VARIANTS = ("build", "exact", "exact_uncached", "graph", "build_lists", "build_lists_flat",
            "lists")
ANN = {"build": "hnsw", "graph": "hnsw", "build_lists": "lists", "build_lists_flat": "lists",
       "lists": "lists"}
EVERYTHING = EVERYTHING
SHARES = (0.01, 0.02, 0.05, 0.1, 0.3, 1.0)
CONCURRENCY = 6


def time_lists_phases() -> dict[str, float]:
    """Seconds the lists build spends in k-means (``train``), assigning every row
    (``assign``) and choosing ``nprobe`` (``tune``), filled in as the build runs (the
    module's phase functions wrapped in this process)."""
    phases: dict[str, float] = {}
    for name in ("train", "assign", "tune"):
        inner = getattr(lists_build, name)

        def timed(*args: Any, _inner: Any = inner, _name: str = name) -> Any:
            t = time.perf_counter()
            try:
                return _inner(*args)
            finally:
                phases[_name] = phases.get(_name, 0.0) + time.perf_counter() - t
        setattr(lists_build, name, timed)
    return phases


def _every(m: int) -> Any:
    """A row filter passing every ``m``-th row id (a caller who may read 1/m of the rows)."""
    return lambda rowids, n: rowids[:n] % m == 0


def _ms(values: list[float]) -> tuple[float, float]:
    return round(1000 * percentile(values, 50), 2), round(1000 * percentile(values, 95), 2)


def _concurrent(index: EmbeddedChunkIndex, qvectors: np.ndarray, rounds: int = 3
                ) -> dict[str, Any]:
    """Dense lane (k 100) p50/p95 with ``CONCURRENCY`` threads querying at once."""
    times: list[float] = []
    lock = threading.Lock()

    def worker(offset: int) -> None:
        mine = []
        for i in range(rounds * 20):
            q = qvectors[(offset * 37 + i) % len(qvectors)]
            t = time.perf_counter()
            index.dense_search(q, 100, EVERYTHING)
            mine.append(time.perf_counter() - t)
        with lock:
            times.extend(mine)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(CONCURRENCY)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    p50, p95 = _ms(times)
    return {"load6_dense_p50_ms": p50, "load6_dense_p95_ms": p95,
            "load6_queries_per_s": round(len(times) / (time.perf_counter() - started), 1)}


def _one_percent(index: EmbeddedChunkIndex, qvectors: np.ndarray) -> dict[str, Any]:
    """A caller who may read 1 % of the rows: rows returned, readable, and recall against
    the exact scan (the graph's selector and the scan, same process)."""
    matrix = index.dense
    ids = index._namespace_ids(EVERYTHING)
    keep = _every(100)
    graph = getattr(matrix, "graph", None)
    hits, filled, readable, times = 0, 0, True, []
    for q in qvectors:
        t = time.perf_counter()
        got = [r.rowid for r in matrix.search(q, K, ids, keep=keep)]  # type: ignore[call-arg]
        times.append(time.perf_counter() - t)
        matrix.graph = None  # type: ignore[union-attr]
        want = [r.rowid for r in matrix.search(q, K, ids, keep=keep)]  # type: ignore[call-arg]
        matrix.graph = graph  # type: ignore[union-attr]
        hits += len(set(got) & set(want))
        filled += len(got) == K
        readable &= all(r % 100 == 0 for r in got)
    return {"one_percent_recall@10_vs_exact": round(hits / (K * len(qvectors)), 4),
            "one_percent_k_filled": filled / len(qvectors), "one_percent_readable": readable,
            "one_percent_dense_p50_ms": _ms(times)[0]}


def _shares(index: EmbeddedChunkIndex, qvectors: np.ndarray) -> dict[str, Any]:
    """Dense lane (k 10) p50 per filter share: the graph forced vs the exact scan,
    alternating query by query; and how often the graph answered."""
    matrix = index.dense
    graph = index.graph
    assert graph is not None
    ids = index._namespace_ids(EVERYTHING)
    out: dict[str, Any] = {}
    saved = graph.min_share
    for share in SHARES:
        keep = None if share == 1.0 else _every(round(1 / share))
        g_times, e_times, hits = [], [], 0
        for q in qvectors:
            graph.min_share = 0.0
            matrix.graph = graph  # type: ignore[union-attr]
            t = time.perf_counter()
            got = matrix.search(q, K, ids, keep=keep)  # type: ignore[call-arg]
            g_times.append(time.perf_counter() - t)
            matrix.graph = None  # type: ignore[union-attr]
            t = time.perf_counter()
            want = matrix.search(q, K, ids, keep=keep)  # type: ignore[call-arg]
            e_times.append(time.perf_counter() - t)
            hits += len({r.rowid for r in got} & {r.rowid for r in want})
        out[f"share_{share}_graph_p50_ms"] = _ms(g_times)[0]
        out[f"share_{share}_exact_p50_ms"] = _ms(e_times)[0]
        out[f"share_{share}_graph_recall@10_vs_scan"] = round(hits / (K * len(qvectors)), 4)
    graph.min_share = saved
    matrix.graph = graph  # type: ignore[union-attr]
    return out


def _raw(index: EmbeddedChunkIndex, catalog: SQLiteCatalog, qvectors: np.ndarray,
         truth: np.ndarray) -> dict[str, Any]:
    """faiss alone on the same graph: top 10 from the walk (efSearch 128), no filter and no
    re-scoring; p50 and recall@10 against the exact truth."""
    import faiss

    g = index.graph.graph  # type: ignore[union-attr]
    params = faiss.SearchParametersHNSW()
    params.efSearch = 128
    times, hits = [], 0
    for q, exact in zip(qvectors, truth, strict=True):
        t = time.perf_counter()
        _, labels = g.index.search(q[None, :].astype(np.float32), K, params=params)
        times.append(time.perf_counter() - t)
        rows = [int(g.keys[x]) for x in labels[0] if x >= 0]
        where = positions_of(catalog, rows)
        hits += len({where[r] for r in rows if r in where} & set(exact.tolist()))
    p50, p95 = _ms(times)
    return {"raw_faiss_p50_ms": p50, "raw_faiss_p95_ms": p95,
            "raw_faiss_recall@10": round(hits / (K * len(qvectors)), 4)}


def child(db: Path, variant: str, budget: float, recall_queries: int) -> dict[str, Any]:
    """Open the catalog as ``variant`` says and measure it (runs in a fresh process)."""
    truth = np.load(truth_path(db))
    qtexts = [str(t) for t in truth["qtexts"]]
    qvectors, side_qvectors = truth["qvectors"], truth["side_qvectors"]
    if variant == "build":
        for f in [graph_path(db), *db.parent.glob(graph_path(db).name + ".*.faiss")]:
            f.unlink(missing_ok=True)
    phases: dict[str, float] = {}
    if variant.startswith("build_lists"):
        lists_path(db).unlink(missing_ok=True)
        phases = time_lists_phases()
        if variant == "build_lists_flat":  # the build before the fast scan: flat throughout
            lists_build.ASSIST_MIN_LISTS = 10**12
    t0 = time.perf_counter()
    catalog = SQLiteCatalog(db)
    index = EmbeddedChunkIndex(catalog, DIM, sidecar_after_rows=10**12,
                               graph_min_rows=None if variant.startswith("exact") else 1,
                               ann=ANN.get(variant, "hnsw"))
    opened = time.perf_counter() - t0
    if variant == "exact_uncached":  # the scan as before the per-snapshot filter masks
        matrix = index.dense

        def uncached(s: Any, namespace_ids: list[int], kind: int) -> tuple[Any, int]:
            mask = (s.alive[: s.n] & (s.kinds[: s.n] == kind)
                    & in_namespaces(s.namespaces[: s.n], namespace_ids))
            return mask, int(np.count_nonzero(mask))
        matrix._allowed = uncached  # type: ignore[union-attr]
    rss, peak = rss_mb()
    result: dict[str, Any] = {
        "variant": variant, "loadavg_1": round(os.getloadavg()[0], 2),
        "sidecar_status": index.sidecar_status, "chunks": len(index),
        "open_s": round(opened, 3), "rss_after_open_mb": round(rss),
        "rss_peak_open_mb": round(peak)}
    if variant.startswith("build"):
        if index.sidecar_status != "loaded":
            index.save_sidecar()
        assert index.graph is not None
        index.graph.wait()
        result.update({"graph_build_s": round(index.graph.last_build_s, 1),
                       "graph_mb": round(index.graph.size_bytes() / 2**20),
                       "rss_peak_build_mb": round(rss_mb()[1]),
                       "loadavg_1_after": round(os.getloadavg()[0], 2)})
        result.update({f"{name}_s": round(v, 1) for name, v in phases.items()})
        if variant.startswith("build_lists"):
            lists = index.graph.lists  # type: ignore[attr-defined]
            result.update({"lists": len(lists.centroids), "nprobe": lists.nprobe})
        catalog.close()
        return result
    if variant in ("graph", "lists"):
        assert index.graph is not None
        result.update({"graph_status": index.graph.status,
                       "graph_mb": round(index.graph.size_bytes() / 2**20)})
    all_ns = latency(catalog, index, qtexts, qvectors, EVERYTHING, budget)
    side_ns = latency(catalog, index, qtexts[:len(side_qvectors)], side_qvectors,
                      frozenset({"side"}), budget)
    result.update({f"all_{k}": v for k, v in all_ns.items()})
    result.update({f"side_{k}": v for k, v in side_ns.items()})
    result["rss_after_queries_mb"] = round(rss_mb()[0])
    result["dense_recall@10_all"] = recall(catalog, index, qvectors[:recall_queries],
                                           truth["truth_all"][:recall_queries], EVERYTHING)
    result["dense_recall@10_side"] = recall(
        catalog, index, side_qvectors[:recall_queries], truth["truth_side"][:recall_queries],
        frozenset({"side"}))
    result.update(_one_percent(index, qvectors[:50]))
    result.update(_concurrent(index, qvectors))
    if variant in ("graph", "lists"):
        result.update(_shares(index, qvectors[:60]))
        result["graph_answered"] = index.graph.answered  # type: ignore[union-attr]
    if variant == "graph":
        result.update(_raw(index, catalog, qvectors[:recall_queries],
                           truth["truth_all"][:recall_queries]))
    if variant == "lists":
        lists = index.graph.lists  # type: ignore[union-attr]
        result.update({"lists": len(lists.centroids), "nprobe": lists.nprobe,
                       "lists_read_per_query": round(
                           index.graph.probed / max(index.graph.answered, 1), 2)})
    result["loadavg_1_after"] = round(os.getloadavg()[0], 2)
    catalog.close()
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--db", type=Path)
    parser.add_argument("--budget", type=float, default=20.0)
    parser.add_argument("--recall-queries", type=int, default=100)
    parser.add_argument("--variants", default="build,exact,graph,exact,graph")
    parser.add_argument("--name", default=None)
    parser.add_argument("--child", nargs=2, metavar=("DB", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(Path(args.child[0]), args.child[1], args.budget,
                               args.recall_queries)))
        return
    db = args.db or BENCH_DIR / ".cache" / f"store_scale_{args.n}" / "catalog.db"
    if not db.exists():
        subprocess.run([sys.executable, str(BENCH_DIR / "store_scale.py"), "--n",
                        str(args.n), "--db", str(db), "--build-only"], check=True)
    results = []
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            parser.error(f"unknown variant {variant!r}")
        log(f"  {variant} ...")
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(db), variant, "--budget",
             str(args.budget), "--recall-queries", str(args.recall_queries)],
            check=False, capture_output=True, text=True,
            # the build uses all cores but one; on this 2-core machine, both (nothing queries)
            env={**os.environ, "DOCGRAPH_SCAN_THREADS": "3"} if variant.startswith("build")
            else None)
        if out.returncode:
            raise SystemExit(f"{variant} failed:\n{out.stderr}")
        row = json.loads(out.stdout.strip().splitlines()[-1])
        log(f"    {row}")
        results.append(row)
    write_result(args.name or f"graph_ann_{args.n}", {
        "settings": {"n": args.n, "budget_s": args.budget, "dimension": DIM,
                     "recall_queries": args.recall_queries,
                     "sidecar_mb": round(sidecar_path(db).stat().st_size / 2**20)},
        "catalog_mb": round(db.stat().st_size / 2**20), "results": results})


if __name__ == "__main__":
    main()
