"""Entity extraction, graph and community benchmarks (issue: entities, graph, communities).

Figures:
- extraction throughput (chunks/s) of the default extractor on SciFact and 2Wiki passages;
- graph + community build time, peak memory and counts for SciFact, 2Wiki and a synthetic
  100k-chunk corpus (target: 100k chunks in <= 60 s on 2 cores);
- the share of 2Wiki gold passages linked to an entity the question names (a recall ceiling
  for entity lanes), and the share reachable in one hop through the entities of chunks that
  mention a question entity.

Passages are written straight into a catalog (one chunk each, random vectors): embedding is
not what is measured here. Community reports are embedded with the hashing embedder. Each
build runs ``--repeats`` times, every time on a fresh copy of the written catalog and in a
fresh interpreter (so peak memory is the build's own); times are the median of the runs.

    python bench/graph.py [--limit N] [--synthetic 100000] [--datasets synthetic] [--repeats 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_beir, print_table, write_result
from docgraph.config import GraphSettings
from docgraph.embedding.embedders import HashingEmbedder
from docgraph.graph.build import GraphBuilder, make_extractor
from docgraph.model import ChunkDraft, EntityLink
from docgraph.retrieve.query_entities import find_query_entities
from docgraph.store.base import DocumentWrite, StoreCatalog
from docgraph.store.sqlite import SQLiteCatalog
from docgraph.store.sqlite.graph import SQLiteGraphStore

EMBEDDER = HashingEmbedder()


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (MB): the kernel's high-water mark of
    this process image (``VmHWM``; ``ru_maxrss`` would include the parent's peak from before
    the exec of a spawned build process), else ``ru_maxrss``."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_passages(catalog: StoreCatalog, namespace: str,
                   passages: list[tuple[str, str, list[EntityLink]]], per_doc: int = 1) -> float:
    """Write (doc id, text, links) rows, ``per_doc`` chunks per document; returns seconds."""
    source = catalog.add_source(f"file:///bench/{namespace}", namespace)
    rng = np.random.default_rng(0)
    started = time.perf_counter()
    for start in range(0, len(passages), per_doc):
        group = passages[start:start + per_doc]
        chunks = [ChunkDraft(i, text, (), len(text.split()), None, None, None)
                  for i, (_, text, _) in enumerate(group)]
        vectors = rng.normal(size=(len(group), EMBEDDER.dimension)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        doc = group[0][0]
        catalog.write_document(DocumentWrite(
            source=source, path=doc, doc_id=f"file:///bench/{namespace}/{doc}", title=doc,
            content_hash=doc, change_token=doc, media_type="text/plain", chunks=chunks,
            breadcrumbs=[f"[{doc}]"] * len(group), embedded_texts=[t for _, t, _ in group],
            vectors=vectors, entity_links=[links for _, _, links in group],
        ))
    return time.perf_counter() - started


def _build_once(path: str, namespace: str, settings: GraphSettings) -> dict[str, Any]:
    """One graph build of ``namespace`` in the catalog at ``path`` (run in a fresh process)."""
    catalog = SQLiteCatalog(Path(path))
    store = SQLiteGraphStore(catalog)
    builder = GraphBuilder(store, EMBEDDER, settings, make_extractor(settings))
    rss_before = peak_rss_mb()
    started = time.perf_counter()
    report = builder.build(namespace)
    seconds = time.perf_counter() - started
    catalog.close()
    return {
        "build_s": seconds, "phases_s": report.seconds,
        "entities": report.entities, "edges": report.edges,
        "communities": report.communities, "reports": report.reports,
        "peak_rss_mb": peak_rss_mb(), "rss_before_build_mb": rss_before,
    }


def build(catalog: SQLiteCatalog, namespace: str, settings: GraphSettings,
          repeats: int) -> dict[str, object]:
    """Median of ``repeats`` builds, each on a fresh copy of the catalog in a new process."""
    catalog.close()
    runs: list[dict[str, Any]] = []
    context = multiprocessing.get_context("spawn")
    for attempt in range(repeats):
        copy = catalog.path.with_name(f"{catalog.path.stem}-build{attempt}.db")
        shutil.copyfile(catalog.path, copy)
        with context.Pool(1) as pool:
            runs.append(pool.apply(_build_once, (str(copy), namespace, settings)))
        if attempt < repeats - 1:
            copy.unlink()
    shutil.copyfile(copy, catalog.path)  # later steps (linkage) read the built graph
    last = runs[-1]
    phases = {k: round(statistics.median(r["phases_s"][k] for r in runs), 2)
              for k in last["phases_s"]}
    build_s = statistics.median(r["build_s"] for r in runs)
    return {
        "build_s": round(build_s, 2),
        "build_runs_s": [round(r["build_s"], 2) for r in runs],
        "build_without_reports_s": round(statistics.median(
            r["build_s"] - r["phases_s"].get("reports", 0.0) for r in runs), 2),
        "phases_s": phases,
        "entities": last["entities"], "edges": last["edges"],
        "communities": last["communities"], "reports": last["reports"],
        "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs), 1),
        "rss_before_build_mb": round(max(r["rss_before_build_mb"] for r in runs), 1),
    }


def real_dataset(name: str, limit: int | None, settings: GraphSettings,
                 workdir: Path, repeats: int) -> dict[str, object]:
    data = load_beir(name)
    ids = list(data.corpus)[:limit] if limit else list(data.corpus)
    extractor = make_extractor(settings)
    texts = [data.corpus[i]["text"] for i in ids]
    sample = texts[:2000]
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        for text in sample:
            extractor.links(text)
        runs.append(len(sample) / (time.perf_counter() - started))
    passages = [(i, t, extractor.links(t)) for i, t in zip(ids, texts, strict=True)]
    catalog = SQLiteCatalog(workdir / f"{name}.db")
    catalog.set_embedding_model(EMBEDDER.name, EMBEDDER.dimension)
    write_s = write_passages(catalog, name, passages)
    result: dict[str, object] = {
        "passages": len(ids),
        "extraction_chunks_per_s_median": round(statistics.median(runs), 1),
        "links_per_chunk": round(sum(len(p[2]) for p in passages) / max(len(passages), 1), 2),
        "write_s": round(write_s, 1),
        **build(catalog, name, settings, repeats),
    }
    if name == "2wiki":
        catalog = SQLiteCatalog(workdir / f"{name}.db")
        result.update(linkage_share(data, catalog, extractor, name))
    catalog.close()
    return result


def linkage_share(data, catalog: SQLiteCatalog, extractor, namespace: str) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Share of gold passages linked to a question entity, directly and within one hop."""
    store = SQLiteGraphStore(catalog)
    chunks_of_doc: dict[str, str] = {}
    direct = hop = total = questions_with_entity = 0
    allowed = frozenset({namespace})
    for qid, question in data.queries.items():
        gold = set(data.qrels[qid])
        total += len(gold)
        entities, _ = find_query_entities(question, extractor, store, allowed)
        if entities:
            questions_with_entity += 1
        links = store.chunks_for_entities([e.id for e in entities], 10_000)
        rowids = {r for _, r, _, _ in links}
        docs = {c.doc_id.rsplit("/", 1)[1] for c in catalog.chunks_by_rowid(list(rowids)).values()}
        direct += len(gold & docs)
        # one hop: entities of the linked chunks (non-hub) -> their chunks
        neighbours = {e for links_ in store.entities_of_chunks(list(rowids)[:200]).values()
                      for e, _ in links_[:5]}
        counts = store.entity_chunk_counts(neighbours)
        hub = max(10, int(0.01 * len(data.corpus)))
        hop_links = store.chunks_for_entities([e for e in neighbours if counts.get(e, 0) <= hub],
                                              50)
        hop_docs = {c.doc_id.rsplit("/", 1)[1] for c in catalog.chunks_by_rowid(
            [r for _, r, _, _ in hop_links]).values()} | docs
        hop += len(gold & hop_docs)
    del chunks_of_doc
    return {
        "questions": len(data.queries),
        "questions_naming_a_known_entity": questions_with_entity,
        "gold_linked_to_question_entities": round(direct / max(total, 1), 3),
        "gold_within_one_hop": round(hop / max(total, 1), 3),
    }


