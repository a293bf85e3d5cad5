"""Retrieval quality of the real product pipeline on SciFact and 2Wiki (BEIR layout).

    python bench/quality.py [--limit N] [--datasets scifact,2wiki]
                            [--configs 200:on,200:off,128:on,256:on]

Every corpus document becomes a Markdown file ``# {title}\\n\\n{text}`` (named by a
filesystem-safe form of its ``_id``; a ``files.json`` maps file name -> ``_id``) in a temporary
folder, which ``DocGraph.index()`` builds with the real MiniLM int8 model behind the shared
embedding cache (``bench/.cache/embeddings.sqlite``: reruns embed nothing). Each query then
asks for ``k=300`` chunks and chunk hits are folded to documents by first occurrence (the
best-ranked chunk speaks for its document):

* ``hybrid``: ``DocGraph.search(mode="hybrid")`` (RRF of dense + BM25, product settings);
* ``dense``: ``DocGraph.search(mode="dense")``;
* ``bm25``: ``graph.chunk_index().lexical_search()`` (no bm25-only API mode exists).

``loader.breadcrumb`` changes the embedded text, so each (chunk_tokens, breadcrumb) pair gets
its own index. Besides the product numbers, the same per-query lanes are re-fused offline
with the product's own ``rrf_fuse`` to sweep cheap levers one at a time: ``index.rrf_k``,
``index.lexical_weight`` and the per-lane candidate depth (``index.candidates``; note
that the product uses ``max(candidates, k)``, so a ``k=300`` search always fuses 300-deep
lanes, while a typical ``k<=100`` search fuses 100-deep lanes). The offline fusion is checked
against the product's own hybrid ranking query by query.

``--limit N`` is a smoke run: N seeded-random queries per dataset and a corpus of their gold
documents plus random others (5N documents at least); scores are then optimistic.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common import (
    RESULTS_DIR,
    BeirDataset,
    cached_embedder,
    load_beir,
    ndcg_at_k,
    print_table,
    progress_printer,
    recall_at_k,
    select_subset,
    write_corpus_folder,
    write_result,
)
from docgraph.app import DocGraph
from docgraph.config import Settings, load_settings
from docgraph.embedding.cache import CachedEmbedder
from docgraph.embedding.embedders import MiniLMEmbedder
from docgraph.ingest.pipeline import IngestReport
from docgraph.model import ScoredRow
from docgraph.retrieve.fusion import rrf_fuse

NAMESPACE = "bench"
SEARCH_K = 300            # chunks asked of every search
LANE_DEPTH_MAX = 1000     # offline lanes are fetched this deep once, then truncated
RRF_K_VARIANTS = [10, 20, 30, 60, 100, 200]
DEPTH_VARIANTS = [50, 100, 200, 300, 500, 1000]
LEXICAL_WEIGHT_VARIANTS = [1.0, 1.25, 1.5, 2.0]
BOOTSTRAP_SAMPLES = 2000

# Headline metric per dataset, and the targets of the brief (hybrid, default settings).
DATASETS: dict[str, dict[str, Any]] = {
    "scifact": {"metrics": ["ndcg@10", "recall@100"], "target": ("ndcg@10", 0.72)},
    "2wiki": {"metrics": ["recall@2", "recall@5"], "target": ("recall@5", 0.70)},
}
ALL_METRICS = ["ndcg@10", "recall@2", "recall@5", "recall@10", "recall@100"]


# ---------------------------------------------------------------- corpus as a folder

# ---------------------------------------------------------------- lanes and scoring

def to_documents(rowids: Sequence[int], chunk_doc: dict[int, str]) -> list[str]:
    """Corpus ids in order of their best-ranked chunk."""
    return list(dict.fromkeys(chunk_doc[r] for r in rowids if r in chunk_doc))


def score_run(run: dict[str, list[str]], data: BeirDataset, qids: Sequence[str]) -> dict[str, Any]:
    """Every metric of ``ALL_METRICS`` over the given queries."""
    qrels = {q: data.qrels[q] for q in qids}
    out: dict[str, Any] = {}
    for metric in ALL_METRICS:
        name, k = metric.split("@")
        fn = ndcg_at_k if name == "ndcg" else recall_at_k
        out[metric] = round(fn(run, qrels, int(k)), 4)
    return out


def per_query(run: dict[str, list[str]], data: BeirDataset, qids: Sequence[str],
              metric: str) -> np.ndarray:
    """One value of ``metric`` per query (same definitions as common.py)."""
    name, k = metric.split("@")
    fn = ndcg_at_k if name == "ndcg" else recall_at_k
    return np.array([fn({q: run.get(q, [])}, {q: data.qrels[q]}, int(k)) for q in qids])


def paired_delta(variant: np.ndarray, base: np.ndarray, seed: int = 0) -> dict[str, Any]:
    """Mean difference with a paired bootstrap 95% interval over queries."""
    diff = variant - base
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(diff), size=(BOOTSTRAP_SAMPLES, len(diff)))
    means = diff[idx].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return {"delta": round(float(diff.mean()), 4),
            "ci95": [round(float(low), 4), round(float(high), 4)],
            "wins_losses": [int((diff > 0).sum()), int((diff < 0).sum())]}


@dataclass
class QueryLanes:
    """Per-query chunk rankings fetched once per index."""

    product_hybrid: list[int]
    product_dense: list[int]
    product_bm25: list[int]
    dense: list[ScoredRow]              # LANE_DEPTH_MAX deep
    bm25: list[ScoredRow]               # LANE_DEPTH_MAX deep


def fetch_lanes(graph: DocGraph, query: str) -> QueryLanes:
    ns = frozenset({NAMESPACE})
    hybrid = graph.search(query, namespaces=ns, k=SEARCH_K, mode="hybrid")
    dense_hits = graph.search(query, namespaces=ns, k=SEARCH_K, mode="dense")
    index = graph.chunk_index()
    bm25 = index.lexical_search(query, SEARCH_K, ns)
    vector = graph.embedder.embed_query(query)
    return QueryLanes(
        product_hybrid=[h.rowid for h in hybrid],
        product_dense=[h.rowid for h in dense_hits],
        product_bm25=[r.rowid for r in bm25],
        dense=index.dense_search(vector, LANE_DEPTH_MAX, ns),
        bm25=index.lexical_search(query, LANE_DEPTH_MAX, ns),
    )


def fused(lanes: QueryLanes, rrf_k: int, depth: int, weight: float,
          k: int = SEARCH_K) -> list[int]:
    """The product's hybrid ranking recomputed offline (``rrf_fuse`` of truncated lanes,
    the BM25 list weighted ``weight``)."""
    rows = rrf_fuse([lanes.dense[:depth], lanes.bm25[:depth]], k=rrf_k,
                    weights=(1.0, weight))[:k]
    return [r.rowid for r in rows]


# ---------------------------------------------------------------- one index configuration

def make_settings(db_path: Path, chunk_tokens: int, breadcrumb: bool) -> Settings:
    return load_settings(
        store={"path": db_path},
        loader={"chunk_tokens": chunk_tokens, "breadcrumb": breadcrumb},
    )


def ingest_info(report: IngestReport, misses: int, wall: float) -> dict[str, Any]:
    return {
        "files_added": len(report.added),
        "failed": len(report.failed),
        "chunks_written": report.chunks_written,
        "chunks_embedded_by_pipeline": report.chunks_embedded,
        "embedded_uncached_by_model": misses,
        "seconds": {k: round(v, 2) for k, v in report.seconds.items()},
        "wall_seconds": round(wall, 1),
        # DocGraph.index() also builds the entity graph after ingest (outside report.seconds)
        "outside_report_seconds": round(wall - sum(report.seconds.values()), 1),
    }


def evaluate_config(
    data: BeirDataset,
    doc_ids: list[str],
    queries: dict[str, str],
    embedder: CachedEmbedder,
    workdir: Path,
    chunk_tokens: int,
    breadcrumb: bool,
) -> dict[str, Any]:
    """Build one index and measure every lane and offline variant on it."""
    label = f"{data.name} chunk_tokens={chunk_tokens} breadcrumb={'on' if breadcrumb else 'off'}"
    print(f"\n== {label}", file=sys.stderr, flush=True)
    folder = workdir / "corpus"
    if not folder.is_dir():
        write_corpus_folder(data, doc_ids, folder)
    file_to_id: dict[str, str] = json.loads((workdir / "files.json").read_text(encoding="utf-8"))
    db_path = workdir / f"index-{chunk_tokens}-{int(breadcrumb)}.db"
    settings = make_settings(db_path, chunk_tokens, breadcrumb)
    graph = DocGraph(settings, embedder)
    try:
        misses0, started = embedder.misses, time.perf_counter()
        report = graph.index(folder, NAMESPACE, progress=progress_printer(label))
        ingest = ingest_info(report, embedder.misses - misses0, time.perf_counter() - started)
        if report.failed:
            print(f"  WARNING: {len(report.failed)} files failed: {report.failed[:3]}",
                  file=sys.stderr)

        all_rowids = [int(r[0]) for r in graph.catalog.connection().execute(
            "SELECT id FROM chunks").fetchall()]
        stored = graph.catalog.chunks_by_rowid(all_rowids)
        # Only chunks of corpus files count; anything else the product stores as a chunk
        # (e.g. generated community reports) is skipped when folding hits to documents.
        chunk_doc = {rid: file_to_id[c.source_path] for rid, c in stored.items()
                     if c.source_path in file_to_id}
        other_chunks = sorted({c.source_path.split("/")[0] for rid, c in stored.items()
                               if rid not in chunk_doc})

        qids = list(queries)
        started = time.perf_counter()
        lanes = {q: fetch_lanes(graph, queries[q]) for q in qids}
        query_seconds = time.perf_counter() - started

        def run_of(ranking: Callable[[QueryLanes], list[int]]) -> dict[str, list[str]]:
            return {q: to_documents(ranking(lanes[q]), chunk_doc) for q in qids}

        product = {
            "bm25": run_of(lambda x: x.product_bm25),
            "dense": run_of(lambda x: x.product_dense),
            "hybrid": run_of(lambda x: x.product_hybrid),
        }
        cfg = graph.settings.index
        checks = {
            "offline_hybrid_equals_product": sum(
                fused(lanes[q], cfg.rrf_k, max(cfg.candidates, SEARCH_K), cfg.lexical_weight)
                == lanes[q].product_hybrid for q in qids),
            "offline_dense_equals_product": sum(
                [r.rowid for r in lanes[q].dense[:SEARCH_K]] == lanes[q].product_dense
                for q in qids),
            "offline_bm25_equals_product": sum(
                [r.rowid for r in lanes[q].bm25[:SEARCH_K]] == lanes[q].product_bm25
                for q in qids),
            "queries": len(qids),
        }
        top10 = [r for q in qids for r in lanes[q].product_hybrid[:10]]
        non_corpus_share = round(sum(r not in chunk_doc for r in top10) / max(len(top10), 1), 4)
        docs_per_query = {m: min(len(r) for r in run.values()) for m, run in product.items()}

        lanes_scores = {m: score_run(run, data, qids) for m, run in product.items()}

        variants: list[dict[str, Any]] = []
        headline = DATASETS[data.name]["metrics"] if data.name in DATASETS else ["ndcg@10"]
        base = {m: per_query(product["hybrid"], data, qids, m) for m in headline}

        def add_variant(lane: str, rrf_k: int | None, depth: int | None, weight: float,
                        run: dict[str, list[str]], note: str = "") -> None:
            row: dict[str, Any] = {
                "lane": lane,
                "rrf_k": rrf_k, "depth": depth, "lexical_weight": weight,
                **score_run(run, data, qids),
                # versus the product's hybrid with the same index (paired, per query)
                "vs_product_hybrid": {m: paired_delta(per_query(run, data, qids, m), base[m])
                                      for m in headline},
            }
            if note:
                row["note"] = note
            variants.append(row)

        weight = cfg.lexical_weight
        for rrf_k in RRF_K_VARIANTS:
            for depth in (100, SEARCH_K):
                add_variant("hybrid", rrf_k, depth, weight,
                            run_of(lambda x, r=rrf_k, d=depth: fused(x, r, d, weight)))
        for depth in DEPTH_VARIANTS:
            add_variant("hybrid", cfg.rrf_k, depth, weight,
                        run_of(lambda x, d=depth: fused(x, cfg.rrf_k, d, weight)),
                        note="depth = max(index.candidates, k)")
        for w in LEXICAL_WEIGHT_VARIANTS:
            add_variant("hybrid", cfg.rrf_k, SEARCH_K, w,
                        run_of(lambda x, w=w: fused(x, cfg.rrf_k, SEARCH_K, w)),
                        note="index.lexical_weight")
        # de-duplicate rows produced by more than one sweep
        unique: dict[str, dict[str, Any]] = {}
        for row in variants:
            unique.setdefault(json.dumps([row["lane"], row["rrf_k"],
                                          row["depth"], row["lexical_weight"]]), row)

        n_docs = len(doc_ids)
        return {
            "chunk_tokens": chunk_tokens,
            "breadcrumb": breadcrumb,
            "docs": n_docs,
            "chunks": len(chunk_doc),
            "non_corpus_chunks": {"count": len(all_rowids) - len(chunk_doc),
                                  "kinds": other_chunks[:10],
                                  "share_of_hybrid_top10": non_corpus_share},
            "chunks_per_doc": round(len(chunk_doc) / max(n_docs, 1), 2),
            "ingest": ingest,
            "query_pass_seconds": round(query_seconds, 1),
            "settings": {"index": cfg.model_dump(), "loader": {
                "chunk_tokens": chunk_tokens, "breadcrumb": breadcrumb}},
            "checks": checks,
            "min_docs_per_query_at_k300": docs_per_query,
            "lanes": lanes_scores,
            "variants": list(unique.values()),
        }
    finally:
        graph.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db_path}{suffix}").unlink(missing_ok=True)


# ---------------------------------------------------------------- main

def parse_list(text: str, cast: Callable[[str], Any]) -> list[Any]:
    return [cast(x.strip()) for x in text.split(",") if x.strip()]


def on_off(text: str) -> bool:
    if text.lower() not in ("on", "off", "true", "false", "1", "0"):
        raise argparse.ArgumentTypeError(f"expected on/off, got {text!r}")
    return text.lower() in ("on", "true", "1")


def delta_text(variant: dict[str, Any], dataset: str) -> str:
    """``+0.0123 [-0.0040,+0.0290]`` for the dataset's target metric."""
    metric = DATASETS[dataset]["target"][0]
    d = variant.get("vs_product_hybrid", {}).get(metric)
    if not d:
        return "-"
    return f"{metric} {d['delta']:+.4f} [{d['ci95'][0]:+.4f},{d['ci95'][1]:+.4f}]"


