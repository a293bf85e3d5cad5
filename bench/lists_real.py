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
(``graph_min_rows`` 1,000; the partition file deleted first, so the build, and its tuning of
``nprobe``, is the current code's; waited for). For every query of the dataset's committed
split it compares the dense lane's top 10 and top 100 chunk rows (recall of the lists
against the scan) and the documents they fold to (nDCG@10 against the qrels, for each way),
over all the queries and per half: the build's ``TUNING_COSINE`` was chosen on SciFact's
tuning half, so SciFact's test half and all of 2Wiki are the held-out figures. Timing is not
the point at this size (the scan is already fast); quality is.
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
from docgraph.store.dense_lists import DenseLists, lists_path
from docgraph.store.lists_build import TUNING_COSINE, TUNING_QUERIES, TUNING_RECALL
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog

BENCH_DIR = Path(__file__).resolve().parent
NAMESPACE = frozenset({"bench"})
FORCED_MIN_ROWS = 1_000


def _split_queries(dataset: str) -> dict[str, list[str]]:
    split = json.loads((BENCH_DIR / "splits" / f"relevance_{dataset}.json").read_text())
    return {"tune": list(split["tune"]), "test": list(split["test"])}


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def measure(dataset: str, limit: int | None) -> dict[str, Any]:
    """Recall of the lists against the scan and nDCG@10 of each, over every split query
    (``limit``: only the first that many corpus documents, for a smoke run)."""
    data = load_beir(dataset)
    embedder = cached_embedder(MiniLMEmbedder())
    doc_ids = sorted(data.corpus)[:limit]
    tag = f"{dataset}-{'full' if limit is None else limit}@{embedder.name}"
    graph, chunk_doc, info = open_dataset_index(data, doc_ids, embedder, tag, False)
    db = Path(graph.settings.store.path)
    halves = {h: [q for q in qs if q in data.queries] for h, qs in _split_queries(dataset).items()}
    qids = halves["tune"] + halves["test"]
    lists_path(db).unlink(missing_ok=True)  # built by this run's code, not a cached file
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
    answered, probed = lists.answered, lists.probed
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
    at = {q: i for i, q in enumerate(qids)}
    per_half = {f"recall@10_vs_scan_{h}": _mean([recall10[at[q]] for q in qs])
                for h, qs in halves.items()}
    result = {
        "dataset": dataset, "corpus_documents": len(doc_ids), "queries": len(qids),
        "chunks": chunks, "index": info,
        "lists": len(lists.lists.centroids), "nprobe": lists.lists.nprobe,
        "lists_read_per_query": round((lists.probed - probed)
                                      / max(1, lists.answered - answered), 1),
        "share_of_lists_read": round((lists.probed - probed) / max(1, lists.answered - answered)
                                     / len(lists.lists.centroids), 3),
        "lists_build_s": round(lists.last_build_s, 1),
        "queries_answered_by_lists": lists.answered - answered,
        "recall@10_vs_scan": round(sum(recall10) / len(recall10), 4),
        **per_half,
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
    write_result(args.name, {"forced_min_rows": FORCED_MIN_ROWS, "tuning": {
        "probe_cosine": TUNING_COSINE, "probes": TUNING_QUERIES, "recall": TUNING_RECALL},
        "results": results})


if __name__ == "__main__":
    main()
