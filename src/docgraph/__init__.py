"""docgraph: a governed, graph-augmented retrieval layer for AI agents.

The names below are imported on first use (PEP 562), so a process that needs one module
(an ingest worker importing ``docgraph.ingest.prepare``, say) does not pay for the whole
package.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from docgraph.version import __version__ as __version__

if TYPE_CHECKING:
    from docgraph.app import DocGraph, IndexStatus
    from docgraph.config import Settings, load_settings
    from docgraph.errors import DocgraphError
    from docgraph.governance import Caller, Governance
    from docgraph.model import SearchHit

_EXPORTS = {
    "Caller": "docgraph.governance",
    "DocGraph": "docgraph.app",
    "DocgraphError": "docgraph.errors",
    "Governance": "docgraph.governance",
    "IndexStatus": "docgraph.app",
    "SearchHit": "docgraph.model",
    "Settings": "docgraph.config",
    "load_settings": "docgraph.config",
}


def governed(docgraph: DocGraph, user: str | None = None, role: str | None = None
             ) -> tuple[Governance[DocGraph], Caller]:
    """The governed service over ``docgraph`` and the local caller, as the CLI uses them
    (``[governance]`` configured: ``user`` is required; else the index owner)."""
    from docgraph.serve.setup import local_governance

    return local_governance(docgraph, user, role)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'docgraph' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = ["Caller", "DocGraph", "DocgraphError", "Governance", "IndexStatus", "SearchHit",
           "Settings", "governed", "load_settings"]
