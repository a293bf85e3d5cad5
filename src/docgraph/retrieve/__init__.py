"""Retrieval: candidate lanes, rank fusion, hybrid search."""

from docgraph.retrieve.fusion import rrf_fuse
from docgraph.retrieve.hybrid import HybridSearcher

__all__ = ["HybridSearcher", "rrf_fuse"]
