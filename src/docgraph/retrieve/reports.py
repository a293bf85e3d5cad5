"""Global mode of cohort search: community reports only, ranked like the seed lane's lists
(:func:`docgraph.retrieve.fusion.fuse_seed_lists`); with a chat model, map-reduced into an
answer (:func:`map_reduce_global_context`)."""

from __future__ import annotations

import time

from docgraph.embedding.embedders import Embedder
from docgraph.llm import ChatModel
from docgraph.model import ChunkKind, SearchHit
from docgraph.retrieve.cohort_settings import CohortSettings
from docgraph.retrieve.fusion import fuse_seed_lists
from docgraph.retrieve.lanes.base import REPORT_LANE
from docgraph.retrieve.pool import chunk_hit
from docgraph.retrieve.trace import RetrievalTrace
from docgraph.store.base import ChunkIndex, StoreCatalog

_REPORTS: ChunkKind = "community_report"  # the chunk kind searched (its lane: REPORT_LANE)


def search_reports(catalog: StoreCatalog, index: ChunkIndex, embedder: Embedder, query: str,
                   allowed: frozenset[str], k: int, s: CohortSettings, trace: RetrievalTrace,
                   model: ChatModel | None, configured: bool
                   ) -> tuple[list[SearchHit], str | None]:
    """(the top ``k`` community reports for ``query``, None), or with ``model`` (the
    reports it rated best, its answer) (``configured``: whether the engine has a chat model
    at all, for the trace's note)."""
    t = time.perf_counter()
    vector = embedder.embed_query(query)
    depth = max(s.seed_candidates, k)
    fused = fuse_seed_lists(index.dense_search(vector, depth, allowed, kind=_REPORTS),
                            index.lexical_search(query, depth, allowed, kind=_REPORTS), s)
    rows = fused[:k if model is None else max(k, 8)]
    chunks = catalog.chunks_by_rowid([r.rowid for r in rows])
    vectors = index.vectors([r.rowid for r in rows])
    hits = [
        chunk_hit(chunks[r.rowid], r.score, i + 1,
                  float(vectors[r.rowid] @ vector) if r.rowid in vectors else None, None,
                  (REPORT_LANE,), "rrf")
        for i, r in enumerate(rows) if r.rowid in chunks
    ]
    trace.add(REPORT_LANE, [h.chunk_id for h in hits])
    trace.pool_size = len(fused)
    trace.timings_ms["reports"] = (time.perf_counter() - t) * 1000
    if not hits:
        trace.notes.append("no community reports in reach (graph not built or empty)")
    if model is None:
        if not configured:
            trace.notes.append("no chat model configured: community reports are returned "
                               "ranked by hybrid relevance, not map-reduced")
        return hits[:k], None
    t = time.perf_counter()
    answer, ranked = map_reduce_global_context(query, hits, model, k)
    trace.timings_ms["map_reduce"] = (time.perf_counter() - t) * 1000
    return ranked, answer


def map_reduce_global_context(
    query: str, reports: list[SearchHit], model: ChatModel, k: int
) -> tuple[str, list[SearchHit]]:
    """Map a chat model over each report (rate 0-100 how well it answers, and extract the
    key points), keep the ``k`` best-rated, and reduce their points into one answer."""
    rated: list[tuple[int, int, SearchHit, str]] = []
    for position, report in enumerate(reports):
        reply = model.complete(
            "Rate from 0 to 100 how useful this community report is for the question, then "
            "list its key points for the question. Answer as 'SCORE: <n>' on the first line, "
            f"then the points.\n\nQuestion: {query}\n\nReport:\n{report.text}"
        )
        first, _, rest = reply.strip().partition("\n")
        digits = "".join(ch for ch in first if ch.isdigit())
        rated.append((-(int(digits[:3]) if digits else 0), position, report, rest.strip()))
    rated.sort(key=lambda x: (x[0], x[1]))
    top = rated[:k]
    points = "\n\n".join(f"[{r.chunk_id}] {p}" for _, _, r, p in top if p)
    answer = model.complete(
        "Answer the question from these points, citing the bracketed ids you use.\n\n"
        f"Question: {query}\n\n{points}"
    ) if points else ""
    ranked = []
    for i, (_, _, report, _) in enumerate(top):
        report.original_rank = i + 1
        ranked.append(report)
    return answer, ranked
