"""``lookup_knowledge``: query transform -> search port -> post-process -> project, traced.

The agent-facing tool takes only the query; the namespace set, widths, thresholds and budgets
are configuration (see :class:`KnowledgeService`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from docgraph.app import DocGraph
from docgraph.config import RagSettings
from docgraph.errors import InvalidQuery
from docgraph.evidence.hints import EntityVocabulary, QueryHints, QueryTransformer
from docgraph.evidence.port import (
    DocgraphSearchPort,
    KnowledgeSearchPort,
    KnowledgeSearchRequest,
)
from docgraph.evidence.postprocess import (
    DroppedEvidence,
    EvidenceBlock,
    EvidenceCandidate,
    EvidencePostProcessor,
    PostProcessResult,
)
from docgraph.evidence.project import Projection, project
from docgraph.evidence.quality import RelevanceLevel
from docgraph.evidence.settings import EvidenceSettings


@dataclass(frozen=True, slots=True)
class SearchAttempt:
    """One call of the search port and what post-processing made of it."""

    request: KnowledgeSearchRequest
    hit_count: int
    top_quality: float | None
    relevance_level: RelevanceLevel
    used: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        category = self.request.category_filter
        return {
            "top_k": self.request.top_k,
            "mode": self.request.mode,
            "category_filter": sorted(category) if category is not None else None,
            "hit_count": self.hit_count,
            "top_quality": self.top_quality,
            "relevance_level": str(self.relevance_level),
            "used": self.used,
        }


@dataclass(frozen=True, slots=True)
class LookupTrace:
    """The internal record of one lookup: hints, searches, candidates, drops and why."""

    query: str
    hints: QueryHints
    attempts: tuple[SearchAttempt, ...]
    candidates: tuple[EvidenceCandidate, ...]
    dropped: tuple[DroppedEvidence, ...]
    retried: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "query": self.query,
            "hints": self.hints.to_dict(),
            "attempts": [a.to_dict() for a in self.attempts],
            "retried": self.retried,
            "candidates": [c.to_dict() for c in self.candidates],
            "dropped": [d.to_dict() for d in self.dropped],
        }


@dataclass(frozen=True, slots=True)
class LookupResult:
    """A lookup's agent projection, its evidence blocks and its trace."""

    projection: Projection
    blocks: tuple[EvidenceBlock, ...]
    top_quality: float | None
    trace: LookupTrace

    @property
    def relevance_level(self) -> RelevanceLevel:
        """The relevance level of the returned evidence."""
        return self.projection.relevance_level

    @property
    def is_low_quality(self) -> bool:
        """Whether the top quality is below the low-quality threshold (or nothing was found)."""
        return self.projection.is_low_quality

    def to_dict(self) -> dict[str, Any]:
        """The agent-facing JSON payload (no scores, no trace)."""
        return self.projection.to_dict()


class KnowledgeService:
    """The evidence pipeline behind the agent tool ``lookup_knowledge(query)``.

    Built once from a search port (which fixes the caller's namespace set) and settings;
    :meth:`lookup_knowledge` takes only the query, as the agent tool does.
    ``category_filter`` (configuration, optional) narrows the port's allowed set; when the
    filtered result is low quality and ``retry_unfiltered`` is on, the lookup is retried
    without it (still within the allowed set) and the better result is kept.
    """

    def __init__(
        self,
        port: KnowledgeSearchPort,
        *,
        rag: RagSettings | None = None,
        evidence: EvidenceSettings | None = None,
        transformer: QueryTransformer | None = None,
        category_filter: Iterable[str] | None = None,
    ) -> None:
        self.port = port
        self.rag = rag or RagSettings()
        self.evidence = evidence or EvidenceSettings()
        self.transformer = transformer or QueryTransformer()
        self.category_filter = frozenset(category_filter) if category_filter is not None \
            else None
        self.post_processor = EvidencePostProcessor.from_settings(self.rag, self.evidence)

    @classmethod
    def for_graph(
        cls,
        graph: DocGraph,
        namespaces: Iterable[str],
        *,
        rag: RagSettings | None = None,
        evidence: EvidenceSettings | None = None,
        entity_vocabulary: EntityVocabulary | None = None,
        namespace_descriptions: Mapping[str, str] | None = None,
        category_filter: Iterable[str] | None = None,
    ) -> KnowledgeService:
        """A service over ``graph`` restricted to ``namespaces`` (``rag`` defaults to the
        graph's settings)."""
        port = DocgraphSearchPort(graph, namespaces)
        transformer = QueryTransformer(
            port.namespaces,
            descriptions=namespace_descriptions,
            entity_vocabulary=entity_vocabulary,
        )
        return cls(
            port,
            rag=rag or graph.settings.rag,
            evidence=evidence,
            transformer=transformer,
            category_filter=category_filter,
        )

    def _category(self, hints: QueryHints) -> frozenset[str] | None:
        if self.category_filter is not None:
            return self.category_filter
        if self.evidence.category_from_domain_hints and hints.domains:
            return frozenset(hints.domains)
        return None

    def _attempt(
        self, query: str, category: frozenset[str] | None, hints: QueryHints
    ) -> tuple[KnowledgeSearchRequest, int, PostProcessResult]:
        request = KnowledgeSearchRequest(
            query=query,
            top_k=self.rag.effective_retrieve_k,
            category_filter=category,
            mode=self.evidence.mode,
        )
        hits = self.port.search(request)
        return request, len(hits), self.post_processor.process(hits, hints)

    def lookup_knowledge(self, query: str) -> LookupResult:
        """Evidence for ``query``: projected for the agent, with the internal trace."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidQuery("query must be a non-empty string")
        hints = self.transformer.transform(query)
        category = self._category(hints)
        attempts = [self._attempt(query, category, hints)]
        chosen = 0
        first = attempts[0][2]
        if category is not None and self.evidence.retry_unfiltered and first.is_low_quality:
            attempts.append(self._attempt(query, None, hints))
            retry = attempts[1][2]
            if _rank_quality(retry.top_quality) > _rank_quality(first.top_quality):
                chosen = 1
        _, _, result = attempts[chosen]
        projection = project(
            result.blocks,
            relevance_level=result.relevance_level,
            is_low_quality=result.is_low_quality,
            excerpt_chars=self.evidence.excerpt_chars,
            total_chars=self.evidence.total_chars,
            min_excerpt_chars=self.evidence.min_excerpt_chars,
        )
        trace = LookupTrace(
            query=query,
            hints=hints,
            attempts=tuple(
                SearchAttempt(req, count, res.top_quality, res.relevance_level, i == chosen)
                for i, (req, count, res) in enumerate(attempts)
            ),
            candidates=result.candidates,
            dropped=result.dropped + projection.dropped,
            retried=len(attempts) > 1,
        )
        return LookupResult(projection, result.blocks, result.top_quality, trace)


def _rank_quality(top: float | None) -> float:
    return -1.0 if top is None else top

