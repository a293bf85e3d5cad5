"""Access tokens of the organisation's identity provider (``[auth] issuer``): JWTs checked
against the issuer's signing keys, opaque tokens through RFC 7662 introspection.

A JWT is accepted only when every check passes (and it is no id_token: one carrying a
``nonce`` is refused): its ``alg`` is one of ``auth.algorithms``
(asymmetric only, so ``none`` and an ``HS256`` token "signed" with the public key never get
as far as a key), its ``kid`` names a key the issuer publishes now (:class:`JwksCache`), the
signature verifies, ``exp``/``nbf``/``iat`` hold within ``auth.clock_skew_s``, ``iss`` is the
issuer and ``aud`` holds this server's audience (RFC 8707: a token minted for another
resource is refused). The user and groups then come from the configured claims
(:mod:`.claims`). Every refusal is a :class:`TokenRefused` whose message says which check
failed; the server returns it in the 401's ``error_description``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import httpx
import jwt
from mcp.server.auth.provider import AccessToken

from docgraph.config import AuthSettings
from docgraph.serve.idp.claims import TokenRefused, groups_from, user_from
from docgraph.serve.idp.discovery import FETCH_TIMEOUT_S, DiscoveryError, JwksCache
from docgraph.serve.idp.introspection import IntrospectionCache, IntrospectionUnavailable

__all__ = ["IdentityTokens", "looks_like_jwt", "token_scopes"]

log = logging.getLogger(__name__)

#: What each of PyJWT's refusals means, as the client is told it.
_REFUSALS: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
    (jwt.ExpiredSignatureError, "the token has expired (exp)"),
    (jwt.ImmatureSignatureError, "the token is not valid yet (nbf/iat)"),
    (jwt.InvalidAudienceError, "the token was issued for another resource (aud)"),
    (jwt.InvalidIssuerError, "the token was issued by another issuer (iss)"),
    (jwt.InvalidSignatureError, "the token's signature does not verify"),
    (jwt.MissingRequiredClaimError, "the token lacks a required claim"),
)


def looks_like_jwt(token: str) -> bool:
    """Whether ``token`` has a JWS compact form's three dot-separated parts (static bearer
    tokens and most opaque tokens have no dot)."""
    return token.count(".") == 2


def token_scopes(claims: Mapping[str, Any]) -> list[str]:
    """The scopes a token grants: ``scope`` (RFC 9068, space-separated) or ``scp`` (Entra ID,
    Okta: a list or a space-separated string)."""
    value = claims.get("scope", claims.get("scp"))
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return [str(v) for v in value]
    return []


class IdentityTokens:
    """Checks the identity provider's access tokens for one audience; see the module doc."""

    def __init__(self, settings: AuthSettings, audience: str,
                 keys: JwksCache | None = None) -> None:
        if settings.issuer is None:
            raise ValueError("IdentityTokens needs auth.issuer")
        self.settings = settings
        self.issuer = settings.issuer
        self.audience = audience
        self.keys = keys or JwksCache(settings.issuer, cache_s=settings.jwks_cache_s)
        self.introspection = IntrospectionCache()

    async def check(self, token: str) -> AccessToken:
        """The access info of an accepted token; a refused one raises :class:`TokenRefused`
        naming the failed check."""
        if looks_like_jwt(token):
            return self.access(token, await self.verified_claims(token))
        if self.settings.introspection_url:
            return self.access(token, await self.introspection.claims(token, self.introspect))
        raise TokenRefused("not a JWT, and no introspection endpoint is configured "
                           "(auth.introspection_url)")

    async def verified_claims(self, token: str) -> dict[str, Any]:
        """The claims of a JWT that passes every check (signature, alg, exp, nbf, iss,
        aud)."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise TokenRefused("the token is not a well-formed JWT") from exc
        alg = header.get("alg")
        if alg not in self.settings.algorithms:
            raise TokenRefused(f"alg {alg!r} is not accepted (auth.algorithms: "
                               f"{', '.join(self.settings.algorithms)})")
        kid = header.get("kid")
        try:
            key = await self.keys.key(kid if isinstance(kid, str) else None)
        except DiscoveryError as exc:
            log.warning("cannot check an access token: %s", exc)
            raise TokenRefused("the identity provider's signing keys cannot be read") from exc
        if key is None:
            raise TokenRefused(f"the token is signed with a key the issuer does not publish "
                               f"(kid {kid!r})")
        return self.decode(token, key, alg)

    def decode(self, token: str, key: jwt.PyJWK, alg: str) -> dict[str, Any]:
        """Verify the signature and the registered claims with ``key`` (no I/O: the cost of a
        request's check with a warm key cache, which ``bench/jwt_auth.py`` measures)."""
        if key.key_type != _KEY_TYPES.get(alg):
            raise TokenRefused(f"key {key.key_id!r} is not a key for alg {alg!r}")
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key.key, algorithms=[alg], audience=self.audience, issuer=self.issuer,
                leeway=self.settings.clock_skew_s,
                options={"require": ["exp", "iss", "aud"]})
        except jwt.PyJWTError as exc:
            for kind, message in _REFUSALS:
                if isinstance(exc, kind):
                    raise TokenRefused(f"{message}: {exc}" if kind is
                                       jwt.MissingRequiredClaimError else message) from exc
            raise TokenRefused("the token is not a valid JWT") from exc
        if "nonce" in claims:  # an OpenID Connect id_token (the console's), not an access token
            raise TokenRefused("an id_token is not an access token (it carries a nonce)")
        return claims

    async def introspect(self, token: str) -> dict[str, Any]:
        """RFC 7662: the authorization server's answer about an opaque token, checked as a
        JWT's claims are (active, exp, nbf, iss, aud; ``aud`` must be present: an answer
        that does not say for whom the token was issued fails closed)."""
        settings = self.settings
        url = str(settings.introspection_url)
        auth: httpx.Auth | httpx._client.UseClientDefault = (
            httpx.BasicAuth(settings.introspection_client_id,
                            settings.introspection_client_secret or "")
            if settings.introspection_client_id else httpx.USE_CLIENT_DEFAULT)
        try:
            async with httpx.AsyncClient(timeout=FETCH_TIMEOUT_S) as client:
                response = await client.post(url, data={"token": token,
                                                        "token_type_hint": "access_token"},
                                             auth=auth, headers={"Accept": "application/json"})
            response.raise_for_status()
            claims = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("token introspection at %s failed: %s", url, exc)
            raise IntrospectionUnavailable("the token cannot be introspected now") from exc
        if not isinstance(claims, dict) or claims.get("active") is not True:
            raise TokenRefused("the token is not active (introspection)")
        kind = claims.get("token_type")
        if kind is not None and str(kind).lower() not in _ACCESS_TOKEN_TYPES:
            raise TokenRefused(f"a {kind!r} is not an access token (introspection)")
        now, skew = time.time(), settings.clock_skew_s
        if isinstance(claims.get("exp"), int | float) and claims["exp"] + skew < now:
            raise TokenRefused("the token has expired (exp)")
        if not isinstance(claims.get("exp"), int | float):
            raise TokenRefused("the introspection answer has no exp")
        if isinstance(claims.get("nbf"), int | float) and claims["nbf"] - skew > now:
            raise TokenRefused("the token is not valid yet (nbf/iat)")
        if claims.get("iss", self.issuer) != self.issuer:
            raise TokenRefused("the token was issued by another issuer (iss)")
        audiences = claims.get("aud")
        audiences = [audiences] if isinstance(audiences, str) else audiences
        if not isinstance(audiences, list) or self.audience not in audiences:
            raise TokenRefused("the token was issued for another resource (aud)")
        return claims

    def access(self, token: str, claims: Mapping[str, Any]) -> AccessToken:
        """The SDK's access info of an accepted token: ``subject``/``iss`` identify the
        principal (an MCP session stays bound to it), ``claims`` carry the docgraph user, its
        groups and where they came from."""
        user = user_from(claims, self.settings.user_claim)
        groups = groups_from(claims, self.settings.groups_claim)
        subject = str(claims.get("sub") or user)
        client = claims.get("client_id", claims.get("azp"))
        exp = claims.get("exp")
        return AccessToken(
            token=token, client_id=f"idp:{client}" if isinstance(client, str) else "idp",
            scopes=token_scopes(claims),
            expires_at=int(exp) if isinstance(exp, int | float) else None,
            resource=self.audience, subject=subject,
            claims={"user": user, "role": None, "groups": sorted(groups),
                    "iss": self.issuer, "sub": subject})


#: ``token_type`` values of an introspection answer that name an access token (absent: one).
_ACCESS_TOKEN_TYPES = frozenset({"access_token", "bearer",
                                 "urn:ietf:params:oauth:token-type:access_token"})

#: The JWK key type each algorithm family needs.
_KEY_TYPES = {**{f"{p}{n}": "RSA" for p in ("RS", "PS") for n in (256, 384, 512)},
              **{f"ES{n}": "EC" for n in (256, 384, 512)}, "EdDSA": "OKP"}
