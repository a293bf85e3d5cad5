"""Console sign-in: who is a console admin, login sessions and their CSRF tokens.

A person signs in with a bearer token (the same tokens as ``/mcp`` and ``/api/v1``). The
token's caller must be a *console admin*: it holds :attr:`ConsoleAuth.admin_role` on every
domain (``*``) in the role assignments of the policy, and a token that pins a role must pin
that role. Anyone else is refused and gets no session: the console shows nothing to a
non-admin (the playground runs queries as chosen callers, which only an admin may do).

A session is a random id in an ``HttpOnly; SameSite=Strict`` cookie (``Secure`` when the
request came over TLS), with its own CSRF token. It is stored through the
:class:`~docgraph.store.sessions.ConsoleSessionStore` port, in the index's database (only
the sha256 of the id is stored), so every ``docgraph serve`` process on one database accepts
it, and it survives a restart. It ends at logout (in every process at once), after
:data:`IDLE_SECONDS` without a request, after :data:`MAX_SECONDS` in all (both judged on
every read, by wall-clock time, so the servers' clocks should agree to a minute), or as soon
as its token is revoked or its user loses the admin role (both are re-checked on every
request). Expired rows are deleted when read and at every sign-in.

With ``[auth]`` configured, a person may instead sign in through the organisation's identity
provider (:mod:`docgraph.serve.idp.console_signin`); the admin is then a member of ``[auth]
admin_group`` (:class:`IdpAdmins`), and anyone else gets no session.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field

from docgraph.config import AuthSettings
from docgraph.governance import Caller, Entitlements, assignments_of
from docgraph.governance.entitlements import WILDCARD
from docgraph.serve.auth import BearerTokens, entry_caller
from docgraph.store.sessions import ConsoleSessionStore, StoredSession

#: A session ends after this long without a request.
IDLE_SECONDS = 30 * 60
#: A session ends this long after sign-in, however active.
MAX_SECONDS = 8 * 60 * 60
#: A session's last use is written back at most this often (see SessionStore.touch_seconds).
TOUCH_SECONDS = 60
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
               for a in assignments_of(caller, entitlements))


@dataclass
class ConsoleSession:
    """One signed-in console user, as read for one request. ``id`` is the cookie value (held
    in memory only: the store keeps its digest)."""

    id: str
    caller: Caller
    token_digest: str
    csrf: str
    created_at: float = field(default_factory=time.time)
    last_seen: float = field(default_factory=time.time)
    flash: list[tuple[str, str]] = field(default_factory=list)  # (kind, message) to show once
    stored_flash: tuple[tuple[str, str], ...] = ()  # the messages as the store has them

    @property
    def digest(self) -> str:
        """The sha256 hex digest of the id: the session's key in the store."""
        return session_digest(self.id)

    @property
    def flash_changed(self) -> bool:
        """Whether the messages differ from the stored ones (and must be saved)."""
        return tuple(self.flash) != self.stored_flash

    def take_flash(self) -> list[tuple[str, str]]:
        """The messages to show on the next page, then forgotten."""
        messages, self.flash = self.flash, []
        return messages

    def check_csrf(self, presented: str | None) -> bool:
        """Whether ``presented`` is this session's CSRF token (constant-time compare)."""
        return bool(presented) and hmac.compare_digest(str(presented).encode(),
                                                       self.csrf.encode())


def session_digest(session_id: str) -> str:
    """The sha256 hex digest a session id is stored under."""
    return hashlib.sha256(session_id.encode()).hexdigest()


