"""Score labels, the quality normaliser and the relevance gates of the evidence contract."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from docgraph.evidence import (
    EvidenceSettings,
    HybridQuality,
    RelevanceLevel,
    ScoreLabel,
    to_quality_score,
)
from docgraph.evidence.labels import canonicalize
from docgraph.evidence.quality import (
    CALIBRATED_LOW_QUALITY_THRESHOLD,
    CALIBRATED_PRECISE_THRESHOLD,
    dense_quality,
    is_low_quality,
    l2_from_cosine,
    rank_quality,
    relevance_level,
)
from tests.conftest import REPO


def test_there_are_exactly_two_canonical_labels_and_no_bm25_only():
    assert [label.value for label in ScoreLabel] == ["dense", "hybrid"]
    assert all("bm25" not in label.value for label in ScoreLabel)


@pytest.mark.parametrize(
    ("legacy", "canonical"),
    [
        ("l2_distance", ScoreLabel.DENSE),
        ("rrf_fused", ScoreLabel.HYBRID),
        ("bm25_only_no_dense", ScoreLabel.HYBRID),
        ("RRF_FUSED", ScoreLabel.HYBRID),
        ("dense", ScoreLabel.DENSE),
        ("hybrid", ScoreLabel.HYBRID),
        ("rrf", ScoreLabel.HYBRID),  # the engines' names for what their scores are
        ("composite", ScoreLabel.HYBRID),
        (ScoreLabel.DENSE, ScoreLabel.DENSE),
    ],
)
def test_legacy_labels_canonicalize(legacy, canonical):
    assert canonicalize(legacy) is canonical


def test_unknown_label_is_rejected_not_guessed():
    with pytest.raises(ValueError, match="unknown score label"):
        canonicalize("cosine")


@pytest.mark.parametrize("l2", [0.0, 0.3, 0.77, 1.0, 1.41, 2.0])
@pytest.mark.parametrize("max_l2", [2.0, 1.5])
def test_dense_quality_is_one_minus_clamped_l2_over_max(l2, max_l2):
    expected = 1 - min(max(l2, 0.0), max_l2) / max_l2
    assert to_quality_score("dense", l2, 7, 20, max_l2) == pytest.approx(expected)
    # The legacy alias takes the same path.
    assert to_quality_score("l2_distance", l2, 7, 20, max_l2) == pytest.approx(expected)


def test_dense_quality_clamps_out_of_range_distances():
    assert to_quality_score("dense", 3.5, 1, 5, 2.0) == 0.0
    assert to_quality_score("dense", -0.1, 1, 5, 2.0) == 1.0
    assert dense_quality(math.nan) == 0.0
    with pytest.raises(ValueError):
        dense_quality(0.5, max_l2=0.0)


def test_dense_quality_ignores_rank():
    assert to_quality_score("dense", 0.8, 1, 20) == to_quality_score("dense", 0.8, 19, 20)


def test_hybrid_quality_is_linear_in_rank_and_ignores_the_fused_score():
    n = 20
    qualities = [to_quality_score("hybrid", 0.0164, rank, n) for rank in range(1, n + 1)]
    assert qualities[0] == 1.0
    assert qualities[-1] == pytest.approx(1 / n)  # the last hit is not worthless
    steps = {round(a - b, 12) for a, b in itertools.pairwise(qualities)}
    assert steps == {round(1 / n, 12)}
    # The fused score (or anything in its place) does not matter, only the rank.
    assert to_quality_score("hybrid", 0.5, 3, n) == to_quality_score("hybrid", 0.0001, 3, n)
    # A fused score is never read as an L2 distance.
    assert to_quality_score("hybrid", 1.9, 1, n) == 1.0


def test_bm25_only_hits_are_not_faked_as_maximal_distance():
    # Legacy 'bm25_only_no_dense' hits are hybrid hits: ranked, not quality ~0.
    q = to_quality_score("bm25_only_no_dense", 0.016, 2, 10)
    assert q == pytest.approx(rank_quality(2, 10)) and q > 0.8
    for rule in HybridQuality:
        assert to_quality_score("hybrid", 0.016, 2, 10, hybrid_rule=rule,
                                dense_similarity=None) == pytest.approx(0.9)


def test_rank_quality_edge_cases():
    assert rank_quality(1, 1) == 1.0
    assert rank_quality(1, 0) == 1.0
    assert rank_quality(50, 10) == pytest.approx(0.1)  # clamped into the batch


def test_dense_aware_hybrid_rules():
    sim = 0.5  # L2 = 1.0 -> dense quality 0.5 with max_l2 = 2
    assert l2_from_cosine(sim) == pytest.approx(1.0)
    top = dict(hybrid_rule=HybridQuality.MIN_RANK_DENSE, dense_similarity=sim)
    assert to_quality_score("hybrid", 0.03, 1, 10, **top) == pytest.approx(0.5)
    assert to_quality_score("hybrid", 0.03, 8, 10, **top) == pytest.approx(0.3)  # rank caps
    assert to_quality_score("hybrid", 0.03, 1, 10, hybrid_rule="max_rank_dense",
                            dense_similarity=sim) == 1.0
    assert to_quality_score("hybrid", 0.03, 8, 10, hybrid_rule="max_rank_dense",
                            dense_similarity=sim) == pytest.approx(0.5)
    # rank_linear ignores the similarity.
    assert to_quality_score("hybrid", 0.03, 1, 10, dense_similarity=-1.0) == 1.0


@pytest.mark.parametrize(
    ("top", "level", "low"),
    [
        (None, RelevanceLevel.NONE, True),
        (1.0, RelevanceLevel.PRECISE, False),
        (0.75, RelevanceLevel.PRECISE, False),
        (0.7499, RelevanceLevel.AMBIGUOUS, False),
        (0.5, RelevanceLevel.AMBIGUOUS, False),
        (0.4999, RelevanceLevel.WEAK, True),
        (0.0, RelevanceLevel.WEAK, True),
    ],
)
def test_relevance_level_uses_only_the_top_quality_and_default_thresholds(top, level, low):
    assert relevance_level(top) is level
    assert is_low_quality(top) is low


def test_relevance_thresholds_are_configurable():
    assert relevance_level(0.6, precise_threshold=0.55, low_quality_threshold=0.3) \
        is RelevanceLevel.PRECISE
    assert relevance_level(0.25, precise_threshold=0.55, low_quality_threshold=0.3) \
        is RelevanceLevel.WEAK
    assert is_low_quality(0.45, low_quality_threshold=0.4) is False


# ---------------------------------------------------------------- calibration, as documented


def _flat(text: str) -> str:
    """``text`` with comment markers dropped and whitespace collapsed."""
    return " ".join(text.replace("#:", " ").split())


def test_documented_thresholds_and_figures_match_the_code_and_the_bench():
    result = json.loads((REPO / "bench" / "results" / "relevance.json").read_text("utf-8"))
    chosen = result["chosen_on_tuning_half"]["best"]
    precise, low = CALIBRATED_PRECISE_THRESHOLD, CALIBRATED_LOW_QUALITY_THRESHOLD
    assert (chosen["precise_threshold"], chosen["low_quality_threshold"]) == (precise, low)
    # the run measured these very constants live, and reproduced every lookup offline
    assert result["code_thresholds"] == {"precise": precise, "low_quality": low}
    assert all(c["offline_equals_live"] == c["lookups"] for c in result["live_checks"].values())
    assert (EvidenceSettings().precise_threshold, EvidenceSettings().low_quality_threshold) \
        == (precise, low)

    after, before = result["served_test"]["after"], result["served_test"]["before"]
    levels = {r["queries"]: r for r in after["relevance_levels"]}
    old = {r["queries"]: r for r in before["relevance_levels"]}
    hit_rate = after["precise_answers"]["evidence_hit_rate"]
    code = _flat((REPO / "src" / "docgraph" / "evidence" / "quality.py").read_text("utf-8"))
    for quoted in (
        f"Low quality {low}", f"precise {precise}", f"AUC {after['auc']};",
        f"flagged low quality {levels['scifact->scifact']['low_quality_%']}% / "
        f"{levels['2wiki->2wiki']['low_quality_%']}%",
        f"({old['scifact->scifact']['low_quality_%']}% / {old['2wiki->2wiki']['low_quality_%']}%",
        f"PRECISE {levels['scifact->scifact']['PRECISE']}% / {levels['2wiki->2wiki']['PRECISE']}%",
        f"gold passage in {hit_rate} of PRECISE",
    ):
        assert quoted in code, quoted
    unanswerable = [r for r in levels.values() if r["kind"] == "unanswerable"]
    assert all(r["low_quality_%"] == 100.0 for r in unanswerable)
    assert f"thresholds {precise} / {low}" in _flat(EvidenceSettings.__doc__ or "")
    docs = _flat((REPO / "docs" / "ARCHITECTURE.md").read_text("utf-8"))
    assert f"`precise_threshold` {precise} and `low_quality_threshold` {low}" in docs
    assert f"AUC {after['auc']} answerable vs unanswerable, {hit_rate} of PRECISE" in docs
