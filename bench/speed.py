"""Ingest throughput, no-op re-index cost and query latency of the product, with the real model.

    python bench/speed.py [--limit N] [--sizes 100000,1000000] [--queries 200]

(a) Ingest on SciFact-as-folder (one Markdown file per abstract, as in quality.py), default
    settings, real MiniLM int8 behind the embedding cache: every phase of
    ``IngestReport.seconds`` except ``embed`` gives the non-embedding chunks/s (median of
    ``--ingest-runs`` fresh builds after one warm-up build that fills the cache); the entity
    graph that ``DocGraph.index()`` builds afterwards is timed separately. Embedding alone is
    the uncached model on a fixed seeded sample of 300 chunk texts (median of 3).
(b) A no-op re-index of the same folder: wall seconds (median of 5) and embeddings performed,
    which must be 0 (asserted, both in the pipeline report and in the model-call counter).
(c) Query latency, one query at a time, p50/p95 over ``--queries`` SciFact queries: the whole
    ``DocGraph.search`` (hybrid and dense, k=10, query embedding included) plus its parts
    (``embed_query``, ``dense_search`` and ``lexical_search`` at the candidate depth), on the
    SciFact index and on synthetic indexes of ``--sizes`` chunks written through
    ``SQLiteCatalog.write_document`` (1,000 chunks per document, random unit 384-d vectors
    recorded as the real model, ~60 words per chunk drawn from a Zipf law over the ~30k most
    frequent SciFact words). Synthetic indexes are deleted after measuring.

``--ingest-only`` runs (a) and (b) alone and replaces only the ``ingest`` section (and the
ingest targets) of an existing result file, keeping its latency figures.

The machine is small and shared: the load average is recorded; every figure is a median (or a
percentile) over the stated number of repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from common import (
    RESULTS_DIR,
    BeirDataset,
    cached_embedder,
    load_beir,
    log,
    machine_info,
    percentile,
    write_corpus_folder,
    write_result,
)
from docgraph.app import DocGraph
from docgraph.config import Settings, load_settings
from docgraph.embedding.embedders import Embedder, MiniLMEmbedder
from docgraph.model import ChunkDraft
from docgraph.sources.urn import document_id, normalize_urn
from docgraph.store.base import DocumentWrite
from docgraph.store.sqlite import SQLiteCatalog

NAMESPACE = "bench"
EMBED_SAMPLE = 300
EMBED_RUNS = 3
NOOP_RUNS = 5
SEARCH_K = 10
CHUNKS_PER_DOC = 1000
WORDS_PER_CHUNK = 60
VOCAB_SIZE = 30_000
ZIPF_S = 1.0
SIZE_BUDGET_S = 300.0   # stop measuring one index size after this many seconds of queries
FLOOR_QUERIES = 50

TARGETS = {
    "ingest_non_embed_chunks_per_s": 2000.0,
    "noop_reindex_s": 2.0,
    "hybrid_p50_ms_at_100k": 20.0,
}


def rss_mb() -> dict[str, float]:
    """Current and peak resident memory of this process (MB), from /proc when available."""
    out: dict[str, float] = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                key = "rss_mb" if line.startswith("VmRSS") else "peak_rss_mb"
                out[key] = round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return out


def file_mb(db: Path) -> float:
    total = sum(Path(f"{db}{s}").stat().st_size for s in ("", "-wal", "-shm")
                if Path(f"{db}{s}").exists())
    return round(total / 2**20, 1)


def remove_db(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def settings_for(db: Path) -> Settings:
    return load_settings(store={"path": db})


def ms_stats(values: Sequence[float]) -> dict[str, float]:
    return {"p50_ms": round(percentile(values, 50), 2), "p95_ms": round(percentile(values, 95), 2),
            "mean_ms": round(statistics.fmean(values), 2), "n": len(values)}


# ---------------------------------------------------------------- (a) + (b) ingest

def measure_ingest(data: BeirDataset, doc_ids: list[str], workdir: Path, runs: int,
                   noop_runs: int) -> tuple[dict[str, Any], Path]:
    """Fresh builds of the SciFact folder, then no-op re-indexes of the last one."""
    folder = workdir / "corpus"
    write_corpus_folder(data, doc_ids, folder)
    embedder = cached_embedder(MiniLMEmbedder())
    builds: list[dict[str, Any]] = []
    last_db = workdir / "unused.db"
    for run in range(runs + 1):
        db = workdir / f"build-{run}.db"
        graph = DocGraph(settings_for(db), embedder)
        misses0 = embedder.misses
        started = time.perf_counter()
        report = graph.index(folder, NAMESPACE)
        wall = time.perf_counter() - started
        phases = dict(report.seconds)
        # Wall time of the folder build minus embedding: with worker processes the phase
        # times add up the busy time of every process, so they are not a wall clock.
        non_embed = report.wall_seconds - phases.get("embed", 0.0)
        build = {
            "run": "warm-up (fills the cache)" if run == 0 else run,
            "chunks": report.chunks_written,
            "files": len(report.added),
            "embedded_by_model": embedder.misses - misses0,
            "seconds": {k: round(v, 3) for k, v in phases.items()},
            "non_embed_s": round(non_embed, 3),
            "non_embed_chunks_per_s": round(report.chunks_written / non_embed, 1),
            "workers": report.workers,
            "wall_s": round(wall, 2),
            "graph_build_s": round(wall - report.wall_seconds, 2),
        }
        builds.append(build)
        log(f"  ingest run {build['run']}: {build['chunks']} chunks, non-embed "
            f"{non_embed:.2f} s ({build['non_embed_chunks_per_s']:.0f} chunks/s), "
            f"wall {wall:.1f} s")
        if run < runs:
            graph.close()
            remove_db(db)
        else:
            noop = measure_noop(graph, folder, embedder, noop_runs)
            graph.close()
            last_db = db
    embedder.close()
    timed = builds[1:]
    phase_names = list(timed[0]["seconds"])
    result = {
        "docs": len(doc_ids),
        "chunks": timed[0]["chunks"],
        "runs": len(timed),
        "non_embed_chunks_per_s_median": statistics.median(
            b["non_embed_chunks_per_s"] for b in timed),
        "non_embed_s_median": round(statistics.median(b["non_embed_s"] for b in timed), 3),
        "phase_s_median": {p: round(statistics.median(b["seconds"][p] for b in timed), 3)
                           for p in phase_names},
        "graph_build_s_median": round(statistics.median(b["graph_build_s"] for b in timed), 2),
        "wall_s_median": round(statistics.median(b["wall_s"] for b in timed), 2),
        "builds": builds,
        "noop_reindex": noop,
    }
    return result, last_db


def measure_noop(graph: DocGraph, folder: Path, embedder: Any, runs: int) -> dict[str, Any]:
    """Re-index an unchanged folder ``runs`` times; nothing may be read or embedded."""
    times: list[float] = []
    embedded = 0
    bodies = 0
    for _ in range(runs):
        misses0 = embedder.misses
        started = time.perf_counter()
        report = graph.index(folder, NAMESPACE)
        times.append(time.perf_counter() - started)
        model_calls = embedder.misses - misses0
        assert report.chunks_embedded == 0, f"no-op re-index embedded {report.chunks_embedded}"
        assert model_calls == 0, f"no-op re-index sent {model_calls} passages to the model"
        embedded += report.chunks_embedded + model_calls
        bodies += report.bodies_read
    log(f"  no-op re-index: median {statistics.median(times):.3f} s over {runs}")
    return {
        "runs": runs,
        "seconds_median": round(statistics.median(times), 3),
        "seconds": [round(t, 3) for t in times],
        "embeddings_performed": embedded,
        "bodies_read": bodies,
        "unchanged_files": report.unchanged,
        "phase_s_last": {k: round(v, 3) for k, v in report.seconds.items()},
    }


def measure_embedding(db: Path, seed: int = 0) -> dict[str, Any]:
    """Uncached MiniLM on a fixed seeded sample of the index's embedded chunk texts."""
    catalog = SQLiteCatalog(db)
    rows = catalog.connection().execute(
        "SELECT breadcrumb, text FROM chunks WHERE kind = 'text' ORDER BY id").fetchall()
    catalog.close()
    # default loader.breadcrumb = True: the embedded text is "<breadcrumb> <text>"
    texts = [f"{crumb} {text}" for crumb, text in rows]
    sample = random.Random(seed).sample(texts, min(EMBED_SAMPLE, len(texts)))
    model = MiniLMEmbedder()
    model.embed_documents(sample[:8])          # load + warm-up, not timed
    rates: list[float] = []
    for _ in range(EMBED_RUNS):
        started = time.perf_counter()
        model.embed_documents(sample)
        rates.append(len(sample) / (time.perf_counter() - started))
        log(f"  embed run: {rates[-1]:.1f} chunks/s")
    tokens = model.count_tokens(sample)
    rate = statistics.median(rates)
    return {
        "sample_chunks": len(sample),
        "runs": EMBED_RUNS,
        "chunks_per_s_median": round(rate, 2),
        "chunks_per_s_runs": [round(r, 2) for r in rates],
        "mean_tokens_per_chunk": round(statistics.fmean(tokens), 1),
        "projected_full_corpus_embed_min": round(len(texts) / rate / 60, 1),
        "corpus_chunks": len(texts),
    }