class SessionStore:
    """Console sessions kept through a :class:`ConsoleSessionStore` (shared by every process
    on the database), bounded in time (see the module docstring). Blocking (store I/O)."""

    def __init__(self, store: ConsoleSessionStore, idle_seconds: float = IDLE_SECONDS,
                 max_seconds: float = MAX_SECONDS) -> None:
        self.store = store
        self.idle_seconds = idle_seconds
        self.max_seconds = max_seconds

    @property
    def touch_seconds(self) -> float:
        """A use is written back only when the stored one is older than this (one write per
        minute per session at most, not one per request)."""
        return min(TOUCH_SECONDS, self.idle_seconds / 4)

    def open(self, caller: Caller, token_digest: str) -> ConsoleSession:
        """A new session for ``caller`` signed in with the token of ``token_digest`` (expired
        sessions of anyone are purged first)."""
        now = time.time()
        self.store.purge(now - self.idle_seconds, now - self.max_seconds)
        session = ConsoleSession(secrets.token_urlsafe(32), caller, token_digest,
                                 secrets.token_urlsafe(32), now, now)
        self.store.add(StoredSession(session.digest, caller.user_id, caller.active_role,
                                     token_digest, session.csrf, now, now))
        return session

    def get(self, session_id: str | None) -> ConsoleSession | None:
        """The live session of a cookie value (touching it), or None; an expired one is
        deleted."""
        if not session_id:
            return None
        digest = session_digest(session_id)
        row = self.store.get(digest)
        if row is None:
            return None
        now = time.time()
        if now - row.last_seen > self.idle_seconds or now - row.created_at > self.max_seconds:
            self.store.remove(digest)
            return None
        if now - row.last_seen > self.touch_seconds:
            self.store.touch(digest, now)
        return ConsoleSession(session_id, Caller(row.user, row.role), row.token_digest, row.csrf,
                              row.created_at, now, list(row.flash), row.flash)

    def save_flash(self, session: ConsoleSession) -> None:
        """Store the session's messages to show once, if they changed."""
        if session.flash_changed:
            self.store.set_flash(session.digest, tuple(session.flash))
            session.stored_flash = tuple(session.flash)

    def close(self, session_id: str) -> None:
        """End a session in every process (a no-op for an unknown one)."""
        self.store.remove(session_digest(session_id))


#: The token digest of a session signed in through the identity provider begins with this.
IDP_DIGEST_PREFIX = "idp:"


@dataclass(frozen=True, slots=True)
class IdpAdmins:
    """Who may hold a console session signed in through the identity provider: the members
    of ``admin_group`` (in the groups claim of ``issuer``'s id_token at sign-in).

    Such a session is stored with :attr:`digest` in place of a bearer token's, so it ends in
    every process as soon as the issuer or the admin group is configured otherwise; its
    caller is the user as a member of the admin group (what the policy grants that group is
    what the console's pages show). A group removed at the provider takes effect at the next
    sign-in: within :data:`IDLE_SECONDS` idle, :data:`MAX_SECONDS` at most."""

    issuer: str
    admin_group: str

    @property
    def digest(self) -> str:
        """The marker stored as the session's token digest."""
        key = f"{self.issuer}\n{self.admin_group}".encode()
        return IDP_DIGEST_PREFIX + hashlib.sha256(key).hexdigest()

    def caller(self, user: str) -> Caller:
        """The console caller of ``user``: a member of the admin group."""
        return Caller(user, groups=frozenset({self.admin_group}))

    def admits(self, groups: frozenset[str]) -> bool:
        """Whether a user of ``groups`` is a console admin."""
        return self.admin_group in groups


def idp_admins(settings: AuthSettings) -> IdpAdmins | None:
    """The console admins of ``[auth]``, when sign-in through the identity provider is
    configured (issuer, console client id and admin group), else None."""
    if not settings.console_sign_in or not settings.issuer or not settings.admin_group:
        return None
    return IdpAdmins(settings.issuer, settings.admin_group)


class ConsoleAuth:
    """Signs console users in and re-checks them on every request."""

    def __init__(self, tokens: BearerTokens, entitlements: Entitlements,
                 sessions: SessionStore, admin_role: str = DEFAULT_ADMIN_ROLE,
                 idp: IdpAdmins | None = None) -> None:
        self.tokens = tokens
        self.entitlements = entitlements
        self.admin_role = admin_role
        self.sessions = sessions
        #: Sign-in through the identity provider (None: bearer tokens only).
        self.idp = idp

    def sign_in_idp(self, user: str, groups: frozenset[str]) -> ConsoleSession | None:
        """A session for ``user``, whom the identity provider vouches for with ``groups``,
        if they make a console admin; else None (no session at all). Blocking."""
        if self.idp is None or not self.idp.admits(groups):
            return None
        return self.sessions.open(self.idp.caller(user), self.idp.digest)

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
        if session.token_digest.startswith(IDP_DIGEST_PREFIX):
            if self.idp is None or not hmac.compare_digest(session.token_digest,
                                                           self.idp.digest):
                self.sessions.close(session.id)
                return None
            session.caller = self.idp.caller(session.caller.user_id)
            return session
        live = any(e.digest == session.token_digest and e.revoked_at is None
                   for e in self.tokens.entries())
        if not live or not is_console_admin(session.caller, self.entitlements,
                                            self.admin_role):
            self.sessions.close(session.id)
            return None
        return session
