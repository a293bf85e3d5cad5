"""An inverted-file partition (IVF) of the compact dense matrix, beside the catalog.

The sign scan (:mod:`docgraph.store.quantized`) reads every allowed row's signs per query:
~15 ms at 1M chunks, ~125 ms at 10M. From a row count (``[store] dense_graph_min_rows``
with ``[store] dense_ann = "lists"``) this module gives the scan's first stage a partition
instead: the rows are split into ``lists`` by their nearest of ``4 sqrt(rows)`` centroids
(spherical k-means, faiss, on a sample), and a query reads only the rows of the lists whose
centroids are nearest to it (``nprobe``), then the matrix ranks those exactly as the scan
ranks its pool (signs, int8 codes, float32 cosines read from the catalog), so results carry
exact scores. Unlike the HNSW graph (:mod:`docgraph.store.graph_ann`), the partition stores
no second copy of the vectors: only the centroids and each row's list, grouped (~12 bytes a
row), and the candidate rows are scored from the matrix's own codes.

**How many lists to read** is chosen when the partition is built, on tuning queries made
to look like questions: rows of the catalog drawn at random, each moved toward another row
drawn at random (``TUNING_COSINE`` to where it started), asking for its 10 nearest rows (by
the int8 codes, over every row); ``nprobe`` is the fewest lists that hold ``TUNING_RECALL``
of those neighbours, and at least ``MIN_NPROBE``. It is stored with the partition and is
the floor of every query.

**Filters stay exact and k filled.** The filters (namespaces, kind, ``alive``, the
caller's row filter) are applied to the candidate rows only, so a query's cost is the lists
it reads, not the rows of the catalog. A query reads lists in order of nearness until it
has read ``nprobe`` of them and holds the rows it needs; a filter that allows fewer than
``min_share`` of the live rows (selective namespaces, a caller who may read little) takes
the exact scan of the allowed rows instead, as does a query whose lists, read up to
``MAX_PROBE_FACTOR`` times ``nprobe``, hold fewer than ``k`` allowed rows.

**A cache that follows the catalog.** One file (``<catalog>.chunk-lists``, written by
:func:`~docgraph.store.sidecar.write_arrays`: crash-safe, mapped at open, no faiss import
to read it) holds the centroids, the row ids grouped by list, the list offsets, the
permutation that sorts the row ids, its inverse and a digest of the sorted row ids; it is
rebuilt when missing, foreign or unreadable, so deleting it loses nothing. Rows the file
does not hold (added since, by any process, or a vector that arrived later) form the
*tail*, which every query reads; rows deleted since stay in their lists, excluded by
``alive`` (or compacted away). Once the tail reaches ``update_rows`` rows, a background
thread assigns it to the existing centroids and writes the file again (no k-means); a
quarter of dead rows, or four times the rows trained on, trains anew.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from docgraph.store.ann_cache import BackgroundUpdates, load_faiss
from docgraph.store.sidecar import SidecarError, read_arrays, write_arrays

log = logging.getLogger(__name__)

LISTS_FORMAT = 2  # 2: the members' sorting permutation
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
MAX_PROBE_FACTOR = 8  # lists read at most, in units of nprobe, before the scan answers
# Share of the live rows a query's filters must allow for the lists to be asked.
LISTS_MIN_SHARE = 0.05
LISTS_UPDATE_ROWS = 50_000
SEED = 1234


def lists_path(catalog_path: Path) -> Path:
    """The file of the catalog's dense partition."""
    return catalog_path.with_name(catalog_path.name + ".chunk-lists")


@dataclass(frozen=True)
class Lists:
    """One immutable partition: centroids, the row ids of each list (list ``i`` is
    ``members[offsets[i]:offsets[i + 1]]``), the permutation that sorts the members (so a
    snapshot finds them with one ordered ``searchsorted``: 0.05 s instead of 0.8 s at 1M),
    lists read per query, rows trained on; in newer files also each member's rank among the
    sorted members (``order`` inverted) and their :func:`members_digest`."""

    centroids: npt.NDArray[np.float32]
    members: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]
    order: npt.NDArray[np.int32]
    nprobe: int
    trained_rows: int
    rank: npt.NDArray[np.int32] | None = None
    digest: str = ""


