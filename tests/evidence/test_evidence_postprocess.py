"""Evidence identity, dedup, per-document cap, return-n and the label-agnostic post-processor."""

from __future__ import annotations

import pytest

from docgraph.config import RagSettings
from docgraph.evidence import (
    DropReason,
    EvidencePostProcessor,
    EvidenceSettings,
    HybridQuality,
    QueryTransformer,
    RelevanceLevel,
    ScoreLabel,
    evidence_key,
)
from docgraph.evidence.quality import l2_from_cosine
from tests.evidence.test_evidence_helpers import make_hit


def keys(result):
    return [b.evidence_key for b in result.blocks]


# ---------------------------------------------------------------- identity

def test_evidence_key_prefers_doc_and_chunk():
    assert evidence_key("file:///x/a.md", 3, "17", 1) == "file:///x/a.md#chunk-3"
    assert evidence_key("a.md", 0, None, 9) == "a.md#chunk-0"  # chunk 0 is a known index


def test_missing_doc_id_falls_back_to_vector_id_then_rank():
    assert evidence_key(None, 3, "17", 4) == "vector:17"
    assert evidence_key("", 3, 17, 4) == "vector:17"
    assert evidence_key("a.md", None, "17", 4) == "vector:17"
    assert evidence_key(None, None, None, 4) == "rank:4"
    assert evidence_key("a.md", None, "  ", 4) == "rank:4"


def test_post_processor_uses_the_fallback_keys():
    hits = [make_hit(1, None, None, vector="v9"), make_hit(2, None, None, vector=None)]
    result = EvidencePostProcessor().process(hits)
    assert keys(result) == ["vector:v9", "rank:2"]


# ---------------------------------------------------------------- dedup and caps

def test_several_chunks_of_one_document_survive_up_to_the_cap():
    hits = [make_hit(1, "a", 0), make_hit(2, "a", 1), make_hit(3, "a", 2), make_hit(4, "b", 0),
            make_hit(5, "a", 3)]
    result = EvidencePostProcessor(max_chunks_per_document=2).process(hits)
    assert keys(result) == ["a#chunk-0", "a#chunk-1", "b#chunk-0"]
    capped = [d for d in result.dropped if d.reason is DropReason.PER_DOCUMENT_CAP]
    assert [d.evidence_key for d in capped] == ["a#chunk-2", "a#chunk-3"]
    # With a higher cap the same chunks are kept as separate blocks, never merged.
    wide = EvidencePostProcessor(max_chunks_per_document=3).process(hits)
    assert keys(wide) == ["a#chunk-0", "a#chunk-1", "a#chunk-2", "b#chunk-0"]
    assert len({b.content for b in wide.blocks}) == 4


def test_candidates_without_doc_id_are_their_own_bucket():
    hits = [make_hit(r, None, None, vector=f"v{r}") for r in range(1, 5)]
    result = EvidencePostProcessor(max_chunks_per_document=1).process(hits)
    assert keys(result) == ["vector:v1", "vector:v2", "vector:v3", "vector:v4"]


def test_duplicate_keys_merge_reasons_and_keep_the_higher_ranked_content():
    first = make_hit(2, "a", 4, content="Higher ranked copy.")
    dup = make_hit(5, "a", 4, content="Lower ranked copy mentioning lidar.")
    hints = QueryTransformer().transform("lidar")
    result = EvidencePostProcessor().process([dup, first, make_hit(1, "b", 0)], hints)
    assert keys(result) == ["b#chunk-0", "a#chunk-4"]
    block = result.blocks[1]
    assert block.content == "Higher ranked copy."
    assert block.original_rank == 2
    assert "retrieved:hybrid@2" in block.hit_reasons
    assert "retrieved:hybrid@5" in block.hit_reasons       # merged from the duplicate
    assert "keyword:lidar" in block.hit_reasons            # only the duplicate matched
    assert [d.reason for d in result.dropped] == [DropReason.DUPLICATE]


def test_return_n_truncates_after_dedup_and_cap():
    hits = [make_hit(r, f"d{r}", 0) for r in range(1, 21)]
    result = EvidencePostProcessor(return_n=5).process(hits)
    assert keys(result) == [f"d{r}#chunk-0" for r in range(1, 6)]
    assert sum(d.reason is DropReason.RETURN_N for d in result.dropped) == 15


