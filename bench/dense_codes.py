"""Exact float32 vs compact codes (sign + int8, exact re-scoring) in the embedded index, in
ONE run: the same synthetic catalog opened alternately by fresh processes.

    python bench/dense_codes.py [--n 100000] [--rounds 3] [--queries 300] [--budget 30]
                                [--name dense_codes]

The catalog is built once from ``bench/backends.py``'s synthetic data (Zipf SciFact words,
clustered 384-d vectors, 10% of documents in a "side" namespace). Each round then runs one
child process per variant, alternating (exact, codes, exact, codes, ...), so shared-machine
load falls on both alike. A child opens ``EmbeddedChunkIndex(catalog, 384, exact=...)`` and
reports: open seconds (the page cache is warm after the build; it is not dropped), RSS
before open (imports only), after open and peak (``/proc/self/status``), hybrid p50/p95 search-only
(``backends.latency``: dense + BM25 lists 100 deep, RRF, chunk fetch) over all namespaces
and over the 10% one, and dense recall@10 against exact cosine search. The result has the
per-round figures, medians, ratios (codes / exact) and the load average at every child.
Wrap timed runs in ``flock /tmp/docgraph-bench.lock``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from backends import (  # noqa: E402
    DIM,
    EVERYTHING,
    FixedQueries,
    dense_recall,
    latency,
    row_positions,
    synthetic_data,
    write_chunks,
)
from common import load_beir, log, percentile, write_result  # noqa: E402
from docgraph.embedding.embedders import MiniLMEmbedder  # noqa: E402
from docgraph.retrieve.cohort import CohortSearch  # noqa: E402
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog  # noqa: E402
from docgraph.store.sqlite.graph import SQLiteGraphStore  # noqa: E402
from docgraph.store.sqlite.index import sidecar_path  # noqa: E402

VARIANTS = ("exact", "codes")
# codes: rebuilt from the catalog at open (no sidecar); sidecar: mapped from the sidecar.
ALL_VARIANTS = ("exact", "codes", "sidecar")
FIGURES = ("open_s", "rss_before_open_mb", "rss_after_open_mb", "rss_peak_mb",
           "rss_after_queries_mb", "anon_growth_during_queries_mb", "file_backed_after_queries_mb",
           "hybrid_p50_ms", "hybrid_p95_ms", "dense_lane_p50_ms", "side_hybrid_p50_ms",
           "side_hybrid_p95_ms",
           "dense_recall@10_all", "dense_recall@10_side", "cohort_vector_first_p50_ms",
           "cohort_vector_first_p95_ms")


def rss_mb() -> tuple[float, float]:
    """(current, peak) resident set size of this process in MB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)


def resident_kinds_mb() -> tuple[float, float]:
    """(anonymous, file-backed) resident memory of this process in MB: mapped sidecar and
    catalog pages are file-backed (the kernel can drop them), the bench's own data and the
    index's heap are anonymous."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return (int(fields["RssAnon"].split()[0]) / 1024, int(fields["RssFile"].split()[0]) / 1024)


def evict(paths: Any) -> None:
    """Drop these files' pages from the page cache (a cold open without root rights)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def cohort_latency(catalog: SQLiteCatalog, index: EmbeddedChunkIndex, queries: list[str],
                   qvectors: Any, namespaces: frozenset[str], budget: float) -> dict[str, Any]:
    """p50/p95 of the cohort engine's ``vector_first`` search (k 10; the synthetic catalog
    has no entity graph, so this is its seed lanes, fusion and chunk reads)."""
    engine = CohortSearch(catalog, index, SQLiteGraphStore(catalog),
                          FixedQueries(dict(zip(queries, qvectors, strict=True))), None)
    for query in queries[:5]:
        engine.search(query, namespaces=namespaces, k=10, mode="vector_first")
    times: list[float] = []
    started = time.perf_counter()
    for query in queries:
        if time.perf_counter() - started > budget:
            break
        t0 = time.perf_counter()
        engine.search(query, namespaces=namespaces, k=10, mode="vector_first")
        times.append(time.perf_counter() - t0)
    return {"cohort_vector_first_p50_ms": round(1000 * percentile(times, 50), 2),
            "cohort_vector_first_p95_ms": round(1000 * percentile(times, 95), 2)}


