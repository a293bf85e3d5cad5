"""LanceDB for ``bench/peers.py``: its table over store_scale's synthetic chunks (id, text,
vector) with one vector index of ``LANCE_INDEXES`` and its native FTS index, and its search
settings (``nprobes``, ``refine_factor``) chosen on the tuning half of the queries the way
``--nprobe auto`` chooses faiss's, so LanceDB is measured at the recall the others reach.

Why two index types: the issue asks for ``IVF_HNSW_SQ``, but on this 2-core machine it
builds too slowly to reach 10M (132 s at 300k, 4.2x its 100k time: hours at 10M);
``IVF_PQ`` built 300k in 36 s and 10M in 676 s (``peers_lance_build_rates.json``), so it is
the LanceDB index that can stand beside the others at 10M. Either is built with LanceDB's
defaults unless ``--lance-partitions`` / ``--lance-sub-vectors`` are given, and the result
records which."""

from __future__ import annotations

import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from backends import DIM, K
from common import log
from dense_codes import rss_mb
from peers_faiss import query_set, recall, size_mb
from store_scale import Synthetic

TABLE = "chunks"
LANCE_INDEXES = {"ivf_hnsw_sq": "IVF_HNSW_SQ", "ivf_pq": "IVF_PQ"}  # --lancedb-index
NPROBES_MAX = 1024  # --lance-nprobes auto: the last nprobes tried
REFINES = (0, 10, 50)  # --lance-nprobes auto: refine factors tried (0: none, the index alone)
PLATEAU = 0.002  # a doubling of nprobes gaining less recall than this ends that walk


def peers_import(peers_path: str | None) -> Any:
    """Import lancedb, with ``peers_path`` appended to ``sys.path`` (never prepended), so
    the project's numpy and pyarrow win over any copy in that folder."""
    import sys

    if peers_path and peers_path not in sys.path:
        sys.path.append(peers_path)
    import lancedb  # type: ignore[import-not-found]

    return lancedb


def lance_dir(work: Path, kind: str, n: int) -> Path:
    """The table's folder: ``lancedb_<n>`` for IVF_HNSW_SQ (the earlier runs' name), else
    ``lancedb_<kind>_<n>``; also its key in ``builds.json``."""
    return work / (f"lancedb_{n}" if kind == "ivf_hnsw_sq" else f"lancedb_{kind}_{n}")


def _write_table(lancedb: Any, target: Path, n: int) -> tuple[Any, float | None]:
    """The table of the first ``n`` synthetic chunks; one already complete there (same rows,
    from an earlier build or trial of another index) is reused, since at 10M the write alone
    takes ~15 min. Returns (table, write seconds or None when reused)."""
    import pyarrow as pa

    if target.exists():
        try:
            table = lancedb.connect(str(target)).open_table(TABLE)
            if table.count_rows() == n:
                log(f"    lancedb table {target.name}: {n} rows there, reused")
                return table, None
        except (OSError, ValueError, RuntimeError) as err:  # a half-written folder
            log(f"    lancedb table {target.name} unusable ({err}), written anew")
    shutil.rmtree(target, ignore_errors=True)
    data = Synthetic(n)
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("text", pa.string()),
                        pa.field("vector", pa.list_(pa.float32(), DIM))])
    table = lancedb.connect(str(target)).create_table(TABLE, schema=schema)
    t0 = time.perf_counter()
    for start in data.slices():
        vectors = data.vectors(start)
        flat = pa.array(vectors.reshape(-1), type=pa.float32())
        table.add(pa.table({
            "id": pa.array(np.arange(start, start + len(vectors)), type=pa.int64()),
            "text": pa.array(data.texts(start)),
            "vector": pa.FixedSizeListArray.from_arrays(flat, DIM)}, schema=schema))
        log(f"    lancedb {start + len(vectors)}/{n} rows")
    return table, time.perf_counter() - t0


def index_params(kind: str, partitions: int | None, sub_vectors: int | None) -> dict[str, Any]:
    """The ``create_index`` arguments beyond the metric: the index type and only the
    parameters set on the command line (None: LanceDB's default, recorded as such)."""
    params: dict[str, Any] = {"index_type": LANCE_INDEXES[kind]}
    if partitions:
        params["num_partitions"] = partitions
    if sub_vectors:
        if kind != "ivf_pq":
            raise SystemExit(f"--lance-sub-vectors {sub_vectors}: only for --lancedb-index"
                             f" ivf_pq, not {kind}")
        params["num_sub_vectors"] = sub_vectors
    return params


