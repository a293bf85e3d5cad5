"""Role assignments ``(user, role, domain | *)`` and their resolution to namespaces.

Domain = namespace. ``*`` is expanded on the server to the domains that exist when the
request is served. :func:`resolve_namespaces` returns a non-empty frozen set or raises
:class:`AccessDenied`: there is no outcome meaning "all namespaces".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from docgraph.errors import ConfigError
from docgraph.governance.caller import AccessDenied, Caller

WILDCARD = "*"


@dataclass(frozen=True, slots=True)
class RoleAssignment:
    """One grant: ``user`` holds ``role`` on ``domain`` (or on every domain, ``*``)."""

    user: str
    role: str
    domain: str


class Entitlements(Protocol):
    """Where role assignments come from."""

    def assignments_for(self, user_id: str) -> list[RoleAssignment]:
        """Every assignment of one user."""
        ...


class StaticEntitlements:
    """Assignments given in code (tests, embedding hosts)."""

    def __init__(self, assignments: Iterable[RoleAssignment]) -> None:
        self._assignments = list(assignments)

    def assignments_for(self, user_id: str) -> list[RoleAssignment]:
        """Assignments of ``user_id``."""
        return [a for a in self._assignments if a.user == user_id]


class PolicyFileEntitlements:
    """Assignments from a YAML policy file, re-read when the file changes::

        assignments:
          - {user: alice, role: support, domain: support}
          - {user: root, role: admin, domain: "*"}
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._mtime = -1.0
        self._assignments: list[RoleAssignment] = []

    def _load(self) -> list[RoleAssignment]:
        import yaml

        try:
            mtime = self.path.stat().st_mtime
        except OSError as exc:
            raise ConfigError(f"policy file {self.path} cannot be read: {exc}") from exc
        with self._lock:
            if mtime == self._mtime:
                return self._assignments
            try:
                data = yaml.safe_load(self.path.read_text(encoding="utf-8")) or {}
                rows = data.get("assignments", [])
                parsed = [
                    RoleAssignment(str(r["user"]), str(r["role"]), str(r["domain"]))
                    for r in rows
                ]
            except (yaml.YAMLError, KeyError, TypeError, AttributeError) as exc:
                raise ConfigError(f"policy file {self.path} is invalid: {exc}") from exc
            self._assignments, self._mtime = parsed, mtime
            return parsed

    def assignments_for(self, user_id: str) -> list[RoleAssignment]:
        """Assignments of ``user_id`` from the current file contents."""
        return [a for a in self._load() if a.user == user_id]


class SqlEntitlements:
    """Assignments from a SQL table through a SQLAlchemy URL, cached for ``ttl_s`` seconds.

    The table needs columns ``user_id``, ``role`` and ``domain`` (names configurable); the
    user id is always a bound parameter.
    """

    def __init__(
        self,
        url: str,
        table: str = "user_role_assignments",
        user_column: str = "user_id",
        role_column: str = "role",
        domain_column: str = "domain",
        ttl_s: float = 30.0,
    ) -> None:
        import sqlalchemy as sa

        self.engine = sa.create_engine(url, pool_pre_ping=True)
        schema, _, name = table.rpartition(".")
        self.table = sa.Table(
            name, sa.MetaData(),
            sa.Column(user_column), sa.Column(role_column), sa.Column(domain_column),
            schema=schema or None,
        )
        self.columns = (user_column, role_column, domain_column)
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[float, list[RoleAssignment]]] = {}
        self._lock = threading.Lock()

    def assignments_for(self, user_id: str) -> list[RoleAssignment]:
        """Assignments of ``user_id`` (``SELECT ... WHERE user = :user``)."""
        import sqlalchemy as sa

        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(user_id)
            if cached and now - cached[0] < self.ttl_s:
                return cached[1]
        user, role, domain = (self.table.c[c] for c in self.columns)
        query = sa.select(user, role, domain).where(user == sa.bindparam("user"))
        with self.engine.connect() as conn:
            rows = conn.execute(query, {"user": user_id}).fetchall()
        found = [RoleAssignment(str(u), str(r), str(d)) for u, r, d in rows]
        with self._lock:
            self._cache[user_id] = (now, found)
        return found


def resolve_namespaces(
    caller: Caller, entitlements: Entitlements, known_domains: Iterable[str]
) -> frozenset[str]:
    """The namespaces ``caller`` may search: the domains of its roles (only
    ``caller.active_role`` when set), ``*`` expanded to ``known_domains``.

    Raises :class:`AccessDenied` when the caller holds no matching role, asserts a role it
    does not hold, or ends up with no namespace.
    """
    assignments = entitlements.assignments_for(caller.user_id)
    held = {a.role for a in assignments}
    if caller.active_role is not None and caller.active_role not in held:
        raise AccessDenied(
            f"user {caller.user_id!r} does not hold role {caller.active_role!r}"
        )
    domains: set[str] = set()
    known = set(known_domains)
    for a in assignments:
        if caller.active_role is not None and a.role != caller.active_role:
            continue
        if a.domain == WILDCARD:
            domains |= known
        else:
            domains.add(a.domain)
    if not domains:
        raise AccessDenied(
            f"user {caller.user_id!r} has no domain"
            + (f" in role {caller.active_role!r}" if caller.active_role else "")
            + ": nothing may be searched"
        )
    return frozenset(domains)
