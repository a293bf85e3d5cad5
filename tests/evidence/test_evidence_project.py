"""The agent projection: chunk-scoped document ids, excerpt and payload budgets."""

from __future__ import annotations

from docgraph.evidence import (
    DropReason,
    EvidencePostProcessor,
    RelevanceLevel,
    cut_excerpt,
    project,
)
from tests.evidence.test_evidence_helpers import make_hit

SENTENCES = "First sentence is here. Second one follows it! Third asks why? Fourth ends it."


def blocks_of(hits, **kwargs):
    return EvidencePostProcessor(**kwargs).process(hits).blocks


def test_projected_ids_are_evidence_keys_one_to_one_with_excerpts():
    hits = [make_hit(1, "a", 0, content="Alpha."), make_hit(2, "a", 1, content="Beta."),
            make_hit(3, "b", 0, content="Gamma.")]
    projection = project(blocks_of(hits), relevance_level=RelevanceLevel.PRECISE,
                         is_low_quality=False)
    ids = [e.document_id for e in projection.evidence]
    assert ids == ["a#chunk-0", "a#chunk-1", "b#chunk-0"]
    assert len(set(ids)) == len(ids) == len([e.excerpt for e in projection.evidence])
    assert [e.excerpt for e in projection.evidence] == ["Alpha.", "Beta.", "Gamma."]
    # source and title are human readable and may repeat across chunks of one document
    assert [e.source for e in projection.evidence] == ["a.md", "a.md", "b.md"]
    assert projection.evidence[0].title == projection.evidence[1].title == "Title a"


def test_projector_dedups_by_document_id():
    block = blocks_of([make_hit(1, "a", 0)])[0]
    projection = project([block, block], relevance_level=RelevanceLevel.AMBIGUOUS,
                         is_low_quality=False)
    assert [e.document_id for e in projection.evidence] == ["a#chunk-0"]
    assert [d.reason for d in projection.dropped] == [DropReason.PROJECTION_DUPLICATE]


def test_agent_payload_has_no_scores():
    hits = [make_hit(1, "a", 0, content="Alpha.")]
    payload = project(blocks_of(hits), relevance_level=RelevanceLevel.WEAK,
                      is_low_quality=True).to_dict()
    assert payload["relevance_level"] == "WEAK" and payload["is_low_quality"] is True
    assert set(payload["evidence"][0]) == {"document_id", "source", "title", "section",
                                           "excerpt"}


def test_excerpt_is_cut_at_a_sentence_boundary():
    assert cut_excerpt(SENTENCES, 1000) == SENTENCES
    assert cut_excerpt(SENTENCES, 50) == "First sentence is here. Second one follows it!"
    assert cut_excerpt(SENTENCES, 62) == "First sentence is here. Second one follows it! Third " \
        "asks why?"
    cjk = "第一句话。第二句话很长很长。第三句。"
    assert cut_excerpt(cjk, 12) == "第一句话。"
    assert cut_excerpt(cjk, 15) == "第一句话。第二句话很长很长。"


def test_excerpt_without_a_usable_sentence_end_is_cut_at_a_word():
    text = "word " * 40
    cut = cut_excerpt(text, 23)
    assert cut == "word word word word…" and len(cut) <= 23
    assert len(cut_excerpt("x" * 100, 10)) == 10


def test_total_budget_cuts_and_drops_blocks():
    hits = [make_hit(r, f"d{r}", 0, content=SENTENCES) for r in range(1, 5)]
    projection = project(blocks_of(hits), relevance_level=RelevanceLevel.PRECISE,
                         is_low_quality=False, excerpt_chars=80, total_chars=200,
                         min_excerpt_chars=30)
    lengths = [len(e.excerpt) for e in projection.evidence]
    assert sum(lengths) <= 200
    assert all(length <= 80 for length in lengths)
    assert len(projection.evidence) == 3  # 78 + 78, then 44 chars left for the third
    assert projection.evidence[2].excerpt == "First sentence is here."
    assert [d.reason for d in projection.dropped] == [DropReason.PAYLOAD_BUDGET]
    assert projection.dropped[0].evidence_key == "d4#chunk-0"


def test_pages_and_ocr_are_shown_only_when_known():
    from dataclasses import replace

    from docgraph.evidence.port import META_OCR, META_PAGES

    def with_meta(hit, **meta):  # type: ignore[no-untyped-def]
        return replace(hit, metadata={**hit.metadata, **meta})

    hits = [with_meta(make_hit(1, "a", 0, content="One page."), **{META_PAGES: (3, 3)}),
            with_meta(make_hit(2, "b", 0, content="Two pages."),
                      **{META_PAGES: (3, 4), META_OCR: True}),
            make_hit(3, "c", 0, content="No pages.")]
    payload = project(blocks_of(hits), relevance_level=RelevanceLevel.PRECISE,
                      is_low_quality=False).to_dict()
    one, two, none = payload["evidence"]
    assert (one["pages"], "ocr" in one) == ([3], False)
    assert (two["pages"], two["ocr"]) == ([3, 4], True)
    assert "pages" not in none and "ocr" not in none
    assert set(none) == {"document_id", "source", "title", "section", "excerpt"}
