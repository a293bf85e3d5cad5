"""The bearer-token port: where ``docgraph serve`` finds the digests of its tokens.

Tokens live in the index's database (SQLite file or PostgreSQL), so every server process on
one database, on any machine, accepts the same tokens, and a token added or revoked by one
process (``docgraph token add/remove``) counts in all of them on their next request.

Only ``sha256(token)`` hex digests are stored. The logic that hashes and compares a
presented token (in constant time, against every entry) is
:mod:`docgraph.serve.auth`'s; this port only stores entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

#: A token id (prefix of the digest) must have at least this many hex digits.
MIN_TOKEN_ID_CHARS = 8


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One stored token: its sha256 hex digest and the caller (user, optional role) it
    stands for. ``revoked_at`` is set once the token was removed."""

    digest: str
    user: str
    role: str | None = None
    created_at: float = 0.0
    revoked_at: float | None = None

    @property
    def token_id(self) -> str:
        """A short, non-secret identifier of the token (first 12 hex digits of the digest)."""
        return self.digest[:12]


class TokenStore(Protocol):
    """Stored bearer-token digests with a change counter.

    A server caches :meth:`entries` and asks :meth:`version` on every request: one
    primary-key read of a one-row table, bumped in the same transaction as every
    :meth:`add` and :meth:`remove`. So another process's change is seen on the very next
    request (a revoked token is refused at once, not after a TTL), with no clock involved
    (``max(created_at)`` would miss removals and trust clocks of several machines), and
    without reading every row per request.

    Removal keeps the row with ``revoked_at`` set: a digest once revoked can never be
    added again (e.g. re-imported from a legacy tokens file that still lists it).
    """

    def entries(self, include_revoked: bool = False) -> list[TokenEntry]:
        """Every live token (and, if asked, the revoked ones), oldest first."""
        ...

    def add(self, entry: TokenEntry) -> bool:
        """Store ``entry``; False (and nothing changed) if its digest is already stored,
        live or revoked."""
        ...

    def remove(self, token_id: str, at: float) -> int:
        """Revoke the live tokens whose digest starts with ``token_id`` (lowercase hex, at
        least :data:`MIN_TOKEN_ID_CHARS` digits) at time ``at``; returns how many."""
        ...

    def version(self) -> int:
        """A counter that changes whenever a token is added or revoked (by any process)."""
        ...
