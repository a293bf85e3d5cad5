"""The embedded store at a scale whose vectors do not fit in memory at once (issue 21's 10M).

    python bench/store_scale.py [--n 1000000] [--db bench/.cache/store_scale_<n>/catalog.db]
        [--build-only] [--variants rebuild,sidecar,cold,write] [--name store_scale_<n>]
        [--dense-ann lists [--ann-min-rows 250000]]

Same synthetic data as ``bench/backends.py`` (Zipf SciFact words, 50 chunks a document,
every 10th document in the "side" namespace and one in a hundred in "rare" (documents 5,
105, 205, ...: a 1 % namespace), 384-d vectors clustered around ``n / 500`` random unit
centres), but generated slice by slice from per-slice seeds, so
neither the build nor the measurement ever holds all vectors (15.4 GB at 10M) or all texts.
A chunk's word count is drawn from a log-normal of mean 60 and the spread of the bundled
sample corpus's chunks (``LENGTH_SPREAD``; ``--fixed-length``: 60 words each, the data of
catalogs built before 2026-12-07, on which BM25 scores tie in plateaus of up to millions of
rows, since every row has the same length).

**Build** (``--build-only``, or when ``--db`` is missing): pass 1 generates the vectors only
to pick the query vectors (each a chunk's vector plus noise; 300 over everything, 300 from
side chunks, 300 from rare ones); pass 2 writes the catalog as a bulk load
(``write_documents`` in batches of 20 documents) and keeps the exact cosine top 10 of every
query over everything, over the side namespace and over the rare one as the slices go by.
Queries and truth go to ``<db>.truth.npz``.

**Measure**: one fresh process per variant, in order:
``rebuild`` opens with no sidecar (the index reads every row of the catalog, then writes the
sidecar, timed separately), ``sidecar`` opens mapping it with the page cache warm, ``cold``
the same after evicting the catalog and sidecar pages (``posix_fadvise DONTNEED``). Each
reports open seconds, RSS after open and peak, hybrid p50/p95 (dense + BM25 lists 100
deep, RRF, chunk fetch) over everything, over the 10 % side namespace and over the 1 % rare
one, dense recall@10 against the exact truth of each, and the cohort engine's
``vector_first`` p50/p95. (A catalog built before the rare namespace existed has no rare
queries: those figures are left out.)

**With the dense ANN cache** (``--dense-ann lists`` or ``hnsw``: every variant opens with
``graph_min_rows`` = ``--ann-min-rows`` and that kind): the variant ``ann_build`` deletes the
cache file, opens (writing the sidecar first if missing), waits for the background build and
reports its seconds, peak RSS, file size, lists and ``nprobe``, and measures nothing else;
put it first. The later variants map the file at open, so their open seconds and RSS include
it, and they report the lists read per query.
Wrap timed runs in ``flock /work/.bench.lock`` or another shared lock.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from backends import (  # noqa: E402
    CHUNKS_PER_DOC,
    CLUSTER_SIZE,
    DIM,
    EVERYTHING,
    QUERY_NOISE,
    SIDE_SHARE,
    WORDS_PER_CHUNK,
    K,
    latency,
    synthetic_document,
    unit,
)
from common import load_beir, log, write_result  # noqa: E402
from dense_codes import cohort_latency, evict, resident_kinds_mb, rss_mb  # noqa: E402
from docgraph.embedding.embedders import MiniLMEmbedder  # noqa: E402
from docgraph.model import ChunkDraft  # noqa: E402
from docgraph.sources.urn import document_id, normalize_urn  # noqa: E402
from docgraph.store.base import DocumentWrite  # noqa: E402
from docgraph.store.dense_lists import DenseLists, lists_path  # noqa: E402
from docgraph.store.graph_ann import graph_path  # noqa: E402
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog  # noqa: E402
from docgraph.store.sqlite.index import sidecar_path  # noqa: E402
from speed import zipf_vocabulary  # noqa: E402

SLICE = 100_000  # chunks generated at once (a multiple of CHUNKS_PER_DOC)
DOCS_PER_WRITE = 20  # documents per write_documents transaction
SEED = 7
RARE_SHARE, RARE_OFFSET = 100, 5  # documents 5, 105, 205, ...: the 1 % "rare" namespace
# (share, offset) of each namespace but "bench": its documents d with d % share == offset
# (side first: no rare document is a side one)
SHARES = {"side": (SIDE_SHARE, 0), "rare": (RARE_SHARE, RARE_OFFSET)}
NAMESPACES = ("bench", "side", "rare")
VARIANTS = ("rebuild", "sidecar", "cold", "write", "ann_build")
# Coefficient of variation of chunk word counts: the bundled sample corpus's 280 chunks have
# 100 words on average, standard deviation 55. Counts are clipped to [8, 4 x the mean].
LENGTH_SPREAD = 0.55


class Synthetic:
    """Deterministic synthetic chunks, generated slice by slice (texts and vectors from
    separate per-slice streams, so either can be regenerated alone)."""

    def __init__(self, n: int, seed: int = SEED, spread: float = LENGTH_SPREAD) -> None:
        if n % CHUNKS_PER_DOC:
            raise ValueError(f"--n must be a multiple of {CHUNKS_PER_DOC}")
        self.n, self.seed, self.spread = n, seed, spread
        self.vocab, probs = zipf_vocabulary(load_beir("scifact"), 30_000)
        self.cumulative = np.cumsum(probs)
        centres = np.random.default_rng((seed, 0)).standard_normal(
            (max(1, n // CLUSTER_SIZE), DIM), dtype=np.float32)
        self.centres = unit(centres)

    def words(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return np.minimum(np.searchsorted(self.cumulative, rng.random(shape)),
                          len(self.vocab) - 1)

    def vectors(self, start: int) -> np.ndarray:
        """The slice of vectors starting at chunk ``start``."""
        count = min(SLICE, self.n - start)
        rng = np.random.default_rng((self.seed, 1, start))
        noise = rng.standard_normal((count, DIM), dtype=np.float32)
        return unit(self.centres[rng.integers(len(self.centres), size=count)]
                    + noise / np.sqrt(DIM))

    def texts(self, start: int) -> list[str]:
        """The slice of chunk texts starting at chunk ``start``."""
        count = min(SLICE, self.n - start)
        rng = np.random.default_rng((self.seed, 2, start))
        lengths = self.lengths(rng, count)
        ends = np.cumsum(lengths)
        words = self.vocab[self.words(rng, (int(ends[-1]),))] if count else []
        return [" ".join(words[end - length:end])
                for length, end in zip(lengths.tolist(), ends.tolist(), strict=True)]

    def lengths(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """Word counts of ``count`` chunks: mean ``WORDS_PER_CHUNK``, coefficient of
        variation ``spread`` (log-normal; 0: all the mean)."""
        if self.spread <= 0:
            return np.full(count, WORDS_PER_CHUNK, np.int64)
        sigma = float(np.sqrt(np.log1p(self.spread ** 2)))
        drawn = rng.lognormal(np.log(WORDS_PER_CHUNK) - sigma ** 2 / 2, sigma, count)
        return np.clip(np.rint(drawn), 8, 4 * WORDS_PER_CHUNK).astype(np.int64)

    def slices(self) -> Iterator[int]:
        return iter(range(0, self.n, SLICE))

    def query_plan(self, n_queries: int) -> tuple[list[str], np.ndarray, np.ndarray,
                                                  np.ndarray]:
        """(query texts, chunk positions of the "all" queries, of the side queries, of the
        rare ones)."""
        rng = np.random.default_rng((self.seed, 3))
        texts = [" ".join(self.vocab[self.words(rng, (int(rng.integers(2, 7)),))]) + f" q{i}"
                 for i in range(n_queries)]
        bases = np.sort(rng.choice(self.n, size=n_queries, replace=False))
        side, rare = (self.members(namespace, n_queries, rng) for namespace in ("side", "rare"))
        return texts, bases, side, rare

    def members(self, namespace: str, count: int, rng: np.random.Generator) -> np.ndarray:
        """Positions of ``count`` chunks of ``namespace`` (``side`` or ``rare``), ascending,
        drawn without replacement (all of them when it has fewer)."""
        share, offset = SHARES[namespace]
        documents = self.n // CHUNKS_PER_DOC
        total = max(0, documents - offset + share - 1) // share * CHUNKS_PER_DOC
        picks = rng.choice(total, size=min(count, total), replace=False)
        return np.sort(((picks // CHUNKS_PER_DOC) * share + offset) * CHUNKS_PER_DOC
                       + picks % CHUNKS_PER_DOC)

    def query_vectors(self, bases: np.ndarray) -> np.ndarray:
        """Each base chunk's vector plus noise (pass 1: vectors regenerated, nothing kept)."""
        found = np.empty((len(bases), DIM), dtype=np.float32)
        for start in self.slices():
            inside = (bases >= start) & (bases < start + SLICE)
            if inside.any():
                found[inside] = self.vectors(start)[bases[inside] - start]
        rng = np.random.default_rng((self.seed, 4, len(bases)))
        noise = rng.standard_normal(found.shape, dtype=np.float32)
        return unit(found + QUERY_NOISE * noise / np.sqrt(DIM))


