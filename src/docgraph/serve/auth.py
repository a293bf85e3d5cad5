"""Bearer tokens for the HTTP transports: each token maps to a caller (user + optional role).

Tokens are stored only as ``sha256(token)`` hex digests, in the index's database (the
:class:`~docgraph.store.tokens.TokenStore` port: the SQLite file or PostgreSQL), so every
``docgraph serve`` process on one database accepts the same tokens. A presented token is
hashed and compared with every stored digest using :func:`hmac.compare_digest` (constant
time per entry, all entries always compared). Entries are cached per process and re-read
when the store's change counter moves, so ``docgraph token add`` / ``remove`` run anywhere
take effect on every server's next request, without a restart.

A legacy tokens file (``serve.tokens_file``, TOML or YAML)::

    [tokens.3f7a...e1]            # sha256 of the token
    user = "alice"
    role = "support"              # optional: the caller acts in this role only

is imported into the database (by digest, idempotently) when the server or a token command
opens the index; it is never written. A token revoked in the database stays revoked even
if the file still lists it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
import tomllib
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import anyio.to_thread
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend
from mcp.server.auth.provider import AccessToken
from starlette.authentication import AuthCredentials, BaseUser
from starlette.requests import HTTPConnection

from docgraph.errors import ConfigError
from docgraph.governance import Caller
from docgraph.serve.outage import StoreOutage
from docgraph.store.tokens import MIN_TOKEN_ID_CHARS, TokenEntry, TokenStore

__all__ = ["MAX_TOKEN_CHARS", "STATIC_ISSUER", "BearerTokens", "RouteBearerBackend",
           "StoreTokenVerifier", "TokenEntry",
           "caller_from_access_token", "entry_caller", "hash_token", "new_token",
           "parse_tokens_file"]

log = logging.getLogger(__name__)

#: The issuer audit rows and traces name for a static bearer token (the index database).
STATIC_ISSUER = "docgraph:tokens"
#: Longest token accepted from a request (anything longer is rejected before hashing).
MAX_TOKEN_CHARS = 512
_HEX = frozenset("0123456789abcdef")


def hash_token(token: str) -> str:
    """The sha256 hex digest under which a token is stored."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh random bearer token (256 bits, URL-safe)."""
    return "dg_" + secrets.token_urlsafe(32)


def entry_caller(entry: TokenEntry) -> Caller:
    """The caller a stored token authenticates."""
    return Caller(entry.user, entry.role)


