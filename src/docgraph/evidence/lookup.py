"""``lookup_knowledge``: query transform -> search port -> post-process -> project, traced.

The agent-facing tool takes only the query; the namespace set, widths, thresholds and budgets
are configuration (see :class:`KnowledgeService`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from docgraph.config import RagSettings
from docgraph.errors import InvalidQuery
from docgraph.evidence.hints import EntityVocabulary, QueryHints, QueryTransformer
from docgraph.evidence.port import (
    DocgraphSearchPort,
    KnowledgeSearchHit,
    KnowledgeSearchPort,
    KnowledgeSearchRequest,
    SearchIndex,
)
from docgraph.evidence.postprocess import (
    DroppedEvidence,
    EvidenceBlock,
    EvidenceCandidate,
    EvidencePostProcessor,
)
from docgraph.evidence.project import Projection, project
from docgraph.evidence.quality import RelevanceLevel
from docgraph.evidence.settings import EvidenceSettings


@dataclass(frozen=True, slots=True)
class SearchAttempt:
    """One search of the lookup and what post-processing made of it; ``searched`` is the
    mode the search really ran (a governed lookup asks for the ``hybrid`` convention and
    searches ``vector_first``), shown as the attempt's ``mode``."""

    request: KnowledgeSearchRequest
    hit_count: int
    top_quality: float | None
    relevance_level: RelevanceLevel
    used: bool
    searched: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        category = self.request.category_filter
        return {
            "top_k": self.request.top_k,
            "mode": self.searched or self.request.mode,
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
    #: Names of the table sources whose row re-check failed during the search (their
    #: rows were left out, fail closed), set by the governed service; empty otherwise.
    unavailable_row_sources: tuple[str, ...] = ()
    #: Chunks of the searched namespaces stored but not embedded yet (a build embeds them
    #: behind its writes: BM25 finds them, the dense lane skips them), set by the governed
    #: service; 0 when every chunk has its vector.
    pending_chunks: int = 0

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

    Built from a search port (which fixes the caller's namespace set; None when the caller
    drives :meth:`lookup_steps` with its own search) and settings;
    :meth:`lookup_knowledge` takes only the query, as the agent tool does.
    ``category_filter`` (configuration, optional) narrows the port's allowed set; when the
    filtered result is low quality and ``retry_unfiltered`` is on, the lookup is retried
    without it (still within the allowed set) and the better result is kept.
    """

    def __init__(
        self,
        port: KnowledgeSearchPort | None,
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
        docgraph: SearchIndex,
        namespaces: Iterable[str],
        *,
        rag: RagSettings | None = None,
        evidence: EvidenceSettings | None = None,
        entity_vocabulary: EntityVocabulary | None = None,
        namespace_descriptions: Mapping[str, str] | None = None,
        category_filter: Iterable[str] | None = None,
    ) -> KnowledgeService:
        """A service over ``docgraph``'s own search (a :class:`~docgraph.DocGraph`, see
        :class:`~docgraph.evidence.port.SearchIndex`) restricted to ``namespaces`` (``rag``
        defaults to its settings)."""
        port = DocgraphSearchPort(docgraph, namespaces)
        transformer = QueryTransformer(
            port.namespaces,
            descriptions=namespace_descriptions,
            entity_vocabulary=entity_vocabulary,
        )
        return cls(
            port,
            rag=rag or docgraph.settings.rag,
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

    def _request(self, query: str, category: frozenset[str] | None) -> KnowledgeSearchRequest:
        return KnowledgeSearchRequest(
            query=query,
            top_k=self.rag.effective_retrieve_k,
            category_filter=category,
            mode=self.evidence.mode,
        )

    def lookup_knowledge(self, query: str) -> LookupResult:
        """Evidence for ``query``: projected for the agent, with the internal trace (the
        searches go to the service's port)."""
        if self.port is None:
            raise TypeError("this KnowledgeService has no search port: drive lookup_steps")
        return run_steps(self.lookup_steps(query), self.port.search)

    def lookup_steps(self, query: str, searched: str | None = None) -> LookupSteps:
        """:meth:`lookup_knowledge` with the searching left to the caller, so that calls go
        one way: the generator yields each :class:`KnowledgeSearchRequest` (one, or two with
        the unfiltered retry), is sent that search's hits, and returns the
        :class:`LookupResult`. The governed service drives it over its own search; nothing
        here calls back up. ``searched`` names the mode the caller's search runs (the
        trace's ``mode``; default: the request's)."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidQuery("query must be a non-empty string")
        return self._steps(query, searched)

    def _steps(self, query: str, searched: str | None) -> LookupSteps:
        hints = self.transformer.transform(query)
        category = self._category(hints)
        request = self._request(query, category)
        hits = yield request
        first = self.post_processor.process(hits, hints)
        attempts = [(request, len(hits), first)]
        chosen = 0
        if category is not None and self.evidence.retry_unfiltered and first.is_low_quality:
            retry_request = self._request(query, None)
            hits = yield retry_request
            retry = self.post_processor.process(hits, hints)
            attempts.append((retry_request, len(hits), retry))
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
                SearchAttempt(req, count, res.top_quality, res.relevance_level, i == chosen,
                              searched or req.mode)
                for i, (req, count, res) in enumerate(attempts)
            ),
            candidates=result.candidates,
            dropped=result.dropped + projection.dropped,
            retried=len(attempts) > 1,
        )
        return LookupResult(projection, result.blocks, result.top_quality, trace)


#: One lookup step by step (see :meth:`KnowledgeService.lookup_steps`).
LookupSteps = Generator[KnowledgeSearchRequest, list[KnowledgeSearchHit], LookupResult]


def run_steps(steps: LookupSteps,
              search: Callable[[KnowledgeSearchRequest], list[KnowledgeSearchHit]]
              ) -> LookupResult:
    """Drive a lookup's steps with ``search``: each request it yields is answered."""
    request = next(steps)
    while True:
        try:
            request = steps.send(search(request))
        except StopIteration as done:
            result: LookupResult = done.value
            return result


def _rank_quality(top: float | None) -> float:
    return -1.0 if top is None else top