def parse_configs(text: str) -> list[tuple[int, bool]]:
    """``"200:on,200:off,128:on"`` -> [(200, True), (200, False), (128, True)]."""
    configs: list[tuple[int, bool]] = []
    for part in parse_list(text, str):
        tokens, _, crumb = part.partition(":")
        configs.append((int(tokens), on_off(crumb or "on")))
    return configs


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None,
                        help="smoke run: N queries per dataset, small corpus")
    parser.add_argument("--datasets", default="scifact,2wiki")
    parser.add_argument("--configs", default="200:on,200:off,128:on,256:on",
                        help="index configurations chunk_tokens:breadcrumb, run in this order "
                             "(each is embedded once, then cached)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1,
                        help="onnxruntime threads (1 avoids spin contention on a shared box; "
                             "quality does not depend on it)")
    parser.add_argument("--name", default="quality")
    args = parser.parse_args(argv)

    configs = parse_configs(args.configs)
    names = parse_list(args.datasets, str)
    unknown = set(names) - set(DATASETS)
    if unknown:
        raise SystemExit(f"unknown dataset(s) {sorted(unknown)}")

    embedder = cached_embedder(MiniLMEmbedder(batch_size=args.batch_size, threads=args.threads))
    started = time.perf_counter()
    per_dataset: dict[str, Any] = {}
    loaded: dict[str, tuple[BeirDataset, list[str], dict[str, str], Path]] = {}
    rows: list[dict[str, Any]] = []
    variant_rows: list[dict[str, Any]] = []
    try:
        for name in names:
            data = load_beir(name)
            doc_ids, queries, subset = select_subset(data, args.limit)
            print(f"{name}: {len(doc_ids)} docs, {len(queries)} queries", file=sys.stderr)
            workdir = Path(tempfile.mkdtemp(prefix=f"docgraph-quality-{name}-"))
            loaded[name] = (data, doc_ids, queries, workdir)
            per_dataset[name] = {"docs": len(doc_ids), "queries": len(queries),
                                 "subset": subset, "configs": []}
        # configuration-major: the default settings of every dataset are measured first
        for ct, bc in configs:
            for name in names:
                data, doc_ids, queries, workdir = loaded[name]
                result = evaluate_config(data, doc_ids, queries, embedder, workdir, ct, bc)
                per_dataset[name]["configs"].append(result)
                crumb = "on" if bc else "off"
                metrics = DATASETS[name]["metrics"]
                for lane, scores in result["lanes"].items():
                    rows.append({"dataset": name, "chunk_tokens": ct, "breadcrumb": crumb,
                                 "method": lane, **{m: scores[m] for m in metrics},
                                 "chunks": result["chunks"]})
                for v in result["variants"]:
                    variant_rows.append({"dataset": name, "chunk_tokens": ct, "breadcrumb": crumb,
                                         **{k: v[k] for k in ("lane", "rrf_k",
                                                              "depth", "lexical_weight")},
                                         **{m: v[m] for m in metrics},
                                         "delta_vs_product (95% CI)": delta_text(v, name)})
                save_partial(args.name, payload(per_dataset, rows, variant_rows, args, started,
                                                False))
    finally:
        embedder.close()
        for _, _, _, workdir in loaded.values():
            shutil.rmtree(workdir, ignore_errors=True)

    if variant_rows:
        print_table(variant_rows, title="\nvariants (offline re-fusion of the same lanes)")
    write_result(args.name, payload(per_dataset, rows, variant_rows, args, started, True))


