"""Building the governed service from settings: entitlements, row authorizer, callers."""

from __future__ import annotations

from docgraph.app import DocGraph
from docgraph.config import GovernanceSettings, ServeSettings
from docgraph.errors import ConfigError, DocgraphError
from docgraph.governance import (
    Caller,
    Entitlements,
    Governance,
    PolicyFileEntitlements,
    RowAuthorizer,
    SqlEntitlements,
    SqlRowAuthorizer,
)
from docgraph.serve.tools import DocgraphTools


def build_entitlements(settings: GovernanceSettings) -> Entitlements:
    """Role assignments from ``[governance]``: a YAML policy file or a SQL table."""
    if settings.policy_file is not None and settings.sql_url:
        raise ConfigError("[governance]: set policy_file or sql_url, not both")
    if settings.policy_file is not None:
        entitlements = PolicyFileEntitlements(settings.policy_file)
        entitlements.assignments_for("")  # fail now, naming the file, if it is unreadable
        return entitlements
    if settings.sql_url:
        return SqlEntitlements(settings.sql_url, table=settings.sql_table,
                               ttl_s=settings.sql_ttl_s)
    raise ConfigError(
        "[governance]: no role assignments configured; set policy_file (YAML with "
        "`assignments: [{user, role, domain}]`) or sql_url. Without them every caller "
        "would be denied."
    )


def build_row_authorizer(graph: DocGraph, settings: GovernanceSettings) -> RowAuthorizer | None:
    """The row re-check of table-row documents: ``row_source_urls`` or else the registered
    SQL sources. None when there is no table source (then row documents, if any, are
    denied: the re-check fails closed)."""
    urls = dict(settings.row_source_urls)
    if not urls:
        try:
            urls = graph.sources.sql_urls()
        except DocgraphError:
            raise
        except Exception as exc:
            raise ConfigError(f"cannot build the row re-check from the SQL sources: {exc}") \
                from exc
    if not urls:
        return None
    return SqlRowAuthorizer(urls, identity=settings.row_identity, setting=settings.row_setting)


def build_tools(graph: DocGraph) -> DocgraphTools:
    """The governed operations over ``graph`` as configured in its settings."""
    settings = graph.settings.governance
    governance = Governance(graph, build_entitlements(settings),
                            build_row_authorizer(graph, settings))
    return DocgraphTools(governance)


def stdio_caller(settings: ServeSettings, user: str | None = None,
                 role: str | None = None) -> Caller:
    """The caller of the stdio transport: ``user``/``role`` if given, else ``[serve]``
    ``stdio_user``/``stdio_role``."""
    user = user or settings.stdio_user
    role = role or settings.stdio_role
    if not user:
        raise ConfigError("the stdio MCP server needs a caller: set [serve] stdio_user "
                          "(and optionally stdio_role) or pass --user")
    return Caller(user, role)
