"""Who may see what: caller -> roles -> domains -> namespaces (a search pre-filter), a
row-level re-check of table-derived chunks, namespace routing that can only narrow, answer
redaction and an audit log; :class:`Governance` is the one service every entry point calls."""

from docgraph.governance.audit import AuditLog, AuditRecord
from docgraph.governance.caller import AccessDenied, Caller
from docgraph.governance.entitlements import (
    Entitlements,
    PolicyFileEntitlements,
    RoleAssignment,
    SqlEntitlements,
    StaticEntitlements,
    assignments_of,
    principal_of,
    resolve_namespaces,
)
from docgraph.governance.ports import GovernedIndex
from docgraph.governance.routing import route_namespaces
from docgraph.governance.rows import CallableRowAuthorizer, RowAuthorizer, SqlRowAuthorizer
from docgraph.governance.search import GovernedSearch
from docgraph.governance.service import Answer, Governance
from docgraph.governance.visibility import Visibility
from docgraph.limits import SearchMode

__all__ = [
    "AccessDenied",
    "Answer",
    "AuditLog",
    "AuditRecord",
    "CallableRowAuthorizer",
    "Caller",
    "Entitlements",
    "Governance",
    "GovernedIndex",
    "GovernedSearch",
    "PolicyFileEntitlements",
    "RoleAssignment",
    "RowAuthorizer",
    "SearchMode",
    "SqlEntitlements",
    "SqlRowAuthorizer",
    "StaticEntitlements",
    "Visibility",
    "assignments_of",
    "principal_of",
    "resolve_namespaces",
    "route_namespaces",
]
