"""``docgraph serve`` as an OAuth 2.1 resource server (the MCP authorization spec, 2025-06-18):
who a bearer token stands for, what a request without an acceptable one is told, and the
Protected Resource Metadata (RFC 9728) that tells a host where to sign in.

- :class:`CallerBackend` authenticates a request: a token shaped like a JWT is the identity
  provider's (:class:`~docgraph.serve.idp.tokens.IdentityTokens`), anything else a static
  bearer token from the index database (service accounts, local use), and, when
  introspection is configured, an opaque token the static tokens do not know is asked
  about. Static tokens are granted the required scopes: an admin minted them for a caller
  the policy already names.
- :class:`Challenge` answers a request the backend did not authenticate: 401 with
  ``WWW-Authenticate: Bearer resource_metadata="..."`` (plus ``error="invalid_token"`` and
  the reason when a token was presented), 403 ``error="insufficient_scope"`` when a
  required scope is missing. ``/mcp`` (:class:`RequireBearer`) and ``/api/v1`` use the same.
- :class:`ResourceServer` is the configuration of both for one server (its MCP URL is the
  resource, and by default the audience tokens must carry, RFC 8707) and the metadata
  routes, at ``/.well-known/oauth-protected-resource`` and at the path-suffixed form
  ``/.well-known/oauth-protected-resource/mcp`` MCP clients look up first.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import Any
from urllib.parse import urlsplit

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_resource_metadata_url, cors_middleware
from pydantic import AnyHttpUrl
from starlette.authentication import AuthCredentials, AuthenticationBackend, BaseUser
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from docgraph.config import AuthSettings
from docgraph.serve.auth import MAX_TOKEN_CHARS, StoreTokenVerifier
from docgraph.serve.idp.claims import TokenRefused
from docgraph.serve.idp.discovery import JwksCache
from docgraph.serve.idp.tokens import IdentityTokens, looks_like_jwt

__all__ = ["PRM_PATH", "REFUSAL_KEY", "CallerBackend", "Challenge", "RequireBearer",
           "ResourceServer"]

log = logging.getLogger(__name__)

#: Where the backend leaves the reason a presented token was refused, for the challenge.
REFUSAL_KEY = "docgraph.token_refusal"
#: RFC 9728's well-known path (the document also answers at this path + the MCP path).
PRM_PATH = "/.well-known/oauth-protected-resource"
_LEGACY_DESCRIPTION = "Authentication required"


def _quoted(text: str) -> str:
    """``text`` as an RFC 6750 quoted value: printable ASCII without ``"`` or ``\\`` (a
    refusal may quote a header the client sent)."""
    return "".join(c if " " <= c <= "~" and c not in '"\\' else "?" for c in text)[:300]


class Challenge:
    """What a request without an acceptable token is answered (see the module doc).
    Without ``metadata_url`` (no ``[auth] issuer``) the 401 is the one static-token servers
    always sent."""

    def __init__(self, metadata_url: str | None = None, scopes: Sequence[str] = ()) -> None:
        self.metadata_url = metadata_url
        self.scopes = list(scopes)

    def refusal(self, scope: Scope) -> tuple[int, str, str, dict[str, str]] | None:
        """``(status, error, description, headers)`` for a request that may not pass, or
        None when its token is accepted and holds every required scope."""
        user = scope.get("user")
        if not isinstance(user, AuthenticatedUser):
            reason = scope.get(REFUSAL_KEY)
            return (401, "invalid_token",
                    str(reason) if reason else "a valid bearer token is required",
                    self._unauthorized(str(reason) if reason else None))
        missing = [s for s in self.scopes if s not in user.scopes]
        if not missing:
            return None
        description = f"the token lacks the scope {' '.join(missing)}"
        parts = ['error="insufficient_scope"', f'scope="{_quoted(" ".join(self.scopes))}"',
                 f'error_description="{_quoted(description)}"']
        if self.metadata_url:
            parts.append(f'resource_metadata="{self.metadata_url}"')
        return 403, "insufficient_scope", description, {
            "WWW-Authenticate": "Bearer " + ", ".join(parts)}

    def _unauthorized(self, reason: str | None) -> dict[str, str]:
        if self.metadata_url is None:
            return {"WWW-Authenticate": 'Bearer error="invalid_token", '
                                        f'error_description="{_LEGACY_DESCRIPTION}"'}
        parts = [] if reason is None else [
            'error="invalid_token"', f'error_description="{_quoted(reason)}"']
        parts.append(f'resource_metadata="{self.metadata_url}"')
        return {"WWW-Authenticate": "Bearer " + ", ".join(parts)}


class RequireBearer:
    """``/mcp`` behind :class:`Challenge`: a refused request gets the challenge and a JSON
    ``{"error", "error_description"}`` body (the SDK's shape), the rest reach ``app``."""

    def __init__(self, app: ASGIApp, challenge: Challenge) -> None:
        self.app = app
        self.challenge = challenge

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer the challenge or pass the request on."""
        refusal = self.challenge.refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, error, description, headers = refusal
        if self.challenge.metadata_url is None and status == 401:
            description = _LEGACY_DESCRIPTION
        await JSONResponse({"error": error, "error_description": description},
                           status_code=status, headers=headers)(scope, receive, send)


class CallerBackend(AuthenticationBackend):
    """Authenticates a request by its bearer token, static or the identity provider's (see
    the module doc); the probes (``public``) take none."""

    def __init__(self, static: StoreTokenVerifier, identity: IdentityTokens,
                 public: Collection[str], scopes: Sequence[str] = ()) -> None:
        self.static = static
        self.identity = identity
        self.public = frozenset(public)
        self.scopes = list(scopes)

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        """The credentials of an accepted token; None (and the reason in the scope) for a
        missing or refused one."""
        if conn.scope["path"] in self.public:
            return None
        header = conn.headers.get("authorization", "")
        if header[:7].lower() != "bearer ":
            return None
        token = header[7:].strip()
        try:
            access = await self.verify(token)
        except TokenRefused as exc:
            conn.scope[REFUSAL_KEY] = str(exc)
            log.info("refused an access token: %s", exc)
            return None
        return AuthCredentials(access.scopes), AuthenticatedUser(access)

    async def verify(self, token: str) -> AccessToken:
        """The access info of ``token``: the identity provider's JWT, a static token, or an
        opaque token introspected; :class:`TokenRefused` otherwise."""
        if not token or len(token) > 16 * MAX_TOKEN_CHARS:
            raise TokenRefused("the bearer token is empty or too long")
        if looks_like_jwt(token):
            try:
                return await self.identity.check(token)
            except TokenRefused:
                static = await self._static(token)  # a legacy static token with two dots
                if static is None:
                    raise
                return static
        static = await self._static(token)
        if static is not None:
            return static
        if self.identity.settings.introspection_url:
            return await self.identity.check(token)
        raise TokenRefused("unknown bearer token")

    async def _static(self, token: str) -> AccessToken | None:
        """The static token's access info, granted the required scopes, or None."""
        static = await self.static.verify_token(token)
        return None if static is None else static.model_copy(
            update={"scopes": list(self.scopes)})


