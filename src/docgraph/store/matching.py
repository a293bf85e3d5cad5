"""The rows a query's filters let in (live, of its chunk kind, in its namespaces) as one
mask over a snapshot's positions, kept while that snapshot stands: both lanes of the
embedded index filter by it.

The dense lane asks for it on every query (a partition's query then costs the lists it
reads, not a pass over every row; the scan saves the pass too). The BM25 lane asks for it
on long posting lists only (:class:`LaneFilter`): read row by row those
three tests are three gathers and a set test, a sixth of the slowest queries' time at 10M
chunks; through the mask, one gather. A snapshot is immutable (a write publishes a new
one), so a mask is valid exactly as long as its snapshot is the one searched: the cache
holds one snapshot's masks and starts afresh on the next. A mask is shared: never written
to.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

import numpy as np
import numpy.typing as npt

from docgraph.store.rows import in_namespaces


class FilteredRows(Protocol):
    """What a snapshot holds for the filters: its row count and per-row arrays."""

    @property
    def n(self) -> int: ...
    @property
    def alive(self) -> npt.NDArray[np.bool_]: ...
    @property
    def kinds(self) -> npt.NDArray[np.int8]: ...
    @property
    def namespaces(self) -> npt.NDArray[np.int32]: ...


class MatchingRows:
    """Masks of one snapshot's matching rows and their counts, one per (namespace set,
    kind) asked for; a byte a row each (10 MB at 10M chunks), at most ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        # Replaced whole under the lock, read without it: a reader sees one state or the
        # next, never a mix.
        self._kept: tuple[object, dict[tuple[tuple[int, ...], int],
                                       tuple[npt.NDArray[np.bool_], int]]] = (None, {})
        self._lock = threading.Lock()

    def allowed(self, s: FilteredRows, namespace_ids: list[int], kind: int
                ) -> tuple[npt.NDArray[np.bool_], int]:
        """The mask over ``s``'s positions ``[0, n)`` of its live rows of ``kind`` in
        ``namespace_ids``, and how many there are: computed once per snapshot and filter."""
        key = (tuple(sorted(set(namespace_ids))), kind)
        snapshot, masks = self._kept
        found = masks.get(key) if snapshot is s else None
        if found is None:
            mask = (s.alive[: s.n] & (s.kinds[: s.n] == kind)
                    & in_namespaces(s.namespaces[: s.n], namespace_ids))
            found = (mask, int(np.count_nonzero(mask)))
            with self._lock:
                snapshot, masks = self._kept
                kept = dict(masks) if snapshot is s else {}
                while len(kept) >= self.limit:
                    kept.pop(next(iter(kept)))
                kept[key] = found
                self._kept = (s, kept)
        return found


Matching = Callable[[], npt.NDArray[np.bool_]]


class LaneFilter:
    """Which row positions of ``s`` a search may return: live, of the kind, in the
    namespaces (``namespace_ids``, at least one), readable by the caller (``keep``: a mask
    over positions, or None).
    ``matching``, when given, returns the first three as one mask over the snapshot's
    positions (:meth:`MatchingRows.allowed`): asked only for ``mask_from`` rows or more at
    once (the BM25 lane's long lists), where one gather replaces three and a set test (a
    sixth of the slowest queries' time at 10M chunks). ``s`` may be replaced by a view of
    the same snapshot (plain arrays over mapped ones)."""

    def __init__(self, s: FilteredRows, kind: int, namespace_ids: list[int],
                 keep: npt.NDArray[np.bool_] | None, matching: Matching | None = None,
                 mask_from: int = 1) -> None:
        self.s, self.kind, self.keep, self.matching = s, kind, keep, matching
        self.namespace_ids, self.mask_from = namespace_ids, mask_from

    def __call__(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Whether each of ``rows`` (positions) may be returned."""
        s = self.s
        ok: npt.NDArray[np.bool_]
        if self.matching is not None and len(rows) >= self.mask_from:
            ok = self.matching()[rows]
        else:
            ok = s.alive[rows] & (s.kinds[rows] == self.kind)
            ok &= in_namespaces(s.namespaces[rows], self.namespace_ids)
        if self.keep is not None:
            ok &= self.keep[rows]
        return ok
