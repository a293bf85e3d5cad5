"""Cohort-search lane ablation (issue #5): quality on 2Wiki and SciFact, latency at 5k / 100k.

    python bench/ablation.py [--split all|tune|test] [--limit N] [--datasets 2wiki,scifact]
                             [--sizes 5000,100000]
                             [--latency-queries 200] [--skip-quality] [--skip-latency]
                             [--rebuild] [--configs hybrid_api,seed_only,...]

Quality: each corpus becomes the ``quality.py`` folder (``# {title}\\n\\n{text}`` per document,
default loader settings: 200 tokens, breadcrumb on) indexed by ``DocGraph.index()`` with the
real MiniLM int8 model behind the shared embedding cache, so passage vectors are cache hits.
The index is kept under ``bench/.cache/ablation/<dataset>/`` for reruns (``--rebuild`` starts
over; one built from another checkout's corpus folder is rebuilt by itself,
``common.discard_foreign_index``). Every configuration asks for ``k=20`` chunks per query
and folds them to documents by first occurrence (the best-ranked chunk speaks for its
document). Query vectors are computed once per query with the real model and reused by
every configuration (the model is deterministic), so configurations differ only in
retrieval.

``--split tune|test`` scores only that half of each dataset's queries (the committed splits
``bench/splits/relevance_<dataset>.json``); the results record the split. Constants are chosen
on ``tune`` and reported on ``test`` (``bench/tune_cohort.py`` runs the declared search).

Configurations (``CohortSettings`` overrides on top of the engine defaults):

* ``hybrid_api`` - ``DocGraph.search(mode="hybrid")``, the single-chunk hybrid ranking;
* ``seed_only`` - the cohort engine with only the seed lane (no expansion, no completeness);
* ``+structural``, ``+entity``, ``+graph``, ``+cluster``, ``+ppr``, ``+completeness`` - seed
  plus one lane;
* ``all_lanes`` - every lane and completeness on;
* ``full`` - the engine defaults (``DocGraph.retrieve()``);
* ``full-<lane>`` / ``full+<lane>`` - the defaults with one default-on lane off, or one
  default-off lane on (leave-one-out / add-one-in: what that lane pays);
* ``full-hops`` - the defaults with the entity lane's hop ranking off;
* ``graph_first`` - ``mode="graph_first"`` with the defaults.

Latency: ``DocGraph.retrieve()`` (query embedding included; the engine stores no trace) one
query at a time, p50/p95 per configuration, on synthetic indexes of ``--sizes`` chunks written
through ``SQLiteCatalog.write_document`` like ``speed.py`` (SciFact-vocabulary Zipf text,
random unit vectors) plus entity links drawn from a Zipf law over an entity vocabulary
(SciFact words and bigrams, so query n-grams name entities too), then
``DocGraph.build_graph()``; queries are SciFact queries. ``lanes_p50_ms`` is the part of the
engine's own trace total that is not the query embedding or the seed lane's dense + BM25
search (which ``DocGraph.search`` pays too).
Synthetic indexes are cached under ``bench/.cache/ablation/`` (seeded, so reruns reuse them).
The real indexes' search timings (no embedding, no trace storage) are in the quality rows.
Medians over the stated repeats; the machine is small and shared (load average recorded).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from common import (
    BENCH_DIR,
    BeirDataset,
    cached_embedder,
    discard_foreign_index,
    load_beir,
    log,
    machine_info,
    percentile,
    print_table,
    progress_printer,
    select_subset,
    write_corpus_folder,
    write_result,
)
from docgraph.app import DocGraph
from docgraph.config import Settings, load_settings
from docgraph.embedding.embedders import Embedder, MiniLMEmbedder
from docgraph.model import ChunkDraft, EntityLink, SearchHit, Vector
from docgraph.retrieve.cohort import CohortSettings
from docgraph.sources.urn import document_id, normalize_urn
from docgraph.store.base import DocumentWrite
from docgraph.store.sqlite import SQLiteCatalog
from quality import make_settings, score_run
from speed import VOCAB_SIZE, WORDS_PER_CHUNK, zipf_vocabulary

NAMESPACE = "bench"
WORKDIR = BENCH_DIR / ".cache" / "ablation"
SEARCH_K = 20            # chunks asked per query, folded to documents
LATENCY_K = 10
CHUNK_TOKENS = 200       # product defaults (quality.py layout, cache hits)
BREADCRUMB = True
SYNTH_CHUNKS_PER_DOC = 20
SYNTH_ENTITY_VOCAB = 20_000
SYNTH_ENTITIES_PER_CHUNK = (2, 8)
SYNTH_ZIPF_S = 1.0
SYNTH_MAX_REPORTS = 100

TARGETS = {
    "2wiki_recall@5_gain_over_hybrid": 0.10,
    "scifact_ndcg@10_max_loss": 0.01,
    "p50_ms_at_100k": 60.0,
}

OFF = {"structural_lane": False, "entity_lane": False, "graph_lane": False,
       "cluster_lane": False, "ppr_lane": False, "completeness": False}
LANE_FLAGS = {"structural": "structural_lane", "entity": "entity_lane", "graph": "graph_lane",
              "cluster": "cluster_lane", "ppr": "ppr_lane", "completeness": "completeness"}


# ---------------------------------------------------------------- configurations

@dataclass(frozen=True)
class Config:
    """One ablation row: ``settings`` None means ``DocGraph.search(mode="hybrid")``."""

    name: str
    settings: CohortSettings | None
    mode: str = "vector_first"
    note: str = ""


def configurations(defaults: CohortSettings) -> list[Config]:
    """Every configuration, built from the engine's current defaults."""
    seed = replace(defaults, **OFF)
    out = [
        Config("hybrid_api", None, "hybrid", "DocGraph.search(mode='hybrid')"),
        Config("seed_only", seed, note="cohort engine, seed lane only"),
    ]
    for lane, flag in LANE_FLAGS.items():
        out.append(Config(f"+{lane}", replace(seed, **{flag: True}),
                          note=f"seed + {lane} only"))
    out.append(Config("all_lanes", replace(defaults, **{f: True for f in LANE_FLAGS.values()}),
                      note="every lane and completeness on"))
    on = [lane for lane, flag in LANE_FLAGS.items() if getattr(defaults, flag)]
    out.append(Config("full", defaults, note="engine defaults: " + ("seed+" + "+".join(on)
                                                                   if on else "seed only")))
    for lane, flag in LANE_FLAGS.items():
        if lane in on:
            out.append(Config(f"full-{lane}", replace(defaults, **{flag: False}),
                              note=f"defaults without {lane}"))
        else:
            out.append(Config(f"full+{lane}", replace(defaults, **{flag: True}),
                              note=f"defaults plus {lane} (off by default)"))
    if defaults.entity_lane and defaults.hop_inherit:
        out.append(Config("full-hops", replace(defaults, hop_inherit=False),
                          note="defaults, entity lane without hop ranking"))
    out.append(Config("graph_first", defaults, "graph_first", "mode='graph_first', defaults"))
    return out


