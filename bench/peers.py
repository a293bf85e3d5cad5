"""docgraph side by side with its peers on the same 1M vectors and texts (issue 36): LanceDB
(IVF_HNSW_SQ vector index, its native full-text index, its hybrid query) and raw faiss
(IVF flat) as a floor.

    python bench/peers.py [--n 1000000] [--db PATH] [--work DIR] [--peers-path DIR]
        [--lancedb-n N] [--queries 300] [--rounds 2] [--engines docgraph,lancedb,faiss]
        [--build-only] [--name peers_1m]

**Data**: the synthetic chunks of ``bench/store_scale.py`` (its ``Synthetic`` generator,
seed 7: same vectors, same texts, position = id), its catalog at ``--db`` (built there when
missing, reused and never rebuilt otherwise) and its query texts, query vectors and exact top 10
(``<db>.truth.npz``; recall@10 of every dense search is measured against that truth).

**Builds** (untimed by the lock, each in a subprocess under ``nice -n 10``, skipped when
already in ``--work``): the LanceDB table (id, text, vector) with an ``IVF_HNSW_SQ`` index
(cosine; LanceDB's default partitions, ``m`` and ``ef_construction``) and a native FTS index
on ``text`` (LanceDB defaults: simple tokenizer, stemming, stop words); a faiss
``IndexIVFFlat`` (inner product on the unit vectors, ``sqrt(n)`` lists trained on 64k
vectors). Build seconds and on-disk size are reported.

**Rounds**: ``--rounds`` times, engine by engine in turn (alternating), one fresh process per
engine per round, each started under ``flock /tmp/docgraph-bench.lock`` so no other timed
bench shares the cores while it measures; the load average is read as it starts. Each
reports RSS after open, then per query (warm: 20 warm-up queries first) k = 10 everywhere:
docgraph's hybrid search (default settings: its ``lists`` dense lane, BM25, RRF over 100-deep
lanes, chunk texts fetched), its dense lane alone and its BM25 lane alone; LanceDB's hybrid
query (vector + FTS, its default RRF reranker, texts fetched), its vector search alone
(``--lance-nprobes``, ``--lance-ef``) and its FTS alone; faiss's search alone (``--nprobe``).
p50/p95 per search, recall@10 of the dense searches against exact.

**Containment**: LanceDB is never a project dependency. Install it into a folder of its own
(``pip install --target DIR lancedb``) and pass ``--peers-path DIR`` (or set
``DOCGRAPH_PEERS_PATH``): only the bench's own processes append DIR to the *end* of
``sys.path`` (so the project's numpy and pyarrow win over any copy in DIR). Without it, or
when the import fails, LanceDB is skipped and the result says why; faiss is the project's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from backends import DIM, FixedQueries, K  # noqa: E402
from common import log, percentile, write_result  # noqa: E402
from dense_codes import rss_mb  # noqa: E402
from docgraph.config import IndexSettings, StoreSettings  # noqa: E402
from docgraph.retrieve.hybrid import HybridSearcher  # noqa: E402
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog  # noqa: E402
from store_scale import SLICE, Synthetic, positions_of, truth_path  # noqa: E402

ENGINES = ("docgraph", "lancedb", "faiss")
EVERYTHING = frozenset({"bench", "side"})
LOCK = "/tmp/docgraph-bench.lock"
WARMUP = 20
TABLE = "chunks"


def _peers_import(peers_path: str | None) -> Any:
    """Import lancedb, with ``peers_path`` appended to ``sys.path`` (never prepended)."""
    if peers_path:
        sys.path.append(peers_path)
    import lancedb  # type: ignore[import-not-found]

    return lancedb


def lancedb_missing(peers_path: str | None) -> str | None:
    """Why LanceDB cannot run here (None when it can); checked in a subprocess so the parent
    never imports it."""
    code = ("import sys; p = sys.argv[1]\nif p: sys.path.append(p)\n"
            "import lancedb; print(lancedb.__version__)")
    out = subprocess.run([sys.executable, "-c", code, peers_path or ""], capture_output=True,
                         text=True, check=False)
    if out.returncode:
        last = (out.stderr.strip().splitlines() or ["import failed"])[-1]
        return f"lancedb not importable (--peers-path {peers_path or 'unset'}): {last}"
    return None


def _size_mb(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return round(sum(p.stat().st_size for p in files) / 2**20, 1)


def build_lancedb(work: Path, n: int, peers_path: str | None) -> dict[str, Any]:
    """Write the first ``n`` synthetic chunks to a LanceDB table, then its IVF_HNSW_SQ and
    FTS indexes; seconds and sizes."""
    import pyarrow as pa

    lancedb = _peers_import(peers_path)
    target = work / f"lancedb_{n}"
    shutil.rmtree(target, ignore_errors=True)
    data = Synthetic(n)
    db = lancedb.connect(str(target))
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("text", pa.string()),
                        pa.field("vector", pa.list_(pa.float32(), DIM))])
    table = db.create_table(TABLE, schema=schema)
    t0 = time.perf_counter()
    for start in data.slices():
        vectors = data.vectors(start)
        flat = pa.array(vectors.reshape(-1), type=pa.float32())
        table.add(pa.table({
            "id": pa.array(np.arange(start, start + len(vectors)), type=pa.int64()),
            "text": pa.array(data.texts(start)),
            "vector": pa.FixedSizeListArray.from_arrays(flat, DIM)}, schema=schema))
        log(f"    lancedb {start + len(vectors)}/{n} rows")
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    table.create_index(metric="cosine", vector_column_name="vector",
                       index_type="IVF_HNSW_SQ")
    vector_s = time.perf_counter() - t0
    log(f"    lancedb IVF_HNSW_SQ {vector_s:.0f} s")
    t0 = time.perf_counter()
    table.create_fts_index("text")
    fts_s = time.perf_counter() - t0
    stats = table.index_stats("vector_idx")
    return {"engine": "lancedb", "rows": n, "write_s": round(write_s, 1),
            "vector_index_s": round(vector_s, 1), "fts_index_s": round(fts_s, 1),
            "vector_index": {"type": str(stats.index_type), "distance": str(stats.distance_type),
                             "segments": stats.num_indices},
            "dir_mb": _size_mb(target),
            "index_mb": _size_mb(target / f"{TABLE}.lance" / "_indices")}


def build_faiss(work: Path, n: int) -> dict[str, Any]:
    """An IVF flat faiss index (inner product, sqrt(n) lists) over the ``n`` vectors."""
    import faiss

    data = Synthetic(n)
    nlist = round(float(np.sqrt(n)))
    quantizer = faiss.IndexFlatIP(DIM)
    index = faiss.IndexIVFFlat(quantizer, DIM, nlist, faiss.METRIC_INNER_PRODUCT)
    sample = np.random.default_rng(11).choice(n, size=min(n, 64 * nlist), replace=False)
    t0 = time.perf_counter()
    train = np.concatenate([data.vectors(s)[sample[(sample >= s) & (sample < s + SLICE)] - s]
                            for s in data.slices()])
    index.train(train)
    train_s = time.perf_counter() - t0
    for start in data.slices():
        index.add(data.vectors(start))
    build_s = time.perf_counter() - t0
    path = work / f"faiss_ivf_{n}.index"
    faiss.write_index(index, str(path))
    return {"engine": "faiss", "rows": n, "nlist": nlist, "train_s": round(train_s, 1),
            "build_s": round(build_s, 1), "index_mb": _size_mb(path)}


def _timed(calls: dict[str, Callable[[int], Any]], count: int) -> dict[str, list[float]]:
    """Run every call per query index, interleaved, after ``WARMUP`` warm-up queries."""
    for i in range(min(WARMUP, count)):
        for call in calls.values():
            call(i)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(count):
        for name, call in calls.items():
            t = time.perf_counter()
            call(i)
            times[name].append(time.perf_counter() - t)
    return times


def _summary(times: dict[str, list[float]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, values in times.items():
        out[f"{name}_p50_ms"] = round(1000 * percentile(values, 50), 2)
        out[f"{name}_p95_ms"] = round(1000 * percentile(values, 95), 2)
    return out


def _recall(found: list[list[int]], truth: np.ndarray) -> float:
    hits = sum(len(set(f) & set(t.tolist())) for f, t in zip(found, truth, strict=True))
    return round(hits / (K * len(found)), 4)


def child(engine: str, db: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Open one engine and measure it (runs in a fresh process, under the bench lock)."""
    truth = np.load(truth_path(db))
    qtexts = [str(t) for t in truth["qtexts"]][: args.queries]
    qvectors = truth["qvectors"][: args.queries].astype(np.float32)
    exact = truth["truth_all"][: args.queries]
    result: dict[str, Any] = {"engine": engine, "loadavg_1": round(os.getloadavg()[0], 2),
                              "queries": len(qtexts)}
    t0 = time.perf_counter()
    if engine == "docgraph":
        catalog = SQLiteCatalog(db)
        store = StoreSettings()  # the defaults, passed as the app's chunk_index() does
        index = EmbeddedChunkIndex(catalog, DIM, graph_min_rows=store.dense_graph_min_rows
                                   or None, ann=store.dense_ann)
        result["open_s"] = round(time.perf_counter() - t0, 3)
        result["rss_after_open_mb"] = round(rss_mb()[0])
        searcher = HybridSearcher(catalog, index, FixedQueries(dict(zip(
            qtexts, qvectors, strict=True))), IndexSettings())
        times = _timed({
            "hybrid": lambda i: searcher.search(qtexts[i], namespaces=EVERYTHING, k=K),
            "dense": lambda i: index.dense_search(qvectors[i], K, EVERYTHING),
            "fts": lambda i: index.lexical_search(qtexts[i], K, EVERYTHING)}, len(qtexts))
        rows = [[r.rowid for r in index.dense_search(q, K, EVERYTHING)] for q in qvectors]
        where = positions_of(catalog, [r for rs in rows for r in rs])
        result["dense_recall@10"] = _recall([[where[r] for r in rs] for rs in rows], exact)
        answered = index.graph.answered if index.graph else 0  # below min rows: the scan
        result["dense_ann"] = (f"{store.dense_ann} ({index.graph.status}), answered"
                               f" {answered} searches" if index.graph and answered
                               else "exact scan")
        catalog.close()
    elif engine == "lancedb":
        lancedb = _peers_import(args.peers_path)
        table = lancedb.connect(str(work / f"lancedb_{args.lancedb_n}")).open_table(TABLE)
        result["open_s"] = round(time.perf_counter() - t0, 3)
        result["rss_after_open_mb"] = round(rss_mb()[0])
        result["rows"] = args.lancedb_n

        def vector(i: int) -> Any:
            return (table.search(qvectors[i], vector_column_name="vector")
                    .distance_type("cosine").nprobes(args.lance_nprobes).ef(args.lance_ef)
                    .limit(K).select(["id"]).to_arrow())

        times = _timed({
            "hybrid": lambda i: table.search(query_type="hybrid").vector(qvectors[i])
            .text(qtexts[i]).limit(K).select(["id", "text"]).to_arrow(),
            "dense": vector,
            "fts": lambda i: table.search(qtexts[i], query_type="fts").limit(K)
            .select(["id"]).to_arrow()}, len(qtexts))
        result["dense_recall@10"] = _recall(
            [vector(i)["id"].to_pylist() for i in range(len(qvectors))], exact)
    else:
        import faiss

        index = faiss.read_index(str(work / f"faiss_ivf_{args.n}.index"))
        index.nprobe = args.nprobe
        result["open_s"] = round(time.perf_counter() - t0, 3)
        result["rss_after_open_mb"] = round(rss_mb()[0])
        result["faiss_threads"] = faiss.omp_get_max_threads()
        times = _timed({"dense": lambda i: index.search(qvectors[i: i + 1], K)},
                       len(qvectors))
        result["dense_recall@10"] = _recall(
            [[int(x) for x in index.search(q[None, :], K)[1][0]] for q in qvectors], exact)
    result.update(_summary(times))
    result["rss_after_queries_mb"] = round(rss_mb()[0])
    return result


