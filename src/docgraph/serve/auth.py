"""Bearer tokens for the HTTP transports: each token maps to a caller (user + optional role).

Tokens are stored only as ``sha256(token)`` hex digests, in a TOML (or YAML) file::

    [tokens.3f7a...e1]            # sha256 of the token
    user = "alice"
    role = "support"              # optional: the caller acts in this role only

A presented token is hashed and compared with every stored digest using
:func:`hmac.compare_digest` (constant time per entry, all entries always compared). The file
is re-read when it changes, so ``docgraph token add`` takes effect without a restart.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server.auth.provider import AccessToken

from docgraph.errors import ConfigError
from docgraph.governance import Caller

#: Longest token accepted from a request (anything longer is rejected before hashing).
MAX_TOKEN_CHARS = 512


def hash_token(token: str) -> str:
    """The sha256 hex digest under which a token is stored."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh random bearer token (256 bits, URL-safe)."""
    return "dg_" + secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One stored token: its digest and the caller it stands for."""

    digest: str
    user: str
    role: str | None = None

    @property
    def token_id(self) -> str:
        """A short, non-secret identifier of the token (first 12 hex digits of the digest)."""
        return self.digest[:12]

    def caller(self) -> Caller:
        """The caller this token authenticates."""
        return Caller(self.user, self.role)


def _parse(path: Path, text: str) -> list[TokenEntry]:
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        data: Any = yaml.safe_load(text) or {}
    else:
        data = tomllib.loads(text)
    if not isinstance(data, dict):
        raise ConfigError(f"tokens file {path}: expected a table of tokens")
    table = data.get("tokens", {})
    if not isinstance(table, dict):
        raise ConfigError(f"tokens file {path}: [tokens] must be a table")
    entries: list[TokenEntry] = []
    for digest, value in table.items():
        digest = str(digest).strip().lower()
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ConfigError(f"tokens file {path}: {digest[:16]!r}... is not a sha256 hex digest")
        if not isinstance(value, dict) or not str(value.get("user", "")).strip():
            raise ConfigError(f"tokens file {path}: token {digest[:12]} needs a user")
        role = value.get("role")
        entries.append(TokenEntry(digest, str(value["user"]).strip(),
                                  str(role).strip() if role else None))
    return entries


class TokenStore:
    """The token file, re-read when its modification time or size changes."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[float, int] | None = None
        self._entries: list[TokenEntry] = []

    def entries(self) -> list[TokenEntry]:
        """Every stored token (an absent file holds none)."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ConfigError(f"tokens file {self.path} cannot be read: {exc}") from exc
        stamp = (stat.st_mtime, stat.st_size)
        with self._lock:
            if stamp != self._stamp:
                self._entries = _parse(self.path, self.path.read_text(encoding="utf-8"))
                self._stamp = stamp
            return self._entries

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
        if not user.strip():
            raise ConfigError("a token needs a non-empty user")
        if self.path.suffix.lower() in (".yaml", ".yml"):
            raise ConfigError(f"{self.path}: `token add` writes TOML files; use a .toml path")
        token = new_token()
        digest = hash_token(token)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        existing = self.path.read_text(encoding="utf-8") if self.path.exists() else ""
        _parse(self.path, existing)  # refuse to append to a broken file
        entry = f'\n[tokens.{digest}]\nuser = {_toml_string(user.strip())}\n'
        if role:
            entry += f"role = {_toml_string(role.strip())}\n"
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        fd = os.open(self.path, flags, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as handle:
            handle.write(entry)
        return token

    def remove(self, token_id: str) -> int:
        """Delete the tokens whose digest starts with ``token_id`` (at least 8 hex digits);
        returns how many were removed."""
        token_id = token_id.strip().lower()
        if len(token_id) < 8:
            raise ConfigError("give at least 8 hex digits of the token id")
        entries = self.entries()
        kept = [e for e in entries if not e.digest.startswith(token_id)]
        if len(kept) == len(entries):
            return 0
        if self.path.suffix.lower() in (".yaml", ".yml"):
            raise ConfigError(f"{self.path}: `token remove` rewrites TOML files only")
        lines = []
        for e in kept:
            lines.append(f"[tokens.{e.digest}]\nuser = {_toml_string(e.user)}\n"
                         + (f"role = {_toml_string(e.role)}\n" if e.role else ""))
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines))
        tmp.replace(self.path)
        return len(entries) - len(kept)


def _toml_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    if any(ord(c) < 0x20 for c in escaped):
        raise ConfigError(f"{value!r}: control characters are not allowed")
    return f'"{escaped}"'


class StoreTokenVerifier:
    """The MCP SDK's ``TokenVerifier`` over a :class:`TokenStore`.

    The access token's ``client_id`` is the token id (so an MCP session stays bound to the
    token that opened it), ``subject`` the user, and ``claims`` carry user and role.
    """

    def __init__(self, store: TokenStore) -> None:
        self.store = store

    async def verify_token(self, token: str) -> AccessToken | None:
        """The access info of a valid token, else None."""
        entry = self.store.verify(token)
        if entry is None:
            return None
        return AccessToken(token=entry.token_id, client_id=f"token:{entry.token_id}",
                           scopes=[], subject=entry.user,
                           claims={"user": entry.user, "role": entry.role})


def caller_from_access_token(access: AccessToken) -> Caller:
    """The caller an access token made by :class:`StoreTokenVerifier` stands for."""
    claims = access.claims or {}
    user = claims.get("user")
    role = claims.get("role")
    if not isinstance(user, str) or not user:
        raise ConfigError("access token carries no docgraph user")
    return Caller(user, role if isinstance(role, str) and role else None)