def members_digest(ascending: npt.NDArray[np.int64]) -> str:
    """A digest of ascending row ids (little-endian int64, hashed in place): a snapshot's
    first rows have a partition's when they are its sorted members."""
    data = np.ascontiguousarray(ascending, dtype="<i8")
    return hashlib.blake2b(data.data, digest_size=16).hexdigest()


def _ranks(order: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
    """Each member's rank among the sorted members (the inverse permutation of ``order``)."""
    rank = np.empty(len(order), dtype=np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    return rank


@dataclass(frozen=True)
class _Placement:
    """Where a partition's rows are in one snapshot: the position of each member (-1: not
    in the snapshot) and the positions of the snapshot's rows the partition lacks."""

    rowids: npt.NDArray[np.int64]
    lists: Lists
    n: int
    pos: npt.NDArray[np.int32]
    tail: npt.NDArray[np.intp]


class DenseLists(BackgroundUpdates):
    """The partition of one catalog's dense rows: opened from its file, asked for
    candidates by the matrix, updated in a background thread as the matrix changes (the
    interface of :class:`~docgraph.store.graph_ann.DenseGraph`)."""

    what = "chunk lists"

    def __init__(self, catalog_path: Path, dimension: int, catalog_id: str, *,
                 min_rows: int, min_share: float = LISTS_MIN_SHARE,
                 update_rows: int = LISTS_UPDATE_ROWS, persist: bool = True) -> None:
        super().__init__(lists_path(catalog_path), dimension, catalog_id, min_rows=min_rows,
                         min_share=min_share, update_rows=update_rows, persist=persist)
        self.lists: Lists | None = None
        self._placement: _Placement | None = None
        self.probed = 0  # lists read by those queries, in all

    def _meta(self) -> dict[str, Any]:
        return {"format": LISTS_FORMAT, "catalog_id": self.catalog_id,
                "dimension": self.dimension}

    def open(self, chunk_seq: int) -> str:
        """Map the partition's file if it belongs to this catalog; returns how it went
        (missing, foreign, stale: it names rows this catalog never had, corrupt, loaded)."""
        found, meta, arrays = self.read_file(self._meta())
        if found != "read":
            self.status = found
            return self.status
        try:
            lists = Lists(np.asarray(arrays["centroids"], dtype=np.float32),
                          np.asarray(arrays["members"], dtype=np.int64),
                          np.asarray(arrays["offsets"], dtype=np.int64),
                          np.asarray(arrays["order"], dtype=np.int32),
                          int(meta["nprobe"]), int(meta["trained_rows"]),
                          (np.asarray(arrays["rank"], dtype=np.int32) if "rank" in arrays
                           else None), str(meta.get("members_digest", "")))
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("chunk lists ignored: %s: %s", self.path, exc)
            self.status = "corrupt"
            return self.status
        if (lists.centroids.ndim != 2 or lists.centroids.shape[1] != self.dimension
                or len(lists.offsets) != len(lists.centroids) + 1
                or int(lists.offsets[-1]) != len(lists.members)
                or len(lists.order) != len(lists.members)
                or (lists.rank is not None and len(lists.rank) != len(lists.members))):
            self.status = "corrupt"
            return self.status
        if len(lists.members) and int(lists.members[lists.order[-1]]) > chunk_seq:  # older
            self.status = "stale"
            return self.status
        self.lists = lists
        self.status = "loaded"
        return self.status

    def placement(self, rowids: npt.NDArray[np.int64], n: int, lists: Lists) -> _Placement:
        """Each member's position among the snapshot's rows ``[0, n)`` and the positions of
        the rows no list holds, kept per row-id array and extended as rows are appended
        (rows written by another process may be members before this one reads them)."""
        kept = self._placement
        if kept is not None and kept.rowids is rowids and kept.lists is lists and kept.n <= n:
            if kept.n == n:
                return kept
            start, pos, tail = kept.n, kept.pos, kept.tail
            part = rowids[start:n]
            unmatched = np.flatnonzero(pos < 0)
            unmatched = unmatched[lists.members[unmatched] >= part[0]]
            covered = np.zeros(n - start, dtype=bool)
            if len(unmatched):
                at = np.minimum(np.searchsorted(part, lists.members[unmatched]), len(part) - 1)
                found = part[at] == lists.members[unmatched]
                if found.any():
                    pos = pos.copy()  # readers may hold the previous placement
                    pos[unmatched[found]] = at[found] + start
                    covered[at[found]] = True
            tail = np.concatenate([tail, np.flatnonzero(~covered) + start])
        else:
            used, members = rowids[:n], len(lists.members)
            if (lists.rank is not None and lists.digest and 0 < members <= n
                    and int(used[members - 1]) == int(lists.members[lists.order[-1]])
                    and members_digest(used[:members]) == lists.digest):
                # the first rows are the sorted members (said by the file's digest, without
                # the gather of the members that took 0.6 s of a cold 10M open): their ranks
                pos, tail = lists.rank, np.arange(members, n)
            elif members <= n and np.array_equal(used[:members], lists.members[lists.order]):
                # no member gone, rows only appended since the build (an older file: at 10M
                # the general way below took 1-2 s of the open's first update check)
                pos, tail = _ranks(lists.order), np.arange(members, n)
            else:
                ordered = lists.members[lists.order]
                at = np.minimum(np.searchsorted(used, ordered), max(n - 1, 0))
                found = (used[at] == ordered) if n else np.zeros(len(ordered), bool)
                pos = np.full(len(ordered), -1, dtype=np.int32)  # half intp's memory
                pos[lists.order[found]] = at[found]
                covered = np.zeros(n, dtype=bool)
                covered[at[found]] = True
                tail = np.flatnonzero(~covered)
        made = _Placement(rowids, lists, n, pos, tail.astype(np.intp))
        self._placement = made
        return made

    def candidates(self, rowids: npt.NDArray[np.int64], n: int, live: int,
                   allowed: npt.NDArray[np.bool_], allowed_count: int,
                   query: npt.NDArray[np.float32], want: int, k: int,
                   ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]] | None:
        """(allowed positions in the lists nearest the query, allowed tail positions), or
        None when the exact scan must answer: no partition, too few rows, too selective a
        filter, or fewer than ``k`` allowed rows within the lists it may read."""
        lists = self.lists
        if lists is None or live < self.min_rows or allowed_count < self.min_share * live:
            return None
        placed = self.placement(rowids, n, lists)
        tail = placed.tail[allowed[placed.tail]]
        nlist = len(lists.centroids)
        limit = min(nlist, MAX_PROBE_FACTOR * lists.nprobe)
        near = lists.centroids @ query
        order = (np.argpartition(-near, limit - 1)[:limit] if limit < nlist
                 else np.arange(nlist))
        order = order[np.argsort(-near[order], kind="stable")]
        parts: list[npt.NDArray[np.int32]] = []
        total = len(tail)
        read = 0
        offsets, pos = lists.offsets, placed.pos
        for i in order.tolist():
            seg = pos[offsets[i]:offsets[i + 1]]
            seg = seg[seg >= 0]
            seg = seg[allowed[seg]]
            parts.append(seg)
            total += len(seg)
            read += 1
            if read >= lists.nprobe and total >= want:
                break
        if total < min(k, allowed_count):
            return None
        self.answered += 1
        self.probed += read
        found = np.concatenate(parts).astype(np.intp) if parts else np.zeros(0, np.intp)
        return found, tail

    def due(self, rowids: npt.NDArray[np.int64], n: int, live: int) -> bool:
        """Whether the partition should be built or updated now: enough live rows, and none
        yet, a long tail, a quarter of its rows dead, or far more rows than it was trained
        on."""
        if live < self.min_rows or self.busy() or self.status == "unavailable":
            return False
        lists = self.lists
        if lists is None:
            return True
        outside = len(self.placement(rowids, n, lists).tail)
        dead = len(lists.members) - (live - outside)
        return (outside >= self.update_rows or 4 * dead > len(lists.members)
                or live > 4 * lists.trained_rows)

    def update(self, rowids: npt.NDArray[np.int64], alive: npt.NDArray[np.bool_],
               codes: npt.NDArray[np.int8], scales: npt.NDArray[np.float32], n: int,
               threads: int) -> None:
        """Bring the partition to the matrix's live rows ``[0, n)``: the rows it lacks
        assigned to its centroids, or (none yet, a quarter of its rows dead, or four times
        the rows it was trained on) new centroids trained and every live row assigned; then
        written and mapped in place of the old one."""
        started = time.perf_counter()
        live = np.flatnonzero(alive[:n])
        old = self.lists
        if old is not None:
            kept = np.isin(old.members, rowids[live])
            if 4 * int((~kept).sum()) > len(old.members) or len(live) > 4 * old.trained_rows:
                old = None
        try:
            faiss = load_faiss()
        except RuntimeError:
            self.status = "unavailable"  # said once; never tried again by this process
            raise
        faiss.omp_set_num_threads(threads)
        if old is None:
            centroids = _train(faiss, codes, scales, live, self.dimension)
            add, base_members, base_lists = live, np.zeros(0, np.int64), np.zeros(0, np.int64)
        else:
            centroids = old.centroids
            add = live[~np.isin(rowids[live], old.members)]
            base_members = old.members[kept]
            base_lists = np.repeat(np.arange(len(old.centroids)), np.diff(old.offsets))[kept]
        assigned = _assign(faiss, centroids, codes, scales, add)
        nprobe = (_tune(faiss, centroids, codes, scales, live, assigned, add)
                  if old is None else old.nprobe)
        members = np.concatenate([base_members, rowids[add]]).astype(np.int64)
        which = np.concatenate([base_lists, assigned]).astype(np.int64)
        order = np.lexsort((members, which))
        counts = np.bincount(which, minlength=len(centroids))
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        trained = len(live) if old is None else old.trained_rows
        grouped = members[order]
        sorting = np.argsort(grouped, kind="stable").astype(np.int32)
        rank = _ranks(sorting)
        lists = Lists(np.ascontiguousarray(centroids, dtype=np.float32), grouped, offsets,
                      sorting, nprobe, trained, rank, members_digest(grouped[sorting]))
        try:
            if not self.persist:
                raise OSError("the index is read-only (copy this file with it to spare the "
                              "build at every start)")
            write_arrays(self.path, {**self._meta(), "nprobe": nprobe, "trained_rows": trained,
                                     "members_digest": lists.digest},
                         {"centroids": lists.centroids, "members": lists.members,
                          "offsets": lists.offsets, "order": lists.order,
                          "rank": rank})
            _, arrays = read_arrays(self.path)  # mapped: the heap copy is let go
            lists = Lists(arrays["centroids"], arrays["members"], arrays["offsets"],
                          arrays["order"], nprobe, trained, arrays["rank"], lists.digest)
        except (OSError, SidecarError) as exc:  # a read-only folder: keep it in memory
            log.warning("chunk lists kept in memory, not written: %s: %s", self.path, exc)
        self.lists = lists
        self.status = "loaded"
        self.last_build_s = time.perf_counter() - started
        log.info("chunk lists %s: %d rows (%d added) in %d lists, nprobe %d, in %.1f s",
                 self.path, len(members), len(add), len(centroids), nprobe, self.last_build_s)

    def size_bytes(self) -> int:
        """Bytes on disk of the partition's file (0 when none)."""
        return self.path.stat().st_size if self.path.exists() else 0


def _floats(codes: npt.NDArray[np.int8], scales: npt.NDArray[np.float32],
            rows: npt.NDArray[np.intp]) -> npt.NDArray[np.float32]:
    """The rows' vectors as their int8 codes give them back (unit length within ~1e-3)."""
    out: npt.NDArray[np.float32] = codes[rows].astype(np.float32) * scales[rows, None]
    return np.ascontiguousarray(out)


def list_count(rows: int) -> int:
    """Lists for a partition of ``rows`` rows: ``LISTS_PER_SQRT * sqrt(rows)``, at least
    ``MIN_LISTS``, and never fewer than 4 rows a list on average."""
    wanted = max(MIN_LISTS, round(LISTS_PER_SQRT * math.sqrt(max(rows, 1))))
    return max(1, min(wanted, rows // 4))


def _train(faiss: Any, codes: npt.NDArray[np.int8], scales: npt.NDArray[np.float32],
           live: npt.NDArray[np.intp], dimension: int) -> npt.NDArray[np.float32]:
    """Spherical k-means centroids of a sample of the live rows (evenly spaced positions,
    so the sample follows the catalog's order of writing)."""
    nlist = list_count(len(live))
    take = min(len(live), nlist * TRAIN_PER_LIST)
    sample = live[np.linspace(0, len(live) - 1, take).astype(np.intp)]
    kmeans = faiss.Kmeans(dimension, nlist, niter=KMEANS_ITERATIONS, spherical=True,
                          seed=SEED, max_points_per_centroid=TRAIN_PER_LIST,
                          min_points_per_centroid=1, verbose=False)
    x = _floats(codes, scales, sample)
    if _assisted(nlist):  # the k-means iterations assign through the fast scan
        kmeans.index = _nearest_index(faiss, x)
    kmeans.train(x)
    centroids: npt.NDArray[np.float32] = np.asarray(kmeans.centroids, dtype=np.float32)
    return centroids


def _assign(faiss: Any, centroids: npt.NDArray[np.float32], codes: npt.NDArray[np.int8],
            scales: npt.NDArray[np.float32], rows: npt.NDArray[np.intp]
            ) -> npt.NDArray[np.int64]:
    """The nearest centroid (inner product) of each of ``rows``, in batches (through the
    product-quantizer fast scan from ``ASSIST_MIN_LISTS`` centroids)."""
    centroids = np.ascontiguousarray(centroids, dtype=np.float32)
    index = (_nearest_index(faiss, centroids) if _assisted(len(centroids))
             else faiss.IndexFlatIP(centroids.shape[1]))
    index.add(centroids)
    out = np.empty(len(rows), dtype=np.int64)
    for start in range(0, len(rows), ASSIGN_BATCH):
        part = rows[start:start + ASSIGN_BATCH]
        _, nearest = index.search(_floats(codes, scales, part), 1)
        out[start:start + len(part)] = nearest[:, 0]
    return out


def _assisted(centroids: int) -> bool:
    """Whether rows find their nearest of ``centroids`` through :func:`_nearest_index`
    (the product quantizer needs 16 vectors a sub-space to train on)."""
    return centroids >= max(ASSIST_MIN_LISTS, 16)


def _nearest_index(faiss: Any, sample: npt.NDArray[np.float32]) -> Any:
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


def _tune(faiss: Any, centroids: npt.NDArray[np.float32], codes: npt.NDArray[np.int8],
          scales: npt.NDArray[np.float32], live: npt.NDArray[np.intp],
          assigned: npt.NDArray[np.int64], rows: npt.NDArray[np.intp]) -> int:
    """The fewest lists a query must read for ``TUNING_RECALL`` of its true neighbours to
    be in them, on ``TUNING_QUERIES`` question-like probes (:func:`_probes`), each asking
    for its ``TUNING_K`` nearest rows (``assigned[i]`` is the list of ``rows[i]``)."""
    if len(rows) <= TUNING_K + 1 or len(centroids) == 1:
        return min(MIN_NPROBE, len(centroids))
    queries = _probes(codes, scales, rows, np.random.default_rng(SEED))
    want = TUNING_K
    best_d = np.full((len(queries), want), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), want), dtype=np.int64)
    for start in range(0, len(rows), ASSIGN_BATCH):
        part = rows[start:start + ASSIGN_BATCH]
        d, i = faiss.knn(queries, _floats(codes, scales, part), min(want, len(part)),
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


def _probes(codes: npt.NDArray[np.int8], scales: npt.NDArray[np.float32],
            rows: npt.NDArray[np.intp], rng: np.random.Generator) -> npt.NDArray[np.float32]:
    """Tuning queries that sit between passages as questions do: ``TUNING_QUERIES`` rows
    drawn at random, each moved toward another row drawn at random (toward a random
    direction where that row is parallel to it, a duplicate or itself) to cosine
    ``TUNING_COSINE`` with where it started; unit length."""
    picks = rng.choice(len(rows), size=min(TUNING_QUERIES, len(rows)), replace=False)
    start = _floats(codes, scales, rows[picks])
    start /= np.maximum(np.linalg.norm(start, axis=1, keepdims=True), 1e-12)  # a zero row
    toward = _floats(codes, scales, rows[rng.integers(0, len(rows), size=len(picks))])
    toward -= (toward * start).sum(axis=1, keepdims=True) * start
    flat = np.linalg.norm(toward, axis=1) < 1e-3
    if flat.any():
        noise = rng.standard_normal((int(flat.sum()), start.shape[1])).astype(np.float32)
        noise -= (noise * start[flat]).sum(axis=1, keepdims=True) * start[flat]
        toward[flat] = noise
    toward /= np.maximum(np.linalg.norm(toward, axis=1, keepdims=True), 1e-12)
    moved = TUNING_COSINE * start + math.sqrt(1 - TUNING_COSINE ** 2) * toward
    return np.ascontiguousarray(moved, dtype=np.float32)
