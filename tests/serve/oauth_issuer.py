"""A small OAuth authorization server on loopback for the resource-server tests: RFC 8414
metadata, a JWKS whose keys the test rotates, RFC 7662 introspection of opaque tokens it
was told about, and access tokens minted with keys generated here (PyJWT + cryptography).
It issues no tokens over HTTP: the tests mint them directly, as the provider would have."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


def b64(data: bytes) -> str:
    """base64url without padding, as JWS writes it."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class TestIssuer:
    """The authorization server's state: its signing keys (``kid`` -> private key), which of
    them the JWKS publishes, opaque tokens and how often the JWKS was read."""

    __test__ = False  # not a test class for pytest

    def __init__(self, url: str) -> None:
        self.url = url
        self.keys: dict[str, PrivateKey] = {}
        self.published: list[str] = []
        self.opaque: dict[str, dict[str, Any]] = {}
        #: Introspection requests answered.
        self.introspections = 0
        self.jwks_reads = 0

    def add_key(self, kid: str, kind: str = "RSA", *, publish: bool = True) -> PrivateKey:
        """A fresh signing key (RSA 2048 or EC P-256), published unless told otherwise."""
        key: PrivateKey = (rsa.generate_private_key(public_exponent=65537, key_size=2048)
                           if kind == "RSA" else ec.generate_private_key(ec.SECP256R1()))
        self.keys[kid] = key
        if publish:
            self.published.append(kid)
        return key

    def jwks(self) -> dict[str, Any]:
        """The published public keys as a JWK set."""
        out = []
        for kid in self.published:
            public = self.keys[kid].public_key()
            jwk = json.loads(RSAAlgorithm.to_jwk(public) if isinstance(public, rsa.RSAPublicKey)
                             else ECAlgorithm.to_jwk(public))
            out.append({**jwk, "kid": kid, "use": "sig"})
        return {"keys": out}

    def public_pem(self, kid: str) -> bytes:
        """The PEM of a key's public half (what an HS256 forgery uses as its secret)."""
        return self.keys[kid].public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def claims(self, audience: str, **overrides: Any) -> dict[str, Any]:
        """A valid token's claims for ``audience`` (5 minutes), with ``overrides`` (a value of
        None drops the claim)."""
        now = int(time.time())
        claims: dict[str, Any] = {"iss": self.url, "aud": audience, "sub": "carol",
                                  "iat": now, "nbf": now - 1, "exp": now + 300,
                                  "groups": ["engineers"], "scope": "docgraph openid",
                                  "azp": "test-host"}
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def mint(self, audience: str, *, kid: str = "k1", alg: str | None = None,
             **overrides: Any) -> str:
        """A token signed with key ``kid`` (RS256 or ES256 by the key's type)."""
        key = self.keys[kid]
        alg = alg or ("RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256")
        return jwt.encode(self.claims(audience, **overrides), key, algorithm=alg,
                          headers={"kid": kid})

    @staticmethod
    def forge(header: dict[str, Any], claims: dict[str, Any], secret: bytes | None) -> str:
        """A token with any header: signed with HMAC-SHA256 over ``secret``, or unsigned
        (``alg: none``) when ``secret`` is None."""
        signing_input = (b64(json.dumps(header).encode()) + "." +
                         b64(json.dumps(claims).encode()))
        signature = b"" if secret is None else hmac.new(
            secret, signing_input.encode(), hashlib.sha256).digest()
        return signing_input + "." + b64(signature)

    def app(self) -> Starlette:
        """The server's routes: metadata, JWKS, introspection."""

        async def metadata(request: Request) -> Response:
            return JSONResponse({
                "issuer": self.url, "jwks_uri": self.url + "/jwks",
                "authorization_endpoint": self.url + "/authorize",
                "token_endpoint": self.url + "/token",
                "introspection_endpoint": self.url + "/introspect",
                "response_types_supported": ["code"],
                "code_challenge_methods_supported": ["S256"]})

        async def jwks(request: Request) -> Response:
            self.jwks_reads += 1
            return JSONResponse(self.jwks())

        async def introspect(request: Request) -> Response:
            if request.headers.get("authorization") != "Basic " + base64.b64encode(
                    b"docgraph:s3cret").decode():
                return JSONResponse({"error": "invalid_client"}, status_code=401)
            form = await request.form()
            self.introspections += 1
            return JSONResponse(self.opaque.get(str(form.get("token")), {"active": False}))

        return Starlette(routes=[
            Route("/.well-known/oauth-authorization-server", metadata),
            Route("/jwks", jwks),
            Route("/introspect", introspect, methods=["POST"]),
        ])