# ---------------------------------------------------------------- (c) latency

def measure_latency(graph: DocGraph, queries: list[str], budget_s: float,
                    one_thread: Embedder | None = None) -> dict[str, Any]:
    """Per query: the whole search (hybrid, dense) and its parts; p50/p95 in ms."""
    ns = frozenset({NAMESPACE})
    index = graph.chunk_index()                 # loaded before timing (see cold_load_s)
    depth = max(graph.settings.index.candidates, SEARCH_K)
    embedder = graph.embedder
    for q in queries[:5]:                       # warm-up
        graph.search(q, namespaces=ns, k=SEARCH_K)
    timings: dict[str, list[float]] = {
        "hybrid_search": [], "dense_search_call": [], "embed_query": [], "dense_lane": [],
        "lexical_lane": [],
    }
    if one_thread is not None:
        timings["embed_query_1_thread"] = []
        one_thread.embed_query(queries[0])
    started = time.perf_counter()
    for q in queries:
        t0 = time.perf_counter()
        graph.search(q, namespaces=ns, k=SEARCH_K, mode="hybrid")
        t1 = time.perf_counter()
        graph.search(q, namespaces=ns, k=SEARCH_K, mode="dense")
        t2 = time.perf_counter()
        vector = embedder.embed_query(q)
        t3 = time.perf_counter()
        index.dense_search(vector, depth, ns)
        t4 = time.perf_counter()
        index.lexical_search(q, depth, ns)
        t5 = time.perf_counter()
        for key, value in zip(list(timings)[:5], (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4),
                              strict=True):
            timings[key].append(value * 1000)
        if one_thread is not None:
            t7 = time.perf_counter()
            one_thread.embed_query(q)
            timings["embed_query_1_thread"].append((time.perf_counter() - t7) * 1000)
        if time.perf_counter() - started > budget_s:
            log(f"  latency budget of {budget_s:.0f} s reached after "
                f"{len(timings['embed_query'])} queries")
            break
    out: dict[str, Any] = {k: ms_stats(v) for k, v in timings.items()}
    rest = [h - e - d - lx for h, e, d, lx in zip(
        timings["hybrid_search"], timings["embed_query"], timings["dense_lane"],
        timings["lexical_lane"], strict=True)]
    out["hybrid_other_ms_median"] = round(statistics.median(rest), 2)
    out["dense_floor"] = dense_floor(index_size(graph), graph.embedder.dimension)
    out["candidate_depth"] = depth
    out["k"] = SEARCH_K
    out["queries"] = len(timings["embed_query"])
    return out


