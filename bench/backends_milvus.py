"""The Milvus chunk index (Milvus Lite) against the embedded default, side by side.

    flock /tmp/docgraph-bench.lock python bench/backends_milvus.py [--limit N]
        [--sizes 100000] [--queries 200]

(a) SciFact nDCG@10 / recall@100 (test queries, whole corpus as one Markdown file per
    abstract, default settings, MiniLM int8 behind the shared embedding cache, so nothing is
    re-embedded). One catalog is built once; the embedded index and the Milvus index both
    follow it, so both rank the same chunks with the same vectors. Per query and index:
    ``DocGraph.search`` hybrid and dense (k=300 chunks folded to documents, as in
    ``quality.py``), the BM25 lane alone, and for Milvus also the engine-side fusion
    (``MilvusChunkIndex.hybrid_search``: one request, ``RRFRanker(rrf_k)``). The entity graph is
    off: hybrid search ranks ``text`` chunks only, so it does not change these numbers.
    Experiment: FTS5 tokenized like Milvus Lite's analyzer (no stemming) over one field, alone
    and fused with the embedded dense lane, to attribute the BM25 difference.
(b) Hybrid latency on synthetic indexes of ``--sizes`` chunks (built like ``speed.py``: random
    unit 384-d vectors, Zipf words), one query at a time over SciFact queries: the whole
    ``DocGraph.search`` (query embedding included) and the index part alone (dense + BM25 lane
    at the candidate depth, query vector precomputed); p50/p95 over ``--queries`` queries.
    The first sync of the Milvus index from the catalog is timed as its ingest throughput
    (chunks/s into Milvus, no embedding).

Results go to ``bench/results/backends_milvus.json``. Timed runs belong under ``flock``.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from common import (
    BeirDataset,
    cached_embedder,
    load_beir,
    log,
    select_subset,
    write_corpus_folder,
    write_result,
)
from docgraph.app import DocGraph
from docgraph.config import Settings, load_settings
from docgraph.ingest.embed import Embedder, MiniLMEmbedder
from docgraph.model import ScoredRow
from docgraph.retrieve.fusion import rrf_fuse
from docgraph.store.lexical import plain_query_words
from docgraph.store.milvus import MilvusChunkIndex
from quality import score_run, to_documents
from speed import (
    NAMESPACE,
    VOCAB_SIZE,
    build_synthetic,
    machine_load,
    ms_stats,
    rss_mb,
    synthetic_sizes,
    zipf_vocabulary,
)

SEARCH_K = 300          # chunks per search, folded to documents (as quality.py)
LATENCY_K = 10
TOLERANCE = 0.01        # nDCG@10 must be within this of the embedded index


def settings(db: Path, index: str, milvus_uri: Path | None = None) -> Settings:
    store: dict[str, Any] = {"path": db, "index": index}
    if milvus_uri is not None:
        store["milvus_uri"] = str(milvus_uri)
    return load_settings(store=store, graph={"enabled": False})


def open_milvus(db: Path, uri: Path, embedder: Embedder) -> tuple[DocGraph, dict[str, Any]]:
    """A Milvus DocGraph on ``db``; its first sync (catalog -> Milvus) is timed."""
    graph = DocGraph(settings(db, "milvus", uri), embedder)
    started = time.perf_counter()
    index = graph.chunk_index()
    seconds = time.perf_counter() - started
    chunks = len(index)
    log(f"  Milvus sync: {chunks} chunks in {seconds:.1f} s")
    return graph, {"chunks": chunks, "sync_s": round(seconds, 1),
                   "chunks_per_s": round(chunks / seconds, 1)}


# ---------------------------------------------------------------- (a) quality

def measure_quality(data: BeirDataset, limit: int | None, workdir: Path) -> dict[str, Any]:
    doc_ids, queries, subset = select_subset(data, limit)
    log(f"== (a) SciFact: {len(doc_ids)} docs, {len(queries)} queries")
    folder = workdir / "corpus"
    file_to_id = write_corpus_folder(data, doc_ids, folder)
    db = workdir / "scifact.db"
    embedder = cached_embedder(MiniLMEmbedder(threads=1))
    embedded = DocGraph(settings(db, "embedded"), embedder)
    misses = embedder.misses
    embedded.index(folder, NAMESPACE)
    log(f"  catalog built; {embedder.misses - misses} passages embedded (cache misses)")
    milvus, ingest = open_milvus(db, workdir / "scifact-milvus.db", embedder)
    try:
        ns = frozenset({NAMESPACE})
        stored = embedded.catalog.chunks_by_rowid([int(r[0]) for r in embedded.catalog
                                                   .connection().execute("SELECT id FROM chunks")])
        chunk_doc = {rid: file_to_id[c.source_path] for rid, c in stored.items()
                     if c.source_path in file_to_id}
        e_index, m_index = embedded.chunk_index(), milvus.chunk_index()
        assert isinstance(m_index, MilvusChunkIndex)
        cfg = embedded.settings.index
        depth = max(cfg.candidates, SEARCH_K)
        runs: dict[str, dict[str, list[str]]] = {}

        def add(name: str, qid: str, rowids: Sequence[int]) -> None:
            runs.setdefault(name, {})[qid] = to_documents(rowids, chunk_doc)

        for qid, text in queries.items():
            vector = embedder.embed_query(text)
            for label, graph, index in (("embedded", embedded, e_index),
                                        ("milvus", milvus, m_index)):
                for mode in ("hybrid", "dense"):
                    hits = graph.search(text, namespaces=ns, k=SEARCH_K, mode=mode)
                    add(f"{label}/{mode}", qid, [_rowid(graph, h.chunk_id) for h in hits])
                add(f"{label}/bm25", qid, [r.rowid for r in index.lexical_search(text, depth, ns)])
            engine = m_index.hybrid_search(text, vector, SEARCH_K, ns, depth=depth, rrf_k=cfg.rrf_k)
            add("milvus/hybrid_engine_rrf", qid, [r.rowid for r in engine])
            fused = rrf_fuse([m_index.dense_search(vector, depth, ns),
                              m_index.lexical_search(text, depth, ns)], k=cfg.rrf_k)[:SEARCH_K]
            add("milvus/hybrid_docgraph_rrf_same_depth", qid, [r.rowid for r in fused])
        unstemmed = UnstemmedBm25(embedded)
        for qid, text in queries.items():
            vector = embedder.embed_query(text)
            lexical = unstemmed.search(text, depth)
            add("embedded_unstemmed_one_field/bm25", qid, [r.rowid for r in lexical])
            fused = rrf_fuse([e_index.dense_search(vector, depth, ns), lexical],
                             k=cfg.rrf_k)[:SEARCH_K]
            add("embedded_unstemmed_one_field/hybrid", qid, [r.rowid for r in fused])
        qids = list(queries)
        scores = {name: score_run(run, data, qids) for name, run in runs.items()}
        base = scores["embedded/hybrid"]["ndcg@10"]
        delta = round(scores["milvus/hybrid"]["ndcg@10"] - base, 4)
        return {"docs": len(doc_ids), "queries": len(qids), "subset": subset,
                "milvus_ingest": ingest, "scores": scores,
                "milvus_hybrid_ndcg10_minus_embedded": delta,
                "within_tolerance": abs(delta) <= TOLERANCE, "tolerance": TOLERANCE}
    finally:
        milvus.close()
        embedded.close()


class UnstemmedBm25:
    """Experiment (not product code): FTS5 BM25 tokenized as Milvus Lite's analyzer does
    (``\\w+`` words, lower case, no stemming, no diacritics folding) over one field of
    breadcrumb + text, as the Milvus ``text`` field holds. It separates what the Milvus
    integration changes from what Lite's analyzer changes."""

    def __init__(self, graph: DocGraph) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5(body,"
                        " tokenize='unicode61 remove_diacritics 0')")
        rows = graph.catalog.connection().execute(
            "SELECT id, breadcrumb, text FROM chunks WHERE kind = 'text'").fetchall()
        self.db.executemany("INSERT INTO t(rowid, body) VALUES (?, ?)",
                            [(r, f"{b}\n{t}" if b else t) for r, b, t in rows])

    def search(self, text: str, k: int) -> list[ScoredRow]:
        words = plain_query_words(text)
        if not words:
            return []
        expression = " OR ".join(f'"{w}"' for w in words)
        rows = self.db.execute("SELECT rowid, bm25(t) AS s FROM t WHERE t MATCH ?"
                               " ORDER BY s, rowid LIMIT ?", (expression, k)).fetchall()
        return [ScoredRow(int(r), -float(s)) for r, s in rows]


