"""Queries right after opening the embedded index from its sidecar (memory-mapped arrays)
against the same index once its arrays are copied into ordinary memory, in ONE process.

    python bench/sidecar_warmup.py --db bench/.cache/store1m_f16/catalog.db [--cold]
                                   [--queries 50] [--name sidecar_warmup_1m]

Opens ``EmbeddedChunkIndex`` over a catalog that has a valid sidecar (``bench/dense_codes.py
--db ... --variants sidecar`` writes one) and times dense (k 100) and BM25 (k 100) searches
over every namespace: the first ``--queries`` after the open (pages fault in as they are
first touched), the next ``--queries`` (mapped, warm), then the same again after copying
every array into anonymous memory. ``--cold`` evicts the catalog and the sidecar from the
page cache first (``posix_fadvise(DONTNEED)``). Random unit query vectors and SciFact-like
query words; wrap in ``flock`` (timed).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from backends import DIM, EVERYTHING  # noqa: E402
from common import write_result  # noqa: E402
from dense_codes import evict  # noqa: E402
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog  # noqa: E402

WORDS = ("cell protein", "gene expression", "patients treatment", "risk study", "cancer",
         "mice model", "blood pressure", "immune response")


def to_memory(matrix: Any) -> None:
    """Replace a row index's snapshot arrays by in-memory copies."""
    s = matrix._snap
    matrix._snap = replace(s, **{f.name: np.array(getattr(s, f.name)) for f in fields(s)
                                 if isinstance(getattr(s, f.name), np.ndarray)})


def timed(index: EmbeddedChunkIndex, vectors: np.ndarray, texts: list[str]) -> dict[str, float]:
    """p50 ms of dense and BM25 searches over the given queries."""
    names = EVERYTHING
    dense, lexical = [], []
    for q, text in zip(vectors, texts, strict=True):
        t0 = time.perf_counter()
        index.dense_search(q, 100, names)
        t1 = time.perf_counter()
        index.lexical_search(text, 100, names)
        dense.append(t1 - t0)
        lexical.append(time.perf_counter() - t1)
    return {"dense_p50_ms": round(1000 * float(np.median(dense)), 2),
            "bm25_p50_ms": round(1000 * float(np.median(lexical)), 2)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--name", default="sidecar_warmup_1m")
    args = parser.parse_args(argv)
    if args.cold:
        evict(p for p in args.db.parent.iterdir() if p.name.startswith(args.db.name))
    rng = np.random.default_rng(11)
    n = args.queries
    vectors = rng.standard_normal((4 * n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    texts = [f"{WORDS[i % len(WORDS)]} q{i}" for i in range(4 * n)]
    t0 = time.perf_counter()
    catalog = SQLiteCatalog(args.db)
    index = EmbeddedChunkIndex(catalog, DIM, sidecar_after_rows=10**12)
    opened = time.perf_counter() - t0
    if index.sidecar_status != "loaded":
        raise SystemExit(f"no usable sidecar ({index.sidecar_status})")
    result: dict[str, Any] = {"open_s": round(opened, 3), "rows": len(index)}
    result["mapped_first"] = timed(index, vectors[:n], texts[:n])
    result["mapped_next"] = timed(index, vectors[n:2 * n], texts[n:2 * n])
    t0 = time.perf_counter()
    to_memory(index.dense)
    to_memory(index.postings)
    result["copy_to_memory_s"] = round(time.perf_counter() - t0, 2)
    result["in_memory"] = timed(index, vectors[2 * n:3 * n], texts[2 * n:3 * n])
    result["in_memory_again"] = timed(index, vectors[3 * n:], texts[3 * n:])
    catalog.close()
    print(result)
    write_result(args.name, {"settings": {"queries": n, "cold": args.cold}, **result})


if __name__ == "__main__":
    main()