def index_size(graph: DocGraph) -> int:
    row = graph.catalog.connection().execute("SELECT count(*) FROM chunks").fetchone()
    return int(row[0])


def dense_floor(n: int, dim: int, seed: int = 3) -> dict[str, Any]:
    """Bare numpy on an n x dim float32 matrix (1 BLAS thread): matvec, then top-100."""
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((n, dim), dtype=np.float32)
    queries = rng.standard_normal((FLOOR_QUERIES, dim), dtype=np.float32)
    matvec: list[float] = []
    total: list[float] = []
    for q in queries:
        t0 = time.perf_counter()
        scores = matrix @ q
        t1 = time.perf_counter()
        top = np.argpartition(-scores, min(100, n - 1))[:100]
        top[np.argsort(-scores[top])]
        t2 = time.perf_counter()
        matvec.append((t1 - t0) * 1000)
        total.append((t2 - t0) * 1000)
    del matrix
    return {"matvec": ms_stats(matvec), "matvec_top100": ms_stats(total)}


def open_and_measure(db: Path, embedder: Embedder, queries: list[str],
                     budget_s: float, one_thread: Embedder | None = None) -> dict[str, Any]:
    graph = DocGraph(settings_for(db), embedder)
    try:
        started = time.perf_counter()
        graph.chunk_index()
        cold = time.perf_counter() - started
        rows = graph.catalog.connection().execute(
            "SELECT count(*) FROM chunks WHERE kind = 'text'").fetchone()[0]
        memory = rss_mb()
        log(f"  {rows} chunks loaded in {cold:.1f} s, {memory}")
        latency = measure_latency(graph, queries, budget_s, one_thread)
        log(f"  hybrid p50 {latency['hybrid_search']['p50_ms']} ms, p95 "
            f"{latency['hybrid_search']['p95_ms']} ms; dense lane p50 "
            f"{latency['dense_lane']['p50_ms']} ms, lexical lane p50 "
            f"{latency['lexical_lane']['p50_ms']} ms, embed p50 "
            f"{latency['embed_query']['p50_ms']} ms")
        return {"chunks": int(rows), "cold_load_s": round(cold, 2), "memory_after_load": memory,
                "file_mb": file_mb(db), "latency": latency}
    finally:
        graph.close()


