"""Key phrases (issue 20): the issue's one-table graph bench with ``[graph] keyphrases`` off and
on, and 2Wiki retrieval quality on the test half of the committed split.

    python bench/keyphrases.py [--datasets scifact,scifact_lower,2wiki,sample,synthetic]
                               [--repeats 3] [--synthetic 100000] [--skip-quality] [--limit N]

Graph table. SciFact, its lower-cased copy (title and text lower-cased: the failure of a
lower-case corpus), 2Wiki and a synthetic corpus (``--synthetic`` chunks, 100 per document:
``bench/graph.py``'s Zipf entities written as capitalized names inside lower-case made-up
words): one chunk per corpus document, written straight into a catalog with the links the
ingest-time extractor finds and random vectors (community reports get the mean of their
members' vectors, ``report_vectors = "mean"``, the default: no model). Per setting and run,
on a fresh copy of a catalog holding all but the last document: a graph build in a new
builder (nothing kept in memory: what a new process pays), then the last document is
written and the same builder builds again (``incremental_*``: what a long-lived process
pays after adding one file). Times are medians of ``--repeats`` runs (the synthetic corpus:
``--synthetic-repeats``, 1 by default) on a 2-core machine shared with other work, under the
shared benchmark lock; phases: ``extraction`` (key-phrase tokenizing, choosing, matching and
link writes), ``graph`` (links load and edges), ``communities``, ``reports`` (texts and
vectors), ``store``. The sample corpus (``examples/corpus``) is indexed through
``DocGraph.index()`` with the real MiniLM int8 model (passages from the embedding cache), then
its graph is rebuilt per run with ``report_vectors = "mean"`` and ``"embed"`` (reports
embedded by the real model, uncached): the only set whose report embedding is timed on the
real model. Per setting: chunks, links per chunk, share of chunks with at least one entity,
entities, edges, communities, community reports, key phrases.

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
from docgraph.embedding.embedders import HashingEmbedder, MiniLMEmbedder
from docgraph.graph.build import GraphBuilder, make_extractor
from docgraph.store.graph import GraphStore
from docgraph.store.sqlite import SQLiteCatalog
from docgraph.store.sqlite.graph import SQLiteGraphStore
from graph import synthetic_passages, write_passages

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


PHASES = {"extraction": ("relink",), "graph": ("load", "edges"),
          "communities": ("communities",), "reports": ("reports",), "store": ("store",)}


def phase_seconds(seconds: dict[str, float]) -> dict[str, float]:
    """A build's phase timings folded into the table's columns (``extraction`` includes the
    key-phrase tokenizing, choosing and matching and the link writes; ``reports`` includes
    their vectors)."""
    return {name: sum(seconds.get(k, 0.0) for k in keys) for name, keys in PHASES.items()}


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the numeric timing fields of ``runs`` (and the runs themselves)."""
    out: dict[str, Any] = {"runs": len(runs)}
    for key in ("build_s", *(f"{p}_s" for p in PHASES), "report_vectors_s", "incremental_s",
                "incremental_extraction_s"):
        values = [r[key] for r in runs if key in r]
        if values:
            out[key] = round(statistics.median(values), 2)
    out["build_runs_s"] = [round(r["build_s"], 2) for r in runs]
    return out


def _one_build(store: GraphStore, builder: GraphBuilder, name: str) -> dict[str, Any]:
    started = time.perf_counter()
    report = builder.build(name)
    seconds = time.perf_counter() - started
    return {"build_s": seconds, **{f"{k}_s": v for k, v in phase_seconds(report.seconds).items()},
            "report_vectors_s": report.seconds.get("report_vectors", 0.0), "report": report}


