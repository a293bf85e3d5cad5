"""The console-session port: where ``docgraph serve`` keeps who is signed in to the console.

Sessions live in the index's database (SQLite file or PostgreSQL) like bearer tokens, so
every server process on one database accepts the same session cookie (a user behind a load
balancer stays signed in whichever process answers), a restart signs nobody out, and a
logout in one process is a logout in all of them.

Only ``sha256(session id)`` hex digests are stored, never the id itself (the cookie value):
someone who reads the table cannot sign in with what they read. The session logic (expiry,
re-checking the token and the admin role) is :mod:`docgraph.serve.console.sessions`'s; this
port only stores rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class StoredSession:
    """One console session as stored: the sha256 hex digest of its id, its caller (user and
    optional role), the digest of the bearer token it was signed in with (or, signed in
    through the identity provider, ``idp:`` and the digest of the issuer and admin group
    that admitted it), its CSRF token,
    when it began and was last used (Unix seconds), and the messages to show once on its next
    page (``(kind, message)`` pairs)."""

    digest: str
    user: str
    role: str | None
    token_digest: str
    csrf: str
    created_at: float
    last_seen: float
    flash: tuple[tuple[str, str], ...] = field(default=())


class ConsoleSessionStore(Protocol):
    """Stored console sessions, shared by every process of the database."""

    def add(self, session: StoredSession) -> None:
        """Store a new session (its digest must not be stored yet)."""
        ...

    def get(self, digest: str) -> StoredSession | None:
        """The session of ``digest``, or None (expiry is the caller's to judge)."""
        ...

    def touch(self, digest: str, at: float) -> None:
        """Record a use of the session at ``at`` (a no-op for an unknown digest)."""
        ...

    def set_flash(self, digest: str, flash: tuple[tuple[str, str], ...]) -> None:
        """Replace the session's messages to show once (a no-op for an unknown digest)."""
        ...

    def remove(self, digest: str) -> bool:
        """End a session; whether it was stored."""
        ...

    def purge(self, idle_before: float, created_before: float) -> int:
        """Delete every session last used before ``idle_before`` or begun before
        ``created_before``; returns how many."""
        ...
