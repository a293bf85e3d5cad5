"""How a dense partition (:mod:`docgraph.store.dense_lists`) is built: spherical k-means
centroids of a sample of the rows, every row assigned to its nearest centroid, and the
number of lists a query reads (``nprobe``) tuned on question-like probes. faiss does the
arithmetic (passed in: imported on first use by the caller); the rows are read from the
compact matrix's int8 codes, never from the catalog. From ``ASSIST_MIN_LISTS`` centroids a
row finds its nearest through a fast scan of the centroids (:func:`nearest_index`), in the
k-means iterations and in the assignment.

The constants below were measured where their comments say; the build's figures at 1M and
10M are in docs/ARCHITECTURE.md ("The build at scale").
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

# Lists per square root of the rows at training (sqrt(n)..4 sqrt(n) is the usual range;
# more lists read fewer rows a query but cost k-means and assignment time in proportion).
# Fewer lists than the data has clusters split clusters between lists: on a 200k sample of
# the 1M bench (2,000 clusters) 1 sqrt(n) = 447 lists needed nprobe 77 for recall@10
# 0.9885, 4 sqrt(n) = 1,789 lists nprobe 2 for 0.999 (bench/dense_ann_sample.py).
LISTS_PER_SQRT = 4.0
MIN_LISTS = 8
TRAIN_PER_LIST = 64  # k-means sample: rows per centroid (faiss warns below 39)
KMEANS_ITERATIONS = 16
ASSIGN_BATCH = 65_536  # rows decoded to float32 and assigned per step (~100 MB)
# From this many centroids, rows find their nearest (in the k-means iterations and in the
# assignment of every row) through a 4-bit product-quantizer fast scan of the centroids that
# re-ranks its best ASSIST_REFINE exactly, instead of the flat float32 product. At the 10M
# shape (12,649 centroids, bench/lists_build_probe.py) a k-means iteration took 12.5-21.8 s
# against 112.9 and assigning 200k rows 3.5-6.2 s against 11.4-27.4; rows near a centroid
# get the flat's, rows near none (clusters without a centroid of their own) a near one:
# 0.876 / 0.938 / 0.962 agreement re-ranking 4 / 16 / 32 for 3.5 / 3.8 / 4.4 s, but 16 did
# not raise recall at 1M (0.995 against 4's 0.997 / 0.997, flat 0.998), so 4. An HNSW
# graph over the centroids did not pay there: 0.71 / 0.91 agreement at efSearch 16 / 64 in
# 20.6 / 41.2 s, slower than the flat scan (near-orthogonal clusters: nothing to follow).
ASSIST_MIN_LISTS = 2_000
ASSIST_REFINE = 4
ASSIST_TRAIN_ROWS = 16_384  # vectors the product quantizer's codebooks are trained on
# The tuning queries are made to look like questions, not passages: the catalog's own rows
# asking for their nearest other rows (leave-one-out) are easier than real questions (on
# MiniLM's SciFact passages that tuning chose nprobe 53 of 433 lists and the questions kept
# 0.977 of the scan's top 10; bench/lists_real.py). A question sits between passages: its
# nearest passage has cosine ~0.64 (SciFact, MiniLM), the next ones little less. So each
# probe is a row drawn at random moved toward another row drawn at random (the part of it
# orthogonal to the first), to cosine TUNING_COSINE with the row it started from, and asks
# for its TUNING_K nearest rows (its two rows often among them).
TUNING_QUERIES = 1000  # probes; 200 left the 99.5 % tail to a handful (nprobe 43-71 by seed)
TUNING_K = 10
TUNING_RECALL = 0.995  # of the probes' true neighbours inside the lists read
# Chosen on SciFact's tuning half only (bench/splits; its test half and 2Wiki held out):
# from 0.5 to 0.9 the tuned nprobe moved little (57-77 of 433 lists over five seeds); 0.55,
# 0.6, 0.8 and 0.85 kept >= 0.98 of the scan's top 10 on that half for every seed, and 0.6
# is the nearest to the questions' own cosine to their nearest passage (median 0.64).
TUNING_COSINE = 0.6
# Lists read at least, a guard where the tuning is optimistic: at 1M with sqrt(n) = 1,000
# lists the leave-one-out tuning the probes replaced chose 1, and one 10 % namespace query
# in 100 lost 9 of its 10 neighbours (its own row in one list, its cluster in the 8th
# nearest; 2 did not save it, 4 sqrt(n) lists did: nprobe 3, recall 0.998 / 1.0).
MIN_NPROBE = 2
SEED = 1234


def floats(codes: npt.NDArray[np.int8], scales: npt.NDArray[np.float32],
            rows: npt.NDArray[np.intp]) -> npt.NDArray[np.float32]:
    """The rows' vectors as their int8 codes give them back (unit length within ~1e-3)."""
    out: npt.NDArray[np.float32] = codes[rows].astype(np.float32) * scales[rows, None]
    return np.ascontiguousarray(out)