def graph_dataset(name: str, passages: list[tuple[str, str, list[Any]]], workdir: Path,
                  repeats: int, per_doc: int = 1) -> list[dict[str, Any]]:
    """Graph figures of one dataset with key phrases off and on. Per run, on a fresh copy of
    a catalog holding all but the last document: a build in a new builder (nothing kept in
    memory: a fresh build), then the last document is written and the same builder builds
    again (``incremental_*``: what a long-lived process pays after adding one file)."""
    held = per_doc
    catalog = SQLiteCatalog(workdir / f"{name}.db")
    catalog.set_embedding_model(EMBEDDER.name, EMBEDDER.dimension)
    write_passages(catalog, name, passages[:-held], per_doc=per_doc)
    catalog.close()
    out = []
    for label, settings in SETTINGS.items():
        runs: list[dict[str, Any]] = []
        for attempt in range(repeats):
            copy = workdir / f"{name}-{label}-{attempt}.db"
            shutil.copyfile(workdir / f"{name}.db", copy)
            catalog = SQLiteCatalog(copy)
            store = SQLiteGraphStore(catalog)
            builder = GraphBuilder(store, EMBEDDER, settings, make_extractor(settings))
            run = _one_build(store, builder, name)
            write_passages(catalog, name, passages[-held:], per_doc=per_doc)
            incremental = _one_build(store, builder, name)
            run["incremental_s"] = incremental["build_s"]
            run["incremental_extraction_s"] = incremental["extraction_s"]
            report = incremental["report"]
            runs.append(run)
            if attempt == repeats - 1:
                out.append({"dataset": name, "keyphrases": label,
                            **link_figures(store, name, len(passages)),
                            "entities": report.entities, "edges": report.edges,
                            "communities": report.communities, "reports": report.reports,
                            "phrases": report.keyphrases, **median_of(runs),
                            "incremental_docs": 1,
                            "incremental_relinked": report.relinked_chunks,
                            "incremental_extracted": report.extracted_chunks,
                            "incremental_matched": report.matched_chunks})
            catalog.close()
            copy.unlink()
        log(f"{name} {label}: {out[-1]}")
    return out


def synthetic_texts(n_chunks: int) -> list[tuple[str, str]]:
    """(doc id, text) of ``n_chunks`` synthetic chunks, 100 per document: the Zipf entities
    of ``bench/graph.py``'s synthetic corpus written as capitalized two-word names inside 40
    lower-case words drawn from a Zipf law over 20k made-up words (so the name extractor
    finds the entities and key phrases have statistics to count; seeded)."""
    rng = np.random.default_rng(11)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(letters[rng.integers(0, 26, size=int(rng.integers(4, 10)))])
             for _ in range(20_000)]
    draws = np.minimum(rng.zipf(1.2, size=(n_chunks, 40)), len(words)) - 1
    out = []
    for (doc, _, links), row in zip(synthetic_passages(n_chunks), draws, strict=True):
        text = [words[w] for w in row.tolist()]
        for j, link in enumerate(links):
            e = int(link.key[1:])
            name = f"{words[e % 20_000].capitalize()} {words[(e * 7919) % 20_000].capitalize()}"
            text.insert(1 + 3 * j, name)
        out.append((doc, " ".join(text) + "."))
    return out


