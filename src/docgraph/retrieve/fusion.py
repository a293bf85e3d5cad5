"""Reciprocal rank fusion."""

from __future__ import annotations

from collections.abc import Sequence

from docgraph.model import ScoredRow


def rrf_fuse(ranked_lists: Sequence[Sequence[ScoredRow]], k: int = 60) -> list[ScoredRow]:
    """Fuse ranked lists by reciprocal rank: ``score(d) = sum(1 / (k + rank_i(d)))``.

    Ranks are 1-based. Ties are broken by the best single rank, then by row id, so the
    result is deterministic.
    """
    scores: dict[int, float] = {}
    best: dict[int, int] = {}
    for ranked in ranked_lists:
        for rank, row in enumerate(ranked, start=1):
            scores[row.rowid] = scores.get(row.rowid, 0.0) + 1.0 / (k + rank)
            best[row.rowid] = min(best.get(row.rowid, rank), rank)
    order = sorted(scores, key=lambda r: (-scores[r], best[r], r))
    return [ScoredRow(r, scores[r]) for r in order]
