"""The dense lane's partition ("lists", ``store/dense_lists.py``) on real embeddings: does
it keep the exact scan's answers when the vectors are MiniLM's, not store_scale's synthetic
clusters?

    python bench/lists_real.py [--datasets scifact,2wiki] [--limit DOCS]

The lists were sized (``LISTS_PER_SQRT``) and their ``nprobe`` floor set on the synthetic
1M store only; ``nprobe`` itself is tuned by each build on the catalog's own rows. This
bench indexes each whole public corpus (SciFact 5,183 passages, 2Wiki 6,119; one Markdown
file per passage, default settings, MiniLM int8 behind the shared embedding cache, as
``bench/model_tune.py --full`` builds them) and opens the catalog twice: once as the
default opens it below 250k rows (the exact sign scan) and once with the lists forced on
(``graph_min_rows`` 1,000, the build waited for). For every query of the dataset's committed
split (both halves: nothing is tuned here) it compares the dense lane's top 10 and top 100
chunk rows (recall of the lists against the scan) and the documents they fold to (nDCG@10
against the qrels, for each way). Timing is not the point at this size (the scan is already
fast); quality is.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ablation import open_dataset_index, to_documents
from common import cached_embedder, load_beir, log, ndcg_at_k, write_result
from docgraph.embedding.embedders import MiniLMEmbedder
from docgraph.store.dense_lists import DenseLists
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog

BENCH_DIR = Path(__file__).resolve().parent
NAMESPACE = frozenset({"bench"})
FORCED_MIN_ROWS = 1_000


def _split_queries(dataset: str) -> list[str]:
    split = json.loads((BENCH_DIR / "splits" / f"relevance_{dataset}.json").read_text())
    return list(split["tune"]) + list(split["test"])


def measure(dataset: str, limit: int | None) -> dict[str, Any]:
    """Recall of the lists against the scan and nDCG@10 of each, over every split query
    (``limit``: only the first that many corpus documents, for a smoke run)."""
    data = load_beir(dataset)
    embedder = cached_embedder(MiniLMEmbedder())
    doc_ids = sorted(data.corpus)[:limit]
    tag = f"{dataset}-{'full' if limit is None else limit}@{embedder.name}"
    graph, chunk_doc, info = open_dataset_index(data, doc_ids, embedder, tag, False)
    db = Path(graph.settings.store.path)
    qids = [q for q in _split_queries(dataset) if q in data.queries]
    scan = EmbeddedChunkIndex(SQLiteCatalog(db), embedder.dimension, sidecar=False)
    forced = EmbeddedChunkIndex(SQLiteCatalog(db), embedder.dimension, sidecar=False,
                                graph_min_rows=FORCED_MIN_ROWS)
    lists = forced.graph
    assert isinstance(lists, DenseLists)
    lists.wait()
    assert lists.lists is not None, f"no lists built: {lists.status}"
    recall10: list[float] = []
    recall100: list[float] = []
    runs: dict[str, dict[str, list[str]]] = {"scan": {}, "lists": {}}
    answered = lists.answered
    for qid in qids:
        vector = embedder.embed_query(data.queries[qid])
        exact = [r.rowid for r in scan.dense_search(vector, 100, NAMESPACE)]
        found = [r.rowid for r in forced.dense_search(vector, 100, NAMESPACE)]
        recall10.append(len(set(exact[:10]) & set(found[:10])) / max(1, min(10, len(exact))))
        recall100.append(len(set(exact) & set(found)) / max(1, len(exact)))
        for way, rows in (("scan", exact), ("lists", found)):
            docs = to_documents(rows, chunk_doc)[:10]
            runs[way][qid] = docs
    qrels = {q: data.qrels[q] for q in qids}
    chunks = len(chunk_doc)
    result = {
        "dataset": dataset, "corpus_documents": len(doc_ids), "queries": len(qids),
        "chunks": chunks, "index": info,
        "lists": len(lists.lists.centroids), "nprobe": lists.lists.nprobe,
        "lists_build_s": round(lists.last_build_s, 1),
        "queries_answered_by_lists": lists.answered - answered,
        "recall@10_vs_scan": round(sum(recall10) / len(recall10), 4),
        "recall@100_vs_scan": round(sum(recall100) / len(recall100), 4),
        "queries_recall@10_below_1": sum(r < 1.0 for r in recall10),
        "ndcg@10_scan": round(ndcg_at_k(runs["scan"], qrels, 10), 4),
        "ndcg@10_lists": round(ndcg_at_k(runs["lists"], qrels, 10), 4),
    }
    log(json.dumps(result))
    return result


def main() -> None:
    """Measure every named dataset and write ``bench/results/lists_real.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="scifact,2wiki")
    parser.add_argument("--limit", type=int, default=None,
                        help="index only the first DOCS corpus documents (smoke runs)")
    parser.add_argument("--name", default="lists_real")
    args = parser.parse_args()
    results = [measure(name, args.limit) for name in args.datasets.split(",") if name]
    write_result(args.name, {"forced_min_rows": FORCED_MIN_ROWS, "results": results})


if __name__ == "__main__":
    main()
