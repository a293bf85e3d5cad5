"""The hybrid tail with the cores busy on purpose (issue 36: p95 within 2x p50 at load 6).

    flock /tmp/docgraph-bench.lock python bench/load_tail.py --db CATALOG \
        [--loads 0,6] [--rounds 3] [--variant NAME[:VAR=VALUE,...]]... [--name load_tail]

``CATALOG`` is a ``bench/store_scale.py`` catalog with its sidecar (and, for the lists,
``<catalog>.chunk-lists``: ``store_scale.py --variants ann_build --dense-ann lists``).

For each level of ``--loads`` (extra busy processes; 0 = none started), in order: start
that many busy processes (a pure-Python spin each, at this process's nice level, which they
inherit), wait until the 1-minute load average reaches the level or ``--settle`` seconds
pass, then run ``--rounds`` rounds of every ``--variant`` alternating, each in a fresh
process, and stop the busy processes before the next level. A child opens the catalog as
``store_scale.py`` does (sidecar mapped, ``--dense-ann`` on from ``--ann-min-rows`` live
rows), warms up, and times the same queries as its ``latency`` (hybrid = both lanes, RRF,
chunk fetch; then each lane alone, 100 deep) over every namespace; it reports p50 / p95,
the ratio p95 / p50, how the hybrid's time per query follows each lane's (correlation, the
BM25 lane's mean on the hybrid's slowest tenth) and the 1-minute load average at its start
and end. A variant is a name
and environment variables set for its child (e.g. ``inline:DOCGRAPH_LANES=inline``), so
old and new can be compared in one run.

The busy processes exit on their own if this process dies (they watch their parent), and
are stopped on every way out (end, error, Ctrl-C, SIGTERM). Run the whole script under
the bench lock: the busy processes load the cores for as long as they live.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from backends import DIM, EVERYTHING  # noqa: E402
from common import log, stop_processes, write_result  # noqa: E402

# Spins in Python until its parent (the pid given) is gone; checks ten times a second.
SPIN = ("import os, sys, time\n"
        "parent = int(sys.argv[1])\n"
        "while os.getppid() == parent:\n"
        "    end = time.monotonic() + 0.1\n"
        "    while time.monotonic() < end:\n"
        "        pass\n")


@contextmanager
def busy(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` busy processes for the length of the block, stopped on any way out."""
    procs: list[subprocess.Popen[bytes]] = []
    previous = signal.getsignal(signal.SIGTERM)

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    try:
        for _ in range(count):
            procs.append(subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid())]))
        yield procs
    finally:
        stop_processes(procs, 5)
        signal.signal(signal.SIGTERM, previous)


def settle(level: float, timeout_s: float) -> dict[str, float]:
    """Wait until the 1-minute load average is at least ``level`` (or ``timeout_s``)."""
    started = time.monotonic()
    while os.getloadavg()[0] < level and time.monotonic() - started < timeout_s:
        time.sleep(2)
    return {"settle_s": round(time.monotonic() - started, 1),
            "loadavg_1_settled": round(os.getloadavg()[0], 2)}


class _Inline:
    """A stand-in for a lane pool that runs each task at once, in the caller's thread."""

    def get(self) -> _Inline:
        return self

    def submit(self, fn: Any, *args: Any, **kwargs: Any) -> Future[Any]:
        done: Future[Any] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as error:  # handed to the caller, as a pool would
            done.set_exception(error)
        return done

    lane = submit  # the pool's call since lanes run inline when no worker is free


def diagnose() -> None:
    """Bench-only switches for finding where the tail comes from, set per variant:
    ``LOAD_TAIL_INLINE_LANES=1`` runs the BM25 lane in the caller's thread (no lane pool),
    ``LOAD_TAIL_SWITCH_INTERVAL=<s>`` sets Python's GIL switch interval (and
    ``LOAD_TAIL_NO_IMPACT=1``, :func:`without_impact_orders`)."""
    if os.environ.get("LOAD_TAIL_INLINE_LANES") == "1":
        import docgraph.retrieve.hybrid as hybrid

        hybrid.LANE_POOL = _Inline()  # type: ignore[assignment]
    interval = os.environ.get("LOAD_TAIL_SWITCH_INTERVAL")
    if interval:
        sys.setswitchinterval(float(interval))


def without_impact_orders(postings: Any) -> None:
    """``LOAD_TAIL_NO_IMPACT=1``: the posting snapshot as a sidecar written before impact
    orders maps it (MaxScore reads every list it walks whole), the rest unchanged; the code
    is the same, so old and new differ only in the orders."""
    from dataclasses import replace

    from docgraph.store.bm25_bounds import ImpactOrders

    with postings._lock:
        postings._snap = replace(postings._snap, **ImpactOrders.none().fields())


