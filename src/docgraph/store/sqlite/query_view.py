"""The embedded chunk index seen by one query (:class:`EmbeddedQueryView`): synced once, and
the stored vectors it reads kept for the rest of the query."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from docgraph.model import CHUNK_KINDS, ChunkKind, ScoredRow, Vector
from docgraph.store.dense import DenseMatrix
from docgraph.store.quantized import QuantizedDenseMatrix
from docgraph.store.restricted import RowFilter

if TYPE_CHECKING:
    from docgraph.store.sqlite.index import EmbeddedChunkIndex


class EmbeddedQueryView:
    """The embedded index for one query (:meth:`EmbeddedChunkIndex.for_query`): synced with
    the catalog when made, once, where each search used to check it again (three times a
    cohort query); and the stored vectors it reads, for the dense search's exact re-scoring
    and for :meth:`vectors`, are kept, so the lanes and the ranking do not read the same
    rows again. Lives as long as its query; shared by its threads (the BM25 lane).

    ``keep`` filters rows before ranking in every search (a caller's readable rows, see
    :mod:`docgraph.store.restricted`); None: every row of the namespaces."""

    def __init__(self, index: EmbeddedChunkIndex, keep: RowFilter | None = None) -> None:
        self.index = index
        self.keep = keep
        self._vectors: dict[int, Vector] = {}

    def for_query(self, readers: frozenset[str] | None = None) -> EmbeddedQueryView:
        """This view (already the query's, with the readers it was made for)."""
        return self

    def __len__(self) -> int:
        """Live chunks loaded (all namespaces and kinds)."""
        return len(self.index)

    def pending_counts(self, namespaces: Iterable[str]) -> dict[str, int]:
        """:meth:`EmbeddedChunkIndex.pending_counts` as of this query's sync."""
        return self.index.pending_counts(namespaces)

    def _stored_vectors(
        self, rowids: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], Vector]:
        """:meth:`EmbeddedChunkIndex._stored_vectors`, reading only rows not read yet."""
        kept = self._vectors
        missing = np.array([r for r in rowids.tolist() if r not in kept], dtype=np.int64)
        if len(missing):
            found, vectors = self.index._stored_vectors(missing)
            kept.update(zip(found.tolist(), vectors, strict=True))
        found_ids = sorted(r for r in rowids.tolist() if r in kept)  # as the catalog reads
        matrix = (np.stack([kept[r] for r in found_ids]) if found_ids
                  else np.zeros((0, self.index.dimension), dtype=np.float32))
        return np.array(found_ids, dtype=np.int64), matrix

    def vectors(self, rowids: Sequence[int]) -> dict[int, Vector]:
        """Unit vectors of the given chunks (deleted ones absent): from the dense matrix when
        exact, else read from the catalog (once for the query)."""
        ids = np.asarray(list(dict.fromkeys(int(r) for r in rowids)), dtype=np.int64)
        dense = self.index.dense
        if isinstance(dense, DenseMatrix):
            found, vectors = dense.vectors_for(ids)
        else:
            found, vectors = self._stored_vectors(ids)
        return {int(r): v for r, v in zip(found, vectors, strict=True)}

    def dense_search(
        self, vector: Vector, k: int, namespaces: frozenset[str], kind: ChunkKind = "text"
    ) -> list[ScoredRow]:
        """:meth:`EmbeddedChunkIndex.dense_search` without the catalog check."""
        ns_ids = self.index._namespace_ids(namespaces)
        dense = self.index.dense
        if isinstance(dense, QuantizedDenseMatrix):
            return dense.search(vector, k, ns_ids, CHUNK_KINDS.index(kind),
                                fetch=self._stored_vectors, keep=self.keep)
        return dense.search(vector, k, ns_ids, CHUNK_KINDS.index(kind), keep=self.keep)

    def lexical_search(
        self, text: str, k: int, namespaces: frozenset[str], kind: ChunkKind = "text"
    ) -> list[ScoredRow]:
        """:meth:`EmbeddedChunkIndex.lexical_search` without the catalog check."""
        ns_ids = self.index._namespace_ids(namespaces)
        if not ns_ids or k <= 0:
            return []
        term_ids = self.index._term_ids(text, ns_ids)
        if not term_ids:
            return []
        return [ScoredRow(rowid, score) for rowid, score in
                self.index.postings.search(term_ids, k, ns_ids, CHUNK_KINDS.index(kind),
                                           keep=self.keep)]

    def lexical_scores(
        self, text: str, rowids: Sequence[int], namespaces: frozenset[str],
        kind: ChunkKind = "text",
    ) -> dict[int, float]:
        """:meth:`EmbeddedChunkIndex.lexical_scores` without the catalog check."""
        ns_ids = self.index._namespace_ids(namespaces)
        ids = np.array(list(dict.fromkeys(int(r) for r in rowids)), dtype=np.int64)
        if not ns_ids or len(ids) == 0:
            return {}
        term_ids = self.index._term_ids(text, ns_ids)
        if not term_ids:
            return {}
        return self.index.postings.scores_for(term_ids, ids, ns_ids, CHUNK_KINDS.index(kind),
                                              keep=self.keep)