def synthetic_passages(n_chunks: int) -> list[tuple[str, str, list[EntityLink]]]:
    """``n_chunks`` (doc id, text, links) rows, 100 per document, with Zipf-distributed
    entities (3-12 per chunk, 50k vocabulary); seeded, so every call gives the same rows."""
    rng = np.random.default_rng(7)
    vocabulary = 50_000
    passages: list[tuple[str, str, list[EntityLink]]] = []
    for i in range(n_chunks):
        count = int(rng.integers(3, 13))
        ids = np.unique(np.minimum(rng.zipf(1.3, size=count), vocabulary))
        links = [EntityLink(f"e{int(e)}", f"Entity {int(e)}", "name", 1, j * 10, 1 / len(ids))
                 for j, e in enumerate(ids)]
        passages.append((f"d{i // 100}", f"chunk {i}", links))
    return passages


def synthetic(n_chunks: int, settings: GraphSettings, workdir: Path,
              repeats: int) -> dict[str, object]:
    """Build the graph of ``synthetic_passages(n_chunks)``."""
    passages = synthetic_passages(n_chunks)
    catalog = SQLiteCatalog(workdir / "synthetic.db")
    catalog.set_embedding_model(EMBEDDER.name, EMBEDDER.dimension)
    write_s = write_passages(catalog, "synthetic", passages, per_doc=100)
    result: dict[str, object] = {"chunks": n_chunks, "write_s": round(write_s, 1),
                                 **build(catalog, "synthetic", settings, repeats)}
    catalog.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="passages per dataset")
    parser.add_argument("--synthetic", type=int, default=100_000, help="synthetic chunks")
    parser.add_argument("--datasets", default="scifact,2wiki,synthetic",
                        help="comma-separated subset of scifact,2wiki,synthetic")
    parser.add_argument("--repeats", type=int, default=3,
                        help="builds per dataset (fresh copy each); times are medians")
    parser.add_argument("--output", default=None,
                        help="result name (default: graph, or graph_smoke with --limit)")
    args = parser.parse_args()
    wanted = [d.strip() for d in args.datasets.split(",") if d.strip()]
    unknown = set(wanted) - {"scifact", "2wiki", "synthetic"}
    if unknown:
        parser.error(f"unknown datasets: {', '.join(sorted(unknown))}")
    settings = GraphSettings()
    results: dict[str, object] = {"settings": settings.model_dump(mode="json"),
                                  "repeats": args.repeats}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for name in ("scifact", "2wiki"):
            if name not in wanted:
                continue
            results[name] = real_dataset(name, args.limit, settings, workdir, args.repeats)
            print_table([{"dataset": name, **{k: v for k, v in results[name].items()  # type: ignore[union-attr]
                                                 if not isinstance(v, dict)}}], name)
        if args.synthetic and "synthetic" in wanted:
            results["synthetic"] = synthetic(args.synthetic, settings, workdir, args.repeats)
            print_table([{k: v for k, v in results["synthetic"].items()  # type: ignore[union-attr]
                          if not isinstance(v, dict)}], f"synthetic {args.synthetic}")
    write_result(args.output or ("graph" if not args.limit else "graph_smoke"), results)


if __name__ == "__main__":
    main()
