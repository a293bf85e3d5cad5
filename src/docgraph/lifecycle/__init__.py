"""Keeping the index fresh: the refresher (one global interval), build records with phase
outcomes per source, ``index_status`` and the admin settings."""

from docgraph.lifecycle.admin import ADMIN_SECTIONS, AdminRequired, AdminSettings, AdminUpdate
from docgraph.lifecycle.history import (
    PHASES,
    BuildHistory,
    NamespaceBuild,
    PhaseOutcome,
)
from docgraph.lifecycle.refresher import Refresher, RefreshResult
from docgraph.lifecycle.status import NamespaceStatus, index_status
from docgraph.sources.changes import ChangeToken

__all__ = [
    "ADMIN_SECTIONS",
    "PHASES",
    "AdminRequired",
    "AdminSettings",
    "AdminUpdate",
    "BuildHistory",
    "ChangeToken",
    "NamespaceBuild",
    "NamespaceStatus",
    "PhaseOutcome",
    "RefreshResult",
    "Refresher",
    "index_status",
]