def zipf_vocabulary(data: BeirDataset, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``size`` most frequent SciFact words (by frequency) and Zipf(s) probabilities."""
    counts: Counter[str] = Counter()
    word = re.compile(r"[a-z][a-z0-9]+")
    for doc in data.corpus.values():
        counts.update(word.findall(f"{doc['title']} {doc['text']}".lower()))
    words = [w for w, _ in counts.most_common(size)]
    ranks = np.arange(1, len(words) + 1, dtype=np.float64)
    probs = ranks ** -ZIPF_S
    return np.array(words, dtype=object), probs / probs.sum()


def build_synthetic(db: Path, n_chunks: int, vocab: np.ndarray, probs: np.ndarray,
                    seed: int = 7) -> dict[str, Any]:
    """Write ``n_chunks`` synthetic chunks through ``SQLiteCatalog.write_document``."""
    rng = np.random.default_rng(seed)
    catalog = SQLiteCatalog(db)
    catalog.set_embedding_model(MiniLMEmbedder.name, MiniLMEmbedder.dimension)
    urn = normalize_urn(f"s3://docgraph-bench/synthetic-{n_chunks}")
    source = catalog.add_source(urn, NAMESPACE)
    started = time.perf_counter()
    last = started
    written = 0
    doc = 0
    cumulative = np.cumsum(probs)
    while written < n_chunks:
        n = min(CHUNKS_PER_DOC, n_chunks - written)
        picks = np.searchsorted(cumulative, rng.random((n, WORDS_PER_CHUNK)))
        picks = np.minimum(picks, len(vocab) - 1)
        texts = [" ".join(vocab[row]) for row in picks]
        vectors = rng.standard_normal((n, MiniLMEmbedder.dimension), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        chunks = [ChunkDraft(index=i, text=t, section_path=(), token_count=WORDS_PER_CHUNK,
                             prev_index=i - 1 if i else None,
                             next_index=i + 1 if i + 1 < n else None, parent_index=0 if i else None)
                  for i, t in enumerate(texts)]
        path = f"doc-{doc:05d}.md"
        catalog.write_document(DocumentWrite(
            source=source, path=path, doc_id=document_id(urn, path),
            title=f"synthetic document {doc}", content_hash=f"synthetic-{doc}",
            change_token="synthetic", media_type="text/markdown", chunks=chunks,
            breadcrumbs=[f"[synthetic document {doc}]"] * n, embedded_texts=texts,
            vectors=vectors,
        ))
        written += n
        doc += 1
        if time.perf_counter() - last > 30:
            last = time.perf_counter()
            rate = written / (last - started)
            log(f"  built {written}/{n_chunks} chunks, {rate:.0f}/s, "
                f"eta {(n_chunks - written) / rate / 60:.1f} min")
    seconds = time.perf_counter() - started
    catalog.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    catalog.close()
    return {"chunks": written, "documents": doc, "build_s": round(seconds, 1),
            "chunks_per_s": round(written / seconds, 1), "file_mb": file_mb(db)}


def synthetic_sizes(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


# ---------------------------------------------------------------- main

def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None,
                        help="smoke run: N SciFact docs, N queries, synthetic sizes 20N and 100N")
    parser.add_argument("--sizes", default="100000,1000000", help="synthetic index sizes")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--ingest-runs", type=int, default=3)
    parser.add_argument("--noop-runs", type=int, default=NOOP_RUNS)
    parser.add_argument("--budget", type=float, default=SIZE_BUDGET_S,
                        help="seconds of latency measurement per index at most")
    parser.add_argument("--name", default="speed")
    parser.add_argument("--ingest-only", action="store_true",
                        help="measure (a) and (b) only; update the ingest section of an "
                             "existing result file")
    args = parser.parse_args(argv)

    data = load_beir("scifact")
    doc_ids = list(data.corpus)
    sizes = synthetic_sizes(args.sizes)
    n_queries = args.queries
    if args.limit:
        doc_ids = doc_ids[:args.limit]
        sizes = [20 * args.limit, 100 * args.limit]
        n_queries = min(n_queries, args.limit)
    queries = list(data.queries.values())[:n_queries]
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="docgraph-speed-"))
    results: dict[str, Any] = {"load_before": machine_load()}
    try:
        log(f"== (a, b) ingest of SciFact as a folder: {len(doc_ids)} files")
        ingest, scifact_db = measure_ingest(data, doc_ids, workdir, args.ingest_runs,
                                            args.noop_runs)
        log("== (a) embedding alone (uncached)")
        ingest["embedding"] = measure_embedding(scifact_db)
        results["ingest"] = ingest
        if args.ingest_only:
            update_ingest(args.name, ingest, results["load_before"], args.ingest_runs)
            return

        model = MiniLMEmbedder()
        latency: list[dict[str, Any]] = []
        log(f"== (c) latency on the SciFact index, {len(queries)} queries")
        # experiment: the same model with one onnxruntime thread, for single-query serving
        scifact = open_and_measure(scifact_db, model, queries, args.budget,
                                   one_thread=MiniLMEmbedder(threads=1))
        latency.append({"index": "scifact", **scifact})
        remove_db(scifact_db)

        vocab, probs = zipf_vocabulary(data, VOCAB_SIZE)
        for size in sizes:
            db = workdir / f"synthetic-{size}.db"
            free_gb = shutil.disk_usage(workdir).free / 2**30
            need_gb = size * 3.5e-6 + 0.5
            if free_gb < need_gb:
                log(f"  skipping {size}: {free_gb:.1f} GB free, ~{need_gb:.1f} GB needed")
                latency.append({"index": f"synthetic-{size}", "skipped": "not enough disk"})
                continue
            log(f"== (c) synthetic index of {size} chunks")
            build = build_synthetic(db, size, vocab, probs)
            log(f"  built in {build['build_s']} s, {build['file_mb']} MB")
            measured = open_and_measure(db, model, queries, args.budget)
            latency.append({"index": f"synthetic-{size}", "build": build, **measured})
            remove_db(db)
        results["latency"] = latency
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    results["targets"] = check_targets(results)
    rows = summary_rows(results)
    write_result(args.name, {
        "limit": args.limit,
        "seconds": round(time.perf_counter() - started, 1),
        "settings": {"search_k": SEARCH_K, "queries": len(queries),
                     "ingest_runs": args.ingest_runs, "noop_runs": args.noop_runs,
                     "embed_sample": EMBED_SAMPLE, "embed_runs": EMBED_RUNS,
                     "synthetic": {"chunks_per_doc": CHUNKS_PER_DOC,
                                   "words_per_chunk": WORDS_PER_CHUNK,
                                   "vocabulary": VOCAB_SIZE, "zipf_s": ZIPF_S,
                                   "vectors": "random unit float32, 384-d"},
                     "blas_threads": 1, "onnx_threads": "all cores (embed.threads = 0)"},
        "notes": "2-core machine shared with other jobs: timings are noisy; medians and "
                 "percentiles over the stated repeats",
        **results,
        "load_after": machine_load(),
        "results": rows,
    })


def update_ingest(name: str, ingest: dict[str, Any], load_before: list[float] | None,
                  runs: int) -> None:
    """Replace the ingest section and ingest targets of ``bench/results/<name>.json``."""
    path = RESULTS_DIR / f"{name}.json"
    if not path.exists():
        raise SystemExit(f"{path} does not exist: run the whole benchmark once first")
    document = json.loads(path.read_text(encoding="utf-8"))
    document["ingest"] = ingest
    document["ingest_measured"] = {"machine": machine_info(), "load_before": load_before,
                                   "load_after": machine_load(), "ingest_runs": runs}
    targets = check_targets({"ingest": ingest})
    document.setdefault("targets", {}).update(targets)
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    log(f"updated the ingest section of {path}: {targets}")


def machine_load() -> list[float] | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def check_targets(results: dict[str, Any]) -> dict[str, Any]:
    ingest = results["ingest"]
    out: dict[str, Any] = {
        "ingest_non_embed_chunks_per_s": {
            "value": ingest["non_embed_chunks_per_s_median"],
            "target": f">= {TARGETS['ingest_non_embed_chunks_per_s']:.0f}",
            "met": ingest["non_embed_chunks_per_s_median"]
            >= TARGETS["ingest_non_embed_chunks_per_s"]},
        "noop_reindex_s": {
            "value": ingest["noop_reindex"]["seconds_median"],
            "target": f"<= {TARGETS['noop_reindex_s']}",
            "met": ingest["noop_reindex"]["seconds_median"] <= TARGETS["noop_reindex_s"]},
        "noop_reindex_embeddings": {
            "value": ingest["noop_reindex"]["embeddings_performed"], "target": "0",
            "met": ingest["noop_reindex"]["embeddings_performed"] == 0},
    }
    for entry in results.get("latency", []):
        if entry.get("index") == "synthetic-100000" and "latency" in entry:
            p50 = entry["latency"]["hybrid_search"]["p50_ms"]
            out["hybrid_p50_ms_at_100k"] = {
                "value": p50, "target": f"<= {TARGETS['hybrid_p50_ms_at_100k']:.0f}",
                "met": p50 <= TARGETS["hybrid_p50_ms_at_100k"]}
    return out


def summary_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One table row per index: latency percentiles of the search and of its parts."""
    rows: list[dict[str, Any]] = []
    for entry in results.get("latency", []):
        if "latency" not in entry:
            continue
        lat: dict[str, Any] = entry["latency"]

        def pick(key: str, p: str, lat: dict[str, Any] = lat) -> float:
            return float(lat[key][p])

        rows.append({
            "index": entry["index"], "chunks": entry["chunks"],
            "hybrid_p50": pick("hybrid_search", "p50_ms"),
            "hybrid_p95": pick("hybrid_search", "p95_ms"),
            "dense_call_p50": pick("dense_search_call", "p50_ms"),
            "embed_p50": pick("embed_query", "p50_ms"),
            "embed_p95": pick("embed_query", "p95_ms"),
            "dense_lane_p50": pick("dense_lane", "p50_ms"),
            "dense_lane_p95": pick("dense_lane", "p95_ms"),
            "lexical_p50": pick("lexical_lane", "p50_ms"),
            "lexical_p95": pick("lexical_lane", "p95_ms"),
            "numpy_floor_p50": lat["dense_floor"]["matvec_top100"]["p50_ms"],
            "queries": lat["queries"],
            "file_mb": entry.get("file_mb"),
            "build_s": entry.get("build", {}).get("build_s"),
            "cold_load_s": entry["cold_load_s"],
        })
    return rows


if __name__ == "__main__":
    main()