class ResourceServer:
    """The resource-server side of one ``docgraph serve``: the resource (its MCP URL), the
    audience tokens must carry, the identity provider's token checks and the metadata
    routes."""

    def __init__(self, settings: AuthSettings, mcp_url: str,
                 keys: JwksCache | None = None) -> None:
        if settings.issuer is None:
            raise ValueError("a resource server needs auth.issuer")
        self.settings = settings
        self.resource = mcp_url
        self.audience = settings.audience or mcp_url
        self.tokens = IdentityTokens(settings, self.audience, keys)
        self.metadata_url = str(build_resource_metadata_url(AnyHttpUrl(mcp_url)))
        self.challenge = Challenge(self.metadata_url, settings.scopes)

    def backend(self, static: StoreTokenVerifier, public: Collection[str]) -> CallerBackend:
        """The authentication backend of the server's requests."""
        return CallerBackend(static, self.tokens, public, self.settings.scopes)

    def metadata(self) -> dict[str, Any]:
        """The RFC 9728 document: this resource, its issuer spelled exactly as configured
        (a client compares it with the issuer's own metadata, so no slash may be added, as
        pydantic's URL type would), the scopes and the bearer method."""
        document: dict[str, Any] = {"resource": self.resource,
                                    "authorization_servers": [self.settings.issuer]}
        if self.settings.scopes:
            document["scopes_supported"] = list(self.settings.scopes)
        document.update(bearer_methods_supported=["header"], resource_name="docgraph")
        return document

    def routes(self) -> list[Route]:
        """The metadata at the path-suffixed well-known URL (the one ``resource_metadata``
        names and MCP clients try first) and at the bare one, with the SDK's CORS handling
        (browser-based hosts read it cross-origin)."""
        document = self.metadata()

        async def handle(request: Request) -> Response:
            return JSONResponse(document, headers={"Cache-Control": "public, max-age=3600"})

        endpoint = cors_middleware(handle, ["GET", "OPTIONS"])
        paths = dict.fromkeys([urlsplit(self.metadata_url).path, PRM_PATH])
        return [Route(path, endpoint=endpoint, methods=["GET", "OPTIONS"]) for path in paths]

    def describe(self) -> dict[str, Any]:
        """What a start-up line says about the resource server."""
        return {"issuer": self.settings.issuer, "audience": self.audience,
                "metadata": self.metadata_url}