def parse_tokens_file(path: Path) -> list[TokenEntry]:
    """The entries of a legacy tokens file (TOML, or YAML by suffix); a broken file is a
    :class:`ConfigError` naming it."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"tokens file {path} cannot be read: {exc}") from exc
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data: Any = yaml.safe_load(text) or {}
        else:
            data = tomllib.loads(text)
    except Exception as exc:
        raise ConfigError(f"tokens file {path}: not valid TOML/YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"tokens file {path}: expected a table of tokens")
    table = data.get("tokens", {})
    if not isinstance(table, dict):
        raise ConfigError(f"tokens file {path}: [tokens] must be a table")
    entries: list[TokenEntry] = []
    for digest, value in table.items():
        digest = str(digest).strip().lower()
        if len(digest) != 64 or set(digest) - _HEX:
            raise ConfigError(f"tokens file {path}: {digest[:16]!r}... is not a sha256 hex digest")
        if not isinstance(value, dict) or not str(value.get("user", "")).strip():
            raise ConfigError(f"tokens file {path}: token {digest[:12]} needs a user")
        role = value.get("role")
        entries.append(TokenEntry(digest, str(value["user"]).strip(),
                                  str(role).strip() if role else None))
    return entries


def _check_name(value: str, what: str) -> str:
    value = value.strip()
    if not value:
        raise ConfigError(f"a token needs a non-empty {what}")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise ConfigError(f"{what} {value!r}: control characters are not allowed")
    return value


class BearerTokens:
    """The tokens a server accepts, read through a :class:`TokenStore` and cached.

    Every :meth:`entries` call (so every request) asks the store's change counter (one
    tiny read) and re-reads the entries only when it moved. The counter is read before the
    entries, so a change committed in between only causes one more re-read, never a stale
    cache.
    """

    def __init__(self, store: TokenStore) -> None:
        self.store = store
        self._cache: tuple[int, tuple[TokenEntry, ...]] | None = None

    def entries(self) -> tuple[TokenEntry, ...]:
        """Every live token."""
        version = self.store.version()
        cached = self._cache
        if cached is None or cached[0] != version:
            cached = (version, tuple(self.store.entries()))
            self._cache = cached  # one atomic swap: readers see the old or the new pair
        return cached[1]

    def verify(self, token: str) -> TokenEntry | None:
        """The entry of ``token``, or None. Compares the digest with every entry in constant
        time each, so timing reveals neither which entry matched nor how much of it."""
        if not token or len(token) > MAX_TOKEN_CHARS:
            return None
        digest = hash_token(token).encode("ascii")
        found: TokenEntry | None = None
        for entry in self.entries():
            if hmac.compare_digest(digest, entry.digest.encode("ascii")):
                found = entry
        return found

    def add(self, user: str, role: str | None = None) -> str:
        """Create a token for ``user`` (acting as ``role``), store its digest, return the token.

        The token itself is not stored anywhere; it is shown once to whoever runs this."""
        user = _check_name(user, "user")
        role = _check_name(role, "role") if role is not None and role.strip() else None
        token = new_token()
        if not self.store.add(TokenEntry(hash_token(token), user, role, time.time())):
            raise ConfigError("token digest collision; run `token add` again")  # 2**-256
        return token

    def remove(self, token_id: str) -> int:
        """Revoke the tokens whose digest starts with ``token_id`` (at least 8 hex digits);
        returns how many were revoked."""
        token_id = token_id.strip().lower()
        if len(token_id) < MIN_TOKEN_ID_CHARS or set(token_id) - _HEX:
            raise ConfigError(f"token id {token_id[:16]!r}: give at least "
                              f"{MIN_TOKEN_ID_CHARS} hex digits of the token id")
        return self.store.remove(token_id, time.time())

    def import_file(self, path: str | Path,
                    notify: Callable[[str], None] | None = None) -> int:
        """Import a legacy tokens file's entries not stored yet (by digest; revoked ones stay
        revoked); returns how many were added. An absent file imports nothing. When some
        were added, ``notify`` (default: a log warning) gets a notice naming the file."""
        path = Path(path)
        if not path.is_file():
            return 0
        try:
            created = path.stat().st_mtime
        except OSError:
            created = time.time()
        added = sum(self.store.add(TokenEntry(e.digest, e.user, e.role, created))
                    for e in parse_tokens_file(path))
        if added:
            (notify or log.warning)(
                f"imported {added} token(s) from {path} into the index database, where "
                "tokens now live (`docgraph token list/add/remove`); the file is no longer "
                "written, and a token revoked in the database stays revoked: delete the file")
        return added


class StoreTokenVerifier:
    """The MCP SDK's ``TokenVerifier`` over :class:`BearerTokens`.

    The access token's ``client_id`` is the token id (so an MCP session stays bound to the
    token that opened it), ``subject`` the user, and ``claims`` carry user and role. The
    store is read in a worker thread (it may be a PostgreSQL round trip). A store that
    cannot be reached raises (the server's outage guard answers 503); a read that succeeds
    tells ``outage`` the store is back.
    """

    def __init__(self, tokens: BearerTokens, outage: StoreOutage | None = None) -> None:
        self.tokens = tokens
        self.outage = outage

    async def verify_token(self, token: str) -> AccessToken | None:
        """The access info of a valid token, else None."""
        entry = await anyio.to_thread.run_sync(self.tokens.verify, token)
        if self.outage is not None and token and len(token) <= MAX_TOKEN_CHARS:
            self.outage.recovered()  # verify read the store (shorter paths read nothing)
        if entry is None:
            return None
        return AccessToken(token=entry.token_id, client_id=f"token:{entry.token_id}",
                           scopes=[], subject=entry.user,
                           claims={"user": entry.user, "role": entry.role,
                                   "iss": STATIC_ISSUER, "sub": f"token:{entry.token_id}"})


class RouteBearerBackend(BearerAuthBackend):
    """The SDK's bearer backend, except on ``public`` paths (``/healthz``, ``/readyz``):
    they take no token, so a probe that sends one anyway is answered without a token
    check, and liveness stays 200 while the token store is down."""

    def __init__(self, verifier: StoreTokenVerifier, public: Collection[str]) -> None:
        super().__init__(verifier)
        self.public = frozenset(public)

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        """No credentials on a public path; else the SDK's bearer check."""
        if conn.scope["path"] in self.public:
            return None
        found: tuple[AuthCredentials, BaseUser] | None = await super().authenticate(conn)
        return found


def caller_from_access_token(access: AccessToken) -> Caller:
    """The caller an access token stands for: its user, role and groups, and the token's
    issuer and subject (what audit rows and traces record; a static token's issuer is
    :data:`STATIC_ISSUER`, its subject ``token:<token id>``). Made by
    :class:`StoreTokenVerifier` or the identity provider's checks
    (:mod:`docgraph.serve.idp.tokens`)."""
    claims = access.claims or {}
    user = claims.get("user")
    role = claims.get("role")
    if not isinstance(user, str) or not user:
        raise ConfigError("access token carries no docgraph user")
    groups = claims.get("groups") or []
    issuer, subject = claims.get("iss"), claims.get("sub")
    return Caller(user, role if isinstance(role, str) and role else None,
                  frozenset(str(g) for g in groups),
                  issuer=issuer if isinstance(issuer, str) else None,
                  subject=subject if isinstance(subject, str) else None)