def build_lancedb(work: Path, n: int, peers_path: str | None, kind: str = "ivf_hnsw_sq",
                  partitions: int | None = None, sub_vectors: int | None = None
                  ) -> dict[str, Any]:
    """The LanceDB table of the first ``n`` synthetic chunks, its ``kind`` vector index
    (cosine) and its FTS index on ``text`` (LanceDB defaults); seconds, sizes, peak RSS and
    the load average at the end (a build shares the cores, so its seconds need it)."""
    lancedb = peers_import(peers_path)
    target = lance_dir(work, kind, n)
    load_start = os.getloadavg()[0]
    table, write_s = _write_table(lancedb, target, n)
    params = index_params(kind, partitions, sub_vectors)
    t0 = time.perf_counter()
    table.create_index(metric="cosine", vector_column_name="vector", replace=True, **params)
    vector_s = time.perf_counter() - t0
    log(f"    lancedb {params} {vector_s:.0f} s")
    t0 = time.perf_counter()
    table.create_fts_index("text", replace=True)
    fts_s = time.perf_counter() - t0
    stats = table.index_stats("vector_idx")
    return {"engine": "lancedb", "lancedb_version": lancedb.__version__, "rows": n,
            "index": kind, "index_params": params,
            "defaults_left": [p for p in ("num_partitions", "num_sub_vectors")
                              if p not in params and (kind == "ivf_pq" or p != "num_sub_vectors")],
            "write_s": round(write_s, 1) if write_s is not None else "reused",
            "vector_index_s": round(vector_s, 1), "fts_index_s": round(fts_s, 1),
            "vector_index": {"type": str(stats.index_type), "distance": str(stats.distance_type),
                             "segments": stats.num_indices},
            "dir_mb": size_mb(target),
            "index_mb": size_mb(target / f"{TABLE}.lance" / "_indices"),
            "build_peak_rss_mb": round(rss_mb()[1]),
            "build_loadavg_1": [round(load_start, 2), round(os.getloadavg()[0], 2)]}


def open_table(work: Path, kind: str, n: int, peers_path: str | None) -> Any:
    """The built table, opened as a reader."""
    return peers_import(peers_path).connect(str(lance_dir(work, kind, n))).open_table(TABLE)


def vector_query(table: Any, vector: np.ndarray, nprobes: int, refine: int, ef: int) -> Any:
    """LanceDB's vector search (cosine, k = 10, ids only) at one setting (refine 0: none)."""
    query = (table.search(vector, vector_column_name="vector").distance_type("cosine")
             .nprobes(nprobes).ef(ef).limit(K).select(["id"]))
    return query.refine_factor(refine) if refine else query


def hybrid_query(table: Any, text: str, vector: np.ndarray, nprobes: int, refine: int) -> Any:
    """LanceDB's hybrid query (its vector search at the chosen setting, its FTS, its
    default RRF reranker), ids and texts fetched."""
    query = (table.search(query_type="hybrid").vector(vector).text(text).nprobes(nprobes)
             .limit(K).select(["id", "text"]))
    return query.refine_factor(refine) if refine else query


def _walk(table: Any, qvectors: np.ndarray, exact: np.ndarray, refine: int, ef: int,
          target: float) -> list[dict[str, Any]]:
    """Recall and mean seconds a query of nprobes 1, 2, 4, ... at one refine factor, until
    ``target`` is reached or a doubling stops gaining recall."""
    steps: list[dict[str, Any]] = []
    nprobes, last = 1, -1.0
    while nprobes <= NPROBES_MAX:
        found, seconds = [], []
        for q in qvectors:
            t = time.perf_counter()
            ids = vector_query(table, q, nprobes, refine, ef).to_arrow()["id"].to_pylist()
            seconds.append(time.perf_counter() - t)
            found.append(ids)
        got = recall(found, exact)
        steps.append({"nprobes": nprobes, "refine_factor": refine, "recall@10": got,
                      "mean_ms": round(1000 * statistics.fmean(seconds), 2)})
        log(f"    lancedb nprobes {nprobes} refine {refine}: recall@10 {got},"
            f" {steps[-1]['mean_ms']} ms")
        if got >= target or got - last < PLATEAU:
            break
        nprobes, last = 2 * nprobes, got
    return steps


def choose_setting(ladder: list[dict[str, Any]], target: float) -> dict[str, Any]:
    """Of a tuning ladder (steps of nprobes, refine_factor, recall@10, mean_ms): the fastest
    step reaching ``target``, else the fastest of the best recall, and beside it a cheaper
    one (same refine factor, the most nprobes at no more than half its mean time; None when
    there is none), so the price of the last points of recall shows in the timed runs."""
    best = max(s["recall@10"] for s in ladder)
    reached = best >= target
    fit = [s for s in ladder if s["recall@10"] >= (target if reached else best)]
    chosen = min(fit, key=lambda s: s["mean_ms"])
    cheaper = [s for s in ladder if s["refine_factor"] == chosen["refine_factor"]
               and s["mean_ms"] <= chosen["mean_ms"] / 2]
    return {"chosen": [chosen["nprobes"], chosen["refine_factor"]],
            "cheaper": ([max(cheaper, key=lambda s: s["nprobes"])["nprobes"],
                         chosen["refine_factor"]] if cheaper else None),
            "target_reached": reached}


def tune_lance(table: Any, db: Path, queries: int, target: float, ef: int) -> dict[str, Any]:
    """LanceDB's search setting chosen on the tuning half of the queries (untimed in the
    report: the figures reported come from the other half): the ladder walks nprobes
    doubling at each refine factor of ``REFINES``, then ``choose_setting``."""
    _, qvectors, exact = query_set(db, queries, "tune")
    for q in qvectors[:5]:  # warm the index's pages before anything is timed
        vector_query(table, q, 1, 0, ef).to_arrow()
    ladder = [step for refine in REFINES
              for step in _walk(table, qvectors, exact, refine, ef, target)]
    return {"target": target, "tuning_queries": len(qvectors), "ef": ef, "ladder": ladder,
            **choose_setting(ladder, target)}