def serial_latency(catalog: Any, index: Any, queries: list[str], qvectors: np.ndarray,
                   namespaces: frozenset[str], budget_s: float) -> dict[str, Any]:
    """``backends.latency``'s loop (each query hybrid, then each lane alone, 100 deep), and
    where the hybrid's slow queries come from: the per-query correlation of the hybrid's
    time with each lane's, and the BM25 lane's mean time on the hybrid's slowest tenth
    against the other queries."""
    from backends import WARMUP, FixedQueries
    from common import percentile
    from docgraph.config import IndexSettings
    from docgraph.retrieve.hybrid import HybridSearcher

    searcher = HybridSearcher(catalog, index, FixedQueries(dict(zip(queries, qvectors,
                                                                     strict=True))),
                              IndexSettings())
    for query in queries[:WARMUP]:
        searcher.search(query, namespaces=namespaces, k=10)
    rows: list[tuple[float, float, float]] = []
    started = time.perf_counter()
    for query, vector in zip(queries, qvectors, strict=True):
        if time.perf_counter() - started > budget_s:
            break
        t0 = time.perf_counter()
        searcher.search(query, namespaces=namespaces, k=10)
        t1 = time.perf_counter()
        index.dense_search(vector, 100, namespaces)
        t2 = time.perf_counter()
        index.lexical_search(query, 100, namespaces)
        rows.append((t1 - t0, t2 - t1, time.perf_counter() - t2))
    times = 1000 * np.array(rows)
    out: dict[str, Any] = {"queries": len(rows)}
    for column, name in enumerate(("hybrid", "dense_lane", "bm25_lane")):
        out[f"{name}_p50_ms"] = round(percentile(times[:, column].tolist(), 50), 2)
        out[f"{name}_p95_ms"] = round(percentile(times[:, column].tolist(), 95), 2)
    hybrid, dense, bm25 = times.T
    slow = hybrid >= np.quantile(hybrid, 0.9)
    out.update({
        "corr_hybrid_bm25": round(float(np.corrcoef(hybrid, bm25)[0, 1]), 2),
        "corr_hybrid_dense": round(float(np.corrcoef(hybrid, dense)[0, 1]), 2),
        "bm25_ms_on_hybrid_slowest_tenth": round(float(bm25[slow].mean()), 2),
        "bm25_ms_on_the_rest": round(float(bm25[~slow].mean()), 2)})
    return out


def concurrent_latency(catalog: Any, index: Any, queries: list[str], qvectors: np.ndarray,
                       namespaces: frozenset[str], budget_s: float,
                       concurrency: int) -> dict[str, Any]:
    """Hybrid latency with ``concurrency`` threads sharing one searcher, as a server's
    request threads do (each takes every ``concurrency``-th query); lanes are not timed
    alone here."""
    from backends import WARMUP, FixedQueries
    from common import percentile
    from docgraph.config import IndexSettings
    from docgraph.retrieve.hybrid import HybridSearcher

    searcher = HybridSearcher(catalog, index, FixedQueries(dict(zip(queries, qvectors,
                                                                     strict=True))),
                              IndexSettings())
    for query in queries[:WARMUP]:
        searcher.search(query, namespaces=namespaces, k=10)
    started = time.perf_counter()

    def worker(first: int) -> list[float]:
        times = []
        for query in queries[first::concurrency]:
            if time.perf_counter() - started > budget_s:
                break
            t0 = time.perf_counter()
            searcher.search(query, namespaces=namespaces, k=10)
            times.append(time.perf_counter() - t0)
        return times

    with ThreadPoolExecutor(concurrency) as pool:
        times = [t for part in pool.map(worker, range(concurrency)) for t in part]
    return {"queries": len(times), "concurrency": concurrency,
            "hybrid_p50_ms": round(1000 * percentile(times, 50), 2),
            "hybrid_p95_ms": round(1000 * percentile(times, 95), 2),
            "queries_per_s": round(len(times) / (time.perf_counter() - started), 1)}


