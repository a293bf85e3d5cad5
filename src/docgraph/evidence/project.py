"""The agent projection: chunk-scoped ``document_id`` (the evidence key), budgeted excerpts.

The agent sees ``relevance_level``, ``is_low_quality`` and one entry per evidence block:
``document_id`` (unique, 1:1 with the excerpt), ``source`` and ``title`` (human readable,
may repeat across blocks of one document), ``section`` and ``excerpt``; ``pages`` (``[3]``
or ``[3, 4]``) when the source has pages, ``ocr: true`` when the text was recognised
from an image, and, once the governed service has published the ids (:func:`publish`),
``url`` where the source has one. Scores, raw fused scores and the trace stay internal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from docgraph.evidence.postprocess import DroppedEvidence, DropReason, EvidenceBlock
from docgraph.evidence.quality import RelevanceLevel
from docgraph.model import page_list

ELLIPSIS = "…"
_SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*(?=\s|$)|[。！？]")
_SPACE = re.compile(r"\s+")


def cut_excerpt(text: str, limit: int, *, min_fraction: float = 0.4) -> str:
    """``text`` cut to at most ``limit`` characters, at a sentence boundary when possible.

    The cut ends at the last sentence end inside the limit, provided that keeps at least
    ``min_fraction`` of the limit; otherwise at the last word boundary, marked with ``…``.
    """
    if limit < 1:
        return ""
    text = text.strip()
    if len(text) <= limit:
        return text
    window = text[:limit]
    ends = [m.end() for m in _SENTENCE_END.finditer(window)]
    if ends and ends[-1] >= limit * min_fraction:
        return window[:ends[-1]].rstrip()
    window = text[:limit - len(ELLIPSIS)]
    cut = window.rsplit(None, 1)[0] if _SPACE.search(window) else window
    if len(cut) < (limit - len(ELLIPSIS)) * min_fraction:
        cut = window  # one very long word: cut inside it rather than return almost nothing
    return cut.rstrip() + ELLIPSIS


@dataclass(frozen=True, slots=True)
class ProjectedEvidence:
    """One agent-visible evidence entry."""

    document_id: str
    source: str
    title: str
    section: str
    excerpt: str
    pages: tuple[int, int] | None = None
    ocr: bool = False
    url: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``pages`` only when known, ``ocr`` only when true, ``url`` only
        when the source publishes one)."""
        out: dict[str, Any] = {
            "document_id": self.document_id,
            "source": self.source,
            "title": self.title,
            "section": self.section,
            "excerpt": self.excerpt,
        }
        if self.pages is not None:
            out["pages"] = page_list(self.pages)
        if self.ocr:
            out["ocr"] = True
        if self.url is not None:
            out["url"] = self.url
        return out


@dataclass(frozen=True, slots=True)
class Projection:
    """What the agent tool returns, plus what the projector dropped (for the trace)."""

    relevance_level: RelevanceLevel
    is_low_quality: bool
    evidence: tuple[ProjectedEvidence, ...]
    dropped: tuple[DroppedEvidence, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The agent-facing JSON payload."""
        return {
            "relevance_level": str(self.relevance_level),
            "is_low_quality": self.is_low_quality,
            "evidence": [e.to_dict() for e in self.evidence],
        }


def project(
    blocks: Sequence[EvidenceBlock],
    *,
    relevance_level: RelevanceLevel,
    is_low_quality: bool,
    excerpt_chars: int = 700,
    total_chars: int = 3500,
    min_excerpt_chars: int = 80,
) -> Projection:
    """Project evidence blocks for the agent, in the given order.

    Blocks are deduplicated by ``document_id`` (= evidence key; the first wins). Each excerpt
    is cut to ``excerpt_chars`` at a sentence boundary; excerpts together stay within
    ``total_chars``; once less than ``min_excerpt_chars`` of the payload budget is left, the
    remaining blocks are dropped (recorded in ``dropped``).
    """
    evidence: list[ProjectedEvidence] = []
    dropped: list[DroppedEvidence] = []
    seen: set[str] = set()
    remaining = total_chars
    for block in blocks:
        if block.evidence_key in seen:
            dropped.append(DroppedEvidence(
                block.evidence_key, block.original_rank, DropReason.PROJECTION_DUPLICATE,
                "document_id already projected",
            ))
            continue
        limit = min(excerpt_chars, remaining)
        excerpt = cut_excerpt(block.content, limit) if limit >= min_excerpt_chars else ""
        if not excerpt:
            dropped.append(DroppedEvidence(
                block.evidence_key, block.original_rank, DropReason.PAYLOAD_BUDGET,
                f"{remaining} of total_chars={total_chars} left",
            ))
            continue
        seen.add(block.evidence_key)
        remaining -= len(excerpt)
        evidence.append(ProjectedEvidence(
            document_id=block.evidence_key,
            source=block.source,
            title=block.title,
            section=" > ".join(block.section_path),
            excerpt=excerpt,
            pages=block.pages,
            ocr=block.ocr,
        ))
    return Projection(relevance_level, is_low_quality, tuple(evidence), tuple(dropped))


def publish(projection: Projection,
            names: Mapping[str, tuple[str, str | None]]) -> Projection:
    """``projection`` with each entry's ``document_id`` and ``url`` as ``names`` gives them
    for its stored evidence key (the agent-visible id and the citation URL, worked out by
    the caller from the blocks: data handed down, no call back up); entries without a name
    are left as they are."""
    evidence = []
    for entry in projection.evidence:
        named = names.get(entry.document_id)
        if named is None:
            evidence.append(entry)
            continue
        document_id, url = named
        evidence.append(replace(entry, document_id=document_id, url=url))
    return replace(projection, evidence=tuple(evidence))
