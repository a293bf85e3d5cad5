"""Retrieval: hybrid search, cohort search (its lanes, one module each, behind the ``Lane``
protocol), rank fusion, context assembly."""

from docgraph.retrieve.cohort import CohortResult, CohortSearch, CohortSettings
from docgraph.retrieve.fusion import rrf_fuse
from docgraph.retrieve.hybrid import HybridSearcher
from docgraph.retrieve.lanes import LANE_NAMES, LANES, Lane, LaneInfo, lane_guide

__all__ = ["LANES", "LANE_NAMES", "CohortResult", "CohortSearch", "CohortSettings",
           "HybridSearcher", "Lane", "LaneInfo", "lane_guide", "rrf_fuse"]
