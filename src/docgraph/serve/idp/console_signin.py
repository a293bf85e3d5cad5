"""The web console's sign-in through the organisation's identity provider: an OpenID Connect
client (authorization code flow with PKCE, RFC 7636) of the ``[auth] issuer``.

Why each check is there:

- ``state`` (random, kept in the browser's pending cookie, compared in constant time) binds
  the answer to the browser that began the sign-in: a callback forged by someone else, or
  replayed after the pending cookie was spent, is refused (login CSRF);
- ``nonce`` (random, in the same cookie, echoed in the id_token) binds the id_token to this
  sign-in: a token obtained for another request is refused (replay, injection);
- PKCE (S256): a code stolen on its way back cannot be redeemed without the verifier that
  only this browser's cookie holds;
- the authorization response's ``iss`` (RFC 9207), when present, must be the issuer (mix-up);
- the id_token is verified: its signature against the issuer's JWKS (``alg`` pinned to
  ``[auth] algorithms``, a kid unknown to the cached set re-fetches it once, following a key
  rotation), ``iss`` = the issuer, ``aud`` holding the console's client id (``azp`` = it when
  there are several audiences), ``exp``/``iat`` within ``[auth] clock_skew_s``.

The user is the ``[auth] user_claim`` of the id_token, its groups the ``[auth]
groups_claim`` (a dotted path reads a nested claim; a missing claim is no group). Who may
then hold a console session is :class:`~docgraph.serve.console.sessions.IdpAdmins`'s to
decide; the pages are :mod:`docgraph.serve.console.idp_pages`'.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt

from docgraph.config import AuthSettings
from docgraph.errors import DocgraphError
from docgraph.serve.idp.claims import TokenRefused, claim_at, user_from
from docgraph.serve.idp.discovery import DiscoveryError, JwksCache, fetch_metadata

#: How long a begun sign-in may take at the identity provider.
PENDING_SECONDS = 600
#: The scopes the console asks for: who the user is; the groups come with the id_token
#: (a groups claim configured at the provider, see the README).
SCOPES = "openid profile email"
HTTP_TIMEOUT_S = 10.0


class SignInRefused(DocgraphError):
    """The identity provider's answer is not a valid sign-in; the message says what failed
    (shown to the person and written to the audit log)."""


@dataclass(frozen=True, slots=True)
class PendingSignIn:
    """A sign-in begun in one browser: the secrets its answer must match, kept in that
    browser's cookie (``HttpOnly``, for the console's callback path only) until the
    callback spends it."""

    state: str
    nonce: str
    verifier: str
    next: str | None
    created_at: float

    @classmethod
    def new(cls, next_page: str | None) -> PendingSignIn:
        """Fresh random ``state``, ``nonce`` and PKCE verifier."""
        return cls(secrets.token_urlsafe(24), secrets.token_urlsafe(24),
                   secrets.token_urlsafe(48), next_page, time.time())

    @property
    def challenge(self) -> str:
        """The PKCE S256 code challenge of the verifier."""
        digest = hashlib.sha256(self.verifier.encode()).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def encode(self) -> str:
        """The cookie value."""
        return base64.urlsafe_b64encode(json.dumps(asdict(self)).encode()).decode()

    @classmethod
    def decode(cls, value: str | None, now: float | None = None) -> PendingSignIn | None:
        """The pending sign-in of a cookie value, or None when absent, malformed or older
        than :data:`PENDING_SECONDS`."""
        if not value or len(value) > 4096:
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(value.encode()))
            pending = cls(str(data["state"]), str(data["nonce"]), str(data["verifier"]),
                          None if data["next"] is None else str(data["next"]),
                          float(data["created_at"]))
        except (ValueError, KeyError, TypeError):
            return None
        if (now or time.time()) - pending.created_at > PENDING_SECONDS:
            return None
        return pending

    def state_matches(self, presented: str | None) -> bool:
        """Whether ``presented`` is this sign-in's ``state`` (constant-time compare)."""
        return bool(presented) and hmac.compare_digest(str(presented).encode(),
                                                       self.state.encode())


@dataclass(frozen=True, slots=True)
class SignedIn:
    """Who the identity provider says signed in: the user (``[auth] user_claim``), the
    groups (``[auth] groups_claim``), the issuer and the subject."""

    user: str
    groups: frozenset[str]
    issuer: str
    subject: str


def groups_of(claims: Mapping[str, Any], path: str) -> frozenset[str]:
    """The group names of ``claims`` at ``path``: a list of names or one name; anything else
    (absent, numbers, objects) is no group, so a missing claim fails closed."""
    value = claim_at(claims, path)
    if isinstance(value, str):
        return frozenset({value}) if value.strip() else frozenset()
    if isinstance(value, list):
        return frozenset(v for v in value if isinstance(v, str) and v.strip())
    return frozenset()


