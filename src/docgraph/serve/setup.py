"""Building the governed service from settings: entitlements, row authorizer, callers."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from docgraph.app import DocGraph
from docgraph.config import GovernanceSettings, ServeSettings
from docgraph.errors import ConfigError, DocgraphError, InvalidQuery
from docgraph.governance import (
    AccessDenied,
    CallableRowAuthorizer,
    Caller,
    Entitlements,
    Governance,
    PolicyFileEntitlements,
    RoleAssignment,
    RowAuthorizer,
    SqlEntitlements,
    SqlRowAuthorizer,
    StaticEntitlements,
    assignments_of,
)
from docgraph.governance.fleet_policy import FleetPolicyEntitlements, join_fleet
from docgraph.serve.auth import BearerTokens
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


def build_row_authorizer(docgraph: DocGraph, settings: GovernanceSettings) -> RowAuthorizer | None:
    """The row re-check of table-row documents: ``row_source_urls`` or else the registered
    SQL sources. None when there is no table source (then row documents, if any, are
    denied: the re-check fails closed)."""
    urls = dict(settings.row_source_urls)
    if not urls:
        try:
            urls = docgraph.sources.sql_urls()
        except DocgraphError:
            raise
        except Exception as exc:
            raise ConfigError(f"cannot build the row re-check from the SQL sources: {exc}") \
                from exc
    if not urls:
        return None
    return SqlRowAuthorizer(urls, identity=settings.row_identity, setting=settings.row_setting)


def governance_configured(settings: GovernanceSettings) -> bool:
    """Whether ``[governance]`` names role assignments (a policy file or a SQL table)."""
    return settings.policy_file is not None or bool(settings.sql_url)


def build_governance(docgraph: DocGraph, *, fleet: bool = False) -> Governance[DocGraph]:
    """The governed service over ``docgraph`` as configured in ``[governance]``. ``fleet``:
    a server of the index (``docgraph serve``), which serves the policy published for every
    server of its database and does not start when its policy file says otherwise
    (:func:`~docgraph.governance.fleet_policy.join_fleet`)."""
    settings = docgraph.settings.governance
    entitlements = build_entitlements(settings)
    if fleet and isinstance(entitlements, PolicyFileEntitlements):
        entitlements = join_fleet(docgraph.ports.policy, entitlements,
                                  read_only=docgraph.ports.read_only)
    return Governance(docgraph, entitlements, build_row_authorizer(docgraph, settings))


#: The caller of local commands on an index without ``[governance]``: its owner.
OWNER = "owner"


class NarrowedEntitlements:
    """Another source's assignments restricted to some domains (``*`` becomes each of
    them): how a local command limits itself to ``--namespace`` without any operation
    taking a namespace argument."""

    def __init__(self, base: Entitlements, domains: Iterable[str]) -> None:
        self.base = base
        self.domains = sorted(set(domains))

    def assignments_for(self, user_id: str, groups: frozenset[str] = frozenset()
                        ) -> list[RoleAssignment]:
        """The base assignments of ``user_id`` and ``groups`` that fall inside the
        domains."""
        out: list[RoleAssignment] = []
        for a in self.base.assignments_for(user_id, groups):
            if a.domain == "*":
                out += [RoleAssignment(a.user, a.role, d, a.group) for d in self.domains]
            elif a.domain in self.domains:
                out.append(a)
        return out

    def groups_of(self, user_id: str) -> frozenset[str]:
        """The base source's memberships of ``user_id``."""
        return self.base.groups_of(user_id)


def local_governance(docgraph: DocGraph, user: str | None = None, role: str | None = None,
                     only: Iterable[str] | None = None) -> tuple[Governance[DocGraph], Caller]:
    """The governed service and caller of a local command (the CLI, the Python API).

    With ``[governance]`` configured, the caller is ``user`` (else ``[serve] stdio_user``)
    and is denied without one. Without it, the index file's owner is the caller: every
    namespace and every row (whoever can open the file can read it), still through the
    one governed path, so results equal what a served caller with the same rights gets.
    ``only`` limits the caller to those of its namespaces.
    """
    if governance_configured(docgraph.settings.governance):
        try:
            caller = stdio_caller(docgraph.settings.serve, user, role)
        except ConfigError as exc:
            raise AccessDenied("[governance] is configured, so local commands need a caller: "
                               "pass --user (or set [serve] stdio_user)") from exc
        governance = build_governance(docgraph)
    else:
        owner = user or OWNER
        caller = Caller(owner, role)
        every_row = CallableRowAuthorizer(lambda caller, table, pks: set(pks))
        governance = Governance(
            docgraph, StaticEntitlements([RoleAssignment(owner, role or OWNER, "*")]), every_row)
        governance.every_document = True  # whoever can open the file can read it
    if only:
        unknown = sorted(set(only) - set(docgraph.namespaces()))
        if unknown:
            raise InvalidQuery(f"--namespace: this index has no namespace "
                               f"{', '.join(map(repr, unknown))}")
        governance.entitlements = NarrowedEntitlements(governance.entitlements, only)
    return governance, caller


