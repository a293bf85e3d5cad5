"""Retrieval quality of the embedded index's compact dense codes against exact float32 search.

Issue 21 requires quality unchanged: SciFact nDCG@10 and 2Wiki Recall@2/@5 (test halves of
the committed splits) within 0.002 of exact search. Both variants open the same cached
dataset index (``bench/ablation.py``'s layout, shared with ``quality_backends.py``): one
with the default chunk index (sign + int8 codes, exact re-scoring from the catalog), one
with ``EmbeddedChunkIndex(exact=True)`` (every vector in memory as float32, scanned
exactly). Modes run alternately on both. Writes ``bench/results/dense_codes_quality.json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import docgraph.store.sqlite.ports as sqlite_ports
from ablation import WORKDIR, QueryVectorCache, open_dataset_index
from common import cached_embedder, load_beir, log, write_result
from docgraph.app import DocGraph
from docgraph.config import load_settings
from docgraph.embedding.embedders import MiniLMEmbedder
from docgraph.store.sqlite.index import EmbeddedChunkIndex
from quality import score_run
from quality_backends import METRICS, MODES, document_run, load_files
from relevance import load_split

TOLERANCE = 0.002


def exact_graph(path: Path, embedder: QueryVectorCache) -> DocGraph:
    """A second DocGraph over the same index file whose chunk index scans float32 exactly."""
    original = sqlite_ports.EmbeddedChunkIndex
    sqlite_ports.EmbeddedChunkIndex = functools.partial(  # type: ignore[misc]
        EmbeddedChunkIndex, exact=True)
    try:
        graph = DocGraph(load_settings(store={"path": path}), embedder)
        graph.search("warm up", namespaces={"bench"}, k=1)  # builds the index now
    finally:
        sqlite_ports.EmbeddedChunkIndex = original  # type: ignore[misc]
    return graph


def evaluate(name: str) -> dict[str, Any]:
    """Both variants of one dataset, every mode, alternating."""
    data = load_beir(name)
    test = load_split(data)["test"]
    queries = {q: data.queries[q] for q in test}
    embedder = QueryVectorCache(cached_embedder(MiniLMEmbedder()),
                                WORKDIR / name / "query_vectors.npz")
    codes, _, build = open_dataset_index(data, list(data.corpus), embedder, name,
                                         rebuild=False)
    for text in queries.values():
        embedder.embed_query(text)
    embedder.save()
    exact = exact_graph(WORKDIR / name / "index.db", embedder)
    files = load_files(WORKDIR / name)
    graphs = {"exact": exact, "codes": codes}
    rows: list[dict[str, Any]] = []
    try:
        for mode in MODES:
            runs: dict[str, dict[str, list[str]]] = {}
            for variant in ("exact", "codes"):
                run, times = document_run(graphs[variant], mode, queries, files)
                runs[variant] = run
                rows.append({"dataset": name, "mode": mode, "variant": variant,
                             **score_run(run, data, list(queries)),
                             "p50_ms": round(statistics.median(times), 1)})
            base, other = rows[-2], rows[-1]
            other["delta"] = {m: round(other[m] - base[m], 4) for m in METRICS[name]}
            other["queries_ranked_differently"] = sum(
                runs["exact"][q][:10] != runs["codes"][q][:10] for q in queries)
            log(f"  {name} {mode:<12} " + "  ".join(
                f"{m} {base[m]:.4f} / {other[m]:.4f} ({other['delta'][m]:+.4f})"
                for m in METRICS[name])
                + f"  top-10 differing {other['queries_ranked_differently']}/{len(queries)}")
    finally:
        exact.close()
        codes.close()
    return {"test_queries": len(queries), "index": build, "results": rows}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison and write ``bench/results/dense_codes_quality.json``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", default="scifact,2wiki")
    parser.add_argument("--name", default="dense_codes_quality")
    parser.add_argument("--reference", type=Path, default=None,
                        help="an earlier result of this bench (e.g. before a storage "
                        "change): each figure's difference from it is added")
    args = parser.parse_args(argv)
    started = time.time()
    datasets = {name: evaluate(name) for name in args.datasets.split(",")}
    deltas = [abs(v) for d in datasets.values() for r in d["results"]
              for v in r.get("delta", {}).values()]
    reference_deltas: list[float] = []
    if args.reference is not None:
        before = json.loads(args.reference.read_text(encoding="utf-8"))["datasets"]
        for name, data in datasets.items():
            old = {(r["mode"], r["variant"]): r for r in before[name]["results"]}
            for row in data["results"]:
                was = old[(row["mode"], row["variant"])]
                row["vs_reference"] = {m: round(row[m] - was[m], 4) for m in METRICS[name]}
                reference_deltas += [abs(v) for v in row["vs_reference"].values()]
    write_result(args.name, {
        "settings": {"split": "test", "tolerance": TOLERANCE, "modes": list(MODES),
                     "reference": None if args.reference is None else args.reference.name},
        "largest_abs_delta_vs_reference": max(reference_deltas, default=0.0),
        "within_tolerance": max(deltas, default=0.0) <= TOLERANCE,
        "largest_abs_delta": max(deltas, default=0.0),
        "wall_minutes": round((time.time() - started) / 60, 1),
        "datasets": datasets})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