_ROWID_CACHE: dict[int, dict[str, int]] = {}


def _rowid(graph: DocGraph, chunk_id: str) -> int:
    """Row id of a chunk id (hits carry the chunk id; the documents fold needs row ids)."""
    table = _ROWID_CACHE.get(id(graph.catalog))
    if table is None:
        rows = graph.catalog.connection().execute(
            "SELECT c.id, d.doc_id, c.chunk_index FROM chunks c"
            " JOIN documents d ON d.id = c.document_id").fetchall()
        table = {f"{d}#chunk-{i}": int(r) for r, d, i in rows}
        _ROWID_CACHE[id(graph.catalog)] = table
    return table[chunk_id]


# ---------------------------------------------------------------- (b) latency

def time_calls(fn: Callable[[str], object], queries: Sequence[str], budget_s: float) -> list[float]:
    for q in queries[:5]:                                   # warm-up
        fn(q)
    out: list[float] = []
    started = time.perf_counter()
    for q in queries:
        t0 = time.perf_counter()
        fn(q)
        out.append((time.perf_counter() - t0) * 1000)
        if time.perf_counter() - started > budget_s:
            break
    return out


def measure_latency(size: int, data: BeirDataset, queries: list[str], workdir: Path,
                    budget_s: float) -> dict[str, Any]:
    log(f"== (b) synthetic index of {size} chunks")
    db = workdir / f"synthetic-{size}.db"
    vocab, probs = zipf_vocabulary(data, VOCAB_SIZE)
    build = build_synthetic(db, size, vocab, probs)
    log(f"  catalog built in {build['build_s']} s")
    model = MiniLMEmbedder(threads=1)
    vectors = {q: model.embed_query(q) for q in queries}
    ns = frozenset({NAMESPACE})
    out: dict[str, Any] = {"chunks": size, "catalog_build": build}
    embedded = DocGraph(settings(db, "embedded"), model)
    started = time.perf_counter()
    embedded.chunk_index()
    out["embedded_load_s"] = round(time.perf_counter() - started, 1)
    milvus, out["milvus_ingest"] = open_milvus(db, workdir / f"synthetic-{size}-milvus.db", model)
    out["memory_after_load"] = rss_mb()
    try:
        depth = embedded.settings.index.candidates
        for label, graph in (("embedded", embedded), ("milvus", milvus)):
            index = graph.chunk_index()

            def search(q: str, graph: DocGraph = graph) -> object:
                return graph.search(q, namespaces=ns, k=LATENCY_K, mode="hybrid")

            def lanes(q: str, index: Any = index) -> object:
                return rrf_fuse([index.dense_search(vectors[q], depth, ns),
                                 index.lexical_search(q, depth, ns)])

            def dense(q: str, index: Any = index) -> object:
                return index.dense_search(vectors[q], depth, ns)

            def lexical(q: str, index: Any = index) -> object:
                return index.lexical_search(q, depth, ns)

            timings = {"docgraph_search_hybrid": ms_stats(time_calls(search, queries, budget_s)),
                       "index_hybrid_lanes": ms_stats(time_calls(lanes, queries, budget_s)),
                       "dense_lane": ms_stats(time_calls(dense, queries, budget_s)),
                       "lexical_lane": ms_stats(time_calls(lexical, queries, budget_s))}
            if isinstance(index, MilvusChunkIndex):
                def engine(q: str, index: MilvusChunkIndex = index) -> object:
                    return index.hybrid_search(q, vectors[q], LATENCY_K, ns, depth=depth)

                timings["engine_hybrid_search_rrf"] = ms_stats(
                    time_calls(engine, queries, budget_s))
            out[label] = timings
            log(f"  {label}: hybrid p50 {timings['docgraph_search_hybrid']['p50_ms']} ms, "
                f"p95 {timings['docgraph_search_hybrid']['p95_ms']} ms")
        return out
    finally:
        milvus.close()
        embedded.close()