def child(db: Path, variant: str, n: int, queries: int, budget: float) -> dict[str, Any]:
    """Open the catalog with one variant and measure it (runs in a fresh process)."""
    before, _ = rss_mb()
    t0 = time.perf_counter()
    catalog = SQLiteCatalog(db)
    index = EmbeddedChunkIndex(catalog, DIM, exact=variant == "exact",
                               sidecar=variant == "sidecar", sidecar_after_rows=10**12)
    opened = time.perf_counter() - t0
    rss, peak = rss_mb()
    texts, vectors, qtexts, qvectors, side_qvectors = synthetic_data(
        n, load_beir("scifact"), queries)
    del texts
    anon_before_queries, _ = resident_kinds_mb()  # the bench's vectors are anonymous too
    everything = EVERYTHING
    all_ns = latency(catalog, index, qtexts, qvectors, everything, budget)
    side_ns = latency(catalog, index, qtexts[:len(side_qvectors)], side_qvectors,
                      frozenset({"side"}), budget)
    cohort = cohort_latency(catalog, index, qtexts, qvectors, everything, budget)
    rss_queried, _ = rss_mb()  # mapped sidecar pages count once touched
    anon_after_queries, file_after_queries = resident_kinds_mb()
    side = row_positions(catalog, "side")
    rows = {**side, **row_positions(catalog, "bench")}
    result = {
        "variant": variant, "loadavg_1": round(os.getloadavg()[0], 2),
        "sidecar_status": index.sidecar_status, "rows_read_at_open": index.rows_read,
        "open_s": round(opened, 2), "rss_before_open_mb": round(before),
        "rss_after_open_mb": round(rss),
        "rss_peak_mb": round(peak), "rss_after_queries_mb": round(rss_queried),
        # rss_after_queries includes the bench's synthetic vectors (1.5 GB at 1M); these two
        # separate the index: heap it grew by while answering, and file pages it maps
        "anon_growth_during_queries_mb": round(anon_after_queries - anon_before_queries),
        "file_backed_after_queries_mb": round(file_after_queries),
        "hybrid_p50_ms": all_ns["hybrid_p50_ms"], "hybrid_p95_ms": all_ns["hybrid_p95_ms"],
        "dense_lane_p50_ms": all_ns["dense_lane_p50_ms"], **cohort,
        "side_hybrid_p50_ms": side_ns["hybrid_p50_ms"],
        "side_hybrid_p95_ms": side_ns["hybrid_p95_ms"],
        "dense_recall@10_all": dense_recall(index, catalog, vectors, qvectors[:100],
                                            everything, rows),
        "dense_recall@10_side": dense_recall(index, catalog, vectors, side_qvectors[:100],
                                             frozenset({"side"}), side),
        "queries": all_ns["queries"],
    }
    catalog.close()
    return result


def build(db: Path, n: int, queries: int) -> float:
    """Write the synthetic catalog; returns seconds."""
    texts, vectors, _, _, _ = synthetic_data(n, load_beir("scifact"), queries)
    t0 = time.perf_counter()
    catalog = SQLiteCatalog(db)
    catalog.set_embedding_model(MiniLMEmbedder.name, DIM)
    write_chunks(catalog, texts, vectors, 0)
    catalog.close()
    return time.perf_counter() - t0


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--budget", type=float, default=30.0,
                        help="seconds of timed queries per latency pass at most")
    parser.add_argument("--name", default="dense_codes")
    parser.add_argument("--db", type=Path, default=None,
                        help="keep the catalog at this path (built when missing, reused "
                        "when present); default: a temporary directory")
    parser.add_argument("--variants", default="exact,codes",
                        help=f"comma-separated, of {', '.join(ALL_VARIANTS)}")
    parser.add_argument("--cold", action="store_true",
                        help="evict the catalog and sidecar files from the page cache "
                        "(posix_fadvise DONTNEED) before each child")
    parser.add_argument("--build-only", action="store_true",
                        help="build the catalog at --db and stop")
    parser.add_argument("--child", nargs=2, metavar=("DB", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(Path(args.child[0]), args.child[1], args.n, args.queries,
                               args.budget)))
        return
    kept = args.db is not None
    workdir = args.db.parent if kept else Path(tempfile.mkdtemp(prefix="docgraph-dense-codes-"))
    try:
        db = args.db if kept else workdir / "catalog.db"
        build_s = 0.0
        if not db.exists():
            workdir.mkdir(parents=True, exist_ok=True)
            log(f"building {args.n} chunks")
            build_s = build(db, args.n, args.queries)
        if args.build_only:
            return
        variants = tuple(args.variants.split(","))
        side = sidecar_path(db)
        if "sidecar" in variants:
            catalog = SQLiteCatalog(db)
            log(f"sidecar: {EmbeddedChunkIndex(catalog, DIM).save_sidecar() / 2**20:.0f} MB")
            catalog.close()
        size_mb = sum(p.stat().st_size for p in workdir.iterdir()
                      if p.name.startswith(db.name) and p != side) / 2**20
        sidecar_mb = side.stat().st_size / 2**20 if side.exists() else 0.0
        runs: list[dict[str, Any]] = []
        for round_no in range(args.rounds):
            order = variants if round_no % 2 == 0 else variants[::-1]
            for variant in order:
                if args.cold:
                    evict(p for p in workdir.iterdir() if p.name.startswith(db.name))
                out = subprocess.run(
                    [sys.executable, __file__, "--n", str(args.n), "--queries",
                     str(args.queries), "--budget", str(args.budget), "--child", str(db),
                     variant], check=True, capture_output=True, text=True).stdout
                runs.append({"round": round_no, **json.loads(out.strip().splitlines()[-1])})
                log(f"  round {round_no} {variant}: {runs[-1]}")
    finally:
        if not kept:
            shutil.rmtree(workdir, ignore_errors=True)
    medians = {v: {f: statistics.median(r[f] for r in runs if r["variant"] == v)
                   for f in FIGURES} for v in variants}
    base, new = variants[0], variants[-1]
    ratios = {f: round(medians[new][f] / medians[base][f], 3)
              for f in FIGURES if medians[base][f]}
    table = [{"variant": v, **medians[v]} for v in variants] + [{"variant": f"{new}/{base}",
                                                                **ratios}]
    write_result(args.name, {
        "settings": {"n": args.n, "rounds": args.rounds, "queries": args.queries,
                     "budget_s": args.budget, "dimension": DIM},
        "variants": list(variants), "page_cache": "evicted" if args.cold else "warm",
        "build_s": round(build_s, 1), "file_mb": round(size_mb),
        "sidecar_mb": round(sidecar_mb),
        "results": table, "runs": runs,
    })


if __name__ == "__main__":
    main()
