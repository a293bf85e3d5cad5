"""SciFact ranking of the Milvus chunk index (Milvus Lite) against the embedded default,
lane by lane.

    flock /tmp/docgraph-bench.lock python bench/backends_milvus.py [--limit N]

SciFact nDCG@10 / recall@100 (test queries, whole corpus as one Markdown file per abstract,
default settings, MiniLM int8 behind the shared embedding cache, so nothing is re-embedded).
One catalog is built once; the embedded index and the Milvus index both follow it, so both
rank the same chunks with the same vectors. Per query and index: ``DocGraph.search`` hybrid
and dense (k=300 chunks folded to documents, as in ``quality.py``), the BM25 lane alone, and
for Milvus also the engine-side fusion (``MilvusChunkIndex.hybrid_search``: one request,
``RRFRanker(rrf_k)``) and docgraph's ``rrf_fuse`` of its two lanes at the same depth. The
entity graph is off: hybrid search ranks ``text`` chunks only, so it does not change these
numbers. The first sync of the Milvus index from the catalog is timed.

Ingest throughput, latency and recall of Milvus next to the embedded and PostgreSQL stores
are measured by ``bench/backends.py``; this script explains the ranking.
Results go to ``bench/results/backends_milvus.json``. Timed runs belong under ``flock``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Sequence
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
from docgraph.embedding.embedders import Embedder, MiniLMEmbedder
from docgraph.retrieve.fusion import rrf_fuse
from docgraph.store.milvus.index import MilvusChunkIndex
from quality import score_run, to_documents
from speed import (
    NAMESPACE,
    machine_load,
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


# ---------------------------------------------------------------- quality

def measure_quality(data: BeirDataset, limit: int | None, workdir: Path) -> dict[str, Any]:
    doc_ids, queries, subset = select_subset(data, limit)
    log(f"== SciFact: {len(doc_ids)} docs, {len(queries)} queries")
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


# ---------------------------------------------------------------- main

def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None,
                        help="smoke run: N SciFact queries (gold + random docs)")
    args = parser.parse_args(argv)

    data = load_beir("scifact")
    workdir = Path(tempfile.mkdtemp(prefix="docgraph-milvus-"))
    started = time.perf_counter()
    results: dict[str, Any] = {"load_before": machine_load()}
    try:
        results["scifact"] = measure_quality(data, args.limit, workdir)
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
    return rows


if __name__ == "__main__":
    main()