def positions_in(namespace: str, start: int, count: int) -> np.ndarray:
    """Offsets within a slice of the chunks in ``namespace`` (``side`` or ``rare``)."""
    share, offset = SHARES[namespace]
    positions = np.arange(start, start + count)
    return np.flatnonzero((positions // CHUNKS_PER_DOC) % share == offset)


def namespace_of(doc: int) -> str:
    """The namespace of synthetic document ``doc``."""
    for namespace, (share, offset) in SHARES.items():
        if doc % share == offset:
            return namespace
    return "bench"


class TopK:
    """The running exact top ``K`` (positions, scores) per query over slices."""

    def __init__(self, queries: np.ndarray) -> None:
        self.queries = queries
        self.scores = np.full((len(queries), K), -np.inf, dtype=np.float32)
        self.positions = np.full((len(queries), K), -1, dtype=np.int64)

    def add(self, vectors: np.ndarray, positions: np.ndarray) -> None:
        if len(vectors) == 0:
            return
        sims = self.queries @ vectors.T  # (queries, rows)
        take = min(K, sims.shape[1])
        best = np.argpartition(-sims, take - 1, axis=1)[:, :take]
        scores = np.concatenate([self.scores, np.take_along_axis(sims, best, 1)], axis=1)
        where = np.concatenate([self.positions, positions[best]], axis=1)
        keep = np.argsort(-scores, axis=1, kind="stable")[:, :K]
        self.scores = np.take_along_axis(scores, keep, 1)
        self.positions = np.take_along_axis(where, keep, 1)


def build(db: Path, n: int, n_queries: int, spread: float = LENGTH_SPREAD) -> dict[str, Any]:
    """Write the catalog and ``<db>.truth.npz``; returns timings."""
    data = Synthetic(n, spread=spread)
    qtexts, bases, side_bases, rare_bases = data.query_plan(n_queries)
    t0 = time.perf_counter()
    qvectors = data.query_vectors(bases)
    side_qvectors = data.query_vectors(side_bases)
    rare_qvectors = data.query_vectors(rare_bases)
    pass1 = time.perf_counter() - t0
    log(f"  query vectors: {pass1:.1f} s")
    everything, side, rare = TopK(qvectors), TopK(side_qvectors), TopK(rare_qvectors)
    db.parent.mkdir(parents=True, exist_ok=True)
    catalog = SQLiteCatalog(db)
    catalog.set_embedding_model(MiniLMEmbedder.name, DIM)
    sources = {ns: catalog.add_source(normalize_urn(f"s3://docgraph-bench/{ns}"), ns)
               for ns in NAMESPACES}
    started = time.perf_counter()
    truth_s = 0.0
    for start in data.slices():
        texts, vectors = data.texts(start), data.vectors(start)
        t = time.perf_counter()
        positions = np.arange(start, start + len(texts))
        everything.add(vectors, positions)
        for namespace, top in (("side", side), ("rare", rare)):
            inside = positions_in(namespace, start, len(texts))
            top.add(vectors[inside], positions[inside])
        truth_s += time.perf_counter() - t
        writes: list[DocumentWrite] = []
        for offset in range(0, len(texts), CHUNKS_PER_DOC):
            doc = (start + offset) // CHUNKS_PER_DOC
            writes.append(synthetic_document(
                sources, doc, texts[offset:offset + CHUNKS_PER_DOC],
                vectors[offset:offset + CHUNKS_PER_DOC], namespace_of(doc)))
            if len(writes) == DOCS_PER_WRITE:
                catalog.write_documents(writes)
                writes = []
        catalog.write_documents(writes)
        done = start + len(texts)
        elapsed = time.perf_counter() - started
        log(f"    {done}/{n} chunks, {done / elapsed:.0f}/s, {elapsed:.0f} s")
    write_s = time.perf_counter() - started
    catalog.close()
    np.savez(truth_path(db), qtexts=np.array(qtexts), qvectors=qvectors,
             side_qvectors=side_qvectors, rare_qvectors=rare_qvectors,
             truth_all=everything.positions, truth_side=side.positions,
             truth_rare=rare.positions, length_spread=spread)
    return {"build_s": round(write_s, 1), "query_vectors_s": round(pass1, 1),
            "truth_s": round(truth_s, 1), "chunks_per_s": round(n / write_s)}


def truth_path(db: Path) -> Path:
    return db.with_name(db.name + ".truth.npz")


def positions_of(catalog: SQLiteCatalog, rowids: Sequence[int]) -> dict[int, int]:
    """Chunk row id -> position in the synthetic stream (document number x 50 + index)."""
    marks = ",".join("?" * len(rowids))
    rows = catalog.connection().execute(
        f"SELECT c.id, d.path, c.chunk_index FROM chunks c JOIN documents d"
        f" ON d.id = c.document_id WHERE c.id IN ({marks})", list(rowids)).fetchall()
    return {int(r): int(p.removeprefix("doc-").removesuffix(".md")) * CHUNKS_PER_DOC + int(i)
            for r, p, i in rows}


def recall(catalog: SQLiteCatalog, index: EmbeddedChunkIndex, qvectors: np.ndarray,
           truth: np.ndarray, namespaces: frozenset[str]) -> float:
    """Mean recall@10 of the dense lane against the exact top 10 (positions)."""
    hits = 0
    for q, exact in zip(qvectors, truth, strict=True):
        rows = [r.rowid for r in index.dense_search(q, K, namespaces)]
        where = positions_of(catalog, rows)
        hits += len({where[r] for r in rows} & set(exact.tolist()))
    return round(hits / (K * len(qvectors)), 4)


def write_one_document(catalog: SQLiteCatalog, index: EmbeddedChunkIndex) -> dict[str, Any]:
    """Write one 50-chunk document, follow it, delete it, follow that: seconds and RSS.

    The catalog keeps 50 more row ids and 50 tombstones (harmless to later runs)."""
    rng = np.random.default_rng(11)
    texts = [f"extra document chunk {i} " + "written after open " * 5 for i in range(50)]
    vectors = unit(rng.standard_normal((50, DIM), dtype=np.float32))
    source = catalog.add_source(normalize_urn("s3://docgraph-bench/bench"), "bench")
    path = "extra-after-open.md"
    record = catalog.write_document(DocumentWrite(
        source=source, path=path, doc_id=document_id(source.urn, path), title=path,
        content_hash="extra", change_token="t", media_type="text/markdown",
        chunks=[ChunkDraft(i, t, (), len(t.split()), None, None, None)
                for i, t in enumerate(texts)],
        breadcrumbs=[f"[{path}]"] * 50, embedded_texts=texts, vectors=vectors))
    t0 = time.perf_counter()
    index.sync()
    added = time.perf_counter() - t0
    anon_after_write, _ = resident_kinds_mb()
    found = index.dense_search(vectors[7], 1, frozenset({"bench"}))
    catalog.delete_document(record)
    t1 = time.perf_counter()
    index.sync()
    removed = time.perf_counter() - t1
    return {"write_sync_s": round(added, 2), "delete_sync_s": round(removed, 2),
            "rss_anon_after_write_mb": round(anon_after_write),
            "written_chunk_found": bool(found) and found[0].score > 0.99}


def ann_files(db: Path, ann: str) -> list[Path]:
    """The dense ANN cache's files beside the catalog (``lists`` or ``hnsw``)."""
    if ann == "lists":
        return [lists_path(db)]
    return [graph_path(db), *db.parent.glob(graph_path(db).name + ".*.faiss")]


def ann_build(catalog: SQLiteCatalog, index: EmbeddedChunkIndex) -> dict[str, Any]:
    """Wait for the ANN cache's background build (started at open): seconds, peak RSS of
    the process (open included), file size, and the lists' shape."""
    if index.sidecar_status != "loaded":  # the build reads the codes either way
        index.save_sidecar()
    graph = index.graph
    assert graph is not None
    graph.wait()
    out: dict[str, Any] = {"ann_status": graph.status,
                           "ann_build_s": round(graph.last_build_s, 1),
                           "ann_mb": round(graph.size_bytes() / 2**20),
                           "rss_peak_build_mb": round(rss_mb()[1])}
    lists = getattr(graph, "lists", None)
    if lists is not None:
        out.update({"lists": len(lists.centroids), "nprobe": lists.nprobe})
    catalog.close()
    return out


def child(db: Path, variant: str, budget: float, recall_queries: int,
          ann: str | None = None, ann_min_rows: int = 250_000) -> dict[str, Any]:
    """Open the catalog as ``variant`` says and measure it (runs in a fresh process)."""
    truth = np.load(truth_path(db))
    qtexts = [str(t) for t in truth["qtexts"]]
    qvectors, side_qvectors = truth["qvectors"], truth["side_qvectors"]
    if variant == "ann_build":
        if ann is None:
            raise SystemExit("the ann_build variant needs --dense-ann")
        for f in ann_files(db, ann):
            f.unlink(missing_ok=True)
    before, _ = rss_mb()
    t0 = time.perf_counter()
    catalog = SQLiteCatalog(db)
    index = EmbeddedChunkIndex(catalog, DIM, sidecar=True, sidecar_after_rows=10**12,
                               graph_min_rows=ann_min_rows if ann else None,
                               ann=ann or "lists")
    opened = time.perf_counter() - t0
    rss, peak = rss_mb()
    anon_after_open, _ = resident_kinds_mb()
    result: dict[str, Any] = {
        "variant": variant, "loadavg_1": round(os.getloadavg()[0], 2),
        "sidecar_status": index.sidecar_status, "rows_read_at_open": index.rows_read,
        "chunks": len(index), "open_s": round(opened, 2),
        "rss_before_open_mb": round(before), "rss_after_open_mb": round(rss),
        "rss_anon_after_open_mb": round(anon_after_open),
        "rss_peak_open_mb": round(peak),
    }
    if index.graph is not None:
        result["ann_status_at_open"] = index.graph.status
    if variant == "ann_build":
        result.update(ann_build(catalog, index))
        return result
    if variant == "rebuild":  # the first open of a sidecar-less catalog writes it
        t1 = time.perf_counter()
        index.save_sidecar()
        result["sidecar_write_s"] = round(time.perf_counter() - t1, 1)
        stat = sidecar_path(db).stat()
        result["sidecar_mb"] = round(stat.st_size / 2**20)  # with the room (a hole)
        result["sidecar_disk_mb"] = round(stat.st_blocks * 512 / 2**20)
        result["rss_peak_after_sidecar_mb"] = round(rss_mb()[1])
    if variant == "write":  # what one new document costs a server that mapped the sidecar
        result.update(write_one_document(catalog, index))
    everything = EVERYTHING
    all_ns = latency(catalog, index, qtexts, qvectors, everything, budget)
    side_ns = latency(catalog, index, qtexts[:len(side_qvectors)], side_qvectors,
                      frozenset({"side"}), budget)
    cohort = cohort_latency(catalog, index, qtexts, qvectors, everything, budget)
    anon_after_queries, file_after_queries = resident_kinds_mb()
    result.update({
        "hybrid_p50_ms": all_ns["hybrid_p50_ms"], "hybrid_p95_ms": all_ns["hybrid_p95_ms"],
        "dense_lane_p50_ms": all_ns["dense_lane_p50_ms"],
        "bm25_lane_p50_ms": all_ns["bm25_lane_p50_ms"], **cohort,
        "side_hybrid_p50_ms": side_ns["hybrid_p50_ms"],
        "side_hybrid_p95_ms": side_ns["hybrid_p95_ms"],
        "queries": all_ns["queries"],
        "anon_growth_during_queries_mb": round(anon_after_queries - anon_after_open),
        "file_backed_after_queries_mb": round(file_after_queries),
        "dense_recall@10_all": recall(catalog, index, qvectors[:recall_queries],
                                      truth["truth_all"][:recall_queries], everything),
        "dense_recall@10_side": recall(catalog, index, side_qvectors[:recall_queries],
                                       truth["truth_side"][:recall_queries],
                                       frozenset({"side"})),
    })
    if "rare_qvectors" in truth.files:  # a catalog built with the 1 % namespace
        rare_qvectors, rare = truth["rare_qvectors"], frozenset({"rare"})
        rare_ns = latency(catalog, index, qtexts[:len(rare_qvectors)], rare_qvectors, rare,
                          budget)
        result.update({
            "rare_hybrid_p50_ms": rare_ns["hybrid_p50_ms"],
            "rare_hybrid_p95_ms": rare_ns["hybrid_p95_ms"],
            "rare_dense_lane_p50_ms": rare_ns["dense_lane_p50_ms"],
            "dense_recall@10_rare": recall(catalog, index, rare_qvectors[:recall_queries],
                                           truth["truth_rare"][:recall_queries], rare)})
    graph = index.graph
    if graph is not None:
        result["ann_answered"] = graph.answered
        if isinstance(graph, DenseLists) and graph.lists is not None:
            result.update({"nprobe": graph.lists.nprobe, "lists_read_per_query": round(
                graph.probed / max(graph.answered, 1), 2)})
    catalog.close()
    return result


def _spread(db: Path) -> float:
    """The chunk length spread ``db`` was built with (0: before it was recorded)."""
    with np.load(truth_path(db)) as truth:
        return float(truth["length_spread"]) if "length_spread" in truth else 0.0


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--db", type=Path,
                        help="the catalog (built when missing, reused when present; default "
                        "bench/.cache/store_scale_<n>/catalog.db)")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--recall-queries", type=int, default=100)
    parser.add_argument("--budget", type=float, default=30.0,
                        help="seconds of timed queries per latency pass at most")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated, run in this order, of {', '.join(VARIANTS)}")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--fixed-length", action="store_true",
                        help="build chunks of 60 words each (the data before 2026-12-07)")
    parser.add_argument("--dense-ann", choices=("lists", "hnsw"), default=None,
                        help="open every variant with this dense ANN cache on")
    parser.add_argument("--ann-min-rows", type=int, default=250_000,
                        help="live rows from which the ANN cache answers (graph_min_rows)")
    parser.add_argument("--name", default=None)
    parser.add_argument("--child", nargs=2, metavar=("DB", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(Path(args.child[0]), args.child[1], args.budget,
                               args.recall_queries, args.dense_ann, args.ann_min_rows)))
        return
    if args.db is None:
        args.db = BENCH_DIR / ".cache" / f"store_scale_{args.n}" / "catalog.db"
    built: dict[str, Any] = {}
    if not args.db.exists():
        log(f"building {args.n} chunks at {args.db}")
        built = build(args.db, args.n, args.queries,
                      0.0 if args.fixed_length else LENGTH_SPREAD)
        log(f"  {built}")
    if args.build_only:
        return
    results = []
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            parser.error(f"unknown variant {variant!r}")
        side = sidecar_path(args.db)
        if variant == "rebuild" and side.exists():
            side.unlink()
        if variant == "cold":
            evict([args.db, side])
        log(f"  {variant} ...")
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(args.db), variant, "--budget",
             str(args.budget), "--recall-queries", str(args.recall_queries),
             *(["--dense-ann", args.dense_ann, "--ann-min-rows", str(args.ann_min_rows)]
               if args.dense_ann else [])],
            check=False, capture_output=True, text=True,
            # the build uses all cores but one; on this 2-core machine, both (nothing queries)
            env={**os.environ, "DOCGRAPH_SCAN_THREADS": "3"} if variant == "ann_build" else None)
        if out.returncode:
            raise SystemExit(f"{variant} failed:\n{out.stderr}")
        row = json.loads(out.stdout.strip().splitlines()[-1])
        log(f"    {row}")
        results.append(row)
    write_result(args.name or f"store_scale_{args.n}", {
        "settings": {"n": args.n, "queries": args.queries, "budget_s": args.budget,
                     "length_spread": _spread(args.db),
                     "recall_queries": args.recall_queries, "dimension": DIM,
                     "dense_ann": args.dense_ann,
                     "ann_min_rows": args.ann_min_rows if args.dense_ann else None},
        "catalog_mb": round(args.db.stat().st_size / 2**20), **built, "results": results})


if __name__ == "__main__":
    main()
