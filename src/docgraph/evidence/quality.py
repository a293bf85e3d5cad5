"""The one place score labels differ: turning a hit's score into a quality score in [0, 1].

Everything downstream of :func:`to_quality_score` (ordering, dedup, caps, relevance gates)
is label-agnostic.
"""

from __future__ import annotations

import math
from enum import StrEnum

from docgraph.evidence.labels import ScoreLabel, canonicalize

#: Normalisation range of L2 distances: the largest distance between unit vectors.
DEFAULT_MAX_L2 = 2.0
#: Seed 003's thresholds on the top quality score (the defaults of the pure functions here).
SEED_PRECISE_THRESHOLD = 0.75
SEED_LOW_QUALITY_THRESHOLD = 0.5
#: Thresholds on the top quality (the best returned block's, ``min_rank_dense``, ``max_l2``
#: 2.0) for all-MiniLM-L6-v2, fitted by ``bench/relevance.py`` on the path agents call
#: (``lookup_knowledge`` through governance, cohort search ``vector_first``), on the tuning
#: half of SciFact and 2Wiki (splits in ``bench/splits/``, whole corpora). Low quality 0.44
#: (~ cosine 0.37) is the best Youden cut between answerable and unanswerable lookups; precise
#: 0.55 (~ cosine 0.60) the lowest value from which at least 0.9 of the lookups at or above
#: it return a gold passage, on each index. Test half (``bench/results/relevance.json``): AUC
#: 0.9997; flagged low quality 0.7% / 0.3% of answerable SciFact / 2Wiki lookups (4.7% / 1.6%
#: with the first block and 0.55 / 0.45 before) and 100% of unanswerable ones; PRECISE
#: 72.7% / 57.9% of answerable lookups, with a gold passage in 0.9422 of PRECISE answers.
CALIBRATED_PRECISE_THRESHOLD = 0.55
CALIBRATED_LOW_QUALITY_THRESHOLD = 0.44


class HybridQuality(StrEnum):
    """How a ``hybrid`` hit's quality is computed (dense hits always use the L2 rule).

    ``rank_linear`` is seed 003's rule: linear in the fused rank within the batch, so the top
    hit always scores 1.0 and the relevance gates cannot fire. ``max_rank_dense`` is the
    seed's later option ``max(rank, denseSim)`` (still 1.0 at the top). ``min_rank_dense``
    caps the rank quality by the hit's own dense quality (``1 - L2/max_l2`` of its dense
    similarity), so an off-topic batch cannot score high; a hit without a dense similarity
    keeps its rank quality and is never faked as a maximal distance. ``bench/evidence.py``
    measures the three (AUC answerable vs unanswerable: 0.50, 0.50, 0.9997). A hybrid hit's
    ``score`` (RRF score, or the cohort composite) never enters: it is relative to the batch
    (``bench/relevance.py``: AUC 0.97 for the composite of the first hit, 0.9997 for quality).
    """

    RANK_LINEAR = "rank_linear"
    MAX_RANK_DENSE = "max_rank_dense"
    MIN_RANK_DENSE = "min_rank_dense"


class RelevanceLevel(StrEnum):
    """How well the evidence answers the query, from the top quality score alone."""

    PRECISE = "PRECISE"
    """Top quality at or above the precise threshold."""
    AMBIGUOUS = "AMBIGUOUS"
    """Top quality between the low-quality and the precise thresholds."""
    WEAK = "WEAK"
    """Top quality below the low-quality threshold."""
    NONE = "NONE"
    """Nothing was retrieved."""


def _clamp(value: float, low: float, high: float) -> float:
    return min(max(value, low), high)


def l2_from_cosine(similarity: float) -> float:
    """L2 distance between two unit vectors whose cosine similarity is ``similarity``."""
    return math.sqrt(max(0.0, 2.0 - 2.0 * similarity))


def dense_quality(l2_distance: float, max_l2: float = DEFAULT_MAX_L2) -> float:
    """``1 - clamp(L2, 0, max_l2) / max_l2``: 1.0 for identical vectors, 0.0 at ``max_l2``."""
    if not max_l2 > 0:
        raise ValueError(f"max_l2 must be positive, got {max_l2!r}")
    if math.isnan(l2_distance):
        return 0.0
    return 1.0 - _clamp(l2_distance, 0.0, max_l2) / max_l2


def rank_quality(rank: int, batch_size: int) -> float:
    """Linear in the 1-based ``rank`` within a batch: ``1 - (rank - 1) / batch_size``.

    The first hit scores 1.0 and the last ``1 / batch_size`` (never 0: a retrieved hit is not
    worthless just because it came last).
    """
    size = max(int(batch_size), 1)
    position = _clamp(int(rank), 1, size)
    return 1.0 - (position - 1) / size


def to_quality_score(
    label: str | ScoreLabel,
    score: float,
    rank: int,
    batch_size: int,
    max_l2: float = DEFAULT_MAX_L2,
    *,
    hybrid_rule: HybridQuality | str = HybridQuality.RANK_LINEAR,
    dense_similarity: float | None = None,
) -> float:
    """A hit's quality score in [0, 1], higher is better; the only function labels reach.

    ``dense``: ``score`` is the L2 distance, quality is ``1 - clamp(L2, 0, max_l2) / max_l2``.
    ``hybrid``: ``score`` (the fused engine score) is not an L2 distance and is never used as
    one; quality follows ``hybrid_rule`` (default: linear in ``rank`` within ``batch_size``;
    the ``*_rank_dense`` rules also use the hit's ``dense_similarity`` when known).
    Legacy labels are accepted and canonicalised first.
    """
    canonical = canonicalize(label)
    if canonical is ScoreLabel.DENSE:
        return dense_quality(score, max_l2)
    by_rank = rank_quality(rank, batch_size)
    rule = HybridQuality(hybrid_rule)
    if rule is HybridQuality.RANK_LINEAR or dense_similarity is None:
        return by_rank
    by_dense = dense_quality(l2_from_cosine(dense_similarity), max_l2)
    if rule is HybridQuality.MAX_RANK_DENSE:
        return max(by_rank, by_dense)
    return min(by_rank, by_dense)


def relevance_level(
    top_quality: float | None,
    precise_threshold: float = SEED_PRECISE_THRESHOLD,
    low_quality_threshold: float = SEED_LOW_QUALITY_THRESHOLD,
) -> RelevanceLevel:
    """The relevance level implied by the top quality score (``None``: nothing retrieved)."""
    if top_quality is None:
        return RelevanceLevel.NONE
    if top_quality >= precise_threshold:
        return RelevanceLevel.PRECISE
    if top_quality >= low_quality_threshold:
        return RelevanceLevel.AMBIGUOUS
    return RelevanceLevel.WEAK


def is_low_quality(
    top_quality: float | None, low_quality_threshold: float = SEED_LOW_QUALITY_THRESHOLD
) -> bool:
    """True when nothing was retrieved or the top quality is below the low-quality threshold."""
    return top_quality is None or top_quality < low_quality_threshold