def settings_diff(settings: CohortSettings | None, base: CohortSettings) -> dict[str, Any]:
    if settings is None:
        return {}
    return {f.name: getattr(settings, f.name) for f in fields(CohortSettings)
            if getattr(settings, f.name) != getattr(base, f.name)}


# ---------------------------------------------------------------- query vectors

class QueryVectorCache:
    """Wraps an embedder: each query is embedded once by the real model, then reused, so
    every configuration sees the same vector and quality runs do not repeat model calls."""

    def __init__(self, inner: Embedder, path: Path | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.dimension = inner.dimension
        self.max_tokens = inner.max_tokens
        self.path = path
        self.vectors: dict[str, Vector] = {}
        if path is not None and path.is_file():
            stored = np.load(path, allow_pickle=False)
            texts = json.loads(str(stored["texts"]))
            self.vectors = dict(zip(texts, stored["vectors"], strict=True))

    def save(self) -> None:
        """Keep the query vectors next to the index (reruns embed no query)."""
        if self.path is not None and self.vectors:
            texts = list(self.vectors)
            np.savez(self.path, texts=json.dumps(texts),
                     vectors=np.stack([self.vectors[t] for t in texts]))

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Vector:
        vector = self.vectors.get(text)
        if vector is None:
            vector = self.inner.embed_query(text)
            self.vectors[text] = vector
        return vector

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.inner.count_tokens(texts)


# ---------------------------------------------------------------- real indexes

# Graph settings of the dataset indexes (``--no-keyphrases`` builds them without key phrases,
# cached under their own tag, to compare the graph lanes with and without that layer).
GRAPH_OVERRIDES: dict[str, Any] = {}


def dataset_settings(db: Path) -> Settings:
    """The product's settings for a dataset index (plus ``GRAPH_OVERRIDES``)."""
    base = make_settings(db, CHUNK_TOKENS, BREADCRUMB)
    if not GRAPH_OVERRIDES:
        return base
    return load_settings(store={"path": db},
                         loader={"chunk_tokens": CHUNK_TOKENS, "breadcrumb": BREADCRUMB},
                         graph=GRAPH_OVERRIDES)


def open_dataset_index(data: BeirDataset, doc_ids: list[str], embedder: Embedder,
                       tag: str, rebuild: bool) -> tuple[DocGraph, dict[int, str], dict[str, Any]]:
    """The dataset's index under ``bench/.cache/ablation/<tag>/`` (built if missing) and the
    chunk row id -> corpus id map."""
    workdir = WORKDIR / tag
    if rebuild and workdir.exists():
        shutil.rmtree(workdir)
    folder = workdir / "corpus"
    if not (workdir / "files.json").is_file():
        write_corpus_folder(data, doc_ids, folder)
    db = workdir / "index.db"
    discard_foreign_index(db, NAMESPACE, folder)  # a cache copied from another checkout
    if db.is_file() and not readable(db, embedder):
        log(f"  {tag}: the cached index predates the current store schema; rebuilding")
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    graph = DocGraph(dataset_settings(db), embedder)
    started = time.perf_counter()
    report = graph.index(folder, NAMESPACE, progress=progress_printer(tag))
    info = {"wall_s": round(time.perf_counter() - started, 1),
            "files_added": len(report.added), "chunks_embedded": report.chunks_embedded,
            "failed": len(report.failed)}
    file_to_id: dict[str, str] = json.loads((workdir / "files.json").read_text("utf-8"))
    rows = graph.catalog.connection().execute(
        "SELECT c.id, d.path FROM chunks c JOIN documents d ON d.id = c.document_id"
        " WHERE c.kind = 'text'").fetchall()
    chunk_doc = {int(r): file_to_id[p] for r, p in rows if p in file_to_id}
    stats = graph.catalog.stats()
    info.update(chunks=len(chunk_doc), entities=sum(s.entities for s in stats),
                communities=sum(s.communities for s in stats))
    return graph, chunk_doc, info


def readable(db: Path, embedder: Embedder) -> bool:
    """Whether the current store code can read a cached index (its schema may have grown
    columns since the index was built; the store does not migrate)."""
    try:
        graph = DocGraph(dataset_settings(db), embedder)
    except Exception:  # any failure to open it means: rebuild
        return False
    try:
        db_rows = graph.catalog.connection().execute(
            "SELECT id FROM chunks WHERE kind = 'text' LIMIT 3").fetchall()
        graph.catalog.chunks_by_rowid([int(r[0]) for r in db_rows])
        graph.catalog.list_documents([NAMESPACE], 0, 3)
        return True
    except sqlite3.Error:
        return False
    finally:
        graph.close()


def to_documents(rowids: Sequence[int], chunk_doc: dict[int, str]) -> list[str]:
    return list(dict.fromkeys(chunk_doc[r] for r in rowids if r in chunk_doc))


def run_config(graph: DocGraph, config: Config, queries: dict[str, str],
               chunk_doc: dict[int, str], k: int = SEARCH_K
               ) -> tuple[dict[str, list[str]], list[float], dict[str, list[str]]]:
    """(document run, per-query ms, per-query top-k lanes) of one configuration."""
    ns = frozenset({NAMESPACE})
    run: dict[str, list[str]] = {}
    lanes: dict[str, list[str]] = {}
    times: list[float] = []
    engine = graph.cohort_engine(config.settings) if config.settings is not None else None
    for qid, text in queries.items():
        started = time.perf_counter()
        hits: list[SearchHit]
        if engine is None:
            hits = graph.search(text, namespaces=ns, k=k, mode="hybrid")
        else:
            hits = engine.search(text, namespaces=ns, k=k, mode=config.mode).hits  # type: ignore[arg-type]
        times.append((time.perf_counter() - started) * 1000)
        run[qid] = to_documents([h.rowid for h in hits], chunk_doc)
        lanes[qid] = [h.lanes[0] for h in hits]
    return run, times, lanes


def by_type(run: dict[str, list[str]], data: BeirDataset, qids: Sequence[str],
            types: dict[str, str]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for t in sorted(set(types.values())):
        sub = [q for q in qids if types.get(q) == t]
        if sub:
            scores = score_run(run, data, sub)
            out[t] = {"queries": len(sub), "recall@2": scores["recall@2"],
                      "recall@5": scores["recall@5"]}
    return out


def query_types(name: str) -> dict[str, str]:
    from common import data_dir

    out: dict[str, str] = {}
    with (data_dir() / name / "queries.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                q = json.loads(line)
                if "type" in q:
                    out[str(q["_id"])] = str(q["type"])
    return out


def measure_quality(names: list[str], limit: int | None, rebuild: bool, wanted: set[str] | None,
                    embedder: Embedder, split: str = "all") -> dict[str, Any]:
    from relevance import load_split

    defaults = CohortSettings()
    out: dict[str, Any] = {}
    for name in names:
        data = load_beir(name)
        doc_ids, queries, subset = select_subset(data, limit)
        if split != "all":
            half = set(load_split(data)[split])
            queries = {q: t for q, t in queries.items() if q in half}
        tag = name if not limit else f"{name}-limit{limit}"
        if GRAPH_OVERRIDES.get("keyphrases") is False:
            tag += "-nokp"
        log(f"== quality: {name}, {len(doc_ids)} docs, {len(queries)} queries")
        (WORKDIR / tag).mkdir(parents=True, exist_ok=True)
        qcache = QueryVectorCache(embedder, WORKDIR / tag / "query_vectors.npz")
        graph, chunk_doc, info = open_dataset_index(data, doc_ids, qcache, tag, rebuild)
        try:
            for text in queries.values():
                qcache.embed_query(text)
            qcache.save()
            types = query_types(name)
            qids = list(queries)
            rows: list[dict[str, Any]] = []
            for config in configurations(defaults):
                if wanted and config.name not in wanted:
                    continue
                run, times, lanes = run_config(graph, config, queries, chunk_doc)
                scores = score_run(run, data, qids)
                provenance: dict[str, int] = {}
                for per_query in lanes.values():
                    for lane in per_query[:10]:
                        provenance[lane] = provenance.get(lane, 0) + 1
                row = {"config": config.name, "mode": config.mode, **scores,
                       "p50_ms": round(percentile(times, 50), 2),
                       "p95_ms": round(percentile(times, 95), 2),
                       "top10_provenance": provenance,
                       "settings": settings_diff(config.settings, defaults), "note": config.note}
                if any(types.get(q) for q in qids):
                    row["by_type"] = by_type(run, data, qids, types)
                rows.append(row)
                log(f"  {config.name:<18} " + "  ".join(
                    f"{m} {scores[m]:.4f}" for m in ("ndcg@10", "recall@2", "recall@5"))
                    + f"  p50 {row['p50_ms']:.1f} ms")
            out[name] = {"docs": len(doc_ids), "queries": len(queries), "split": split,
                         "subset": subset,
                         "index": info, "results": rows}
        finally:
            graph.close()
    return out


# ---------------------------------------------------------------- synthetic indexes (latency)

def entity_vocabulary(data: BeirDataset, size: int, rng: np.random.Generator
                      ) -> tuple[list[str], np.ndarray]:
    """Entity names (SciFact words ranked 200+ by frequency, and bigrams of them, title-cased)
    and Zipf probabilities: queries made of SciFact words name some of them."""
    words, _ = zipf_vocabulary(data, VOCAB_SIZE)
    pool = [str(w) for w in words[200:]]
    names: list[str] = []
    seen: set[str] = set()
    singles = pool[: size // 2]
    for w in singles:
        names.append(w.title())
        seen.add(w)
    while len(names) < size:
        a, b = rng.choice(len(pool), 2)
        name = f"{pool[a].title()} {pool[b].title()}"
        if name not in seen:
            seen.add(name)
            names.append(name)
    order = rng.permutation(len(names))
    names = [names[i] for i in order]
    ranks = np.arange(1, len(names) + 1, dtype=np.float64)
    probs = ranks ** -SYNTH_ZIPF_S
    return names, probs / probs.sum()


def build_synthetic(db: Path, n_chunks: int, data: BeirDataset, seed: int = 7) -> dict[str, Any]:
    """``n_chunks`` synthetic chunks (speed.py's text and vectors) with entity links, written
    through ``SQLiteCatalog.write_document``, then the entity graph via ``build_graph``."""
    from docgraph.graph.normalize import canonical_key

    rng = np.random.default_rng(seed)
    vocab, probs = zipf_vocabulary(data, VOCAB_SIZE)
    cumulative = np.cumsum(probs)
    names, entity_probs = entity_vocabulary(data, SYNTH_ENTITY_VOCAB, rng)
    entity_cumulative = np.cumsum(entity_probs)
    keys = [canonical_key(n, "name") for n in names]
    catalog = SQLiteCatalog(db)
    catalog.set_embedding_model(MiniLMEmbedder.name, MiniLMEmbedder.dimension)
    urn = normalize_urn(f"s3://docgraph-bench/ablation-{n_chunks}")
    source = catalog.add_source(urn, NAMESPACE)
    started = time.perf_counter()
    written, doc, links_written = 0, 0, 0
    dim = MiniLMEmbedder.dimension
    while written < n_chunks:
        n = min(SYNTH_CHUNKS_PER_DOC, n_chunks - written)
        picks = np.minimum(np.searchsorted(cumulative, rng.random((n, WORDS_PER_CHUNK))),
                           len(vocab) - 1)
        vectors = rng.standard_normal((n, dim), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        texts: list[str] = []
        links: list[list[EntityLink]] = []
        for row in picks:
            count = int(rng.integers(*SYNTH_ENTITIES_PER_CHUNK, endpoint=True))
            chosen = np.unique(np.minimum(
                np.searchsorted(entity_cumulative, rng.random(count)), len(names) - 1))
            words = [str(w) for w in vocab[row]]
            chunk_links: list[EntityLink] = []
            for position, e in enumerate(chosen.tolist()):
                at = int(rng.integers(0, len(words)))
                words.insert(at, names[e])
                freq = int(rng.integers(1, 4))
                chunk_links.append(EntityLink(keys[e], names[e], "name", freq, at * 8,
                                              min(1.0, freq / (len(chosen) + 2) * (
                                                  1.5 if position == 0 else 1.0))))
            chunk_links.sort(key=lambda link: (-link.score, link.first_position))
            texts.append(" ".join(words))
            links.append(chunk_links)
            links_written += len(chunk_links)
        chunks = [ChunkDraft(index=i, text=t, section_path=(), token_count=WORDS_PER_CHUNK,
                             prev_index=i - 1 if i else None,
                             next_index=i + 1 if i + 1 < n else None,
                             parent_index=0 if i else None)
                  for i, t in enumerate(texts)]
        path = f"doc-{doc:05d}.md"
        catalog.write_document(DocumentWrite(
            source=source, path=path, doc_id=document_id(urn, path),
            title=f"synthetic document {doc}", content_hash=f"synthetic-{doc}",
            change_token="synthetic", media_type="text/markdown", chunks=chunks,
            breadcrumbs=[f"[synthetic document {doc}]"] * n, embedded_texts=texts,
            vectors=vectors, entity_links=links,
        ))
        written += n
        doc += 1
    write_s = time.perf_counter() - started
    catalog.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    catalog.close()
    return {"chunks": written, "documents": doc, "entity_links": links_written,
            "write_s": round(write_s, 1)}


def time_configs(graph: DocGraph, configs: list[Config], queries: list[str],
                 repeats: int, budget_s: float) -> list[dict[str, Any]]:
    """p50/p95 of ``DocGraph.retrieve()`` (or ``search(mode='hybrid')``) per configuration;
    configurations are interleaved query by query so load changes hit them alike."""
    ns = frozenset({NAMESPACE})
    defaults = graph.cohort_settings
    timings: dict[str, list[float]] = {c.name: [] for c in configs}
    phases: dict[str, dict[str, list[float]]] = {c.name: {} for c in configs}
    # per query: everything but the query embedding and the seed lane's dense + BM25 search
    lanes: dict[str, list[float]] = {c.name: [] for c in configs}

    def once(config: Config, q: str) -> float:
        started = time.perf_counter()
        if config.settings is None:
            graph.search(q, namespaces=ns, k=LATENCY_K, mode="hybrid")
        else:
            graph.cohort_settings = config.settings
            result = graph.retrieve(q, namespaces=ns, k=LATENCY_K,
                                    mode=config.mode, return_trace=True)  # type: ignore[arg-type]
            if result.trace is not None:
                timings = result.trace.timings_ms
                for phase, ms in timings.items():
                    phases[config.name].setdefault(phase, []).append(ms)
                lanes[config.name].append(timings.get("total", 0.0) - timings.get("seed", 0.0)
                                          - timings.get("embed_query", 0.0))
        return (time.perf_counter() - started) * 1000

    try:
        for q in queries[:5]:   # warm-up
            for config in configs:
                once(config, q)
        started = time.perf_counter()
        done = 0
        for _ in range(repeats):
            for q in queries:
                for config in configs:
                    timings[config.name].append(once(config, q))
                done += 1
                if time.perf_counter() - started > budget_s:
                    break
            if time.perf_counter() - started > budget_s:
                log(f"  latency budget reached after {done} queries")
                break
    finally:
        graph.cohort_settings = defaults
    rows: list[dict[str, Any]] = []
    for config in configs:
        values = timings[config.name]
        rows.append({
            "config": config.name, "mode": config.mode,
            "p50_ms": round(percentile(values, 50), 2),
            "p95_ms": round(percentile(values, 95), 2),
            "mean_ms": round(statistics.fmean(values), 2), "n": len(values),
            "phase_p50_ms": {p: round(percentile(v, 50), 2)
                             for p, v in phases[config.name].items()},
            "lanes_p50_ms": round(percentile(lanes[config.name], 50), 2)
            if lanes[config.name] else None,
        })
    return rows


def synthetic_index(size: int, data: BeirDataset, embedder: Embedder, rebuild: bool
                    ) -> tuple[Path, dict[str, Any]]:
    """The synthetic index of ``size`` chunks, cached under ``bench/.cache/ablation/`` (it is
    deterministic: seeded text, vectors and links); built and its graph built if missing."""
    WORKDIR.mkdir(parents=True, exist_ok=True)
    db = WORKDIR / f"synthetic-{size}.db"
    info_path = WORKDIR / f"synthetic-{size}.json"
    if not rebuild and db.is_file() and info_path.is_file() and readable_synthetic(db):
        return db, dict(json.loads(info_path.read_text("utf-8")))
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    log(f"  building the synthetic index of {size} chunks")
    build = build_synthetic(db, size, data)
    graph = DocGraph(synthetic_settings(db), embedder)
    try:
        started = time.perf_counter()
        reports = graph.build_graph([NAMESPACE])
        build["graph_build_s"] = round(time.perf_counter() - started, 1)
        if reports:
            build.update(entities=reports[0].entities, edges=reports[0].edges,
                         communities=reports[0].communities, reports=reports[0].reports)
    finally:
        graph.close()
    info_path.write_text(json.dumps(build), encoding="utf-8")
    return db, build


def synthetic_settings(db: Path) -> Settings:
    # Community reports only serve mode="global"; 100 (not 500) keeps the build short.
    return load_settings(store={"path": db}, graph={"max_reports": SYNTH_MAX_REPORTS})


def readable_synthetic(db: Path) -> bool:
    try:
        catalog = SQLiteCatalog(db)
    except Exception:  # any failure to open it means: rebuild
        return False
    try:
        rows = catalog.connection().execute("SELECT id FROM chunks LIMIT 3").fetchall()
        catalog.chunks_by_rowid([int(r[0]) for r in rows])
        return True
    except sqlite3.Error:
        return False
    finally:
        catalog.close()


def measure_latency(sizes: list[int], n_queries: int, repeats: int, budget_s: float,
                    wanted: set[str] | None, rebuild: bool) -> list[dict[str, Any]]:
    data = load_beir("scifact")
    queries = list(data.queries.values())[:n_queries]
    model = cached_embedder(MiniLMEmbedder(threads=1))   # passages cached, queries never
    out: list[dict[str, Any]] = []
    try:
        for size in sizes:
            log(f"== latency: synthetic index of {size} chunks")
            db, build = synthetic_index(size, data, model, rebuild)
            graph = DocGraph(synthetic_settings(db), model)
            try:
                started = time.perf_counter()
                graph.chunk_index()
                build["cold_load_s"] = round(time.perf_counter() - started, 2)
                log(f"  index: {build}")
                configs = [c for c in configurations(graph.cohort_settings)
                           if not wanted or c.name in wanted]
                rows = time_configs(graph, configs, queries, repeats, budget_s)
                for row in rows:
                    log(f"  {row['config']:<18} p50 {row['p50_ms']:7.2f} ms  "
                        f"p95 {row['p95_ms']:7.2f} ms  lanes p50 {row['lanes_p50_ms']} ms")
                out.append({"chunks": size, "build": build, "results": rows})
            finally:
                graph.close()
    finally:
        model.close()
    return out


# ---------------------------------------------------------------- summary

def summary(quality: dict[str, Any], latency: list[dict[str, Any]]) -> dict[str, Any]:
    def row(name: str, config: str) -> dict[str, Any] | None:
        for r in quality.get(name, {}).get("results", []):
            if r["config"] == config:
                return dict(r)
        return None

    out: dict[str, Any] = {}
    wiki_full, wiki_seed = row("2wiki", "full"), row("2wiki", "seed_only")
    wiki_api = row("2wiki", "hybrid_api")
    if wiki_full and wiki_seed:
        gain = wiki_full["recall@5"] - wiki_seed["recall@5"]
        out["2wiki_recall@5_gain_over_hybrid"] = {
            "full": wiki_full["recall@5"], "seed_only": wiki_seed["recall@5"],
            "hybrid_api": wiki_api["recall@5"] if wiki_api else None,
            "gain": round(gain, 4), "target": TARGETS["2wiki_recall@5_gain_over_hybrid"],
            "met": gain >= TARGETS["2wiki_recall@5_gain_over_hybrid"]}
    sci_full, sci_seed = row("scifact", "full"), row("scifact", "seed_only")
    sci_api = row("scifact", "hybrid_api")
    if sci_full and sci_seed:
        loss = max(sci_seed["ndcg@10"], sci_api["ndcg@10"] if sci_api else 0) - sci_full[
            "ndcg@10"]
        out["scifact_ndcg@10_loss"] = {
            "full": sci_full["ndcg@10"], "seed_only": sci_seed["ndcg@10"],
            "hybrid_api": sci_api["ndcg@10"] if sci_api else None,
            "loss_vs_best_hybrid": round(loss, 4),
            "target": TARGETS["scifact_ndcg@10_max_loss"],
            "met": loss <= TARGETS["scifact_ndcg@10_max_loss"]}
    for entry in latency:
        if entry["chunks"] == 100_000:
            for r in entry["results"]:
                if r["config"] == "full":
                    out["p50_ms_at_100k"] = {"full": r["p50_ms"], "p95": r["p95_ms"],
                                             "target": TARGETS["p50_ms_at_100k"],
                                             "met": r["p50_ms"] <= TARGETS["p50_ms_at_100k"]}
    return out


def table_rows(quality: dict[str, Any], latency: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names: list[str] = []
    for entry in quality.values():
        names += [r["config"] for r in entry["results"] if r["config"] not in names]
    for entry in latency:
        names += [r["config"] for r in entry["results"] if r["config"] not in names]
    rows: list[dict[str, Any]] = []
    for config in names:
        row: dict[str, Any] = {"config": config}
        for r in quality.get("2wiki", {}).get("results", []):
            if r["config"] == config:
                row.update({"2wiki_R@2": r["recall@2"], "2wiki_R@5": r["recall@5"]})
        for r in quality.get("scifact", {}).get("results", []):
            if r["config"] == config:
                row.update({"scifact_nDCG@10": r["ndcg@10"]})
        for entry in latency:
            for r in entry["results"]:
                if r["config"] == config:
                    label = f"{entry['chunks'] // 1000}k"
                    row.update({f"p50_{label}": r["p50_ms"], f"p95_{label}": r["p95_ms"],
                                f"lanes_p50_{label}": r.get("lanes_p50_ms")})
        rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="smoke run: N queries")
    parser.add_argument("--split", choices=("all", "tune", "test"), default="all",
                        help="score one half of the committed query splits")
    parser.add_argument("--datasets", default="2wiki,scifact")
    parser.add_argument("--sizes", default="5000,100000", help="synthetic index sizes")
    parser.add_argument("--latency-queries", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--budget", type=float, default=900.0,
                        help="seconds of latency measurement per index size at most")
    parser.add_argument("--configs", default="", help="only these configurations")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--rebuild", action="store_true", help="rebuild cached indexes")
    parser.add_argument("--no-keyphrases", action="store_true",
                        help="dataset indexes built without the key-phrase entity layer")
    parser.add_argument("--name", default="ablation")
    args = parser.parse_args(argv)
    if args.no_keyphrases:
        GRAPH_OVERRIDES["keyphrases"] = False

    wanted = {c.strip() for c in args.configs.split(",") if c.strip()} or None
    started = time.perf_counter()
    load_before = machine_info().get("loadavg_1_5_15")
    quality: dict[str, Any] = {}
    if not args.skip_quality:
        embedder = cached_embedder(MiniLMEmbedder(threads=1))
        try:
            quality = measure_quality([n.strip() for n in args.datasets.split(",") if n.strip()],
                                      args.limit, args.rebuild, wanted, embedder,
                                      args.split)
        finally:
            embedder.close()
    latency: list[dict[str, Any]] = []
    if not args.skip_latency:
        sizes = [int(float(s)) for s in args.sizes.split(",") if s.strip()]
        if args.limit:
            sizes = [min(s, 20 * args.limit) for s in sizes]
        latency = measure_latency(sizes, args.latency_queries, args.repeats, args.budget,
                                  wanted, args.rebuild)
    rows = table_rows(quality, latency)
    write_result(args.name, {
        "protocol": {
            "quality": f"k={SEARCH_K} chunks per query folded to documents by first "
                       "occurrence; engine searches without trace storage; query vectors "
                       "computed once per query by the real model and shared by configurations",
            "latency": f"DocGraph.retrieve(k={LATENCY_K}, return_trace=True) one query at a "
                       "time, query embedding (MiniLM int8, 1 thread) included, no trace "
                       "storage (only the governed service stores traces); configurations "
                       "interleaved per query; synthetic indexes "
                       "(speed.py text/vectors + Zipf entity links, graph built)",
            "hybrid_only": "seed_only = cohort engine with expansions and completeness off; "
                           "hybrid_api = DocGraph.search(mode='hybrid')",
        },
        "defaults": asdict(CohortSettings()),
        "limit": args.limit,
        "split": args.split,
        "graph_overrides": dict(GRAPH_OVERRIDES),
        "seconds": round(time.perf_counter() - started, 1),
        "load_before": load_before,
        "summary": summary(quality, latency),
        "quality": quality,
        "latency": latency,
        "results": rows,
    })


if __name__ == "__main__":
    if "--print" in sys.argv:
        doc = json.loads((BENCH_DIR / "results" / "ablation.json").read_text("utf-8"))
        print_table(doc["results"])
    else:
        main()
