"""The evidence post-processor: quality, dedup by evidence key, per-document cap, return-n.

It is label-agnostic: the only label-dependent step is :func:`to_quality_score`. The order is
the retrieval order (``original_rank`` ascending); hints only add ``hit_reasons``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from docgraph.config import RagSettings
from docgraph.evidence.hints import QueryHints, explain_hit, merge_reasons
from docgraph.evidence.identity import evidence_key
from docgraph.evidence.port import (
    META_LANES,
    META_NAMESPACE,
    META_OCR,
    META_PAGES,
    META_SECTION_PATH,
    META_SOURCE,
    META_TITLE,
    KnowledgeSearchHit,
)
from docgraph.evidence.quality import (
    HybridQuality,
    RelevanceLevel,
    is_low_quality,
    relevance_level,
    to_quality_score,
)
from docgraph.evidence.settings import EvidenceSettings

_DEFAULTS = EvidenceSettings()


class DropReason(StrEnum):
    """Why a candidate did not become (or stay) an evidence block."""

    DUPLICATE = "duplicate"
    PER_DOCUMENT_CAP = "per_document_cap"
    RETURN_N = "return_n"
    PROJECTION_DUPLICATE = "projection_duplicate"
    PAYLOAD_BUDGET = "payload_budget"


@dataclass(frozen=True, slots=True)
class DroppedEvidence:
    """A candidate left out, and why (for the trace)."""

    evidence_key: str
    original_rank: int
    reason: DropReason
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "evidence_key": self.evidence_key,
            "original_rank": self.original_rank,
            "reason": str(self.reason),
            "detail": self.detail,
        }


@dataclass(slots=True)
class EvidenceCandidate:
    """A retrieved hit with its evidence key, quality score and hit reasons."""

    evidence_key: str
    hit: KnowledgeSearchHit
    quality_score: float
    hit_reasons: list[str] = field(default_factory=list)

    @property
    def original_rank(self) -> int:
        """The rank retrieval gave the hit."""
        return self.hit.original_rank

    @property
    def document_bucket(self) -> str:
        """The per-document cap bucket: the doc id, or the evidence key when it is unknown."""
        return self.hit.doc_id or f"key:{self.evidence_key}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for the trace)."""
        return {
            "evidence_key": self.evidence_key,
            "doc_id": self.hit.doc_id,
            "chunk_index": self.hit.chunk_index,
            "original_rank": self.hit.original_rank,
            "score_label": str(self.hit.score_label),
            "score": self.hit.score,
            "raw_score": self.hit.raw_score,
            "dense_similarity": self.hit.dense_similarity,
            "quality_score": self.quality_score,
            "hit_reasons": list(self.hit_reasons),
        }


@dataclass(frozen=True, slots=True)
class EvidenceBlock:
    """One piece of evidence handed to the projector: a chunk and where it came from
    (``pages``: its first and last page when the source has pages; ``ocr``: its text was
    recognised from an image)."""

    evidence_key: str
    content: str
    title: str
    source: str
    namespace: str | None
    section_path: tuple[str, ...]
    doc_id: str | None
    chunk_index: int | None
    original_rank: int
    quality_score: float
    hit_reasons: tuple[str, ...]
    pages: tuple[int, int] | None = None
    ocr: bool = False

    @classmethod
    def from_candidate(cls, candidate: EvidenceCandidate) -> EvidenceBlock:
        """Assemble a block from a post-processed candidate."""
        hit = candidate.hit
        meta = hit.metadata
        namespace = meta.get(META_NAMESPACE)
        source = meta.get(META_SOURCE) or hit.doc_id or candidate.evidence_key
        section = meta.get(META_SECTION_PATH) or ()
        pages = meta.get(META_PAGES)
        return cls(
            evidence_key=candidate.evidence_key,
            content=hit.content,
            title=str(meta.get(META_TITLE) or ""),
            source=str(source),
            namespace=namespace if isinstance(namespace, str) else None,
            section_path=tuple(str(s) for s in section),
            doc_id=hit.doc_id,
            chunk_index=hit.chunk_index,
            original_rank=hit.original_rank,
            quality_score=candidate.quality_score,
            hit_reasons=tuple(candidate.hit_reasons),
            pages=(int(pages[0]), int(pages[1])) if pages else None,
            ocr=bool(meta.get(META_OCR)),
        )


@dataclass(frozen=True, slots=True)
class PostProcessResult:
    """Blocks in retrieval order plus everything the trace needs (``top_quality``: the best
    block quality, ``None`` when there is no block)."""

    blocks: tuple[EvidenceBlock, ...]
    candidates: tuple[EvidenceCandidate, ...]
    dropped: tuple[DroppedEvidence, ...]
    top_quality: float | None
    relevance_level: RelevanceLevel
    is_low_quality: bool


def retrieval_reasons(hit: KnowledgeSearchHit) -> list[str]:
    """Why retrieval returned the hit: its label and rank, and the lanes that found it."""
    reasons = [f"retrieved:{hit.score_label}@{hit.original_rank}"]
    lanes = hit.metadata.get(META_LANES) or ()
    reasons.extend(f"lane:{lane}" for lane in lanes)
    return reasons


