"""The evidence pipeline's search port inside one governed request.

``lookup_knowledge`` post-processes what a search port returns; governed, that port is the
request's :class:`~docgraph.governance.search.GovernedSearch` in ``vector_first`` mode (the
cohort engine: dense + BM25 seeds widened by the lanes, row re-check with over-fetch),
within the caller's namespaces, on every backend. A request's category filter can only
narrow them.
"""

from __future__ import annotations

from docgraph.errors import InvalidQuery
from docgraph.evidence.port import KnowledgeSearchHit, KnowledgeSearchRequest, hit_from_search_hit
from docgraph.governance.search import GovernedSearch, SearchMode


class GovernedSearchPort:
    """Search port over one request's governed search."""

    def __init__(self, engine: GovernedSearch, namespaces: frozenset[str],
                 mode: SearchMode = "vector_first") -> None:
        self.engine = engine
        self.namespaces = namespaces
        self.mode = mode

    def search(self, request: KnowledgeSearchRequest) -> list[KnowledgeSearchHit]:
        """Governed hits in retrieval order."""
        if request.mode != "hybrid":
            raise InvalidQuery(f"the governed evidence port searches in hybrid mode only, "
                               f"got {request.mode!r}")
        allowed = self.namespaces
        if request.category_filter is not None:
            allowed = allowed & request.category_filter
            if not allowed:
                return []
        hits = self.engine.search(request.query, namespaces=allowed, k=request.top_k,
                                  mode=self.mode).hits
        return [hit_from_search_hit(h) for h in hits]
