"""Key phrases (issue 20, first step): graph figures with ``[graph] keyphrases`` off and on,
and 2Wiki retrieval quality on the test half of the committed split.

    python bench/keyphrases.py [--datasets scifact,scifact_lower,2wiki,sample]
                               [--skip-quality] [--limit N]

Graph figures (no model: community reports are embedded with the hashing embedder). SciFact,
its lower-cased copy (title and text lower-cased: the failure of a lower-case corpus) and
2Wiki: one chunk per corpus document (``title text``), written straight into a catalog with
the links the ingest-time extractor finds (as ``bench/graph.py`` does), all but the last 1%,
then per setting, on its own copy of that catalog, a graph build (``build_s``: with key phrases
on it includes choosing the phrases and re-extracting every chunk) and, after writing the last
1%, an incremental build (``incremental_*``, chunks whose links it rewrote); the figures are
those of the complete corpus. Single runs on a shared 2-core machine. The sample corpus
(``examples/corpus``) is indexed through ``DocGraph.index()``. Per setting: chunks, links per
chunk, share of chunks with at least one entity, entities, edges, communities, community
reports (what ``explore_topics`` and ``mode="global"`` answer from), key phrases.

Quality: the 2Wiki corpus as ``bench/quality.py`` writes it (Markdown files, default loader
settings, real MiniLM int8 behind the shared embedding cache) is indexed once with key phrases
off; a copy of that index then gets key phrases on through ``build_graph`` (re-extraction and
a new graph, no re-embedding). On the test half of ``bench/splits/relevance_2wiki.json``
(nothing here was tuned on any query: the key-phrase constants were set by reading the
phrases chosen on the corpora), ``hybrid`` and ``vector_first`` ask for ``k=20`` chunks,
folded to documents by first occurrence; Recall@2/@5 and nDCG@10 with a paired bootstrap of
the on-minus-off difference.
"""

from __future__ import annotations

import argparse
import json
import shutil
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
    BeirDataset,
    cached_embedder,
    load_beir,
    log,
    ndcg_at_k,
    print_table,
    recall_at_k,
    write_corpus_folder,
    write_result,
)
from docgraph.app import DocGraph
from docgraph.config import GraphSettings, load_settings
from docgraph.graph.build import GraphBuilder, make_extractor
from docgraph.ingest.embed import HashingEmbedder, MiniLMEmbedder
from docgraph.store.graph import GraphStore
from docgraph.store.sqlite import SQLiteCatalog
from docgraph.store.sqlite.graph import SQLiteGraphStore
from graph import write_passages

EMBEDDER = HashingEmbedder()
NAMESPACE = "bench"
QUALITY_K = 20
BOOTSTRAP = 2000
SETTINGS = {"off": GraphSettings(keyphrases=False), "on": GraphSettings(keyphrases=True)}


def link_figures(store: GraphStore, namespace: str, chunks: int) -> dict[str, Any]:
    """Links per chunk and the share of chunks with at least one entity, as stored."""
    links = store.links(namespace)
    linked = len(np.unique(links.chunk_rowids))
    return {"chunks": chunks,
            "links_per_chunk": round(len(links.chunk_rowids) / max(chunks, 1), 2),
            "chunks_with_entity": round(linked / max(chunks, 1), 3)}


def passages_of(name: str, limit: int | None) -> list[tuple[str, str]]:
    """(doc id, text) of a dataset's documents; ``scifact_lower`` lower-cases SciFact."""
    data = load_beir(name.removesuffix("_lower"))
    ids = sorted(data.corpus)[:limit] if limit else sorted(data.corpus)
    texts = [data.doc_text(i) for i in ids]
    if name.endswith("_lower"):
        texts = [t.lower() for t in texts]
    return list(zip(ids, texts, strict=True))


