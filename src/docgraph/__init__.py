"""docgraph: a governed, graph-augmented retrieval layer for AI agents."""

from docgraph.app import DocGraph, IndexStatus
from docgraph.config import Settings, load_settings
from docgraph.errors import DocgraphError
from docgraph.governance import Caller, Governance
from docgraph.model import SearchHit


def governed(graph: DocGraph, user: str | None = None, role: str | None = None
             ) -> tuple[Governance, Caller]:
    """The governed service over ``graph`` and the local caller, as the CLI uses them
    (``[governance]`` configured: ``user`` is required; else the index owner)."""
    from docgraph.serve.setup import local_governance

    return local_governance(graph, user, role)


__all__ = ["Caller", "DocGraph", "DocgraphError", "Governance", "IndexStatus", "SearchHit",
           "Settings", "governed", "load_settings"]
__version__ = "0.1.0"
