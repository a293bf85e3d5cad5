"""The lane list and the :class:`Lane` protocol: the one place a lane is named.

A *lane* is one way a chunk enters the cohort's pool (``docgraph.retrieve.cohort``); the lane
that brought a chunk is its provenance. :data:`LANES` is the only list of them: the engine
writes these names into the trace (``RetrievalTrace.candidates``, ``final_provenance``) and
the hits (``SearchHit.lanes``), the console stacks its lane chart in this order, and the
agent guidance of the tools (``serve/tool_args.py``) is rendered from the descriptions
(:func:`lane_guide`). Global mode has one lane of its own, :data:`REPORT_LANE`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from docgraph.retrieve.cohort_settings import CohortSettings
    from docgraph.retrieve.pool import CohortQuery


@dataclass(frozen=True)
class LaneInfo:
    """A lane's name and what a chunk it brought has in common with the query (one line,
    as agents and the console read it)."""

    name: str
    description: str


SEED = "seed"
STRUCTURAL = "structural"
ENTITY = "entity_adjacent"
CLUSTER = "cluster_adjacent"
GRAPH = "graph"
PPR = "ppr"

#: Every lane of cohort search, in the order the console stacks them.
LANES: tuple[LaneInfo, ...] = (
    LaneInfo(SEED, "matched the query's meaning (dense), its words (bm25) or both"),
    LaneInfo(STRUCTURAL, "neighbouring section of a strong match"),
    LaneInfo(ENTITY, "shares an entity with the query or its strongest matches"),
    LaneInfo(CLUSTER, "mentions an entity of the same community"),
    LaneInfo(GRAPH, "on an entity-graph path from the query's entities"),
    LaneInfo(PPR, "reached by a walk over the entities around the query"),
)
LANE_NAMES: tuple[str, ...] = tuple(lane.name for lane in LANES)
#: Global mode's one lane: community reports, ranked by hybrid relevance.
REPORT_LANE = "community_report"


def lane_guide(skip: Iterable[str] = ()) -> str:
    """``name = description`` of every lane but those in ``skip``, in :data:`LANES` order,
    joined by commas (the agent guidance's provenance legend)."""
    skipped = set(skip)
    return ", ".join(f"{lane.name} = {lane.description}" for lane in LANES
                     if lane.name not in skipped)


class Lane(Protocol):
    """One lane of ``vector_first`` cohort search: reads what the orchestrator put on the
    query (seeds, their entities, the query's entities), admits chunks to its pool with
    :meth:`CohortQuery.admit`, records them in its trace, and may leave a result for the
    ranking (hops, the walk's probabilities, entity paths)."""

    @property
    def name(self) -> str:
        """The lane's name (one of :data:`LANE_NAMES`): its provenance and trace key."""
        ...

    @property
    def needs_entities(self) -> bool:
        """Whether the lane expands from entities, so the query's and the seeds' entities
        must be looked up before it runs."""
        ...

    def enabled(self, settings: CohortSettings) -> bool:
        """Whether the lane runs with ``settings``."""
        ...

    def run(self, q: CohortQuery) -> None:
        """Add the lane's candidates to ``q``'s pool."""
        ...