def graph_dataset(name: str, limit: int | None, workdir: Path) -> list[dict[str, Any]]:
    """Graph figures of one dataset with key phrases off and on: a build of all but the
    last 1% of its documents, then an incremental build after writing that 1%
    (``incremental_*``; the figures are those of the full build)."""
    passages = passages_of(name, limit)
    base = make_extractor(SETTINGS["off"])
    rows = [(doc, text, base.links(text)) for doc, text in passages]
    held = max(1, len(rows) // 100)
    catalog = SQLiteCatalog(workdir / f"{name}.db")
    catalog.set_embedding_model(EMBEDDER.name, EMBEDDER.dimension)
    write_passages(catalog, name, rows[:-held])
    catalog.close()
    out = []
    for label, settings in SETTINGS.items():
        copy = workdir / f"{name}-{label}.db"
        shutil.copyfile(workdir / f"{name}.db", copy)
        catalog = SQLiteCatalog(copy)
        store = SQLiteGraphStore(catalog)
        builder = GraphBuilder(store, EMBEDDER, settings, make_extractor(settings))
        started = time.perf_counter()
        builder.build(name)
        seconds = time.perf_counter() - started
        write_passages(catalog, name, rows[-held:])
        started = time.perf_counter()
        report = builder.build(name)
        incremental = time.perf_counter() - started
        out.append({"dataset": name, "keyphrases": label,
                    **link_figures(store, name, len(rows)),
                    "entities": report.entities, "edges": report.edges,
                    "communities": report.communities, "reports": report.reports,
                    "phrases": report.keyphrases, "build_s": round(seconds, 2),
                    "incremental_docs": held, "incremental_build_s": round(incremental, 2),
                    "incremental_relinked": report.relinked_chunks,
                    "incremental_phrases_s": round(report.seconds.get("keyphrases", 0.0), 2),
                    "incremental_relink_s": round(report.seconds.get("relink", 0.0), 2)})
        catalog.close()
        copy.unlink()
    return out


def sample_corpus(workdir: Path) -> list[dict[str, Any]]:
    """Graph figures of ``examples/corpus`` indexed through ``DocGraph.index()``."""
    out = []
    for label, graph_settings in SETTINGS.items():
        settings = load_settings(graph=graph_settings.model_dump())
        settings.store.path = workdir / f"sample-{label}.db"
        graph = DocGraph(settings, EMBEDDER)
        try:
            started = time.perf_counter()
            graph.index(REPO_ROOT / "examples" / "corpus", namespace="sample")
            index_s = time.perf_counter() - started
            report = graph.last_graph_reports[0]
            chunks = graph.graph_store.namespace_chunk_count(["sample"])
            out.append({"dataset": "sample", "keyphrases": label,
                        **link_figures(graph.graph_store, "sample", chunks),
                        "entities": report.entities, "edges": report.edges,
                        "communities": report.communities, "reports": report.reports,
                        "phrases": report.keyphrases, "relinked": report.relinked_chunks,
                        "build_s": round(sum(report.seconds.values()), 2),
                        "phrases_s": round(report.seconds.get("keyphrases", 0.0), 2),
                        "relink_s": round(report.seconds.get("relink", 0.0), 2),
                        "index_s": round(index_s, 2)})
        finally:
            graph.close()
    return out


def run_of(graph: DocGraph, queries: dict[str, str], mode: str,
           file_to_id: dict[str, str]) -> dict[str, list[str]]:
    """Corpus ids per query, in order of their best-ranked chunk."""
    out: dict[str, list[str]] = {}
    for qid, text in queries.items():
        hits = graph.search(text, namespaces={NAMESPACE}, k=QUALITY_K, mode=mode)  # type: ignore[arg-type]
        out[qid] = list(dict.fromkeys(file_to_id[h.source_path] for h in hits
                                      if h.source_path in file_to_id))
    return out


def per_query(run: dict[str, list[str]], data: BeirDataset, qids: list[str], metric: str
              ) -> np.ndarray:
    """One score per query (Recall@k or nDCG@k)."""
    name, k = metric.split("@")
    fn = ndcg_at_k if name == "ndcg" else recall_at_k
    return np.array([fn({q: run[q]}, {q: data.qrels[q]}, int(k)) for q in qids])


def paired(on: np.ndarray, off: np.ndarray) -> dict[str, float]:
    """Mean difference with a 95% paired-bootstrap interval (seeded)."""
    rng = np.random.default_rng(0)
    diff = on - off
    means = [float(diff[rng.integers(0, len(diff), len(diff))].mean()) for _ in range(BOOTSTRAP)]
    return {"delta": round(float(diff.mean()), 4),
            "ci95": [round(float(np.percentile(means, 2.5)), 4),
                     round(float(np.percentile(means, 97.5)), 4)]}


def quality(workdir: Path) -> dict[str, Any]:
    """2Wiki test half: hybrid and vector_first with key phrases off and on."""
    data = load_beir("2wiki")
    split = json.loads((BENCH_DIR / "splits" / "relevance_2wiki.json").read_text())
    queries = {q: data.queries[q] for q in split["test"]}
    folder = workdir / "corpus"
    file_to_id = write_corpus_folder(data, sorted(data.corpus), folder)
    embedder = cached_embedder(MiniLMEmbedder(batch_size=32, threads=1))
    metrics = ["recall@2", "recall@5", "ndcg@10"]
    runs: dict[str, dict[str, dict[str, list[str]]]] = {}
    builds: dict[str, Any] = {}
    try:
        for label, graph_settings in SETTINGS.items():
            settings = load_settings(graph=graph_settings.model_dump())
            settings.store.path = workdir / f"2wiki-{label}.db"
            if label == "on":  # the same chunks and vectors; only the graph is rebuilt
                shutil.copyfile(workdir / "2wiki-off.db", settings.store.path)
            graph = DocGraph(settings, embedder)
            try:
                started = time.perf_counter()
                if label == "off":
                    graph.index(folder, NAMESPACE)
                    report = graph.last_graph_reports[0]
                else:
                    report = graph.build_graph([NAMESPACE])[0]
                builds[label] = {"seconds": round(time.perf_counter() - started, 1),
                                 "entities": report.entities, "edges": report.edges,
                                 "communities": report.communities,
                                 "phrases": report.keyphrases}
                log(f"2wiki {label}: {builds[label]}")
                runs[label] = {mode: run_of(graph, queries, mode, file_to_id)
                               for mode in ("hybrid", "vector_first")}
            finally:
                graph.close()
    finally:
        embedder.close()
    qids = list(queries)
    table: dict[str, Any] = {}
    for mode in ("hybrid", "vector_first"):
        entry: dict[str, Any] = {}
        for metric in metrics:
            off = per_query(runs["off"][mode], data, qids, metric)
            on = per_query(runs["on"][mode], data, qids, metric)
            entry[metric] = {"off": round(float(off.mean()), 4), "on": round(float(on.mean()), 4),
                             **paired(on, off)}
        table[mode] = entry
    return {"queries": len(qids), "split": "bench/splits/relevance_2wiki.json (test half)",
            "k": QUALITY_K, "builds": builds, "metrics": table}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="scifact,scifact_lower,2wiki,sample")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--limit", type=int, default=None, help="documents per dataset")
    parser.add_argument("--name", default="keyphrases")
    args = parser.parse_args()
    wanted = [d.strip() for d in args.datasets.split(",") if d.strip()]
    results: dict[str, Any] = {
        "settings": {k: v.model_dump(mode="json") for k, v in SETTINGS.items()},
        "protocol": " ".join(__doc__.split("\n\n", 2)[2].split()),
    }
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for name in wanted:
            log(f"graph: {name}")
            rows += sample_corpus(workdir) if name == "sample" else graph_dataset(
                name, args.limit, workdir)
        results["results"] = rows  # write_result prints them as the table
        if not args.skip_quality:
            results["quality_2wiki_test"] = quality(workdir)
            q = results["quality_2wiki_test"]["metrics"]
            print_table([{"mode": mode, "metric": m, **{k: v for k, v in q[mode][m].items()}}
                         for mode in q for m in q[mode]], "2wiki test half")
    results["build_s_median_on_over_off"] = {
        name: round(statistics.median([r["build_s"] for r in rows
                                       if r["dataset"] == name and r["keyphrases"] == "on"])
                    / max(statistics.median([r["build_s"] for r in rows if r["dataset"] == name
                                             and r["keyphrases"] == "off"]), 1e-9), 2)
        for name in dict.fromkeys(r["dataset"] for r in rows)}
    write_result(args.name, results)


if __name__ == "__main__":
    main()
