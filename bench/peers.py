"""docgraph side by side with its peers on the same 1M (or 10M) vectors and texts (issue
36): LanceDB (IVF_HNSW_SQ or IVF_PQ vector index, its native full-text index, its hybrid
query) and raw faiss (IVF flat, or IVF SQ8 where float32 vectors do not fit) as a floor.

    python bench/peers.py [--n 1000000] [--db PATH] [--work DIR] [--peers-path DIR]
        [--lancedb-n N] [--queries 300] [--rounds 2] [--engines docgraph,lancedb,faiss]
        [--faiss-index ivf_flat|ivf_sq8] [--nprobe 16 | auto,64 [--recall-target 0.98]]
        [--lancedb-index ivf_hnsw_sq|ivf_pq [--lance-partitions N] [--lance-sub-vectors N]]
        [--lance-nprobes 20 [--lance-refine 0] | auto] [--lance-ef 64]
        [--dense-ann lists [--ann-min-rows 250000]] [--build-only] [--lock PATH] [--name peers_1m]

**Data**: the synthetic chunks of ``bench/store_scale.py`` (its ``Synthetic`` generator,
seed 7: same vectors, same texts, position = id), its catalog at ``--db`` (built there when
missing, reused and never rebuilt otherwise) and its query texts, query vectors and exact top 10
(``<db>.truth.npz``; recall@10 of every dense search is measured against that truth).

**Builds** (each in a subprocess under ``nice -n 10`` and the bench lock, so a build never
evicts the pages of a timed run beside it; skipped when already in ``--work``): the LanceDB
table (id, text, vector) with an ``IVF_HNSW_SQ`` index (the default; cosine, LanceDB's
default partitions, ``m`` and ``ef_construction``) or, with ``--lancedb-index ivf_pq``, an
``IVF_PQ`` one (LanceDB's default partitions and sub-vectors unless ``--lance-partitions`` /
``--lance-sub-vectors``; the one that builds at 10M on 2 cores, ``bench/peers_lance.py``),
and a native FTS index on ``text`` (LanceDB defaults: simple tokenizer, stemming, stop
words); a complete table already there is reused, only its indexes rebuilt; a faiss IVF
index (inner product on the unit vectors, ``sqrt(n)`` lists trained on 64 sampled vectors a
list): ``--faiss-index ivf_flat`` (the default: ``IndexIVFFlat``, float32, 15.4 GB at 10M)
or ``ivf_sq8`` (``IndexIVFScalarQuantizer``, 8 bits a dimension of the residual, 3.8 GB at
10M). Build seconds, on-disk size and the build's peak RSS are reported.

**faiss's nprobe**: ``--nprobe`` takes a count, or several (each timed and its recall
reported, the first beside docgraph's dense search), and ``auto``: the smallest power of two
whose recall@10 reaches ``--recall-target`` on the *first half* of the queries (or, where
the quantizer's ceiling stops it short, where doubling stops gaining recall); every engine
is then timed and scored on the *second half*, so the figures reported are not those the
choice was made on. The ladder is in the result. ``--lance-nprobes auto`` does the same for
LanceDB's ``nprobes`` and ``refine_factor`` (a doubling walk of nprobes at each refine
factor 0 / 10 / 50: the fastest setting on the tuning half reaching the target, else the
best recall, and a cheaper one timed beside it; its hybrid query's vector part uses the
chosen setting).

**docgraph's dense lane**: ``[store]`` defaults (the exact scan), or with ``--dense-ann
lists`` the ANN cache from ``--ann-min-rows`` rows, as ``store_scale.py --dense-ann`` opens
it (the 10M store's lists file is read, never rebuilt; the sidecar is never rewritten).

**Rounds**: ``--rounds`` times, engine by engine in turn (alternating), one fresh process per
engine per round, each started under ``flock /tmp/docgraph-bench.lock`` so no other timed
bench shares the cores while it measures; the load average is read as it starts. Each
reports RSS after open, then per query (warm: 20 warm-up queries first) k = 10 everywhere:
docgraph's hybrid search (default settings: its ``lists`` dense lane, BM25, RRF over 100-deep
lanes, chunk texts fetched), its dense lane alone and its BM25 lane alone; LanceDB's hybrid
query (vector + FTS, its default RRF reranker, texts fetched), its vector search alone
(``--lance-nprobes``, ``--lance-refine``, ``--lance-ef``) and its FTS alone; faiss's search
alone (``--nprobe``).
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
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from backends import DIM, EVERYTHING, FixedQueries, K  # noqa: E402
from common import log, percentile, write_result  # noqa: E402
from dense_codes import rss_mb  # noqa: E402
from docgraph.config import IndexSettings, StoreSettings  # noqa: E402
from docgraph.retrieve.hybrid import HybridSearcher  # noqa: E402
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog  # noqa: E402
from peers_faiss import (  # noqa: E402
    FAISS_INDEXES,
    build_faiss,
    faiss_file,
    faiss_key,
    faiss_search,
    nprobes_of,
    query_set,
    recall,
    tune_nprobe,
)
from peers_lance import (  # noqa: E402
    LANCE_INDEXES,
    build_lancedb,
    hybrid_query,
    lance_dir,
    open_table,
    tune_lance,
    vector_query,
)
from store_scale import positions_of  # noqa: E402

ENGINES = ("docgraph", "lancedb", "faiss")
EVERYTHING = EVERYTHING
LOCK = "/tmp/docgraph-bench.lock"
WARMUP = 20


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


def lance_setting(spec: str) -> tuple[int, int]:
    """``NPROBES:REFINE`` (as the tuning passes it to the timed processes) as numbers."""
    try:
        nprobes, refine = (int(x) for x in spec.split(":"))
    except ValueError:
        raise SystemExit(f"lancedb search setting {spec!r}: expected NPROBES:REFINE") from None
    return nprobes, refine


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


def child(engine: str, db: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Open one engine and measure it (runs in a fresh process, under the bench lock)."""
    qtexts, qvectors, exact = query_set(db, args.queries, args.query_part)
    result: dict[str, Any] = {"engine": engine, "loadavg_1": round(os.getloadavg()[0], 2),
                              "queries": len(qtexts)}
    t0 = time.perf_counter()
    if engine == "docgraph":
        catalog = SQLiteCatalog(db)
        store = StoreSettings()  # the defaults, passed as the app's chunk_index() does
        if args.dense_ann:  # as store_scale's --dense-ann: the ANN cache from that size
            store = StoreSettings(dense_ann=args.dense_ann,
                                  dense_graph_min_rows=args.ann_min_rows)
        # a bench never rewrites the catalog's sidecar (the 10M store is shared, read only)
        index = EmbeddedChunkIndex(catalog, DIM, sidecar_after_rows=10**12,
                                   graph_min_rows=store.dense_graph_min_rows or None,
                                   ann=store.dense_ann)
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
        result["dense_recall@10"] = recall([[where[r] for r in rs] for rs in rows], exact)
        answered = index.graph.answered if index.graph else 0  # below min rows: the scan
        result["dense_ann"] = (f"{store.dense_ann} ({index.graph.status}), answered"
                               f" {answered} searches" if index.graph and answered
                               else "exact scan")
        catalog.close()
    elif engine == "lancedb":
        table = open_table(work, args.lancedb_index, args.lancedb_n, args.peers_path)
        result["open_s"] = round(time.perf_counter() - t0, 3)
        result["rss_after_open_mb"] = round(rss_mb()[0])
        result["rows"] = args.lancedb_n
        result["lancedb_index"] = args.lancedb_index
        # the chosen setting is "dense" (and the hybrid's), a cheaper one "dense_npN"
        chosen = lance_setting(args.lance_chosen or f"{args.lance_nprobes}:{args.lance_refine}")
        settings = {"dense": chosen}
        if args.lance_cheaper:
            settings[f"dense_np{lance_setting(args.lance_cheaper)[0]}"] = lance_setting(
                args.lance_cheaper)
        result["search_settings"] = {name: {"nprobes": p, "refine_factor": r, "ef": args.lance_ef}
                                     for name, (p, r) in settings.items()}

        def searching(p: int, r: int) -> Callable[[int], Any]:
            return lambda i: vector_query(table, qvectors[i], p, r, args.lance_ef).to_arrow()

        times = _timed({
            "hybrid": lambda i: hybrid_query(table, qtexts[i], qvectors[i], *chosen).to_arrow(),
            **{name: searching(*setting) for name, setting in settings.items()},
            "fts": lambda i: table.search(qtexts[i], query_type="fts").limit(K)
            .select(["id"]).to_arrow()}, len(qtexts))
        for name, setting in settings.items():
            result[f"{name}_recall@10"] = recall(
                [searching(*setting)(i)["id"].to_pylist() for i in range(len(qvectors))], exact)
    else:
        import faiss

        index = faiss.read_index(str(faiss_file(work, args.faiss_index, args.n)))
        result["open_s"] = round(time.perf_counter() - t0, 3)
        result["rss_after_open_mb"] = round(rss_mb()[0])
        result["faiss_threads"] = faiss.omp_get_max_threads()
        result["faiss_index"] = args.faiss_index
        # the first nprobe is "dense" (beside the others' dense search), more: "dense_npN"
        names = {p: "dense" if not at else f"dense_np{p}"
                 for at, p in enumerate(nprobes_of(args.nprobe, args.nprobe_chosen))}
        result["nprobe"] = {name: p for p, name in names.items()}

        def probing(p: int) -> Callable[[int], Any]:
            params = faiss.SearchParametersIVF(nprobe=p)
            return lambda i: index.search(qvectors[i: i + 1], K, params=params)

        times = _timed({name: probing(p) for p, name in names.items()}, len(qvectors))
        for p, name in names.items():
            result[f"{name}_recall@10"] = recall(faiss_search(index, p, qvectors), exact)
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
        for search in [k.removesuffix("_p50_ms") for k in mine[0] if k.endswith("_p50_ms")]:
            out.append({
                "engine": engine, "search": search, "rounds": len(mine),
                **({"nprobe": mine[0]["nprobe"][search]} if "nprobe" in mine[0] else {}),
                **({"setting": mine[0]["search_settings"][search]}
                   if search in mine[0].get("search_settings", {}) else {}),
                "p50_ms": round(float(np.median([r[f"{search}_p50_ms"] for r in mine])), 2),
                "p95_ms": round(float(np.median([r[f"{search}_p95_ms"] for r in mine])), 2),
                "recall@10": mine[0].get(f"{search}_recall@10"),
                "rss_after_open_mb": round(float(np.median(
                    [r["rss_after_open_mb"] for r in mine]))),
                "loadavg_1": [r["loadavg_1"] for r in mine]})
    for row in out:
        search = row["search"].split("_np")[0]  # faiss's dense_npN: beside docgraph's dense
        same = [o for o in out if o["engine"] == "docgraph" and o["search"] == search]
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
    parser.add_argument("--faiss-index", choices=sorted(FAISS_INDEXES), default="ivf_flat",
                        help="the raw faiss index: IVF flat (float32) or IVF SQ8 (int8)")
    parser.add_argument("--nprobe", default="16",
                        help="faiss IVF lists probed: a count, or several (comma list, each"
                             " timed), 'auto' the smallest reaching --recall-target on the"
                             " first half of the queries (all engines then timed on the"
                             " second half)")
    parser.add_argument("--recall-target", type=float, default=0.98,
                        help="recall@10 that --nprobe auto must reach on the tuning half")
    parser.add_argument("--dense-ann", choices=("lists", "hnsw"), default=None,
                        help="docgraph's ANN cache (as store_scale's); default: [store]"
                             " defaults")
    parser.add_argument("--ann-min-rows", type=int, default=250_000,
                        help="with --dense-ann: live rows from which it answers")
    parser.add_argument("--lancedb-index", choices=sorted(LANCE_INDEXES), default="ivf_hnsw_sq",
                        help="LanceDB's vector index (IVF_PQ: the one that builds at 10M here)")
    parser.add_argument("--lance-partitions", type=int, default=None,
                        help="its num_partitions (default: LanceDB's)")
    parser.add_argument("--lance-sub-vectors", type=int, default=None,
                        help="IVF_PQ's num_sub_vectors (default: LanceDB's)")
    parser.add_argument("--lance-nprobes", default="20",
                        help="LanceDB's nprobes, or 'auto': nprobes and refine_factor chosen"
                             " on the first half of the queries as --nprobe auto does")
    parser.add_argument("--lance-refine", type=int, default=0,
                        help="LanceDB's refine_factor with a fixed --lance-nprobes (0: none)")
    parser.add_argument("--lance-ef", type=int, default=64)
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--lock", default=LOCK,
                        help="the lock every build and timed process holds (another path:"
                             " a functional run beside a timed one)")
    parser.add_argument("--name", default=None)
    parser.add_argument("--note", default="", help="a remark stored with the result")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--build", help=argparse.SUPPRESS)
    parser.add_argument("--tune", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--query-part", default="all", help=argparse.SUPPRESS)
    parser.add_argument("--nprobe-chosen", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tune-lance", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--lance-chosen", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--lance-cheaper", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.lancedb_n = args.lancedb_n or args.n
    if args.lance_nprobes != "auto" and not args.lance_nprobes.isdigit():
        parser.error(f"--lance-nprobes {args.lance_nprobes!r}: a count or auto")
    db = args.db or BENCH_DIR / ".cache" / f"store_scale_{args.n}" / "catalog.db"
    work = args.work or db.parent / "peers"
    if args.tune:
        print(json.dumps(tune_nprobe(faiss_file(work, args.faiss_index, args.n), db,
                                      args.queries, args.recall_target)))
        return
    if args.tune_lance:
        print(json.dumps(tune_lance(
            open_table(work, args.lancedb_index, args.lancedb_n, args.peers_path), db,
            args.queries, args.recall_target, args.lance_ef)))
        return
    if args.child:
        print(json.dumps(child(args.child, db, work, args)))
        return
    if args.build:
        print(json.dumps(build_lancedb(work, args.lancedb_n, args.peers_path,
                                       args.lancedb_index, args.lance_partitions,
                                       args.lance_sub_vectors)
                         if args.build == "lancedb"
                         else build_faiss(work, args.n, args.faiss_index)))
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
              "--faiss-index", args.faiss_index,
              "--nprobe", args.nprobe, "--recall-target", str(args.recall_target),
              "--ann-min-rows", str(args.ann_min_rows), "--lance-nprobes", args.lance_nprobes,
              "--lance-ef", str(args.lance_ef), "--lance-refine", str(args.lance_refine),
              "--lancedb-index", args.lancedb_index] + (
        ["--peers-path", args.peers_path] if args.peers_path else []) + (
        ["--dense-ann", args.dense_ann] if args.dense_ann else [])
    builds_file = work / "builds.json"
    builds = json.loads(builds_file.read_text()) if builds_file.exists() else {}
    keys = {"lancedb": lance_dir(work, args.lancedb_index, args.lancedb_n).name,
            "faiss": faiss_key(args.faiss_index, args.n)}
    def once(key: str, flags: list[str], what: str) -> dict[str, Any]:
        """A build or tuning child's result, run (niced, under the lock) unless recorded."""
        if key not in builds:
            log(f"  {what} ({key}, nice -n 10, under {args.lock}) ...")
            builds[key] = _spawn(["flock", args.lock, "nice", "-n", "10", sys.executable,
                                  __file__, *flags, *passed], what)
            builds_file.write_text(json.dumps(builds, indent=1))
        found: dict[str, Any] = builds[key]
        return found

    for engine, key in keys.items():
        if engine in engines:
            once(key, ["--build", engine], f"{engine} build")
    tuned: dict[str, Any] | None = None
    if "faiss" in engines and "auto" in args.nprobe:
        tuned = once(f"{keys['faiss']}_tune_{args.recall_target}_{args.queries}", ["--tune"],
                     f"faiss nprobe tuning on the first {args.queries // 2} queries")
        passed += ["--nprobe-chosen", str(tuned["chosen"])]
    lance_tuned: dict[str, Any] | None = None
    if "lancedb" in engines and args.lance_nprobes == "auto":
        lance_tuned = once(
            f"{keys['lancedb']}_tune_{args.recall_target}_{args.queries}_ef{args.lance_ef}",
            ["--tune-lance"], f"lancedb nprobes/refine tuning on the first "
            f"{args.queries // 2} queries")
        passed += ["--lance-chosen", "{}:{}".format(*lance_tuned["chosen"])] + (
            ["--lance-cheaper", "{}:{}".format(*lance_tuned["cheaper"])]
            if lance_tuned["cheaper"] else [])
    if tuned or lance_tuned:
        passed += ["--query-part", "report"]
    if args.build_only:
        return
    rows = []
    for round_no in range(args.rounds):
        for engine in engines:
            log(f"  round {round_no + 1}: {engine} (under {args.lock}) ...")
            row = _spawn(["flock", args.lock, sys.executable, __file__, "--child", engine,
                          *passed], engine)
            rows.append({"round": round_no + 1, **row})
    half = ("the second half (the search settings tuned on the first)"
            if tuned or lance_tuned else "all")
    lance_search = ("nprobes:refine_factor auto = {} (cheaper {})".format(
        *[":".join(map(str, s)) if s else "none" for s in (lance_tuned["chosen"],
                                                           lance_tuned["cheaper"])])
        if lance_tuned else f"nprobes {args.lance_nprobes}, refine_factor {args.lance_refine}")
    write_result(args.name or f"peers_{args.n}", {
        "settings": {"n": args.n, "k": K, "dimension": DIM,
                     "lancedb_rows": args.lancedb_n if "lancedb" in engines else None,
                     "queries": args.queries, "queries_timed": half,
                     "rounds": args.rounds, "warmup": WARMUP,
                     "faiss": f"{FAISS_INDEXES[args.faiss_index]} (index_factory) inner"
                              f" product, nprobe {args.nprobe}"
                              + (f" (auto = {tuned['chosen']})" if tuned else ""),
                     "lancedb": "not run (see note / skipped)" if "lancedb" not in engines
                     else f"{LANCE_INDEXES[args.lancedb_index]} cosine ("
                          + (f"num_partitions {args.lance_partitions}" if args.lance_partitions
                             else "default partitions")
                          + (f", num_sub_vectors {args.lance_sub_vectors}"
                             if args.lance_sub_vectors else "")
                          + f", else defaults), {lance_search}, ef {args.lance_ef}; native"
                            " FTS (defaults); hybrid = its default RRF reranker, its vector"
                            " part at the same setting",
                     "docgraph": "[index] defaults (BM25, RRF of 100-deep lanes), dense: "
                                 + (f"{args.dense_ann} from {args.ann_min_rows} rows"
                                    if args.dense_ann else "[store] defaults")},
        "note": args.note, "skipped": skipped,
        "builds": [b for k, b in builds.items() if k in keys.values()],
        "faiss_nprobe_tuning": tuned, "lancedb_search_tuning": lance_tuned,
        "rounds": rows, "results": summarise(rows)})

if __name__ == "__main__":
    main()
