"""Role assignments ``(user or group, role, domain | *)``, group memberships, and their
resolution to namespaces.

Domain = namespace. ``*`` is expanded on the server to the domains that exist when the
request is served. A grant names a user or a group; a caller holds the grants of its user
and of every group it belongs to (the groups its authenticator vouches for and those the
policy declares, :meth:`Entitlements.groups_of`). :func:`resolve_namespaces` returns a
non-empty frozen set or raises :class:`AccessDenied`: there is no outcome meaning "all
namespaces".
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
from docgraph.model import GROUP_PREFIX

WILDCARD = "*"


@dataclass(frozen=True, slots=True)
class RoleAssignment:
    """One grant: ``user`` holds ``role`` on ``domain`` (or on every domain, ``*``); with
    ``group`` set (and ``user`` empty), every member of that group does."""

    user: str
    role: str
    domain: str
    group: str | None = None

    def applies_to(self, user_id: str, groups: frozenset[str]) -> bool:
        """Whether the grant is the user's own or one of its groups'."""
        return self.group in groups if self.group is not None else self.user == user_id


class Entitlements(Protocol):
    """Where role assignments and group memberships come from."""

    def assignments_for(self, user_id: str, groups: frozenset[str] = frozenset()
                        ) -> list[RoleAssignment]:
        """Every assignment of one user, and of the given groups."""
        ...

    def groups_of(self, user_id: str) -> frozenset[str]:
        """The groups this source declares the user a member of."""
        ...


class StaticEntitlements:
    """Assignments (and memberships, group -> users) given in code (tests, embedding
    hosts)."""

    def __init__(self, assignments: Iterable[RoleAssignment],
                 members: dict[str, Iterable[str]] | None = None) -> None:
        self._assignments = list(assignments)
        self._members = {g: frozenset(users) for g, users in (members or {}).items()}

    def assignments_for(self, user_id: str, groups: frozenset[str] = frozenset()
                        ) -> list[RoleAssignment]:
        """Assignments of ``user_id`` and of ``groups``."""
        return [a for a in self._assignments if a.applies_to(user_id, groups)]

    def groups_of(self, user_id: str) -> frozenset[str]:
        """The groups whose members include ``user_id``."""
        return frozenset(g for g, users in self._members.items() if user_id in users)


def _policy_row(row: object, where: str) -> RoleAssignment:
    """One ``assignments`` entry of a policy file: ``user`` or ``group``, ``role``,
    ``domain``."""
    if not isinstance(row, dict):
        raise ConfigError(f"{where}: expected a mapping with user or group, role and domain, "
                          f"got {row!r}")
    missing = [k for k in ("role", "domain") if k not in row]
    if missing or ("user" in row) == ("group" in row):
        raise ConfigError(f"{where}: needs role, domain and exactly one of user or group, "
                          f"got {sorted(row)}")
    if "group" in row:
        return RoleAssignment("", str(row["role"]), str(row["domain"]), str(row["group"]))
    return RoleAssignment(str(row["user"]), str(row["role"]), str(row["domain"]))


def _policy_members(data: object, where: str) -> dict[str, frozenset[str]]:
    """The ``groups`` section of a policy file: group name -> its members' user ids."""
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(
            isinstance(users, list) and all(isinstance(u, str) and u for u in users)
            for users in data.values()):
        raise ConfigError(f"{where}: expected group names each with a list of user ids, "
                          f"got {data!r}")
    return {str(g): frozenset(users) for g, users in data.items()}


