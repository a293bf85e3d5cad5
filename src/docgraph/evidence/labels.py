"""Score labels: the two conventions the evidence contract tells apart, the names engines
give their scores, and the legacy aliases they replace."""

from __future__ import annotations

from enum import StrEnum


class ScoreLabel(StrEnum):
    """How the evidence contract reads a hit's ``score``; it always matches the search mode.

    ``dense``: the score is the L2 distance between unit query and chunk vectors (lower is
    better) and the original rank is the ANN order. ``hybrid``: the original rank is the fused
    order and the score is the engine's own (higher is better): the RRF score of hybrid
    search (engine label ``rrf``), or the cohort engine's composite (relevance, lane
    priority, coverage, redundancy; engine label ``composite``). Both are relative to the
    batch, so neither says how well a hit matches; quality comes from the hit's own dense
    similarity (see :mod:`docgraph.evidence.quality`). Surfaces show the engine labels
    (:data:`docgraph.model.ScoreName`), which say what the number is.
    """

    DENSE = "dense"
    HYBRID = "hybrid"


#: The engines' score names (:data:`docgraph.model.ScoreName`) and their convention.
ENGINE_LABELS: dict[str, ScoreLabel] = {
    "rrf": ScoreLabel.HYBRID,
    "composite": ScoreLabel.HYBRID,
}

#: Legacy first-level labels, read as aliases and never produced.
LEGACY_ALIASES: dict[str, ScoreLabel] = {
    "l2_distance": ScoreLabel.DENSE,
    "rrf_fused": ScoreLabel.HYBRID,
    "bm25_only_no_dense": ScoreLabel.HYBRID,
}


def canonicalize(label: str | ScoreLabel) -> ScoreLabel:
    """The canonical :class:`ScoreLabel` for ``label`` (case-insensitive; engine labels and
    legacy aliases ok).

    Raises :class:`ValueError` for a label that is neither canonical nor a known alias, so an
    unknown engine convention is never silently normalised.
    """
    if isinstance(label, ScoreLabel):
        return label
    key = str(label).strip().casefold()
    try:
        return ScoreLabel(key)
    except ValueError:
        pass
    if key in ENGINE_LABELS:
        return ENGINE_LABELS[key]
    if key in LEGACY_ALIASES:
        return LEGACY_ALIASES[key]
    raise ValueError(
        f"unknown score label {label!r}; expected 'dense', 'hybrid', an engine's "
        f"'{', '.join(ENGINE_LABELS)}' (or a legacy alias: {', '.join(sorted(LEGACY_ALIASES))})"
    )
