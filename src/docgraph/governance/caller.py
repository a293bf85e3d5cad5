"""The caller of a governed operation."""

from __future__ import annotations

from dataclasses import dataclass

from docgraph.errors import DocgraphError


class AccessDenied(DocgraphError):
    """The caller may not see anything for this request; the message says why."""


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated user, optionally acting in one of its roles.

    ``active_role`` narrows the caller to that role's domains; it must be a role the
    caller holds (asserting another one is refused, never trusted).
    """

    user_id: str
    active_role: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.user_id, str) or not self.user_id.strip():
            raise AccessDenied("a caller needs a non-empty user id")
