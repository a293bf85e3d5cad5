"""A real OpenID Connect provider on loopback for the tests: node-oidc-provider (npm
``oidc-provider``, pinned in ``.ci/run`` and installed into ``.ci/node``) run by
``tests/idp/oidc_provider.mjs``.

What it offers (see the script's header): users with a ``groups`` claim in the id_token and
in JWT access tokens, PKCE required, short token lifetimes, resource indicators (an access
token asked for ``resource=<url>`` is a JWT with ``aud`` = that URL), dynamic client
registration at ``/reg``, pre-registered clients, consent given automatically, and a key
rotation (:meth:`OidcProvider.rotate_keys`).

How a test gets tokens (no browser needed): take the module-scoped ``oidc_provider``
fixture (``from tests.idp.provider import oidc_provider  # noqa: F401``), or start one with
its own pre-registered clients, then::

    with running_provider([Client("console", "secret", [redirect])]) as idp:
        client = idp.register(["http://127.0.0.1:9/cb"])   # RFC 7591, a public client
        tokens = idp.tokens(client, "alice", resource="http://127.0.0.1:8765/mcp",
                            scope="openid mcp")
        tokens["access_token"]    # a JWT: aud = the resource, groups = alice's
        idp.rotate_keys()         # new signing key; the old one leaves the JWKS

:meth:`OidcProvider.authorize` drives the provider's login form with httpx and returns the
redirect back to the client (``code``, ``state``), for tests of a client's own callback
(the console's). Without node or the package the provider is skipped, naming what is
missing (a failure under ``DOCGRAPH_REQUIRE_SERVICES=1``, as for every test service).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from tests.conftest import REPO
from tests.serve.test_http_server import free_port

#: The pinned release (.ci/run installs it): 9.x is the newest line; it runs on Node 20
#: (and warns that it prefers Node 22).
PROVIDER_VERSION = "9.13.3"
PACKAGE = REPO / ".ci" / "node" / "node_modules" / "oidc-provider"
SCRIPT = REPO / "tests" / "idp" / "oidc_provider.mjs"
#: The test users and their groups (``groups`` claim).
USERS = {"alice": ["engineering", "docgraph-admins"], "bob": ["support"]}
ADMIN_GROUP = "docgraph-admins"


@dataclass(frozen=True)
class Client:
    """A client of the provider: its id, secret (None for a public client) and redirect
    URIs."""

    client_id: str
    client_secret: str | None
    redirect_uris: list[str]

    def registration(self) -> dict[str, Any]:
        """The client's metadata as the provider's configuration takes it."""
        out: dict[str, Any] = {"client_id": self.client_id, "redirect_uris": self.redirect_uris,
                               "grant_types": ["authorization_code", "refresh_token"],
                               "response_types": ["code"]}
        if self.client_secret is None:
            out["token_endpoint_auth_method"] = "none"
        else:
            out["client_secret"] = self.client_secret
        return out


def pkce_pair() -> tuple[str, str]:
    """A PKCE ``(verifier, S256 challenge)``."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    return verifier, challenge.rstrip(b"=").decode()


