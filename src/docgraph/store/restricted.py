"""Which chunk rows belong to documents with a permission set, for filtering before ranking.

The in-memory lanes of the embedded index (the dense matrices, the BM25 posting lists) rank
rows by position in their own arrays. A caller who may read only part of a namespace must
get its top ``k`` from what it may read, not the top ``k`` of everything with the others
removed afterwards (a caller who may read 1% of a namespace would get almost nothing). So
the lanes take a *row filter* (:data:`RowFilter`): a function from a snapshot's row ids to
a boolean mask of the rows the caller may read, applied with the namespace filter before
any row is scored against another.

:class:`RestrictedRows` holds the chunk rows of every document that has a permission set,
labelled by that set (a *class*: documents with the same readers share one). For a caller,
the classes it may read are the union of those naming one of its principals (an index from
principal to classes, so a caller costs its own principals, not the number of classes);
the mask is a lookup of each position's class in a small table. Each snapshot's class per
position is computed once (one ``searchsorted`` of the restricted rows) and kept while the
snapshot lives. A caller who may read every class gets no filter at all, and an index with
no restricted row costs nothing.

This filter decides ranking only. The governed path still decides every hit, chunk and
listing through :class:`~docgraph.governance.visibility.Visibility` (a row filter that is a
build behind can make a caller miss a document, never see one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["RestrictedRows", "RowFilter"]

#: ``(snapshot row ids, rows used) -> mask of the rows [0, n) the caller may read``.
RowFilter = Callable[[npt.NDArray[np.int64], int], npt.NDArray[np.bool_]]

# Snapshots whose class-per-position arrays are kept (the dense matrix and the posting
# lists each have one current snapshot; one more covers a sync racing a query).
_KEPT_SNAPSHOTS = 3


class RestrictedRows:
    """The chunk rows of documents with a permission set, by set (see the module)."""

    def __init__(self, documents: Iterable[tuple[frozenset[str], npt.ArrayLike]]) -> None:
        """``documents``: (permission set, its chunk row ids) per restricted document."""
        class_of: dict[frozenset[str], int] = {}
        parts: list[npt.NDArray[np.int64]] = []
        labels: list[int] = []
        for access, ids in documents:
            part = np.asarray(ids, dtype=np.int64).reshape(-1)
            parts.append(part)
            labels.append(class_of.setdefault(access, len(class_of) + 1))
        rowids = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        dtype = np.int16 if len(class_of) < np.iinfo(np.int16).max else np.int32
        per_row = np.repeat(np.asarray(labels, dtype=dtype),
                            [len(p) for p in parts]) if parts else np.zeros(0, dtype)
        order = np.argsort(rowids, kind="stable")
        #: Restricted row ids, ascending, and the class (1..) of each.
        self.rowids = rowids[order]
        self.labels = per_row[order]
        self.classes = len(class_of)
        self._by_principal: dict[str, list[int]] = {}
        for access, label in class_of.items():
            for principal in access:
                self._by_principal.setdefault(principal, []).append(label)
        self._positions: dict[int, tuple[Any, int, np.ndarray]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Restricted chunk rows."""
        return len(self.rowids)

    def readable(self, principals: frozenset[str]) -> npt.NDArray[np.bool_] | None:
        """Per class (index 0: rows without a permission set), whether a caller with these
        principals may read it; None when it may read every class (no filter needed)."""
        table = np.zeros(self.classes + 1, dtype=bool)
        table[0] = True
        for principal in principals:
            table[self._by_principal.get(principal, [])] = True
        return None if table.all() else table

    def row_filter(self, principals: frozenset[str]) -> RowFilter | None:
        """The filter of the rows a caller with these principals may read, or None when it
        may read them all."""
        table = self.readable(principals)
        if table is None:
            return None
        readable = table
        # A query's lanes ask for the same snapshot's mask several times (dense, BM25, the
        # completeness lane, re-scoring): it is computed once per snapshot for the filter.
        made: list[tuple[npt.NDArray[np.int64], int, npt.NDArray[np.bool_]]] = []

        def keep(snapshot_rowids: npt.NDArray[np.int64], n: int) -> npt.NDArray[np.bool_]:
            for rowids, count, kept in made:
                if rowids is snapshot_rowids and count == n:
                    return kept
            mask: npt.NDArray[np.bool_] = readable[self.positions(snapshot_rowids, n)]
            made.append((snapshot_rowids, n, mask))
            return mask
        return keep

    def positions(self, snapshot_rowids: npt.NDArray[np.int64], n: int) -> np.ndarray:
        """The class of each of a snapshot's rows ``[0, n)`` (0: not restricted), computed
        once per snapshot array and row count."""
        key = id(snapshot_rowids)
        with self._lock:
            kept = self._positions.get(key)
            if kept is not None and kept[0] is snapshot_rowids and kept[1] == n:
                return kept[2]
        classes = np.zeros(n, dtype=self.labels.dtype)
        if n and len(self.rowids):
            used = snapshot_rowids[:n]
            at = np.searchsorted(used, self.rowids)
            inside = at < n
            at, labels, wanted = at[inside], self.labels[inside], self.rowids[inside]
            found = used[at] == wanted
            classes[at[found]] = labels[found]
        with self._lock:
            if len(self._positions) >= _KEPT_SNAPSHOTS:
                self._positions.pop(next(iter(self._positions)))
            self._positions[key] = (snapshot_rowids, n, classes)
        return classes
