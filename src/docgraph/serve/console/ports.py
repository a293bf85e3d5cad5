"""What the console uses of the index: :class:`ConsoleIndex`, the console's own narrow
protocol (the governed index plus the owner's lifecycle: sources, admin settings,
refresher, build history), which :class:`~docgraph.DocGraph` satisfies. The console is
handed the governed service over it (:data:`ConsoleGovernance`) and never imports the application.

Pages read governed data through the service's operations; the owner's changes (sources,
settings, a refresh) go through the ports listed here, taken once per page from
:attr:`Governance.root <docgraph.governance.Governance.root>`.
"""

from __future__ import annotations

import copy
from typing import Protocol, TypeVar

from docgraph.governance import Governance
from docgraph.governance.audit import UnrecordedAuditLog
from docgraph.governance.ports import GovernedIndex
from docgraph.lifecycle.admin import AdminSettings
from docgraph.lifecycle.history import BuildHistory
from docgraph.lifecycle.refresher import Refresher
from docgraph.sources.registry import SourceRegistry


class ConsoleIndex(GovernedIndex, Protocol):
    """Everything the console pages use of the index beyond the governed reads."""

    @property
    def sources(self) -> SourceRegistry: ...

    @property
    def admin(self) -> AdminSettings: ...

    @property
    def refresher(self) -> Refresher: ...

    @property
    def build_history(self) -> BuildHistory: ...


#: The governed service as the console is handed it.
ConsoleGovernance = Governance[ConsoleIndex]
GovernanceT = TypeVar("GovernanceT", bound=ConsoleGovernance)


def page_reader(governance: GovernanceT) -> GovernanceT:
    """``governance`` for rendering pages: the same service whose reads write no audit
    records (:class:`~docgraph.governance.audit.UnrecordedAuditLog`). The console audits
    what a person changes or asks (sign-in, changes, playground queries), not the reads
    behind each page view, which would bury the agents' requests."""
    reader = copy.copy(governance)
    reader.audit = UnrecordedAuditLog(governance.audit.store, governance.root.traces)
    return reader