def _ratio(a: Any, b: Any) -> float | None:
    return round(a / b, 2) if isinstance(a, float | int) and isinstance(b, float | int) and b \
        else None


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per engine and search: the median over rounds of p50 and of p95, recall, RSS."""
    out = []
    for engine in dict.fromkeys(r["engine"] for r in rows):
        mine = [r for r in rows if r["engine"] == engine]
        for search in ("hybrid", "dense", "fts"):
            if f"{search}_p50_ms" not in mine[0]:
                continue
            out.append({
                "engine": engine, "search": search, "rounds": len(mine),
                "p50_ms": round(float(np.median([r[f"{search}_p50_ms"] for r in mine])), 2),
                "p95_ms": round(float(np.median([r[f"{search}_p95_ms"] for r in mine])), 2),
                "recall@10": mine[0]["dense_recall@10"] if search == "dense" else None,
                "rss_after_open_mb": round(float(np.median(
                    [r["rss_after_open_mb"] for r in mine]))),
                "loadavg_1": [r["loadavg_1"] for r in mine]})
    for row in out:
        same = [o for o in out if o["engine"] == "docgraph" and o["search"] == row["search"]]
        if same:
            row["docgraph_p50_over_this"] = _ratio(same[0]["p50_ms"], row["p50_ms"])
    return out


def _spawn(cmd: list[str], what: str) -> dict[str, Any]:
    out = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{what} failed:\n{out.stderr[-4000:]}")
    row: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    log(f"    {row}")
    return row


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--db", type=Path, help="store_scale catalog (default in .cache)")
    parser.add_argument("--work", type=Path, help="peer indexes (default beside --db)")
    parser.add_argument("--peers-path", default=os.environ.get("DOCGRAPH_PEERS_PATH"),
                        help="folder lancedb was pip-installed into with --target")
    parser.add_argument("--lancedb-n", type=int, help="LanceDB rows (default --n)")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--nprobe", type=int, default=16, help="faiss IVF lists probed")
    parser.add_argument("--lance-nprobes", type=int, default=20)
    parser.add_argument("--lance-ef", type=int, default=64)
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--name", default=None)
    parser.add_argument("--note", default="", help="a remark stored with the result")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--build", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.lancedb_n = args.lancedb_n or args.n
    db = args.db or BENCH_DIR / ".cache" / f"store_scale_{args.n}" / "catalog.db"
    work = args.work or db.parent / "peers"
    if args.child:
        print(json.dumps(child(args.child, db, work, args)))
        return
    if args.build:
        print(json.dumps(build_lancedb(work, args.lancedb_n, args.peers_path)
                         if args.build == "lancedb" else build_faiss(work, args.n)))
        return
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if set(engines) - set(ENGINES):
        parser.error(f"unknown engine(s) {sorted(set(engines) - set(ENGINES))}")
    skipped: dict[str, str] = {}
    if "lancedb" in engines and (why := lancedb_missing(args.peers_path)):
        skipped["lancedb"] = why
        engines.remove("lancedb")
        log(f"  skipping lancedb: {why}")
    if not db.exists():
        subprocess.run(["nice", "-n", "10", sys.executable, str(BENCH_DIR / "store_scale.py"),
                        "--n", str(args.n), "--db", str(db), "--build-only"], check=True)
    work.mkdir(parents=True, exist_ok=True)
    passed = ["--n", str(args.n), "--db", str(db), "--work", str(work),
              "--lancedb-n", str(args.lancedb_n), "--queries", str(args.queries),
              "--nprobe", str(args.nprobe), "--lance-nprobes", str(args.lance_nprobes),
              "--lance-ef", str(args.lance_ef)] + (
        ["--peers-path", args.peers_path] if args.peers_path else [])
    builds_file = work / "builds.json"
    builds = json.loads(builds_file.read_text()) if builds_file.exists() else {}
    for engine, rows in (("lancedb", args.lancedb_n), ("faiss", args.n)):
        key = f"{engine}_{rows}"
        if engine in engines and key not in builds:
            log(f"  building {key} (nice -n 10, outside the lock) ...")
            builds[key] = _spawn(["nice", "-n", "10", sys.executable, __file__, "--build",
                                  engine, *passed], f"{engine} build")
            builds_file.write_text(json.dumps(builds, indent=1))
    if args.build_only:
        return
    rows = []
    for round_no in range(args.rounds):
        for engine in engines:
            log(f"  round {round_no + 1}: {engine} (under {LOCK}) ...")
            row = _spawn(["flock", LOCK, sys.executable, __file__, "--child", engine,
                          *passed], engine)
            rows.append({"round": round_no + 1, **row})
    write_result(args.name or f"peers_{args.n}", {
        "settings": {"n": args.n, "k": K, "dimension": DIM,
                     "lancedb_rows": args.lancedb_n if "lancedb" in engines else None,
                     "queries": args.queries, "rounds": args.rounds, "warmup": WARMUP,
                     "faiss": f"IndexIVFFlat inner product, nprobe {args.nprobe}",
                     "lancedb": "not run (see note / skipped)" if "lancedb" not in engines
                     else f"IVF_HNSW_SQ cosine (default partitions, m, ef_construction),"
                                f" nprobes {args.lance_nprobes}, ef {args.lance_ef}; native"
                                " FTS (defaults); hybrid = its default RRF reranker",
                     "docgraph": "[store] and [index] defaults (dense_ann lists from 250k"
                                 " rows, BM25, RRF of 100-deep lanes)"},
        "note": args.note, "skipped": skipped, "builds": [b for k, b in builds.items()
                                       if k in (f"faiss_{args.n}",
                                                f"lancedb_{args.lancedb_n}")],
        "rounds": rows, "results": summarise(rows)})


if __name__ == "__main__":
    main()