class EvidencePostProcessor:
    """Turns one batch of hits into at most ``return_n`` evidence blocks.

    Steps: quality score per hit, order by ``original_rank`` ascending (retrieval owns the
    order), dedup by evidence key (true duplicates merge their reasons; the higher-ranked
    content stays), at most ``max_chunks_per_document`` blocks per doc id (a hit without a doc
    id is its own bucket), cut to ``return_n``. Scoring defaults are those of
    :class:`EvidenceSettings`. ``relevance_level`` and ``is_low_quality`` depend only on the
    top quality score and the thresholds; hints never change the order or a score.

    The top quality is the best quality among the returned blocks, not the first block's:
    the level grades the evidence handed out, and a fused order (BM25 rank, entity coverage,
    lanes) can put a lexically strong but less similar chunk first. In ``dense`` mode the
    order is by distance, so the best block is the first.
    """

    def __init__(
        self,
        *,
        return_n: int = 5,
        max_chunks_per_document: int = 2,
        max_l2: float = _DEFAULTS.max_l2,
        precise_threshold: float = _DEFAULTS.precise_threshold,
        low_quality_threshold: float = _DEFAULTS.low_quality_threshold,
        hybrid_quality: HybridQuality | str = _DEFAULTS.hybrid_quality,
    ) -> None:
        if return_n < 1:
            raise ValueError(f"return_n must be at least 1, got {return_n!r}")
        if max_chunks_per_document < 1:
            raise ValueError(
                f"max_chunks_per_document must be at least 1, got {max_chunks_per_document!r}"
            )
        self.return_n = return_n
        self.max_chunks_per_document = max_chunks_per_document
        self.max_l2 = max_l2
        self.precise_threshold = precise_threshold
        self.low_quality_threshold = low_quality_threshold
        self.hybrid_quality = HybridQuality(hybrid_quality)

    @classmethod
    def from_settings(
        cls, rag: RagSettings | None = None, evidence: EvidenceSettings | None = None
    ) -> EvidencePostProcessor:
        """A post-processor configured from ``rag`` (widths, cap) and ``evidence`` (scoring)."""
        rag = rag or RagSettings()
        evidence = evidence or EvidenceSettings()
        return cls(
            return_n=rag.effective_return_n,
            max_chunks_per_document=rag.max_chunks_per_document,
            max_l2=evidence.max_l2,
            precise_threshold=evidence.precise_threshold,
            low_quality_threshold=evidence.low_quality_threshold,
            hybrid_quality=evidence.hybrid_quality,
        )

    def quality(self, hit: KnowledgeSearchHit, batch_size: int) -> float:
        """The hit's quality score within a batch of ``batch_size`` hits."""
        return to_quality_score(
            hit.score_label,
            hit.score,
            hit.original_rank,
            batch_size,
            self.max_l2,
            hybrid_rule=self.hybrid_quality,
            dense_similarity=hit.dense_similarity,
        )

    def process(
        self, hits: Sequence[KnowledgeSearchHit], hints: QueryHints | None = None
    ) -> PostProcessResult:
        """Post-process one batch of hits (in any order; the retrieval rank decides)."""
        batch_size = max([len(hits), *(h.original_rank for h in hits)], default=0)
        ordered = sorted(enumerate(hits), key=lambda pair: (pair[1].original_rank, pair[0]))
        dropped: list[DroppedEvidence] = []
        by_key: dict[str, EvidenceCandidate] = {}
        for _, hit in ordered:
            key = evidence_key(hit.doc_id, hit.chunk_index, hit.vector_id, hit.original_rank)
            reasons = retrieval_reasons(hit) + explain_hit(hints, hit)
            kept = by_key.get(key)
            if kept is not None:
                kept.hit_reasons = merge_reasons(kept.hit_reasons, reasons)
                dropped.append(DroppedEvidence(
                    key, hit.original_rank, DropReason.DUPLICATE,
                    f"same evidence key as rank {kept.original_rank}; reasons merged",
                ))
                continue
            by_key[key] = EvidenceCandidate(key, hit, self.quality(hit, batch_size), reasons)

        candidates = list(by_key.values())
        per_document: dict[str, int] = {}
        selected: list[EvidenceCandidate] = []
        for candidate in candidates:
            bucket = candidate.document_bucket
            if per_document.get(bucket, 0) >= self.max_chunks_per_document:
                dropped.append(DroppedEvidence(
                    candidate.evidence_key, candidate.original_rank, DropReason.PER_DOCUMENT_CAP,
                    f"document {candidate.hit.doc_id} already has "
                    f"{self.max_chunks_per_document} blocks",
                ))
                continue
            if len(selected) >= self.return_n:
                dropped.append(DroppedEvidence(
                    candidate.evidence_key, candidate.original_rank, DropReason.RETURN_N,
                    f"return_n={self.return_n} blocks already selected",
                ))
                continue
            per_document[bucket] = per_document.get(bucket, 0) + 1
            selected.append(candidate)

        top = max((c.quality_score for c in selected), default=None)
        return PostProcessResult(
            blocks=tuple(EvidenceBlock.from_candidate(c) for c in selected),
            candidates=tuple(candidates),
            dropped=tuple(dropped),
            top_quality=top,
            relevance_level=relevance_level(
                top, self.precise_threshold, self.low_quality_threshold
            ),
            is_low_quality=is_low_quality(top, self.low_quality_threshold),
        )
