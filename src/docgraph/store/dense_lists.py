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

**How many lists to read** is chosen when the partition is built (with the k-means and
the assignment, :mod:`docgraph.store.lists_build`), on tuning queries made to look like
questions: rows of the catalog drawn at random, each moved toward another row drawn at
random (``TUNING_COSINE`` to where it started), asking for its 10 nearest rows (by the int8
codes, over every row); ``nprobe`` is the fewest lists that hold ``TUNING_RECALL`` of those
neighbours, and at least ``MIN_NPROBE``. It is stored with the partition and is the floor
of every query.

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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from docgraph.store import lists_build
from docgraph.store.ann_cache import BackgroundUpdates, load_faiss
from docgraph.store.sidecar import SidecarError, read_arrays, write_arrays

log = logging.getLogger(__name__)

LISTS_FORMAT = 2  # 2: the members' sorting permutation
MAX_PROBE_FACTOR = 8  # lists read at most, in units of nprobe, before the scan answers
# Share of the live rows a query's filters must allow for the lists to be asked.
LISTS_MIN_SHARE = 0.05
LISTS_UPDATE_ROWS = 50_000


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
            centroids = lists_build.train(faiss, codes, scales, live, self.dimension)
            add, base_members, base_lists = live, np.zeros(0, np.int64), np.zeros(0, np.int64)
        else:
            centroids = old.centroids
            add = live[~np.isin(rowids[live], old.members)]
            base_members = old.members[kept]
            base_lists = np.repeat(np.arange(len(old.centroids)), np.diff(old.offsets))[kept]
        assigned = lists_build.assign(faiss, centroids, codes, scales, add)
        nprobe = (lists_build.tune(faiss, centroids, codes, scales, live, assigned, add)
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
            self.check_writable()
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
