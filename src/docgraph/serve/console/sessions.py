"""Console sign-in: who is a console admin, login sessions and their CSRF tokens.

A person signs in with a bearer token (the same tokens as ``/mcp`` and ``/api/v1``). The
token's caller must be a *console admin*: it holds :attr:`ConsoleAuth.admin_role` on every
domain (``*``) in the role assignments of the policy, and a token that pins a role must pin
that role. Anyone else is refused and gets no session: the console shows nothing to a
non-admin (the playground runs queries as chosen callers, which only an admin may do).

A session is a random id in an ``HttpOnly; SameSite=Strict`` cookie (``Secure`` when the
request came over TLS), kept in this process's memory with its own CSRF token. It ends at
logout, after :data:`IDLE_SECONDS` without a request, after :data:`MAX_SECONDS` in all, or
as soon as its token is revoked or its user loses the admin role (both are re-checked on
every request). Sessions do not survive a restart and are not shared between processes:
sign in again.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field

from docgraph.governance import Caller, Entitlements
from docgraph.governance.entitlements import WILDCARD
from docgraph.serve.auth import BearerTokens, entry_caller

#: A session ends after this long without a request.
IDLE_SECONDS = 30 * 60
#: A session ends this long after sign-in, however active.
MAX_SECONDS = 8 * 60 * 60
#: Name of the session cookie.
SESSION_COOKIE = "docgraph_console"
#: Name of the cookie that carries the sign-in form's CSRF token (before a session exists).
LOGIN_COOKIE = "docgraph_console_login"
#: The role that makes a caller a console admin (on domain ``*``), unless configured.
DEFAULT_ADMIN_ROLE = "admin"


def is_console_admin(caller: Caller, entitlements: Entitlements,
                     admin_role: str = DEFAULT_ADMIN_ROLE) -> bool:
    """Whether ``caller`` administers the whole deployment: it holds ``admin_role`` on
    ``*`` and, if the caller acts in one role only, that role is ``admin_role``."""
    if caller.active_role is not None and caller.active_role != admin_role:
        return False
    return any(a.role == admin_role and a.domain == WILDCARD
               for a in entitlements.assignments_for(caller.user_id))


@dataclass
class ConsoleSession:
    """One signed-in console user."""

    id: str
    caller: Caller
    token_digest: str
    csrf: str
    created_at: float = field(default_factory=time.monotonic)
    last_seen: float = field(default_factory=time.monotonic)
    flash: list[tuple[str, str]] = field(default_factory=list)  # (kind, message) to show once

    def take_flash(self) -> list[tuple[str, str]]:
        """The messages to show on the next page, then forgotten."""
        messages, self.flash = self.flash, []
        return messages

    def check_csrf(self, presented: str | None) -> bool:
        """Whether ``presented`` is this session's CSRF token (constant-time compare)."""
        return bool(presented) and hmac.compare_digest(str(presented).encode(),
                                                       self.csrf.encode())


class SessionStore:
    """The console sessions of this process, bounded in time (see the module docstring)."""

    def __init__(self, idle_seconds: float = IDLE_SECONDS,
                 max_seconds: float = MAX_SECONDS) -> None:
        self.idle_seconds = idle_seconds
        self.max_seconds = max_seconds
        self._sessions: dict[str, ConsoleSession] = {}
        self._lock = threading.Lock()

    def open(self, caller: Caller, token_digest: str) -> ConsoleSession:
        """A new session for ``caller`` signed in with the token of ``token_digest``."""
        session = ConsoleSession(secrets.token_urlsafe(32), caller, token_digest,
                                 secrets.token_urlsafe(32))
        with self._lock:
            self._expire()
            self._sessions[session.id] = session
        return session

    def get(self, session_id: str | None) -> ConsoleSession | None:
        """The live session of a cookie value (touching it), or None."""
        if not session_id:
            return None
        with self._lock:
            self._expire()
            session = self._sessions.get(session_id)
            if session is not None:
                session.last_seen = time.monotonic()
            return session

    def close(self, session_id: str) -> None:
        """End a session (a no-op for an unknown one)."""
        with self._lock:
            self._sessions.pop(session_id, None)

    def _expire(self) -> None:
        now = time.monotonic()
        for key, s in list(self._sessions.items()):
            if now - s.last_seen > self.idle_seconds or now - s.created_at > self.max_seconds:
                del self._sessions[key]


class ConsoleAuth:
    """Signs console users in and re-checks them on every request."""

    def __init__(self, tokens: BearerTokens, entitlements: Entitlements,
                 admin_role: str = DEFAULT_ADMIN_ROLE,
                 sessions: SessionStore | None = None) -> None:
        self.tokens = tokens
        self.entitlements = entitlements
        self.admin_role = admin_role
        self.sessions = sessions or SessionStore()

    def sign_in(self, token: str) -> tuple[Caller | None, ConsoleSession | None]:
        """``(caller, session)`` for an admin's token; ``(caller, None)`` for a valid token
        of a non-admin; ``(None, None)`` for an invalid one. Blocking (store reads)."""
        entry = self.tokens.verify(token.strip())
        if entry is None:
            return None, None
        caller = entry_caller(entry)
        if not is_console_admin(caller, self.entitlements, self.admin_role):
            return caller, None
        return caller, self.sessions.open(caller, entry.digest)

    def current(self, session_id: str | None) -> ConsoleSession | None:
        """The session of a cookie, if it is live, its token still valid and its user still
        an admin (else the session is ended). Blocking (store reads)."""
        session = self.sessions.get(session_id)
        if session is None:
            return None
        live = any(e.digest == session.token_digest and e.revoked_at is None
                   for e in self.tokens.entries())
        if not live or not is_console_admin(session.caller, self.entitlements,
                                            self.admin_role):
            self.sessions.close(session.id)
            return None
        return session