class PolicyFileEntitlements:
    """Assignments and group memberships from a YAML policy file, re-read when the file
    changes::

        groups:
          finance: [alice, bob]
        assignments:
          - {user: alice, role: support, domain: support}
          - {group: finance, role: analyst, domain: finance}
          - {user: root, role: admin, domain: "*"}
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._mtime = -1.0
        self._assignments: list[RoleAssignment] = []
        self._members: dict[str, frozenset[str]] = {}

    def _load(self) -> tuple[list[RoleAssignment], dict[str, frozenset[str]]]:
        import yaml

        try:
            mtime = self.path.stat().st_mtime
        except OSError as exc:
            raise ConfigError(f"policy file {self.path} cannot be read: {exc}") from exc
        with self._lock:
            if mtime == self._mtime:
                return self._assignments, self._members
            try:
                data = yaml.safe_load(self.path.read_text(encoding="utf-8")) or {}
                if not isinstance(data, dict):
                    raise ConfigError(f"policy file {self.path}: expected a mapping with "
                                      f"assignments (and groups), got {type(data).__name__}")
                parsed = [_policy_row(r, f"policy file {self.path}, assignment {i + 1}")
                          for i, r in enumerate(data.get("assignments") or [])]
                members = _policy_members(data.get("groups"), f"policy file {self.path}, groups")
            except (yaml.YAMLError, TypeError, AttributeError) as exc:
                raise ConfigError(f"policy file {self.path} is invalid: {exc}") from exc
            self._assignments, self._members, self._mtime = parsed, members, mtime
            return parsed, members

    def policy(self) -> tuple[list[RoleAssignment], dict[str, frozenset[str]]]:
        """Every assignment and group membership the file holds now (re-read when it
        changed): what a server compares with its fleet's published policy."""
        return self._load()

    def assignments_for(self, user_id: str, groups: frozenset[str] = frozenset()
                        ) -> list[RoleAssignment]:
        """Assignments of ``user_id`` and of ``groups`` from the current file contents."""
        return [a for a in self._load()[0] if a.applies_to(user_id, groups)]

    def groups_of(self, user_id: str) -> frozenset[str]:
        """The groups the current file declares ``user_id`` a member of."""
        return frozenset(g for g, users in self._load()[1].items() if user_id in users)


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
        self._cache: dict[tuple[str, ...], tuple[float, list[RoleAssignment]]] = {}
        self._lock = threading.Lock()

    def assignments_for(self, user_id: str, groups: frozenset[str] = frozenset()
                        ) -> list[RoleAssignment]:
        """Assignments of ``user_id`` and of ``groups``: rows whose user column holds the
        user id, or ``group:<name>`` for a group grant (``SELECT ... WHERE user IN
        (:user, :group_1, ...)``, every value bound)."""
        import sqlalchemy as sa

        key = (user_id, *sorted(groups))
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(key)
            if cached and now - cached[0] < self.ttl_s:
                return cached[1]
        user, role, domain = (self.table.c[c] for c in self.columns)
        names = [user_id, *(GROUP_PREFIX + g for g in sorted(groups))]
        query = sa.select(user, role, domain).where(
            user.in_(sa.bindparam("names", expanding=True)))
        with self.engine.connect() as conn:
            rows = conn.execute(query, {"names": names}).fetchall()
        found = [RoleAssignment("", str(r), str(d), str(u)[len(GROUP_PREFIX):])
                 if str(u) != user_id and str(u).startswith(GROUP_PREFIX)
                 else RoleAssignment(str(u), str(r), str(d)) for u, r, d in rows]
        with self._lock:
            self._cache[key] = (now, found)
        return found

    def groups_of(self, user_id: str) -> frozenset[str]:
        """None: a SQL policy source grants to groups (rows naming ``group:<name>``), the
        memberships come from the caller's authenticator or a policy file."""
        return frozenset()


def resolve_namespaces(
    caller: Caller, entitlements: Entitlements, known_domains: Iterable[str]
) -> frozenset[str]:
    """The namespaces ``caller`` may search: the domains of its roles, its user's and its
    groups' (the caller's own and those ``entitlements`` declares; only
    ``caller.active_role`` when set), ``*`` expanded to ``known_domains``.

    Raises :class:`AccessDenied` when the caller holds no matching role, asserts a role it
    does not hold, or ends up with no namespace.
    """
    assignments = assignments_of(caller, entitlements)
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


def principal_of(caller: Caller, entitlements: Entitlements) -> Caller:
    """``caller`` with the groups ``entitlements`` declares it a member of, too: the
    principal every decision of a request is made for."""
    return caller.with_groups(entitlements.groups_of(caller.user_id))


def assignments_of(caller: Caller, entitlements: Entitlements) -> list[RoleAssignment]:
    """Every grant ``caller`` holds: its user's and each of its groups' (declared or its
    own)."""
    principal = principal_of(caller, entitlements)
    return entitlements.assignments_for(principal.user_id, principal.groups)
