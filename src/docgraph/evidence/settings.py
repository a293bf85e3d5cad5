"""Knobs of the evidence contract that :class:`docgraph.config.RagSettings` does not hold yet."""

from __future__ import annotations

from dataclasses import dataclass

from docgraph.evidence.quality import (
    CALIBRATED_LOW_QUALITY_THRESHOLD,
    CALIBRATED_PRECISE_THRESHOLD,
    DEFAULT_MAX_L2,
    SEED_LOW_QUALITY_THRESHOLD,
    SEED_PRECISE_THRESHOLD,
    HybridQuality,
)
from docgraph.limits import HYBRID_MODES, HybridMode


@dataclass(frozen=True, slots=True)
class EvidenceSettings:
    """How evidence is scored, gated and projected (recall width etc. live in ``RagSettings``).

    - ``mode``: search mode of the port (``hybrid`` is the main path, ``dense`` the control).
    - ``max_l2``: L2 distance that maps to quality 0 (``dense`` and the dense part of the
      ``*_rank_dense`` hybrid rules); 2.0 is the largest distance between unit vectors.
    - ``precise_threshold`` / ``low_quality_threshold``: top-quality gates of
      ``relevance_level``, ``is_low_quality`` and the category-unfiltered retry.
    - ``hybrid_quality``: how a hybrid hit's quality is computed (see :class:`HybridQuality`).
    - ``retry_unfiltered``: retry without the category filter when the filtered top quality
      is low (never beyond the allowed namespace set).
    - ``category_from_domain_hints``: use the query's domain hints as the category filter.
    - ``excerpt_chars`` / ``total_chars``: projector budgets per excerpt and per payload;
      once less than ``min_excerpt_chars`` is left, the remaining blocks are dropped.

    The defaults are calibrated with MiniLM on the served path, on the tuning half of SciFact
    and 2Wiki (``bench/relevance.py``; see ``CALIBRATED_*`` in
    :mod:`docgraph.evidence.quality` for the test-half figures): ``min_rank_dense`` with
    thresholds 0.55 / 0.44. Seed 003's configuration (rank-linear hybrid quality, 0.75 / 0.5)
    is :meth:`seed_contract`; with it every hybrid lookup is ``PRECISE``.
    """

    mode: HybridMode = "hybrid"
    max_l2: float = DEFAULT_MAX_L2
    precise_threshold: float = CALIBRATED_PRECISE_THRESHOLD
    low_quality_threshold: float = CALIBRATED_LOW_QUALITY_THRESHOLD
    hybrid_quality: HybridQuality = HybridQuality.MIN_RANK_DENSE
    retry_unfiltered: bool = True
    category_from_domain_hints: bool = False
    excerpt_chars: int = 700
    total_chars: int = 3500
    min_excerpt_chars: int = 80

    def __post_init__(self) -> None:
        if self.mode not in HYBRID_MODES:
            raise ValueError(f"mode must be 'hybrid' or 'dense', got {self.mode!r}")
        if not self.max_l2 > 0:
            raise ValueError(f"max_l2 must be positive, got {self.max_l2!r}")
        if not 0.0 <= self.low_quality_threshold <= self.precise_threshold <= 1.0:
            raise ValueError(
                "thresholds must satisfy 0 <= low_quality_threshold <= precise_threshold <= 1, "
                f"got {self.low_quality_threshold!r} and {self.precise_threshold!r}"
            )
        if not 1 <= self.min_excerpt_chars <= self.excerpt_chars <= self.total_chars:
            raise ValueError(
                "budgets must satisfy 1 <= min_excerpt_chars <= excerpt_chars <= total_chars"
            )
        object.__setattr__(self, "hybrid_quality", HybridQuality(self.hybrid_quality))

    @classmethod
    def seed_contract(cls, mode: HybridMode = "hybrid") -> EvidenceSettings:
        """Seed 003's configuration: rank-linear hybrid quality, thresholds 0.75 / 0.5."""
        return cls(
            mode=mode,
            max_l2=DEFAULT_MAX_L2,
            precise_threshold=SEED_PRECISE_THRESHOLD,
            low_quality_threshold=SEED_LOW_QUALITY_THRESHOLD,
            hybrid_quality=HybridQuality.RANK_LINEAR,
        )
