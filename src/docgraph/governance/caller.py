"""The caller of a governed operation: the principal (a user and the groups it belongs to)
that every visibility decision is made for."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from docgraph.errors import DocgraphError
from docgraph.model import GROUP_PREFIX, USER_PREFIX


class AccessDenied(DocgraphError):
    """The caller may not see anything for this request; the message says why."""


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated user, the groups it belongs to, optionally acting in one of its
    roles.

    ``active_role`` narrows the caller to that role's domains; it must be a role the
    caller holds (asserting another one is refused, never trusted). ``groups`` are those
    the authenticator vouches for (an identity provider's claim); the governed service adds
    the memberships its policy declares (:meth:`with_groups`) before deciding anything.
    ``issuer`` and ``subject`` name the token behind the caller, for the record.
    """

    user_id: str
    active_role: str | None = None
    groups: frozenset[str] = field(default_factory=frozenset)
    #: Who vouched for the caller and as whom (a token's ``iss`` and ``sub``): recorded in
    #: the audit log and the traces of its requests, never used to decide anything (nor
    #: to compare callers: the same user and groups are the same principal).
    issuer: str | None = field(default=None, kw_only=True, compare=False)
    subject: str | None = field(default=None, kw_only=True, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.user_id, str) or not self.user_id.strip():
            raise AccessDenied("a caller needs a non-empty user id")
        if not isinstance(self.groups, frozenset) or not all(
                isinstance(g, str) and g.strip() for g in self.groups):
            raise AccessDenied(f"user {self.user_id!r}: groups must be non-empty names, "
                               f"got {sorted(map(repr, self.groups))}")

    @property
    def principals(self) -> frozenset[str]:
        """``user:<id>`` and ``group:<name>`` of every group: whom a grant or a document
        permission may name to let this caller in."""
        return frozenset({USER_PREFIX + self.user_id,
                          *(GROUP_PREFIX + g for g in self.groups)})

    def with_groups(self, groups: Iterable[str]) -> Caller:
        """This caller, also a member of ``groups``."""
        more = frozenset(groups) - self.groups
        return replace(self, groups=self.groups | more) if more else self
