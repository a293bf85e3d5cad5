"""The rows a BM25 query's filters let in (live, of its chunk kind, in its namespaces) as
one mask over a posting snapshot's positions, kept while that snapshot stands.

The BM25 lane filters every long posting list it walks by these three (and by the caller's
own rows, which are not kept here). Read row by row that is three gathers and a set test
over the index's arrays, a sixth of the slowest queries' time at 10M chunks; one mask
computed for the snapshot makes it one gather (:class:`docgraph.store.bm25._Filter` asks
for it only on long lists). A snapshot is immutable (a write publishes a new one), so a
mask is valid exactly as long as its snapshot is the one searched: the cache holds one
snapshot's masks and starts afresh on the next.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from docgraph.store.lexical import _Snapshot

#: Masks kept for one snapshot (a kind and namespace set each; the oldest goes first).
PER_SNAPSHOT = 4


class MatchingRows:
    """Masks of one snapshot's matching rows, one per (kind, namespace set) asked for; a
    byte a row each (10 MB at 10M chunks), at most :data:`PER_SNAPSHOT`."""

    def __init__(self) -> None:
        # Replaced whole under the lock, read without it: a reader sees one state or the
        # next, never a mix.
        self._kept: tuple[object, dict[tuple[int, tuple[int, ...]],
                                       npt.NDArray[np.bool_]]] = (None, {})
        self._lock = threading.Lock()

    def mask(self, s: _Snapshot, kind: int,
             namespace_ids: list[int]) -> Callable[[], npt.NDArray[np.bool_]]:
        """A function giving the mask over ``s``'s positions ``[0, n)`` of its live rows of
        ``kind`` in ``namespace_ids``, computed on its first call for ``s``."""
        key = (kind, tuple(sorted(set(namespace_ids))))

        def get() -> npt.NDArray[np.bool_]:
            snapshot, masks = self._kept
            found = masks.get(key) if snapshot is s else None
            if found is None:
                found = s.alive[: s.n] & (s.kinds[: s.n] == kind)
                found &= np.isin(s.namespaces[: s.n], np.asarray(key[1], s.namespaces.dtype))
                with self._lock:
                    snapshot, masks = self._kept
                    kept = dict(masks) if snapshot is s else {}
                    while len(kept) >= PER_SNAPSHOT:
                        kept.pop(next(iter(kept)))
                    kept[key] = found
                    self._kept = (s, kept)
            return found

        return get
