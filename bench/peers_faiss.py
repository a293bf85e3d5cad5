"""Raw faiss for ``bench/peers.py``: the IVF index built over store_scale's synthetic
vectors (float32 lists, or 8-bit scalar-quantized ones where float32 does not fit: 15.4 GB
against 3.8 GB at 10M), its ``nprobe`` chosen on half the queries, and the query halves and
recall shared with the other engines' measurements."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from backends import DIM, K
from common import log
from dense_codes import rss_mb
from store_scale import SLICE, Synthetic, truth_path

NPROBE_MAX = 512  # --nprobe auto: the last step tried
PLATEAU = 0.002  # --nprobe auto: a doubling gaining less recall than this ends the search


def size_mb(path: Path) -> float:
    """MB on disk of a file or a folder's files."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return round(sum(p.stat().st_size for p in files) / 2**20, 1)


def recall(found: list[list[int]], truth: np.ndarray) -> float:
    """Share of the exact top 10s found, over all queries."""
    hits = sum(len(set(f) & set(t.tolist())) for f, t in zip(found, truth, strict=True))
    return round(hits / (K * len(found)), 4)


def query_set(db: Path, queries: int, part: str = "all") -> tuple[
        list[str], np.ndarray, np.ndarray]:
    """(texts, vectors, exact top 10) of the first ``queries`` queries of the truth file:
    all of them, or the first half ("tune": faiss's ``nprobe`` is chosen on it) or the
    second ("report": what every engine is timed on when it was), so the figures reported
    are not those the choice was made on."""
    truth = np.load(truth_path(db))
    half = queries // 2
    pick = {"all": slice(0, queries), "tune": slice(0, half),
            "report": slice(half, queries)}[part]
    return ([str(t) for t in truth["qtexts"][pick]],
            truth["qvectors"][pick].astype(np.float32), truth["truth_all"][pick])


def faiss_search(index: Any, nprobe: int, qvectors: np.ndarray) -> list[list[int]]:
    """The ids faiss finds for each query, one query a call (as the timed searches)."""
    index.nprobe = nprobe
    return [[int(x) for x in index.search(q[None, :], K)[1][0]] for q in qvectors]


def tune_nprobe(path: Path, db: Path, queries: int, target: float) -> dict[str, Any]:
    """The smallest ``nprobe`` (powers of two up to the lists) whose recall@10 on the
    tuning half of the queries reaches ``target``, and the recall at each step (untimed:
    recall only), so the nprobe reported is chosen, not picked after the fact."""
    import faiss

    _, qvectors, exact = query_set(db, queries, "tune")
    index = faiss.read_index(str(path))
    nlist = faiss.extract_index_ivf(index).nlist
    ladder: dict[int, float] = {}
    nprobe, last = 1, -1.0
    while nprobe <= min(nlist, NPROBE_MAX):
        ladder[nprobe] = found = recall(faiss_search(index, nprobe, qvectors), exact)
        log(f"    nprobe {nprobe}: recall@10 {found} on {len(qvectors)} queries")
        if found >= target or found - last < PLATEAU:
            break  # reached, or the quantizer's ceiling: more lists find no more
        nprobe, last = 2 * nprobe, found
    best = max(ladder.values())
    reached = best >= target
    chosen = min(p for p, r in ladder.items() if r >= (target if reached else best))
    return {"target": target, "tuning_queries": len(qvectors),
            "recall_by_nprobe": ladder, "chosen": chosen, "target_reached": reached}


def nprobes_of(spec: str, chosen: int | None) -> list[int]:
    """``--nprobe`` as numbers: a comma list of counts, ``auto`` standing for the tuned one."""
    out = [chosen if p.strip() == "auto" else int(p) for p in spec.split(",") if p.strip()]
    if any(p is None or p < 1 for p in out):
        raise SystemExit(f"--nprobe {spec!r}: counts >= 1, or auto once tuned")
    return list(dict.fromkeys(p for p in out if p is not None))


FAISS_INDEXES = {  # --faiss-index: the faiss index_factory string (nlist filled in)
    "ivf_flat": "IVF{nlist},Flat",  # float32 vectors: 15.4 GB at 10M
    "ivf_sq8": "IVF{nlist},SQ8",  # 8-bit scalar quantizer of the residuals: 3.8 GB at 10M
}


def faiss_file(work: Path, kind: str, n: int) -> Path:
    """Where the ``kind`` faiss index over ``n`` vectors lives (IVF flat: the 1M name)."""
    return work / (f"faiss_ivf_{n}.index" if kind == "ivf_flat" else f"faiss_{kind}_{n}.index")


def faiss_key(kind: str, n: int) -> str:
    """The faiss build's key in ``builds.json`` (IVF flat: the 1M runs' key)."""
    return f"faiss_{n}" if kind == "ivf_flat" else f"faiss_{kind}_{n}"


def build_faiss(work: Path, n: int, kind: str = "ivf_flat") -> dict[str, Any]:
    """A faiss IVF index (``kind`` of ``FAISS_INDEXES``; inner product, sqrt(n) lists
    trained on 64 sampled vectors a list) over the ``n`` vectors, added slice by slice."""
    import faiss

    data = Synthetic(n)
    nlist = round(float(np.sqrt(n)))
    factory = FAISS_INDEXES[kind].format(nlist=nlist)
    index = faiss.index_factory(DIM, factory, faiss.METRIC_INNER_PRODUCT)
    sample = np.random.default_rng(11).choice(n, size=min(n, 64 * nlist), replace=False)
    t0 = time.perf_counter()
    train = np.concatenate([data.vectors(s)[sample[(sample >= s) & (sample < s + SLICE)] - s]
                            for s in data.slices()])
    index.train(train)
    del train
    train_s = time.perf_counter() - t0
    log(f"    faiss {factory} trained in {train_s:.0f} s")
    for start in data.slices():
        index.add(data.vectors(start))
        if (start // SLICE) % 10 == 9:
            log(f"    faiss {start + SLICE}/{n} added, {time.perf_counter() - t0:.0f} s")
    build_s = time.perf_counter() - t0
    path = faiss_file(work, kind, n)
    faiss.write_index(index, str(path))
    return {"engine": "faiss", "index": kind, "factory": factory, "rows": n, "nlist": nlist,
            "train_s": round(train_s, 1), "build_s": round(build_s, 1),
            "index_mb": size_mb(path), "build_peak_rss_mb": round(rss_mb()[1]),
            "build_loadavg_1": round(os.getloadavg()[0], 2)}


