"""The lanes of cohort search, one module each (``seed``, ``structural``, ``entity``,
``cluster``, ``graph``, ``ppr``; ``completeness`` beside them) behind the :class:`Lane`
protocol. The one lane list, :data:`LANES`, is here (from :mod:`.base`); the lane modules
are imported by the orchestrator, :mod:`docgraph.retrieve.cohort`."""

from docgraph.retrieve.lanes.base import (
    CLUSTER,
    ENTITY,
    GRAPH,
    LANE_NAMES,
    LANES,
    PPR,
    REPORT_LANE,
    SEED,
    STRUCTURAL,
    Lane,
    LaneInfo,
    lane_guide,
)

__all__ = [
    "CLUSTER", "ENTITY", "GRAPH", "LANES", "LANE_NAMES", "PPR", "REPORT_LANE", "SEED",
    "STRUCTURAL", "Lane", "LaneInfo", "lane_guide",
]
