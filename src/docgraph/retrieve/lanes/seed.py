"""The seed lane: the dense and the BM25 candidate lists, fused by reciprocal rank
(:func:`docgraph.retrieve.fusion.fuse_seed_lists`); the best of them are the seeds every
other lane expands from."""

from __future__ import annotations

import time

from docgraph.embedding.embedders import Embedder
from docgraph.model import ScoredRow, Vector
from docgraph.retrieve.cohort_settings import CohortSettings
from docgraph.retrieve.hybrid import LANE_POOL
from docgraph.retrieve.lanes.base import SEED
from docgraph.retrieve.pool import CohortQuery
from docgraph.retrieve.trace import RetrievalTrace
from docgraph.store.base import ChunkIndex


def seed_lists(index: ChunkIndex, embedder: Embedder, query: str, allowed: frozenset[str],
               depth: int, trace: RetrievalTrace
               ) -> tuple[Vector, list[ScoredRow], list[ScoredRow], float]:
    """(query vector, dense list, BM25 list, when the dense search started) of the text
    chunks, each list ``depth`` deep.

    The BM25 list needs no vector: it runs in a lane thread while the query is embedded and
    the dense list is searched (as in hybrid search), so the lane costs the slower of the
    two lists, not their sum. Times the embedding (``embed_query``); the seed lane's time
    (``seed``) runs from the dense search until the seeds are chosen."""
    pending = LANE_POOL.get().submit(index.lexical_search, query, depth, allowed, kind="text")
    try:
        t = time.perf_counter()
        vector = embedder.embed_query(query)
        trace.timings_ms["embed_query"] = (time.perf_counter() - t) * 1000
        started = time.perf_counter()
        dense = index.dense_search(vector, depth, allowed, kind="text")
    except BaseException:
        pending.cancel()
        raise
    return vector, dense, pending.result(), started


def seed_width(settings: CohortSettings, k: int) -> int:
    """How many of the fused list's best rows are seeds."""
    return max(settings.seed_pool, k) if settings.seed_pool_grows_with_k else settings.seed_pool


class SeedLane:
    """Admits the seeds (the orchestrator found them: ``q.seeds``)."""

    name = SEED
    needs_entities = False

    def enabled(self, settings: CohortSettings) -> bool:
        return True  # every other lane expands from the seeds

    def run(self, q: CohortQuery) -> None:
        for rowid in q.seeds:
            q.admit(rowid, SEED, "seed")
        q.trace.add(SEED, [str(r) for r in q.seeds])

    @staticmethod
    def fill(q: CohortQuery) -> None:
        """``graph_first``: the strongest seeds always take part; when the graph added too
        little, more seeds fill the pool up to ``k`` (a corpus without entities still
        answers ``k``)."""
        for position, rowid in enumerate(q.seeds):
            if position >= max(5, q.k // 2) and len(q.pool) >= q.k:
                break
            q.admit(rowid, SEED, "seed")