def child(db: Path, budget: float, ann: str | None, ann_min_rows: int,
          concurrency: int = 1) -> dict[str, Any]:
    """Open the catalog and time the queries (runs in a fresh process)."""
    from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog
    from store_scale import truth_path

    diagnose()
    load_start = os.getloadavg()[0]
    truth = np.load(truth_path(db))
    qtexts = [str(t) for t in truth["qtexts"]]
    catalog = SQLiteCatalog(db)
    index = EmbeddedChunkIndex(catalog, DIM, sidecar=True, sidecar_after_rows=10**12,
                               graph_min_rows=ann_min_rows if ann else None,
                               ann=ann or "lists")
    if index.graph is not None:
        index.graph.wait()
    if os.environ.get("LOAD_TAIL_NO_IMPACT") == "1":
        without_impact_orders(index.postings)
    everything = EVERYTHING
    out = (serial_latency(catalog, index, qtexts, truth["qvectors"], everything, budget)
           if concurrency == 1 else
           concurrent_latency(catalog, index, qtexts, truth["qvectors"], everything, budget,
                              concurrency))
    result: dict[str, Any] = {
        "loadavg_1_start": round(load_start, 2), "loadavg_1_end": round(os.getloadavg()[0], 2),
        "sidecar_status": index.sidecar_status, **out}
    for lane in ("hybrid", "dense_lane", "bm25_lane")[:3 if concurrency == 1 else 1]:
        result[f"{lane}_p95_over_p50"] = round(out[f"{lane}_p95_ms"] / out[f"{lane}_p50_ms"], 2)
    if index.graph is not None:
        result["ann_answered"] = index.graph.answered
    catalog.close()
    return result


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """``NAME[:VAR=VALUE,...]`` -> (name, environment)."""
    name, _, assignments = text.partition(":")
    env: dict[str, str] = {}
    for item in filter(None, assignments.split(",")):
        var, eq, value = item.partition("=")
        if not eq or not var:
            raise SystemExit(f"--variant {text!r}: expected NAME[:VAR=VALUE,...]")
        env[var] = value
    return name, env


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over a variant's rounds at one load."""
    out: dict[str, Any] = {"rounds": len(rows)}
    for key in rows[0]:
        values = [r[key] for r in rows]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            out[key] = round(statistics.median(values), 2)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path)
    parser.add_argument("--loads", default="0,6",
                        help="comma-separated busy process counts, measured in this order")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME[:VAR=VALUE,...], repeatable (default: one, 'current')")
    parser.add_argument("--budget", type=float, default=20.0,
                        help="seconds of timed queries per child at most")
    parser.add_argument("--settle", type=float, default=150.0,
                        help="seconds to wait at most for the load average to reach a level")
    parser.add_argument("--dense-ann", choices=("lists", "hnsw"), default="lists")
    parser.add_argument("--ann-min-rows", type=int, default=250_000)
    parser.add_argument("--concurrency", type=int, default=1,
                        help="threads querying at once in a child (above 1: hybrid only)")
    parser.add_argument("--note", default="",
                        help="what the variants are, for the result file (a variant's "
                        "paths are not written there)")
    parser.add_argument("--name", default="load_tail")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.budget, args.dense_ann, args.ann_min_rows,
                                     args.concurrency)))
        return
    if args.db is None:
        parser.error("--db is required")
    variants = [parse_variant(v) for v in args.variant] or [("current", {})]
    loads = [int(x) for x in args.loads.split(",")]
    rows: list[dict[str, Any]] = []
    levels: list[dict[str, Any]] = []
    for level in loads:
        with busy(level):
            settled = settle(level, args.settle) if level else {
                "settle_s": 0.0, "loadavg_1_settled": round(os.getloadavg()[0], 2)}
            log(f"load {level}: {settled}")
            levels.append({"busy_processes": level, **settled})
            for round_ in range(args.rounds):
                for name, env in variants:
                    out = subprocess.run(
                        [sys.executable, __file__, "--child", str(args.db), "--budget",
                         str(args.budget), "--dense-ann", args.dense_ann,
                         "--ann-min-rows", str(args.ann_min_rows),
                         "--concurrency", str(args.concurrency)],
                        check=False, capture_output=True, text=True,
                        env={**os.environ, **env})
                    if out.returncode:
                        raise SystemExit(f"{name} at load {level} failed:\n{out.stderr}")
                    row = {"busy_processes": level, "variant": name, "round": round_,
                           **json.loads(out.stdout.strip().splitlines()[-1])}
                    log(f"  {row}")
                    rows.append(row)
    medians = []
    for level in loads:
        for name, _ in variants:
            picked = [r for r in rows if r["busy_processes"] == level and r["variant"] == name]
            medians.append({"variant": name, **summary(picked)})
    write_result(args.name, {
        "settings": {"db_chunks_note": str(args.db.name), "loads": loads,
                     "rounds": args.rounds, "budget_s": args.budget,
                     "concurrency": args.concurrency,
                     "dense_ann": args.dense_ann, "ann_min_rows": args.ann_min_rows,
                     "variants": {n: {var: "(a path)" if os.sep in value else value
                                      for var, value in e.items()} for n, e in variants},
                     "note": args.note,
                     "cores": len(os.sched_getaffinity(0)), "nice": os.nice(0)},
        "levels": levels, "results": medians, "rounds": rows})


if __name__ == "__main__":
    main()
