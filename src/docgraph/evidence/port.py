"""The thin search port of the evidence pipeline (seed 000, decision D6).

``KnowledgeSearchPort.search(KnowledgeSearchRequest) -> list[KnowledgeSearchHit]`` is all the
evidence layer knows about retrieval. :class:`DocgraphSearchPort` is the default adapter over
docgraph's own hybrid search; nothing store-specific passes through it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from docgraph.config import Settings
from docgraph.embedding.embedders import Embedder
from docgraph.errors import InvalidQuery
from docgraph.evidence.labels import ScoreLabel, canonicalize
from docgraph.limits import HYBRID_MODES, HybridMode
from docgraph.model import SearchHit
from docgraph.store.base import ChunkIndex, require_namespaces

#: Metadata keys the default adapter fills (all optional for other adapters).
META_NAMESPACE = "namespace"
META_TITLE = "title"
META_SOURCE = "source"
META_SECTION_PATH = "section_path"
META_LANES = "lanes"
META_LEXICAL_SCORE = "lexical_score"
META_PAGES = "pages"
META_OCR = "ocr"


@dataclass(frozen=True, slots=True)
class KnowledgeSearchRequest:
    """One search: ``top_k`` wide, optionally narrowed to a category, in one mode.

    ``category_filter`` is a set of categories (namespaces for the default adapter) that
    narrows the caller's allowed set; ``None`` means no category filter. It never widens it.
    """

    query: str
    top_k: int
    category_filter: frozenset[str] | None = None
    mode: HybridMode = "hybrid"

    def __post_init__(self) -> None:
        if self.top_k < 1:
            raise InvalidQuery(f"top_k must be at least 1, got {self.top_k!r}")
        if self.mode not in HYBRID_MODES:
            raise InvalidQuery(f"mode must be 'hybrid' or 'dense', got {self.mode!r}")


@dataclass(frozen=True, slots=True)
class KnowledgeSearchHit:
    """One hit as the evidence layer sees it.

    ``score`` follows ``score_label`` (``dense``: L2 distance; ``hybrid``: the engine's fused
    or composite score);
    ``raw_score`` is the engine's own score, kept as reported (for ``hybrid`` the fused
    score, never overwritten by a dense distance). ``original_rank`` is the 1-based order
    retrieval returned. ``doc_id``/``chunk_index``/``vector_id`` are the identity fields when
    known; ``dense_similarity`` is the cosine similarity to the query when the dense lane saw
    the hit (``None`` for a BM25-only hybrid hit).
    """

    id: str
    content: str
    score: float
    raw_score: float | None
    score_label: ScoreLabel
    original_rank: int
    metadata: Mapping[str, Any] = field(default_factory=dict)
    doc_id: str | None = None
    chunk_index: int | None = None
    vector_id: str | None = None
    dense_similarity: float | None = None


@runtime_checkable
class KnowledgeSearchPort(Protocol):
    """Anything that answers a :class:`KnowledgeSearchRequest` with ranked hits."""

    def search(self, request: KnowledgeSearchRequest) -> list[KnowledgeSearchHit]:
        """Hits in retrieval order (``original_rank`` 1, 2, ...)."""
        ...


class SearchIndex(Protocol):
    """What the default adapter uses of docgraph (a :class:`~docgraph.DocGraph` has it):
    its single-chunk search, the chunk index's stored vectors, the embedder, the settings
    (``rag``). The evidence layer never imports the application."""

    @property
    def settings(self) -> Settings: ...

    @property
    def embedder(self) -> Embedder: ...

    def chunk_index(self) -> ChunkIndex: ...

    def search(self, query: str, *, namespaces: Iterable[str], k: int = 10,
               mode: HybridMode = "hybrid", strict: bool = True) -> list[SearchHit]: ...


def hit_from_search_hit(
    hit: SearchHit, dense_similarity: float | None = None
) -> KnowledgeSearchHit:
    """Map docgraph's :class:`~docgraph.model.SearchHit` onto the port's hit type.

    ``dense_similarity`` stands in for the hit's own when that is unknown.
    """
    similarity = hit.dense_similarity if hit.dense_similarity is not None else dense_similarity
    return KnowledgeSearchHit(
        id=hit.chunk_id,
        content=hit.text,
        score=hit.score,
        raw_score=hit.score,
        score_label=canonicalize(hit.score_label),
        original_rank=hit.original_rank,
        metadata={
            META_NAMESPACE: hit.namespace,
            META_TITLE: hit.title,
            META_SOURCE: hit.source_path,
            META_SECTION_PATH: tuple(hit.section_path),
            META_LANES: hit.shown_lanes,
            META_LEXICAL_SCORE: hit.lexical_score,
            META_PAGES: hit.pages,
            META_OCR: hit.ocr,
        },
        doc_id=hit.doc_id or None,
        chunk_index=hit.chunk_index,
        vector_id=str(hit.rowid) if hit.rowid else None,
        dense_similarity=similarity,
    )


class DocgraphSearchPort:
    """The default adapter: docgraph's own search over a fixed, allowed namespace set.

    The allowed set comes from configuration (later: from the caller's entitlements), never
    from the agent. A request's category filter narrows it; a filter that leaves nothing
    allowed returns no hits rather than searching anything else.

    ``fill_similarity``: a hybrid hit the dense lane did not return (BM25-only) gets its true
    cosine similarity from its stored vector, so quality rules that use it never guess. The
    hit's lanes, rank and scores are unchanged.
    """

    def __init__(
        self, docgraph: SearchIndex, namespaces: Iterable[str], *, fill_similarity: bool = True
    ) -> None:
        self.docgraph = docgraph
        self.namespaces = require_namespaces(namespaces)
        self.fill_similarity = fill_similarity

    def search(self, request: KnowledgeSearchRequest) -> list[KnowledgeSearchHit]:
        """Search the allowed namespaces (narrowed by the category filter, if any)."""
        allowed = self.namespaces
        if request.category_filter is not None:
            allowed = allowed & request.category_filter
            if not allowed:
                return []
        hits = self.docgraph.search(  # a caller's domains may hold nothing yet: not an error
            request.query, namespaces=allowed, k=request.top_k, mode=request.mode,
            strict=False,
        )
        similarity = missing_similarity(self.docgraph, request.query, hits) \
            if self.fill_similarity else {}
        return [hit_from_search_hit(h, similarity.get(h.rowid)) for h in hits]


def missing_similarity(docgraph: SearchIndex, query: str, hits: Sequence[SearchHit]
                       ) -> dict[int, float]:
    """Cosine similarity to ``query`` of the hits that carry none (row id -> similarity).

    A hybrid hit the dense lane did not return (BM25-only) has no similarity; this computes it
    from the stored vector (one query embedding, one dot product per hit). Returns ``{}`` when
    every hit has one or the chunk index cannot hand out vectors. Other ports over docgraph
    search can use it to get the same ``dense_similarity`` semantics as
    :class:`DocgraphSearchPort`.
    """
    missing = [h.rowid for h in hits if h.dense_similarity is None and h.rowid]
    if not missing:
        return {}
    vectors_of = getattr(docgraph.chunk_index(), "vectors", None)
    if not callable(vectors_of):
        return {}
    query_vector = docgraph.embedder.embed_query(query)
    vectors: dict[int, Any] = vectors_of(missing)
    return {rowid: float(vector @ query_vector) for rowid, vector in vectors.items()}
