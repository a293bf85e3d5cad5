"""Builders shared by the evidence tests (no tests here): port hits and a scripted port."""

from __future__ import annotations

from docgraph.evidence import KnowledgeSearchHit, KnowledgeSearchRequest, ScoreLabel
from docgraph.evidence.port import META_NAMESPACE, META_SOURCE, META_TITLE


def make_hit(
    rank: int,
    doc: str | None = "doc-a",
    chunk: int | None = 0,
    *,
    label: ScoreLabel | str = ScoreLabel.HYBRID,
    score: float | None = None,
    sim: float | None = 0.5,
    content: str = "",
    vector: str | None = None,
    namespace: str = "ns",
) -> KnowledgeSearchHit:
    """A port hit; the hybrid score defaults to an RRF-like value, the dense one to an L2."""
    canonical = ScoreLabel(label)
    if score is None:
        score = 1 / (60 + rank) if canonical is ScoreLabel.HYBRID else 0.5 + 0.05 * rank
    return KnowledgeSearchHit(
        id=vector or f"{doc}:{chunk}:{rank}",
        content=content or f"text of {doc} chunk {chunk} at rank {rank}.",
        score=score,
        raw_score=score,
        score_label=canonical,
        original_rank=rank,
        metadata={META_NAMESPACE: namespace, META_TITLE: f"Title {doc}",
                  META_SOURCE: f"{doc}.md" if doc else "unknown"},
        doc_id=doc,
        chunk_index=chunk,
        vector_id=vector,
        dense_similarity=sim,
    )


class ScriptedPort:
    """A search port that answers from a script and records every request."""

    def __init__(
        self,
        filtered: list[KnowledgeSearchHit],
        unfiltered: list[KnowledgeSearchHit] | None = None,
    ) -> None:
        self.filtered = filtered
        self.unfiltered = unfiltered if unfiltered is not None else filtered
        self.requests: list[KnowledgeSearchRequest] = []

    def search(self, request: KnowledgeSearchRequest) -> list[KnowledgeSearchHit]:
        self.requests.append(request)
        hits = self.filtered if request.category_filter is not None else self.unfiltered
        return hits[:request.top_k]
