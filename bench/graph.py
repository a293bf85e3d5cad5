"""Entity extraction, graph and community benchmarks (issue: entities, graph, communities).

Figures:
- extraction throughput (chunks/s) of the default extractor on SciFact and 2Wiki passages;
- graph + community build time, peak memory and counts for SciFact, 2Wiki and a synthetic
  100k-chunk corpus (target: 100k chunks in <= 60 s on 2 cores);
- the share of 2Wiki gold passages linked to an entity the question names (a recall ceiling
  for entity lanes), and the share reachable in one hop through the entities of chunks that
  mention a question entity.

Passages are written straight into a catalog (one chunk each, random vectors): embedding is
not what is measured here. Community reports are embedded with the hashing embedder.

    python bench/graph.py [--limit N] [--synthetic 100000]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_beir, print_table, write_result
from docgraph.config import GraphSettings
from docgraph.graph.build import GraphBuilder, make_extractor
from docgraph.ingest.embed import HashingEmbedder
from docgraph.model import ChunkDraft, EntityLink
from docgraph.retrieve.query_entities import find_query_entities
from docgraph.store.base import DocumentWrite
from docgraph.store.sqlite import SQLiteCatalog
from docgraph.store.sqlite_graph import SQLiteGraphStore

EMBEDDER = HashingEmbedder()


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (MB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_passages(catalog: SQLiteCatalog, namespace: str,
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


def build(catalog: SQLiteCatalog, namespace: str, settings: GraphSettings) -> dict[str, object]:
    store = SQLiteGraphStore(catalog)
    builder = GraphBuilder(store, EMBEDDER, settings, make_extractor(settings))
    rss_before = peak_rss_mb()
    started = time.perf_counter()
    report = builder.build(namespace)
    seconds = time.perf_counter() - started
    return {
        "build_s": round(seconds, 2),
        "build_without_reports_s": round(seconds - report.seconds.get("reports", 0.0), 2),
        "phases_s": {k: round(v, 2) for k, v in report.seconds.items()},
        "entities": report.entities, "edges": report.edges,
        "communities": report.communities, "reports": report.reports,
        "peak_rss_mb": round(peak_rss_mb(), 1), "peak_rss_before_mb": round(rss_before, 1),
    }


def real_dataset(name: str, limit: int | None, settings: GraphSettings,
                 workdir: Path) -> dict[str, object]:
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
        **build(catalog, name, settings),
    }
    if name == "2wiki":
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


def synthetic(n_chunks: int, settings: GraphSettings, workdir: Path) -> dict[str, object]:
    """``n_chunks`` chunks with Zipf-distributed entities (3-12 per chunk, 50k vocabulary)."""
    rng = np.random.default_rng(7)
    vocabulary = 50_000
    passages: list[tuple[str, str, list[EntityLink]]] = []
    for i in range(n_chunks):
        count = int(rng.integers(3, 13))
        ids = np.unique(np.minimum(rng.zipf(1.3, size=count), vocabulary))
        links = [EntityLink(f"e{int(e)}", f"Entity {int(e)}", "name", 1, j * 10, 1 / len(ids))
                 for j, e in enumerate(ids)]
        passages.append((f"d{i // 100}", f"chunk {i}", links))
    catalog = SQLiteCatalog(workdir / "synthetic.db")
    catalog.set_embedding_model(EMBEDDER.name, EMBEDDER.dimension)
    write_s = write_passages(catalog, "synthetic", passages, per_doc=100)
    result: dict[str, object] = {"chunks": n_chunks, "write_s": round(write_s, 1),
                                 **build(catalog, "synthetic", settings)}
    catalog.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="passages per dataset")
    parser.add_argument("--synthetic", type=int, default=100_000, help="synthetic chunks")
    args = parser.parse_args()
    settings = GraphSettings()
    results: dict[str, object] = {"settings": settings.model_dump(mode="json")}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for name in ("scifact", "2wiki"):
            results[name] = real_dataset(name, args.limit, settings, workdir)
            print_table([{"dataset": name, **{k: v for k, v in results[name].items()  # type: ignore[union-attr]
                                                 if not isinstance(v, dict)}}], name)
        if args.synthetic:
            results["synthetic"] = synthetic(args.synthetic, settings, workdir)
            print_table([{k: v for k, v in results["synthetic"].items()  # type: ignore[union-attr]
                          if not isinstance(v, dict)}], f"synthetic {args.synthetic}")
    write_result("graph" if not args.limit else "graph_smoke", results)


if __name__ == "__main__":
    main()