class OidcConsoleClient:
    """The console as an OpenID Connect client of ``settings.issuer`` (see the module
    docstring). Its metadata and keys are cached per process (:class:`JwksCache`)."""

    def __init__(self, settings: AuthSettings) -> None:
        if not (settings.issuer and settings.console_client_id):
            raise ValueError("console sign-in through an identity provider needs [auth] "
                             "issuer and console_client_id")
        self.settings = settings
        self.issuer: str = settings.issuer
        self.client_id: str = settings.console_client_id
        # the issuer's metadata and signing keys, as the resource server keeps them
        self._jwks = JwksCache(self.issuer, cache_s=settings.jwks_cache_s)
        # the last failure to read the metadata (when, why): an unauthenticated sign-in
        # start must not make the server ask an unreachable provider on every request
        self._metadata_failed: tuple[float, str] | None = None

    async def metadata(self) -> dict[str, Any]:
        """The issuer's metadata (read once per process, :func:`fetch_metadata`: its
        ``issuer`` must be the configured one exactly), with the endpoints sign-in uses."""
        if self._jwks.metadata is None:
            failed = self._metadata_failed
            if failed is not None and time.monotonic() - failed[0] < self._jwks.refetch_s:
                raise SignInRefused(failed[1])  # asked again only every refetch_s
            try:
                self._jwks.metadata = await fetch_metadata(self.issuer)
            except DiscoveryError as exc:
                self._metadata_failed = (time.monotonic(), str(exc))
                raise SignInRefused(str(exc)) from None
        data = self._jwks.metadata
        for key in ("authorization_endpoint", "token_endpoint"):
            if not isinstance(data.get(key), str):
                raise SignInRefused(f"the metadata of {self.issuer} has no {key}")
        return data

    async def authorization_url(self, pending: PendingSignIn, redirect_uri: str) -> str:
        """Where to send the browser to sign in: the authorization request with ``state``,
        ``nonce`` and the PKCE challenge of ``pending``."""
        endpoint = (await self.metadata())["authorization_endpoint"]
        query = urlencode({"response_type": "code", "client_id": self.client_id,
                           "redirect_uri": redirect_uri, "scope": SCOPES,
                           "state": pending.state, "nonce": pending.nonce,
                           "code_challenge": pending.challenge,
                           "code_challenge_method": "S256"})
        return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"

    async def finish(self, pending: PendingSignIn, params: Mapping[str, str],
                     redirect_uri: str) -> SignedIn:
        """The person signed in by the authorization response ``params`` of ``pending``:
        checks ``error``, ``state`` and ``iss``, redeems the code with the PKCE verifier and
        verifies the id_token. Raises :class:`SignInRefused` naming what failed."""
        if params.get("error"):
            raise SignInRefused(f"the identity provider answered {params['error']!r}: "
                                f"{params.get('error_description', '')}".rstrip(": "))
        if not pending.state_matches(params.get("state")):
            raise SignInRefused("state: the answer does not belong to the sign-in this "
                                "browser began (forged or replayed)")
        if "iss" in params and params["iss"] != self.issuer:
            raise SignInRefused(f"iss: the answer comes from {params['iss']!r}, not the "
                                f"issuer {self.issuer!r}")
        code = params.get("code")
        if not code:
            raise SignInRefused("code: the answer carries no authorization code")
        tokens = await self._redeem(code, pending.verifier, redirect_uri)
        id_token = tokens.get("id_token")
        if not isinstance(id_token, str):
            raise SignInRefused("the token response carries no id_token")
        claims = await self.verify_id_token(id_token, pending.nonce)
        try:  # the same rules as an access token's user: a name, a verified address
            user = user_from(claims, self.settings.user_claim)
        except TokenRefused as exc:
            raise SignInRefused(f"id_token: {exc}") from None
        return SignedIn(user, groups_of(claims, self.settings.groups_claim), self.issuer,
                        str(claims["sub"]))

    async def verify_id_token(self, token: str, nonce: str) -> dict[str, Any]:
        """The claims of a valid id_token of this sign-in (see the module docstring)."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise SignInRefused(f"id_token: not a JWT ({exc})") from None
        alg = header.get("alg")
        if alg not in self.settings.algorithms:
            raise SignInRefused(f"id_token: algorithm {alg!r} is not one of [auth] "
                                f"algorithms {self.settings.algorithms}")
        key = await self._key(header.get("kid"))
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key.key, algorithms=[alg], audience=self.client_id, issuer=self.issuer,
                leeway=self.settings.clock_skew_s,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]})
        except jwt.PyJWTError as exc:
            raise SignInRefused(f"id_token: {exc}") from None
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != self.client_id:
            raise SignInRefused("id_token: several audiences and azp is not the console")
        presented = claims.get("nonce")
        if not isinstance(presented, str) or not hmac.compare_digest(presented.encode(),
                                                                      nonce.encode()):
            raise SignInRefused("id_token: its nonce is not this sign-in's (a token issued "
                                "for another request)")
        return claims

    async def _key(self, kid: Any) -> jwt.PyJWK:
        """The signing key ``kid`` names (the set is read again when it does not hold it,
        rate-limited: the issuer may have rotated its keys)."""
        try:
            await self.metadata()
            key = await self._jwks.key(None if kid is None else str(kid))
        except DiscoveryError as exc:
            raise SignInRefused(str(exc)) from None
        if key is None:
            raise SignInRefused(f"id_token: no signing key of the issuer has kid {kid!r}")
        return key

    async def _redeem(self, code: str, verifier: str, redirect_uri: str) -> dict[str, Any]:
        """The token response for ``code`` (client_secret_basic for a confidential client,
        client_id alone for a public one)."""
        endpoint = (await self.metadata())["token_endpoint"]
        form = {"grant_type": "authorization_code", "code": code,
                "redirect_uri": redirect_uri, "code_verifier": verifier}
        secret = self.settings.console_client_secret
        auth = httpx.BasicAuth(self.client_id, secret) if secret else None
        if not secret:
            form["client_id"] = self.client_id
        try:
            async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S, auth=auth) as http:
                response = await http.post(endpoint, data=form,
                                           headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise SignInRefused(f"the token endpoint {endpoint} cannot be reached: "
                                f"{exc}") from None
        try:
            data = response.json()
        except ValueError:
            data = {}
        if response.status_code != 200 or not isinstance(data, dict):
            error = data.get("error", response.status_code) if isinstance(data, dict) \
                else response.status_code
            raise SignInRefused(f"the token endpoint refused the code: {error}")
        return data
