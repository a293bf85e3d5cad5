"""The dense partition's build when its centroids are many (``docgraph.store.lists_build``,
``ASSIST_MIN_LISTS`` forced down to 16 on a small clustered matrix): the k-means iterations
and the assignment of every row go through the product-quantizer fast scan with exact
re-ranking, and the partition must still hold every live row exactly once, put nearly every
row in the list the exact (flat) scan would, and keep the true neighbours of a query inside
the lists a query reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from docgraph.store import lists_build
from docgraph.store.dense_lists import DenseLists

DIM = 32
ROWS = 4_000  # 253 lists
CLUSTERS = 300
K = 10


def _matrix() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(unit vectors, their int8 codes, scales): clustered like the synthetic store."""
    rng = np.random.default_rng(5)
    centres = rng.standard_normal((CLUSTERS, DIM)).astype(np.float32)
    vectors = centres[rng.integers(CLUSTERS, size=ROWS)] + 0.3 * rng.standard_normal(
        (ROWS, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    scales = (np.abs(vectors).max(axis=1) / 127).astype(np.float32)
    codes = np.round(vectors / scales[:, None]).astype(np.int8)
    return vectors, codes, scales


def _build(tmp_path: Path, name: str) -> DenseLists:
    _, codes, scales = _matrix()
    rowids = np.arange(1, ROWS + 1, dtype=np.int64) * 3  # row ids are not positions
    alive = np.ones(ROWS, dtype=bool)
    alive[::10] = False  # deleted rows stay out of the lists
    lists = DenseLists(tmp_path / f"{name}.db", DIM, "catalog", min_rows=1)
    lists.update(rowids, alive, codes, scales, ROWS, threads=1)
    return lists


def test_the_fast_scan_partition_holds_every_live_row_once_with_the_exact_neighbours(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vectors, _, _ = _matrix()
    flat = _build(tmp_path, "flat").lists
    monkeypatch.setattr(lists_build, "ASSIST_MIN_LISTS", 16)
    used: list[int] = []
    made = lists_build.nearest_index
    monkeypatch.setattr(lists_build, "nearest_index",
                        lambda faiss, sample: used.append(len(sample)) or made(faiss, sample))
    built = _build(tmp_path, "assisted")
    fast = built.lists
    assert flat is not None and fast is not None
    assert len(used) == 2  # the k-means iterations and the assignment of every row
    assert len(fast.centroids) == lists_build.list_count(int(0.9 * ROWS)) >= 200
    live = np.flatnonzero(np.arange(ROWS) % 10 != 0)
    rowids = (live + 1) * 3
    assert np.array_equal(np.sort(fast.members), rowids)  # every live row, exactly once
    assert fast.members[fast.order].tolist() == rowids.tolist()
    # nearly every row in the list of its nearest centroid (exact inner products)
    which = np.repeat(np.arange(len(fast.centroids)), np.diff(fast.offsets))
    position = fast.members // 3 - 1
    nearest = np.argmax(vectors[position] @ fast.centroids.T, axis=1)
    assert np.mean(which == nearest) >= 0.99
    # the true top 10 of a query are in the lists it reads, as with the flat build
    queries = vectors[live[::37]]
    truth = np.argsort(-(queries @ vectors[live].T), axis=1)[:, 1:K + 1]
    found = {}
    for name, part in (("flat", flat), ("fast", fast)):
        inside = 0
        lists_of = np.repeat(np.arange(len(part.centroids)), np.diff(part.offsets))
        list_of_row = dict(zip(part.members.tolist(), lists_of.tolist(), strict=True))
        for q, top in zip(queries, truth, strict=True):
            read = set(np.argsort(-(part.centroids @ q))[:part.nprobe].tolist())
            inside += sum(list_of_row[int(rowids[t])] in read for t in top)
        found[name] = inside / (K * len(queries))
    assert found["fast"] >= 0.98 and found["fast"] >= found["flat"] - 0.01, found
    assert fast.nprobe <= 2 * flat.nprobe  # the tuning's own noise at this size: 9 vs 10
