"""The agent-facing evidence contract: identity, quality, post-processing, projection.

:class:`KnowledgeService` (``lookup_knowledge(query)``) runs query transform (L0 hints) ->
search port (retrieve-k wide) -> candidates with evidence keys -> post-process (quality,
dedup, per-document cap, return-n) -> projection (chunk-scoped ``document_id``, budgeted
excerpts), with a trace. Callers reach it through the governed service
(:meth:`docgraph.governance.Governance.lookup`), which puts the caller's governed search
behind the port.
"""

from docgraph.evidence.hints import QueryHints, QueryTransformer
from docgraph.evidence.identity import evidence_key
from docgraph.evidence.labels import ScoreLabel, canonicalize
from docgraph.evidence.lookup import (
    KnowledgeService,
    LookupResult,
    LookupTrace,
)
from docgraph.evidence.port import (
    DocgraphSearchPort,
    KnowledgeSearchHit,
    KnowledgeSearchPort,
    KnowledgeSearchRequest,
    SearchIndex,
)
from docgraph.evidence.postprocess import (
    DroppedEvidence,
    DropReason,
    EvidenceBlock,
    EvidenceCandidate,
    EvidencePostProcessor,
    PostProcessResult,
)
from docgraph.evidence.project import ProjectedEvidence, Projection, cut_excerpt, project
from docgraph.evidence.quality import HybridQuality, RelevanceLevel, to_quality_score
from docgraph.evidence.settings import EvidenceSettings

__all__ = [
    "DocgraphSearchPort",
    "DropReason",
    "DroppedEvidence",
    "EvidenceBlock",
    "EvidenceCandidate",
    "EvidencePostProcessor",
    "EvidenceSettings",
    "HybridQuality",
    "KnowledgeSearchHit",
    "KnowledgeSearchPort",
    "KnowledgeSearchRequest",
    "KnowledgeService",
    "LookupResult",
    "LookupTrace",
    "PostProcessResult",
    "ProjectedEvidence",
    "Projection",
    "QueryHints",
    "QueryTransformer",
    "RelevanceLevel",
    "ScoreLabel",
    "SearchIndex",
    "canonicalize",
    "cut_excerpt",
    "evidence_key",
    "project",
    "to_quality_score",
]