PROTOCOL = {
    "documents": "one Markdown file '# {title}\\n\\n{text}' per corpus document, indexed by "
                 "DocGraph.index() with default settings except loader.* (real MiniLM int8 "
                 "behind the embedding cache)",
    "search": f"k={SEARCH_K} chunks per query; chunk hits folded to documents by first "
              "occurrence; chunks that are not corpus files (community reports) are skipped",
    "lanes": "hybrid/dense = DocGraph.search(mode=...); bm25 = chunk_index().lexical_search()",
    "variants": "offline rrf_fuse of the same per-query lanes (dense via dense_search, bm25 via "
                "lexical_search); depth = per-lane candidates (product: "
                "max(index.candidates, k)); checks.* count queries where "
                "the offline ranking equals the product's",
    "caveat": "variants are tuned on the test queries themselves: treat a gain as a lead only "
              "if it holds on both datasets",
}


def payload(per_dataset: dict[str, Any], rows: list[dict[str, Any]],
            variant_rows: list[dict[str, Any]], args: argparse.Namespace, started: float,
            complete: bool) -> dict[str, Any]:
    return {
        "complete": complete,
        "protocol": PROTOCOL,
        "limit": args.limit,
        "configs": args.configs,
        "seconds": round(time.perf_counter() - started, 1),
        "summary": summarize(per_dataset),
        "datasets": per_dataset,
        "results": rows,
        "variants": variant_rows,
    }


