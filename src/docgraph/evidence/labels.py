"""Score labels: the two canonical names retrieval uses, and the legacy aliases they replace."""

from __future__ import annotations

from enum import StrEnum


class ScoreLabel(StrEnum):
    """What a hit's ``score`` means; it always matches the search mode.

    ``dense``: the score is the L2 distance between unit query and chunk vectors (lower is
    better) and the original rank is the ANN order. ``hybrid``: the original rank is the fused
    order and the score is the engine's own (higher is better): the RRF score of hybrid
    search, or the cohort engine's composite (relevance, lane priority, coverage, redundancy).
    Both are relative to the batch, so neither says how well a hit matches; quality comes from
    the hit's own dense similarity (see :mod:`docgraph.evidence.quality`).
    """

    DENSE = "dense"
    HYBRID = "hybrid"


#: Legacy first-level labels, read as aliases and never produced.
LEGACY_ALIASES: dict[str, ScoreLabel] = {
    "l2_distance": ScoreLabel.DENSE,
    "rrf_fused": ScoreLabel.HYBRID,
    "bm25_only_no_dense": ScoreLabel.HYBRID,
}


def canonicalize(label: str | ScoreLabel) -> ScoreLabel:
    """The canonical :class:`ScoreLabel` for ``label`` (case-insensitive; legacy aliases ok).

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
    if key in LEGACY_ALIASES:
        return LEGACY_ALIASES[key]
    raise ValueError(
        f"unknown score label {label!r}; expected 'dense' or 'hybrid' "
        f"(or a legacy alias: {', '.join(sorted(LEGACY_ALIASES))})"
    )
