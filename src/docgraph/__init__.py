"""docgraph: a governed, graph-augmented retrieval layer for AI agents."""

from docgraph.app import DocGraph, IndexStatus
from docgraph.config import Settings, load_settings
from docgraph.errors import DocgraphError
from docgraph.model import SearchHit

__all__ = ["DocGraph", "DocgraphError", "IndexStatus", "SearchHit", "Settings", "load_settings"]
__version__ = "0.1.0"