def save_partial(name: str, document: dict[str, Any]) -> None:
    """Progress file (same path as the final result, ``complete: false``), written quietly."""
    path = RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def summarize(per_dataset: dict[str, Any]) -> dict[str, Any]:
    """Targets at the default settings, and which breadcrumb default wins where."""
    out: dict[str, Any] = {"targets": {}, "breadcrumb": {}}
    for name, info in per_dataset.items():
        configs = {(c["chunk_tokens"], c["breadcrumb"]): c for c in info["configs"]}
        metric, target = DATASETS[name]["target"]
        default = configs.get((200, True))
        if default is not None:
            value = default["lanes"]["hybrid"][metric]
            out["targets"][name] = {"metric": f"hybrid {metric}", "value": value,
                                    "target": target, "met": value >= target}
        comparison: dict[str, Any] = {}
        for ct in sorted({c[0] for c in configs}):
            on, off = configs.get((ct, True)), configs.get((ct, False))
            if on is None or off is None:
                continue
            lanes: dict[str, Any] = {}
            for lane in ("hybrid", "dense"):
                a, b = on["lanes"][lane], off["lanes"][lane]
                lanes[lane] = {m: {"on": a[m], "off": b[m], "delta": round(a[m] - b[m], 4)}
                               for m in DATASETS[name]["metrics"]}
            better = on["lanes"]["hybrid"][metric] - off["lanes"]["hybrid"][metric]
            lanes["better_default"] = "on" if better > 0 else "off" if better < 0 else "tie"
            comparison[str(ct)] = lanes
        out["breadcrumb"][name] = comparison
    return out


if __name__ == "__main__":
    main()
