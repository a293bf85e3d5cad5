"""Hybrid search: dense + BM25 candidate lists fused by reciprocal rank, namespace pre-filtered."""

from __future__ import annotations

import math
from collections.abc import Iterable
from concurrent.futures import Future

from docgraph.config import IndexSettings
from docgraph.embedding.embedders import Embedder
from docgraph.errors import InvalidQuery
from docgraph.limits import ENGINE_MAX_K, ENGINE_MAX_QUERY_CHARS, HYBRID_MODES, HybridMode
from docgraph.model import ScoredRow, SearchHit, StoredChunk
from docgraph.parallel import LazyThreadPool, core_count
from docgraph.retrieve.fusion import rrf_fuse
from docgraph.retrieve.navigation import navigation_factor
from docgraph.store.base import Catalog, ChunkIndex, require_namespaces

# Threads that run a query's BM25 lane while the caller embeds it and scans vectors.
LANE_POOL = LazyThreadPool(lambda: max(2, core_count()), "docgraph-lane")


def l2_from_cosine(similarity: float) -> float:
    """L2 distance between two unit vectors with the given cosine similarity."""
    return math.sqrt(max(0.0, 2.0 - 2.0 * similarity))


class HybridSearcher:
    """Answers ``search(query, k, mode, namespaces)`` over a catalog and its chunk index.

    Stateless between calls (safe to share between threads).
    """

    def __init__(
        self, catalog: Catalog, index: ChunkIndex, embedder: Embedder, settings: IndexSettings
    ) -> None:
        self.catalog = catalog
        self.index = index
        self.embedder = embedder
        self.settings = settings

    def search(
        self,
        query: str,
        *,
        namespaces: Iterable[str],
        k: int = 10,
        mode: HybridMode = "hybrid",
        readers: frozenset[str] | None = None,
    ) -> list[SearchHit]:
        """Top ``k`` chunks for ``query`` within ``namespaces`` (required, non-empty).

        ``hybrid`` fuses the dense and BM25 lists (RRF, ``index.rrf_k``) and weighs link
        lists as navigation (``index.navigation_weight``); ``dense`` ranks by cosine only
        and reports the L2 distance as the score. ``readers``: rank only the chunks these
        principals may read (see :meth:`~docgraph.store.base.ChunkIndex.for_query`).
        """
        allowed = require_namespaces(namespaces)
        if not isinstance(query, str) or not query.strip():
            raise InvalidQuery("query must be a non-empty string")
        if len(query) > ENGINE_MAX_QUERY_CHARS:
            raise InvalidQuery(f"query is {len(query)} characters; "
                               f"the limit is {ENGINE_MAX_QUERY_CHARS}")
        if not isinstance(k, int) or not 1 <= k <= ENGINE_MAX_K:
            raise InvalidQuery(f"k must be an integer from 1 to {ENGINE_MAX_K}, got {k!r}")
        if mode not in HYBRID_MODES:
            raise InvalidQuery(f"mode must be 'hybrid' or 'dense', got {mode!r}")

        depth = max(self.settings.candidates, k)
        # synced with the catalog once for both lists
        index = self.index.for_query(readers)
        # The BM25 lane needs no vector: it runs while the query is embedded and scanned.
        pending: Future[list[ScoredRow]] | None = None
        if mode == "hybrid":
            pending = LANE_POOL.get().submit(index.lexical_search, query, depth, allowed)
        try:
            query_vector = self.embedder.embed_query(query)
            dense = index.dense_search(query_vector, depth, allowed)
        except BaseException:
            if pending is not None:
                pending.cancel()
            raise
        similarity = {r.rowid: r.score for r in dense}
        lexical_scores: dict[int, float] = {}
        if pending is None:
            ranked: list[ScoredRow] = dense[:k]
            chunks = self.catalog.chunks_by_rowid([r.rowid for r in ranked])
        else:
            lexical = pending.result()
            lexical_scores = {r.rowid: r.score for r in lexical}
            fused = rrf_fuse([dense, lexical], k=self.settings.rrf_k,
                             weights=(1.0, self.settings.lexical_weight))
            ranked, chunks = self._weigh_navigation(fused, k)
        # BM25-only hits get their real cosine too, so every hit reports its similarity.
        unscored = [r.rowid for r in ranked if r.rowid not in similarity]
        if unscored:
            for rowid, vector in index.vectors(unscored).items():
                similarity[rowid] = float(vector @ query_vector)
        hits: list[SearchHit] = []
        for row in ranked:
            chunk = chunks.get(row.rowid)
            if chunk is None or chunk.namespace not in allowed:
                continue  # deleted since the index answered; never outside the filter
            sim = similarity.get(row.rowid)
            hits.append(self._hit(
                chunk,
                score=l2_from_cosine(row.score) if mode == "dense" else row.score,
                mode=mode,
                rank=len(hits) + 1,
                similarity=sim,
                lexical=lexical_scores.get(row.rowid),
            ))
        return hits

    def _weigh_navigation(self, fused: list[ScoredRow], k: int
                          ) -> tuple[list[ScoredRow], dict[int, StoredChunk]]:
        """The top ``k`` of ``fused`` once the score of every link-list chunk (``See
        also``, see :mod:`docgraph.retrieve.navigation`) is multiplied by
        ``index.navigation_weight`` (ties keep their fused order), with the chunks read.

        The first ``k`` chunks are read; only when one of them is a link list are the next
        ``k`` read too, so that ``k`` remain when it moves down."""
        weight = self.settings.navigation_weight
        chunks = self.catalog.chunks_by_rowid([r.rowid for r in fused[:k]])

        def factor(row: ScoredRow) -> float:
            chunk = chunks.get(row.rowid)
            return (1.0 if chunk is None else
                    navigation_factor(chunk.text, chunk.section_path, weight))

        factors = [factor(row) for row in fused[:k]]
        if all(f == 1.0 for f in factors):
            return fused[:k], chunks
        chunks.update(self.catalog.chunks_by_rowid([r.rowid for r in fused[k:2 * k]]))
        factors += [factor(row) for row in fused[k:2 * k]]
        weighed = sorted(
            ((row.score * f, position, row.rowid)
             for position, (row, f) in enumerate(zip(fused, factors, strict=False))),
            key=lambda item: (-item[0], item[1]))
        return [ScoredRow(rowid, score) for score, _, rowid in weighed[:k]], chunks

    @staticmethod
    def _hit(
        chunk: StoredChunk,
        *,
        score: float,
        mode: HybridMode,
        rank: int,
        similarity: float | None,
        lexical: float | None,
    ) -> SearchHit:
        lanes = tuple(
            name for name, present in (("dense", similarity is not None),
                                       ("bm25", lexical is not None)) if present
        )
        return SearchHit(
            chunk_id=chunk.chunk_id,
            doc_id=chunk.doc_id,
            chunk_index=chunk.index,
            namespace=chunk.namespace,
            text=chunk.text,
            title=chunk.title,
            source_path=chunk.source_path,
            section_path=chunk.section_path,
            score=score,
            score_label="rrf" if mode == "hybrid" else "dense",
            original_rank=rank,
            dense_similarity=similarity,
            lexical_score=lexical,
            lanes=lanes,
            rowid=chunk.rowid,
            origin=chunk.origin,
            pages=chunk.pages,
            ocr=chunk.ocr,
        )