@dataclass
class OidcProvider:
    """A running provider: its ``issuer`` URL, the pre-registered ``clients`` and the
    process (stopped by :func:`running_provider`)."""

    issuer: str
    clients: dict[str, Client]
    admin_key: str
    process: subprocess.Popen[bytes]
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=30))

    def metadata(self) -> dict[str, Any]:
        """The provider's discovery document."""
        response = self.http.get(self.issuer + "/.well-known/openid-configuration")
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def jwks(self) -> dict[str, Any]:
        """The provider's current JSON Web Key Set."""
        data: dict[str, Any] = self.http.get(self.issuer + "/jwks").json()
        return data

    def rotate_keys(self) -> str:
        """Sign with a fresh key from now on; the old key leaves the JWKS (tokens it signed
        no longer verify). Registered clients, grants and sessions stay. Returns the new
        ``kid``."""
        response = self.http.post(self.issuer + "/_test/rotate-keys",
                                  headers={"Authorization": f"Bearer {self.admin_key}"})
        response.raise_for_status()
        return str(response.json()["kid"])

    def register(self, redirect_uris: list[str], public: bool = True) -> Client:
        """A client registered dynamically (RFC 7591), as an MCP host does; public (PKCE
        only) unless ``public`` is False."""
        body: dict[str, Any] = {"redirect_uris": redirect_uris,
                                "grant_types": ["authorization_code", "refresh_token"],
                                "response_types": ["code"]}
        if public:
            body["token_endpoint_auth_method"] = "none"
        response = self.http.post(self.issuer + "/reg", json=body)
        assert response.status_code == 201, response.text
        data = response.json()
        return Client(data["client_id"], data.get("client_secret"), redirect_uris)

    def authorize(self, user: str, params: dict[str, str],
                  browser: httpx.Client | None = None) -> str:
        """Sign ``user`` in at the authorization endpoint with ``params`` (client_id,
        redirect_uri, state, code_challenge, ...) through the login form, and return the
        URL the provider sends the browser back to (the client's redirect URI with ``code``
        and ``state``, or ``error``). ``browser`` keeps the provider's cookies across calls
        (a fresh one each call by default)."""
        own = browser is None
        agent = browser or httpx.Client(timeout=30)
        try:
            url = self.metadata()["authorization_endpoint"] + "?" + urlencode(params)
            for _ in range(10):
                response = agent.get(url)
                if response.status_code in (302, 303):
                    url = _absolute(self.issuer, response.headers["location"])
                    if not url.startswith(self.issuer + "/"):
                        return url
                    continue
                if url.startswith(self.issuer + "/interaction/"):
                    # the login form, or a consent form for what the grant lacks
                    form = {"prompt": "login", "login": user, "password": "any"} \
                        if 'value="login"' in response.text else {"prompt": "consent"}
                    response = agent.post(url, data=form)
                    assert response.status_code in (302, 303), response.text[:500]
                    url = _absolute(self.issuer, response.headers["location"])
                    continue
                raise AssertionError(f"unexpected page {url}: {response.status_code} "
                                     f"{response.text[:500]}")
            raise AssertionError("the provider never sent the browser back")
        finally:
            if own:
                agent.close()

    def tokens(self, client: Client, user: str, *, scope: str = "openid",
               resource: str | None = None) -> dict[str, Any]:
        """The token response for ``user`` signed in to ``client`` (authorization code +
        PKCE; with ``resource``, an RFC 8707 resource indicator on both requests, so the
        access token is a JWT for that audience)."""
        verifier, challenge = pkce_pair()
        redirect = client.redirect_uris[0]
        params = {"response_type": "code", "client_id": client.client_id,
                  "redirect_uri": redirect, "scope": scope, "state": secrets.token_urlsafe(8),
                  "nonce": secrets.token_urlsafe(8), "code_challenge": challenge,
                  "code_challenge_method": "S256"}
        if resource:
            params["resource"] = resource
        back = self.authorize(user, params)
        query = parse_qs(urlsplit(back).query)
        assert "code" in query, back
        form = {"grant_type": "authorization_code", "code": query["code"][0],
                "redirect_uri": redirect, "code_verifier": verifier,
                "client_id": client.client_id}
        if resource:
            form["resource"] = resource
        auth = (client.client_id, client.client_secret) if client.client_secret else None
        response = self.http.post(self.metadata()["token_endpoint"], data=form, auth=auth)
        assert response.status_code == 200, response.text
        data: dict[str, Any] = response.json()
        return data


def _absolute(base: str, location: str) -> str:
    return base + location if location.startswith("/") else location


def provider_missing() -> str | None:
    """Why the provider cannot run here, or None."""
    if shutil.which("node") is None:
        return "node not found: the test OpenID Connect provider needs Node.js (.ci/run " \
               "installs it)"
    if not (PACKAGE / "package.json").is_file():
        return (f"oidc-provider not installed: run `npm install --prefix .ci/node "
                f"--save-exact oidc-provider@{PROVIDER_VERSION}` (.ci/run does)")
    return None


@contextmanager
def running_provider(clients: list[Client] | None = None,
                     users: dict[str, list[str]] | None = None,
                     ttl: dict[str, int] | None = None) -> Iterator[OidcProvider]:
    """A provider on a free loopback port with ``clients`` pre-registered and ``users``
    (name -> groups; default :data:`USERS`), ready (its discovery document answers);
    stopped afterwards, no process left. Skips the test when node or the package is
    absent."""
    missing = provider_missing()
    if missing:
        pytest.skip(missing)
    port = free_port()
    admin_key = secrets.token_urlsafe(16)
    config = {"port": port, "users": users or USERS, "admin_key": admin_key,
              "clients": [c.registration() for c in clients or []], "ttl": ttl or {}}
    env = dict(os.environ, OIDC_TEST_CONFIG=json.dumps(config),
               OIDC_PROVIDER_PACKAGE=str(PACKAGE))
    with tempfile.TemporaryFile() as log:  # a file, not a pipe: a full pipe stalls node
        process = subprocess.Popen(["node", str(SCRIPT)], env=env, stdout=subprocess.DEVNULL,
                                   stderr=log)
        provider = OidcProvider(f"http://127.0.0.1:{port}",
                                {c.client_id: c for c in clients or []}, admin_key, process)
        try:
            _wait_ready(provider, log)
            yield provider
        finally:
            provider.http.close()
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_ready(provider: OidcProvider, log: IO[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        if provider.process.poll() is not None:
            log.seek(0)
            err = log.read().decode(errors="replace")
            raise RuntimeError(f"the OIDC provider exited ({provider.process.returncode}): "
                               f"{err[-2000:]}")
        try:
            if provider.metadata()["issuer"] == provider.issuer:
                return
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the OIDC provider did not answer its discovery document "
                               "within 30 s")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def oidc_provider() -> Iterator[OidcProvider]:
    """A provider with the test users and no pre-registered client, for one module (register
    clients with :meth:`OidcProvider.register`)."""
    with running_provider() as provider:
        yield provider