def test_from_settings_reads_rag_settings_including_legacy_top_k():
    processor = EvidencePostProcessor.from_settings(RagSettings(top_k=3))
    assert processor.return_n == 3
    processor = EvidencePostProcessor.from_settings(
        RagSettings.model_validate({"top-k": 3, "return-n": 4, "max-chunks-per-document": 1}))
    assert (processor.return_n, processor.max_chunks_per_document) == (4, 1)


# ---------------------------------------------------------------- order and hints

def test_order_is_the_original_rank_whatever_the_input_order():
    hits = [make_hit(3, "c"), make_hit(1, "a"), make_hit(2, "b")]
    result = EvidencePostProcessor().process(hits)
    assert [b.original_rank for b in result.blocks] == [1, 2, 3]


def test_hybrid_keeps_the_fused_order_and_keyword_hints_cannot_reorder_it():
    hits = [
        make_hit(1, "a", content="Unrelated words about weather."),
        make_hit(2, "b", content="Still nothing relevant here."),
        make_hit(3, "c", content="Kestrel firmware lidar calibration: the kestrel lidar."),
    ]
    hints = QueryTransformer(
        ["kestrel"], entity_vocabulary=lambda q: ["Kestrel"]
    ).transform("kestrel lidar calibration")
    processor = EvidencePostProcessor()
    plain = processor.process(hits)
    hinted = processor.process(hits, hints)
    assert keys(hinted) == keys(plain) == ["a#chunk-0", "b#chunk-0", "c#chunk-0"]
    assert [b.quality_score for b in hinted.blocks] == [b.quality_score for b in plain.blocks]
    assert hinted.top_quality == plain.top_quality
    assert hinted.relevance_level is plain.relevance_level
    reasons = hinted.blocks[2].hit_reasons
    assert {"keyword:kestrel", "keyword:lidar", "keyword:calibration", "entity:Kestrel"} \
        <= set(reasons)
    assert not any(r.startswith(("keyword:", "entity:")) for r in hinted.blocks[0].hit_reasons)


def test_domain_hints_are_reasons_only():
    hits = [make_hit(1, "a", namespace="hr"), make_hit(2, "b", namespace="support-faq")]
    hints = QueryTransformer(["hr", "support-faq"]).transform("faq about the robot")
    assert hints.domains == ("support-faq",)
    result = EvidencePostProcessor().process(hits, hints)
    assert keys(result) == ["a#chunk-0", "b#chunk-0"]
    assert "domain:support-faq" in result.blocks[1].hit_reasons


# ---------------------------------------------------------------- quality and gates

def test_dense_blocks_carry_the_l2_quality():
    hits = [make_hit(1, "a", label="dense", score=0.9), make_hit(2, "b", label="dense",
                                                                score=1.2)]
    result = EvidencePostProcessor(max_l2=2.0).process(hits)
    assert [b.quality_score for b in result.blocks] == pytest.approx([0.55, 0.4])
    assert result.top_quality == pytest.approx(0.55)
    assert result.relevance_level is RelevanceLevel.PRECISE  # calibrated default 0.55
    seed = EvidencePostProcessor.from_settings(evidence=EvidenceSettings.seed_contract("dense"))
    assert seed.process(hits).relevance_level is RelevanceLevel.AMBIGUOUS  # seed 0.75 / 0.5
    assert not result.is_low_quality


def test_seed_rank_linear_quality_uses_the_rank_within_the_retrieved_batch():
    hits = [make_hit(r, f"d{r}", sim=0.1) for r in range(1, 11)]
    seed = EvidencePostProcessor(return_n=3, hybrid_quality="rank_linear")
    result = seed.process(hits)
    assert [b.quality_score for b in result.blocks] == pytest.approx([1.0, 0.9, 0.8])
    assert result.relevance_level is RelevanceLevel.PRECISE  # rank-linear: top is always 1