# ---------------------------------------------------------------- main

def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None,
                        help="smoke run: N SciFact queries (gold + random docs), size 100N")
    parser.add_argument("--sizes", default="100000", help="synthetic index sizes")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--budget", type=float, default=120.0,
                        help="seconds of timing per lane and index at most")
    parser.add_argument("--skip-quality", action="store_true")
    args = parser.parse_args(argv)

    data = load_beir("scifact")
    sizes = [100 * args.limit] if args.limit else synthetic_sizes(args.sizes)
    queries = list(data.queries.values())[:min(args.queries, args.limit or args.queries)]
    workdir = Path(tempfile.mkdtemp(prefix="docgraph-milvus-"))
    started = time.perf_counter()
    results: dict[str, Any] = {"load_before": machine_load()}
    try:
        if not args.skip_quality:
            results["scifact"] = measure_quality(data, args.limit, workdir)
        results["latency"] = [measure_latency(size, data, queries, workdir, args.budget)
                              for size in sizes]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results["load_after"] = machine_load()
    results["wall_s"] = round(time.perf_counter() - started, 1)
    write_result("backends_milvus", {
        "protocol": __doc__,
        "limited": bool(args.limit),
        "milvus_lite": _version("milvus-lite"),
        "pymilvus": _version("pymilvus"),
        **results,
        "results": summary_rows(results),
    })


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def summary_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name, s in results.get("scifact", {}).get("scores", {}).items():
        rows.append({"what": f"scifact {name}", "ndcg@10": s["ndcg@10"],
                     "recall@100": s["recall@100"]})
    for lat in results.get("latency", []):
        for label in ("embedded", "milvus"):
            t = lat[label]["docgraph_search_hybrid"]
            rows.append({"what": f"{lat['chunks']} chunks {label} hybrid",
                         "p50_ms": t["p50_ms"], "p95_ms": t["p95_ms"]})
    return rows


if __name__ == "__main__":
    main()
