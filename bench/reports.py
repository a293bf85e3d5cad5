"""Community report vectors (issue 20): embedded report text against the normalised mean of
the member chunks' stored vectors, for global-mode quality and ``index()`` time.

    python bench/reports.py [--chars N] [--timing-runs N] [--skip-quality] [--skip-timing]

Quality, on GraphRAG-Bench novel (``$DOCGRAPH_DATA/graphrag_bench_novel``): each of the 20
books is one namespace (its first ``--chars`` characters, 60,000 by default, to bound the
build on a shared 2-core machine), indexed through ``DocGraph.index()`` with MiniLM int8
behind the shared embedding cache and ``report_vectors = "embed"``; then the same index gets
``report_vectors = "mean"`` through ``build_graph`` (the same report texts, only their
vectors change). Questions: the test half of ``bench/splits/reports_novel.json`` (sorted
question ids shuffled with a fixed seed; nothing is tuned on either half). Each question asks
``mode="global"`` over all 20 namespaces for ``k=10`` reports (RRF of dense and BM25, as
served), and the dense lane alone is measured too (where the vectors are all that differs).
Proxy metrics (the set has no passage labels): ``route@1`` the top report is from the
question's book; ``p@5`` the share of the top 5 from it; ``mrr@10`` of the first report from
it; with a paired bootstrap of mean minus embed.

A part skipped keeps its figures in ``bench/results/reports.json`` from the last run.

Timing: ``index()`` of the sample corpus (``examples/corpus``) with MiniLM int8 *without* the
cache (every chunk and report embedded, as on a first index), alternating ``embed`` and
``mean`` runs, medians, load averages before each run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    BENCH_DIR,
    REPO_ROOT,
    cached_embedder,
    data_dir,
    log,
    print_table,
    write_result,
)
from docgraph.app import DocGraph
from docgraph.config import load_settings
from docgraph.embedding.embedders import MiniLMEmbedder
from docgraph.model import SearchHit

SPLIT = BENCH_DIR / "splits" / "reports_novel.json"
SEED = 20261204
K = 10
BOOTSTRAP = 2000
MODES = ("embed", "mean")


def load_novel(chars: int) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Book name -> its first ``chars`` characters; the questions."""
    root = data_dir() / "graphrag_bench_novel"
    books: dict[str, str] = {}
    with (root / "corpus.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            books[row["corpus_name"]] = row["context"][:chars]
    questions = json.loads((root / "questions.json").read_text(encoding="utf-8"))
    return books, questions


def split_questions(questions: list[dict[str, Any]]) -> dict[str, Any]:
    """The committed split (written once): sorted ids shuffled by ``Random(SEED)``."""
    if SPLIT.exists():
        return dict(json.loads(SPLIT.read_text()))
    ids = sorted(q["id"] for q in questions)
    random.Random(SEED).shuffle(ids)
    half = len(ids) // 2
    split = {"dataset": "graphrag_bench_novel", "seed": SEED,
             "method": "sorted question ids shuffled by random.Random(seed); first half tunes",
             "tune": ids[:half], "test": ids[half:]}
    SPLIT.write_text(json.dumps(split, indent=1) + "\n")
    return split


def scores(ranked: list[str], book: str) -> tuple[float, float, float]:
    """(route@1, p@5, mrr@10) of a ranked list of namespaces for a question about ``book``."""
    first = next((i for i, ns in enumerate(ranked[:K]) if ns == book), None)
    return (float(bool(ranked) and ranked[0] == book),
            sum(ns == book for ns in ranked[:5]) / 5.0,
            0.0 if first is None else 1.0 / (first + 1))


def namespaces_of(hits: list[SearchHit]) -> list[str]:
    return [h.namespace for h in hits]


def evaluate(graph: DocGraph, books: list[str], questions: list[dict[str, Any]]
             ) -> dict[str, np.ndarray]:
    """Per question (route@1, p@5, mrr@10) for global mode and for its dense lane alone."""
    allowed = frozenset(books)
    index = graph.chunk_index()
    out: dict[str, list[tuple[float, float, float]]] = {"global": [], "dense": []}
    for q in questions:
        hits = graph.search(q["question"], namespaces=books, k=K, mode="global")
        out["global"].append(scores(namespaces_of(hits), q["source"]))
        rows = index.dense_search(graph.embedder.embed_query(q["question"]), K, allowed,
                                  kind="community_report")
        chunks = graph.store.chunks_by_rowid([r.rowid for r in rows])
        out["dense"].append(scores([chunks[r.rowid].namespace for r in rows
                                    if r.rowid in chunks], q["source"]))
    return {lane: np.asarray(values) for lane, values in out.items()}


def paired(on: np.ndarray, off: np.ndarray) -> dict[str, float]:
    """Mean difference and a 95% paired-bootstrap interval."""
    rng = np.random.default_rng(0)
    diff = on - off
    samples = rng.integers(0, len(diff), size=(BOOTSTRAP, len(diff)))
    means = diff[samples].mean(axis=1)
    return {"diff": round(float(diff.mean()), 4),
            "ci95": [round(float(np.percentile(means, 2.5)), 4),
                     round(float(np.percentile(means, 97.5)), 4)]}


def quality(workdir: Path, chars: int) -> dict[str, Any]:
    books, questions = load_novel(chars)
    split = split_questions(questions)
    test = set(split["test"])
    asked = [q for q in questions if q["id"] in test and q["source"] in books]
    names = sorted(books)
    for name in names:
        folder = workdir / "books" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.txt").write_text(books[name], encoding="utf-8")
    embedder = cached_embedder(MiniLMEmbedder(batch_size=32, threads=1))
    results: dict[str, dict[str, np.ndarray]] = {}
    builds: dict[str, Any] = {}
    try:
        for mode in MODES:
            settings = load_settings(graph={"report_vectors": mode})
            settings.store.path = workdir / "novel.db"
            graph = DocGraph(settings, embedder)
            try:
                started = time.perf_counter()
                if mode == "embed":
                    reports = []
                    for name in names:
                        graph.index(workdir / "books" / name, namespace=name)
                        reports += graph.last_graph_reports
                else:
                    reports = graph.build_graph(names)
                builds[mode] = {
                    "seconds": round(time.perf_counter() - started, 1),
                    "reports": sum(r.reports for r in reports),
                    "reports_embedded": sum(r.reports_embedded for r in reports),
                    "report_vectors_s": round(sum(r.seconds.get("report_vectors", 0.0)
                                                  for r in reports), 2)}
                log(f"novel {mode}: {builds[mode]}")
                results[mode] = evaluate(graph, names, asked)
            finally:
                graph.close()
    finally:
        embedder.close()
    metrics = ("route@1", "p@5", "mrr@10")
    table: dict[str, Any] = {}
    for lane in ("global", "dense"):
        for subset in ("all", "Contextual Summarize"):
            mask = np.array([subset == "all" or q["question_type"] == subset for q in asked])
            entry: dict[str, Any] = {"questions": int(mask.sum())}
            for i, metric in enumerate(metrics):
                embed = results["embed"][lane][mask, i]
                mean = results["mean"][lane][mask, i]
                entry[metric] = {"embed": round(float(embed.mean()), 4),
                                 "mean": round(float(mean.mean()), 4), **paired(mean, embed)}
            table[f"{lane}/{subset}"] = entry
    return {"books": len(names), "chars_per_book": chars, "questions": len(asked),
            "split": "bench/splits/reports_novel.json (test half)", "k": K,
            "builds": builds, "metrics": table}


def timing(workdir: Path, runs: int) -> dict[str, Any]:
    """index() of the sample corpus, uncached MiniLM, alternating modes."""
    embedder = MiniLMEmbedder(batch_size=32, threads=1)
    embedder.embed_documents(["warm up"])
    seconds: dict[str, list[float]] = {m: [] for m in MODES}
    report_s: dict[str, list[float]] = {m: [] for m in MODES}
    loads: list[dict[str, Any]] = []
    reports = 0
    for run in range(runs):
        for mode in MODES:
            settings = load_settings(graph={"report_vectors": mode})
            settings.store.path = workdir / f"sample-{mode}-{run}.db"
            graph = DocGraph(settings, embedder)
            try:
                load = os.getloadavg()
                started = time.perf_counter()
                graph.index(REPO_ROOT / "examples" / "corpus", namespace="sample")
                elapsed = time.perf_counter() - started
                built = graph.last_graph_reports[0]
                reports = built.reports
                seconds[mode].append(elapsed)
                report_s[mode].append(built.seconds.get("report_vectors", 0.0))
                loads.append({"run": run, "mode": mode,
                              "load_before": [round(x, 2) for x in load],
                              "index_s": round(elapsed, 2)})
                log(f"sample {mode} run {run}: {elapsed:.1f} s (load {load[0]:.2f})")
            finally:
                graph.close()
    return {"corpus": "examples/corpus", "reports": reports, "runs": runs, "order": loads,
            "median_index_s": {m: round(statistics.median(v), 2) for m, v in seconds.items()},
            "median_report_vectors_s": {m: round(statistics.median(v), 2)
                                        for m, v in report_s.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, default=60_000)
    parser.add_argument("--timing-runs", type=int, default=3)
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-timing", action="store_true")
    args = parser.parse_args()
    # a part skipped keeps its figures from the last run (the two parts run separately)
    previous = BENCH_DIR / "results" / "reports.json"
    payload: dict[str, Any] = {}
    if previous.exists():
        old = json.loads(previous.read_text())
        payload = {key: old[key] for key in ("quality", "timing") if key in old}
    payload["load_before"] = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        if not args.skip_quality:
            payload["quality"] = quality(workdir, args.chars)
            print_table([{"lane/subset": key, "questions": v["questions"],
                          **{f"{m} embed": v[m]["embed"] for m in ("route@1", "p@5", "mrr@10")},
                          **{f"{m} mean": v[m]["mean"] for m in ("route@1", "p@5", "mrr@10")}}
                         for key, v in payload["quality"]["metrics"].items()],
                        "global-mode proxies, test half")
        if not args.skip_timing:
            payload["timing"] = timing(workdir, args.timing_runs)
            print_table([{"mode": m, "median index_s": payload["timing"]["median_index_s"][m],
                          "median report_vectors_s":
                              payload["timing"]["median_report_vectors_s"][m]}
                         for m in MODES], "index() of examples/corpus")
    write_result("reports", payload)


if __name__ == "__main__":
    main()