def test_default_hybrid_quality_flags_an_off_topic_batch():
    # Same ranks; only the dense similarity to the query differs.
    off_topic = [make_hit(r, f"d{r}", sim=0.1) for r in range(1, 11)]
    on_topic = [make_hit(r, f"d{r}", sim=0.8) for r in range(1, 11)]
    processor = EvidencePostProcessor()
    low = processor.process(off_topic)
    assert low.top_quality == pytest.approx(1 - l2_from_cosine(0.1) / 2)
    assert low.relevance_level is RelevanceLevel.WEAK and low.is_low_quality
    high = processor.process(on_topic)
    assert high.relevance_level is RelevanceLevel.PRECISE and not high.is_low_quality
    assert keys(low) == keys(high)  # the order is the retrieval order either way
    # later blocks are capped by their rank quality (rank 5 of 10: 0.6 < dense 0.68)
    assert high.blocks[0].quality_score == pytest.approx(1 - l2_from_cosine(0.8) / 2)
    assert high.blocks[4].quality_score == pytest.approx(0.6)


def test_shipped_defaults_and_seed_contract():
    shipped = EvidenceSettings()
    assert shipped.hybrid_quality is HybridQuality.MIN_RANK_DENSE
    assert (shipped.max_l2, shipped.precise_threshold, shipped.low_quality_threshold) == \
        (2.0, 0.55, 0.44)
    seed = EvidenceSettings.seed_contract()
    assert seed.hybrid_quality is HybridQuality.RANK_LINEAR
    assert (seed.max_l2, seed.precise_threshold, seed.low_quality_threshold) == (2.0, 0.75, 0.5)


def test_levels_depend_only_on_top_quality_and_thresholds():
    # min_rank_dense: the second block's quality is capped by its rank (2 of 2: 0.5), so the
    # top quality is 0.5 either way.
    hits = [make_hit(1, "a", sim=0.5), make_hit(2, "b", sim=0.95)]
    result = EvidencePostProcessor(hybrid_quality=HybridQuality.MIN_RANK_DENSE).process(hits)
    assert result.top_quality == pytest.approx(0.5)
    assert result.relevance_level is RelevanceLevel.AMBIGUOUS
    stricter = EvidencePostProcessor(hybrid_quality="min_rank_dense", low_quality_threshold=0.6,
                                     precise_threshold=0.8).process(hits)
    assert stricter.relevance_level is RelevanceLevel.WEAK and stricter.is_low_quality


def test_top_quality_is_the_best_returned_block_not_the_first():
    # A fused order may put a lexically strong, less similar chunk first (cohort search does);
    # the level grades the evidence handed out, and the order stays the retrieval order.
    hits = [make_hit(1, "lexical", sim=0.2), make_hit(2, "close", sim=0.7),
            make_hit(3, "other", sim=0.4)] + [make_hit(r, f"d{r}", sim=0.1) for r in range(4, 21)]
    result = EvidencePostProcessor().process(hits)
    assert keys(result)[:2] == ["lexical#chunk-0", "close#chunk-0"]
    assert result.top_quality == pytest.approx(1 - l2_from_cosine(0.7) / 2)
    assert result.top_quality == max(b.quality_score for b in result.blocks)
    assert result.relevance_level is RelevanceLevel.PRECISE and not result.is_low_quality
    # A close chunk that return_n cut off does not count: only returned blocks are graded.
    cut = EvidencePostProcessor(return_n=1).process(hits)
    assert cut.top_quality == pytest.approx(1 - l2_from_cosine(0.2) / 2)
    assert cut.relevance_level is RelevanceLevel.WEAK and cut.is_low_quality


def test_empty_batch_is_none_and_low_quality():
    result = EvidencePostProcessor().process([])
    assert result.blocks == () and result.top_quality is None
    assert result.relevance_level is RelevanceLevel.NONE and result.is_low_quality


def test_post_processor_never_branches_on_labels_beyond_quality():
    # The same ranks with either label give the same keys, order and cap decisions.
    for label in ScoreLabel:
        hits = [make_hit(1, "a", 0, label=label), make_hit(2, "a", 1, label=label),
                make_hit(3, "a", 2, label=label), make_hit(4, "b", 0, label=label)]
        assert keys(EvidencePostProcessor().process(hits)) == \
            ["a#chunk-0", "a#chunk-1", "b#chunk-0"]


def test_settings_validation():
    with pytest.raises(ValueError):
        EvidenceSettings(low_quality_threshold=0.8, precise_threshold=0.7)
    with pytest.raises(ValueError):
        EvidenceSettings(max_l2=0)
    with pytest.raises(ValueError):
        EvidencePostProcessor(return_n=0)
    assert EvidenceSettings(hybrid_quality="min_rank_dense").hybrid_quality \
        is HybridQuality.MIN_RANK_DENSE  # type: ignore[arg-type]