def stdio_governance(docgraph: DocGraph, user: str | None = None,
                     role: str | None = None) -> tuple[Governance[DocGraph], Caller]:
    """The governed service and caller of ``docgraph mcp`` (stdio): the rule of every local
    transport, as :func:`local_governance` applies it to the CLI.

    Without ``[governance]`` the index owner is the caller (every namespace and row: whoever
    can start the server can open the file). With it, the caller is ``user`` (else
    ``[serve] stdio_user``) and the server refuses to start without one (a
    :class:`ConfigError` naming both ways to set it); assignments come from the configured
    source, so a caller without any is denied at every call (:func:`caller_warnings` says
    so up front)."""
    if not governance_configured(docgraph.settings.governance):
        return local_governance(docgraph, user, role)
    caller = stdio_caller(docgraph.settings.serve, user, role)
    return build_governance(docgraph), caller


def caller_warnings(docgraph: DocGraph, governance: Governance[DocGraph],
                    caller: Caller) -> list[str]:
    """Why ``caller`` will be denied by ``governance`` whatever it asks (no role assignment,
    none in its active role), as sentences; empty when it may read something or when
    ``[governance]`` is not configured (the owner reads everything)."""
    settings = docgraph.settings.governance
    if not governance_configured(settings):
        return []
    source = (f"governance.policy_file {settings.policy_file}" if settings.policy_file
              else f"the table {settings.sql_table} of governance.sql_url")
    try:
        assignments = assignments_of(caller, governance.entitlements)
    except Exception as exc:  # a SQL table that cannot be read: the calls will fail closed
        return [f"cannot read the role assignments of {caller.user_id!r}: {exc}"]
    if not assignments:
        return [f"user {caller.user_id!r} has no role assignments in {source}: every tool "
                "call will be denied"]
    if caller.active_role and all(a.role != caller.active_role for a in assignments):
        held = ", ".join(sorted({a.role for a in assignments}))
        return [f"user {caller.user_id!r} does not hold role {caller.active_role!r} in "
                f"{source} (it holds {held}): every tool call will be denied"]
    return []


def leave_fleet(governance: Governance[DocGraph]) -> None:
    """Say that this server no longer serves (a server joined to its fleet's policy), so
    that a server started next with another policy file need not wait for its row to age."""
    if isinstance(governance.entitlements, FleetPolicyEntitlements):
        governance.entitlements.stop()


def build_tools(docgraph: DocGraph, *, fleet: bool = False) -> DocgraphTools:
    """The governed operations over ``docgraph`` as configured in its settings (``fleet``:
    for a server of the index, see :func:`build_governance`)."""
    return DocgraphTools(build_governance(docgraph, fleet=fleet))


def stdio_caller(settings: ServeSettings, user: str | None = None,
                 role: str | None = None) -> Caller:
    """The caller of the stdio transport: ``user``/``role`` if given, else ``[serve]``
    ``stdio_user``/``stdio_role``."""
    user = user or settings.stdio_user
    role = role or settings.stdio_role
    if not user:
        raise ConfigError("[governance] is configured, so the stdio MCP server needs a "
                          "caller: set [serve] stdio_user (and optionally stdio_role) or "
                          "pass --user")
    return Caller(user, role)


def open_bearer_tokens(docgraph: DocGraph,
                       notify: Callable[[str], None] | None = None) -> BearerTokens:
    """The bearer tokens of ``docgraph``'s database, after importing the legacy
    ``[serve] tokens_file`` if there is one (idempotent; ``notify`` gets the notice naming
    the file when it added tokens)."""
    tokens = BearerTokens(docgraph.token_store)
    tokens.import_file(docgraph.settings.serve.tokens_file, notify)
    return tokens