def list_count(rows: int) -> int:
    """Lists for a partition of ``rows`` rows: ``LISTS_PER_SQRT * sqrt(rows)``, at least
    ``MIN_LISTS``, and never fewer than 4 rows a list on average."""
    wanted = max(MIN_LISTS, round(LISTS_PER_SQRT * math.sqrt(max(rows, 1))))
    return max(1, min(wanted, rows // 4))


def train(faiss: Any, codes: npt.NDArray[np.int8], scales: npt.NDArray[np.float32],
           live: npt.NDArray[np.intp], dimension: int) -> npt.NDArray[np.float32]:
    """Spherical k-means centroids of a sample of the live rows (evenly spaced positions,
    so the sample follows the catalog's order of writing)."""
    nlist = list_count(len(live))
    take = min(len(live), nlist * TRAIN_PER_LIST)
    sample = live[np.linspace(0, len(live) - 1, take).astype(np.intp)]
    kmeans = faiss.Kmeans(dimension, nlist, niter=KMEANS_ITERATIONS, spherical=True,
                          seed=SEED, max_points_per_centroid=TRAIN_PER_LIST,
                          min_points_per_centroid=1, verbose=False)
    x = floats(codes, scales, sample)
    if assisted(nlist):  # the k-means iterations assign through the fast scan
        kmeans.index = nearest_index(faiss, x)
    kmeans.train(x)
    centroids: npt.NDArray[np.float32] = np.asarray(kmeans.centroids, dtype=np.float32)
    return centroids


def assign(faiss: Any, centroids: npt.NDArray[np.float32], codes: npt.NDArray[np.int8],
            scales: npt.NDArray[np.float32], rows: npt.NDArray[np.intp]
            ) -> npt.NDArray[np.int64]:
    """The nearest centroid (inner product) of each of ``rows``, in batches (through the
    product-quantizer fast scan from ``ASSIST_MIN_LISTS`` centroids)."""
    centroids = np.ascontiguousarray(centroids, dtype=np.float32)
    index = (nearest_index(faiss, centroids) if assisted(len(centroids))
             else faiss.IndexFlatIP(centroids.shape[1]))
    index.add(centroids)
    out = np.empty(len(rows), dtype=np.int64)
    for start in range(0, len(rows), ASSIGN_BATCH):
        part = rows[start:start + ASSIGN_BATCH]
        _, nearest = index.search(floats(codes, scales, part), 1)
        out[start:start + len(part)] = nearest[:, 0]
    return out


def assisted(centroids: int) -> bool:
    """Whether rows find their nearest of ``centroids`` through :func:`nearest_index`
    (the product quantizer needs 16 vectors a sub-space to train on)."""
    return centroids >= max(ASSIST_MIN_LISTS, 16)


def nearest_index(faiss: Any, sample: npt.NDArray[np.float32]) -> Any:
    """An empty index finding many rows' nearest centroid (inner product) faster than the
    flat scan: a 4-bit product quantizer (4 dimensions a sub-quantizer, codebooks trained
    once on ``sample``), its best ``ASSIST_REFINE`` re-ranked exactly (``IndexRefineFlat``:
    a near miss costs a tie, not a far centroid); k-means refills it each iteration."""
    dimension = sample.shape[1]
    subs = max(1, dimension // 4)
    while dimension % subs:
        subs -= 1
    quantizer = faiss.IndexPQFastScan(dimension, subs, 4, faiss.METRIC_INNER_PRODUCT)
    take = np.linspace(0, len(sample) - 1, min(len(sample), ASSIST_TRAIN_ROWS)).astype(np.intp)
    threads = faiss.omp_get_max_threads()
    # one thread: its 16-centroid k-means per sub-space is tiny, and OpenMP threads waiting
    # on each other on busy cores made it 20x slower (1.2 s vs 25 s at load 9 on 2 cores)
    faiss.omp_set_num_threads(1)
    try:
        quantizer.train(np.ascontiguousarray(sample[take]))
    finally:
        faiss.omp_set_num_threads(threads)
    index = faiss.IndexRefineFlat(quantizer)
    index.k_factor = ASSIST_REFINE
    return index


def tune(faiss: Any, centroids: npt.NDArray[np.float32], codes: npt.NDArray[np.int8],
          scales: npt.NDArray[np.float32], live: npt.NDArray[np.intp],
          assigned: npt.NDArray[np.int64], rows: npt.NDArray[np.intp]) -> int:
    """The fewest lists a query must read for ``TUNING_RECALL`` of its true neighbours to
    be in them, on ``TUNING_QUERIES`` question-like probes (:func:`probes`), each asking
    for its ``TUNING_K`` nearest rows (``assigned[i]`` is the list of ``rows[i]``)."""
    if len(rows) <= TUNING_K + 1 or len(centroids) == 1:
        return min(MIN_NPROBE, len(centroids))
    queries = probes(codes, scales, rows, np.random.default_rng(SEED))
    want = TUNING_K
    best_d = np.full((len(queries), want), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), want), dtype=np.int64)
    for start in range(0, len(rows), ASSIGN_BATCH):
        part = rows[start:start + ASSIGN_BATCH]
        d, i = faiss.knn(queries, floats(codes, scales, part), min(want, len(part)),
                         metric=faiss.METRIC_INNER_PRODUCT)
        d = np.concatenate([best_d, d], axis=1)
        i = np.concatenate([best_i, i + start], axis=1)
        top = np.argsort(-d, axis=1, kind="stable")[:, :want]
        best_d, best_i = np.take_along_axis(d, top, 1), np.take_along_axis(i, top, 1)
    ranks = np.empty((len(queries), len(centroids)), dtype=np.int64)
    order = np.argsort(-(queries @ centroids.T), axis=1, kind="stable")
    np.put_along_axis(ranks, order, np.arange(len(centroids))[None, :], axis=1)
    needed = np.take_along_axis(ranks, assigned[best_i], axis=1) + 1
    tuned = int(np.quantile(needed, TUNING_RECALL, method="higher"))
    return min(len(centroids), max(MIN_NPROBE, tuned))


def probes(codes: npt.NDArray[np.int8], scales: npt.NDArray[np.float32],
            rows: npt.NDArray[np.intp], rng: np.random.Generator) -> npt.NDArray[np.float32]:
    """Tuning queries that sit between passages as questions do: ``TUNING_QUERIES`` rows
    drawn at random, each moved toward another row drawn at random (toward a random
    direction where that row is parallel to it, a duplicate or itself) to cosine
    ``TUNING_COSINE`` with where it started; unit length."""
    picks = rng.choice(len(rows), size=min(TUNING_QUERIES, len(rows)), replace=False)
    start = floats(codes, scales, rows[picks])
    start /= np.maximum(np.linalg.norm(start, axis=1, keepdims=True), 1e-12)  # a zero row
    toward = floats(codes, scales, rows[rng.integers(0, len(rows), size=len(picks))])
    toward -= (toward * start).sum(axis=1, keepdims=True) * start
    flat = np.linalg.norm(toward, axis=1) < 1e-3
    if flat.any():
        noise = rng.standard_normal((int(flat.sum()), start.shape[1])).astype(np.float32)
        noise -= (noise * start[flat]).sum(axis=1, keepdims=True) * start[flat]
        toward[flat] = noise
    toward /= np.maximum(np.linalg.norm(toward, axis=1, keepdims=True), 1e-12)
    moved = TUNING_COSINE * start + math.sqrt(1 - TUNING_COSINE ** 2) * toward
    return np.ascontiguousarray(moved, dtype=np.float32)