def sample_corpus(workdir: Path, repeats: int) -> list[dict[str, Any]]:
    """Graph figures of ``examples/corpus`` indexed through ``DocGraph.index()`` with the
    real MiniLM int8 model (behind the shared embedding cache, so passages are cache hits);
    then, per run, the graph rebuilt with ``report_vectors = "mean"`` and ``"embed"``
    (reports embedded by the real model, none cached)."""
    out = []
    embedder = MiniLMEmbedder(batch_size=32, threads=1)
    cached = cached_embedder(embedder)
    for label, graph_settings in SETTINGS.items():
        settings = load_settings(graph=graph_settings.model_dump())
        settings.store.path = workdir / f"sample-{label}.db"
        graph = DocGraph(settings, cached)
        try:
            graph.index(REPO_ROOT / "examples" / "corpus", namespace="sample")
            report = graph.last_graph_reports[0]
            chunks = graph.graph_store.namespace_chunk_count(["sample"])
            row: dict[str, Any] = {"dataset": "sample", "keyphrases": label,
                                   **link_figures(graph.graph_store, "sample", chunks),
                                   "entities": report.entities, "edges": report.edges,
                                   "communities": report.communities, "reports": report.reports,
                                   "phrases": report.keyphrases}
        finally:
            graph.close()
        for vectors in ("mean", "embed"):
            runs = []
            for _ in range(repeats):
                settings = load_settings(graph={**graph_settings.model_dump(),
                                                "report_vectors": vectors})
                settings.store.path = workdir / f"sample-{label}.db"
                graph = DocGraph(settings, embedder)  # no cache: reports really embedded
                try:
                    graph.graph_store.replace_graph("sample", _no_edges(), [], "")
                    started = time.perf_counter()
                    built = graph.build_graph(["sample"])[0]
                    runs.append({"build_s": time.perf_counter() - started,
                                 **{f"{k}_s": v for k, v in phase_seconds(built.seconds).items()},
                                 "report_vectors_s": built.seconds.get("report_vectors", 0.0)})
                finally:
                    graph.close()
            summary = median_of(runs)
            if vectors == "mean":
                row.update(summary)
            row[f"report_vectors_{vectors}_s"] = summary["report_vectors_s"]
        out.append(row)
        log(f"sample {label}: {row}")
    cached.close()
    return out


def _no_edges() -> Any:
    from docgraph.store.graph import EdgeTable
    empty = np.zeros(0, dtype=np.int64)
    return EdgeTable(empty, empty, np.zeros(0), empty)


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


def dataset_rows(name: str, args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    """The table rows (key phrases off and on) of one dataset."""
    if name == "sample":
        return sample_corpus(workdir, args.repeats)
    base = make_extractor(SETTINGS["off"])
    if name == "synthetic":
        passages = [(doc, text, base.links(text)) for doc, text in synthetic_texts(args.synthetic)]
        return graph_dataset(name, passages, workdir, args.synthetic_repeats, per_doc=100)
    passages = [(doc, text, base.links(text)) for doc, text in passages_of(name, args.limit)]
    return graph_dataset(name, passages, workdir, args.repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="scifact,scifact_lower,2wiki,sample,synthetic")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--limit", type=int, default=None, help="documents per dataset")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (medians)")
    parser.add_argument("--synthetic", type=int, default=100_000, help="synthetic chunks")
    parser.add_argument("--synthetic-repeats", type=int, default=1)
    parser.add_argument("--name", default="keyphrases")
    args = parser.parse_args()
    wanted = [d.strip() for d in args.datasets.split(",") if d.strip()]
    results: dict[str, Any] = {
        "settings": {k: v.model_dump(mode="json") for k, v in SETTINGS.items()},
        "protocol": " ".join(__doc__.split("\n\n", 2)[2].split()),
        "repeats": args.repeats, "synthetic_repeats": args.synthetic_repeats,
    }
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for name in wanted:
            log(f"graph: {name}")
            rows += dataset_rows(name, args, workdir)
        results["results"] = rows  # write_result prints them as the table
        if not args.skip_quality:
            results["quality_2wiki_test"] = quality(workdir)
            q = results["quality_2wiki_test"]["metrics"]
            print_table([{"mode": mode, "metric": m, **{k: v for k, v in q[mode][m].items()}}
                         for mode in q for m in q[mode]], "2wiki test half")
    results["build_s_on_over_off"] = {
        name: round(next(r["build_s"] for r in rows if r["dataset"] == name
                         and r["keyphrases"] == "on")
                    / max(next(r["build_s"] for r in rows if r["dataset"] == name
                               and r["keyphrases"] == "off"), 1e-9), 2)
        for name in dict.fromkeys(r["dataset"] for r in rows)}
    write_result(args.name, results)


if __name__ == "__main__":
    main()
