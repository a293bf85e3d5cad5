"""Reciprocal rank fusion."""

from __future__ import annotations

from collections.abc import Sequence

from docgraph.model import ScoredRow


def rrf_fuse(ranked_lists: Sequence[Sequence[ScoredRow]], k: int = 60,
             weights: Sequence[float] | None = None) -> list[ScoredRow]:
    """Fuse ranked lists by reciprocal rank: ``score(d) = sum(w_i / (k + rank_i(d)))``,
    ``w_i`` = ``weights[i]`` (default 1 for every list).

    Ranks are 1-based. Ties are broken by the best single rank, then by row id, so the
    result is deterministic.
    """
    if weights is None:
        weights = [1.0] * len(ranked_lists)
    if len(weights) != len(ranked_lists):
        raise ValueError(f"{len(weights)} weights for {len(ranked_lists)} ranked lists")
    scores: dict[int, float] = {}
    best: dict[int, int] = {}
    for ranked, weight in zip(ranked_lists, weights, strict=True):
        for rank, row in enumerate(ranked, start=1):
            scores[row.rowid] = scores.get(row.rowid, 0.0) + weight / (k + rank)
            best[row.rowid] = min(best.get(row.rowid, rank), rank)
    order = sorted(scores, key=lambda r: (-scores[r], best[r], r))
    return [ScoredRow(r, scores[r]) for r in order]
