"""The whole MCP authorization flow, as a host that speaks the spec runs it: the official MCP
Python SDK client (its ``OAuthClientProvider``) connects to `docgraph serve` with no token,
gets the 401 and its resource metadata, reads the identity provider's metadata, registers
itself (RFC 7591), signs a user in with the authorization code and PKCE, redeems the code
for an access token bound to the server (RFC 8707), and calls tools; the provider is a real
OpenID Connect provider on loopback (node-oidc-provider, ``tests/idp``). Each user sees
exactly what their groups are granted, the same evidence a static token for the same user
gets, and a token signed by a key the provider rotated out is refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import anyio.to_thread
import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from docgraph.config import AuthSettings
from docgraph.governance import CallableRowAuthorizer, Governance, RoleAssignment
from docgraph.governance.entitlements import StaticEntitlements
from docgraph.serve.auth import BearerTokens
from docgraph.serve.http import create_app
from docgraph.serve.idp.discovery import JwksCache
from docgraph.serve.idp.resource import ResourceServer
from docgraph.serve.tools import DocgraphTools
from tests.idp.provider import OidcProvider, running_provider
from tests.serve.test_http_server import Running, free_port, mcp_calls
from tests.serve.test_mcp_tools import build_corpus, open_isolated_graph, payload, row_rights

#: Grants by the provider's groups (alice: engineering, bob: support); the policy also
#: declares the memberships, so a static token for the same user reaches the same.
GRANTS = [RoleAssignment("", "eng", "engineering", "engineering"),
          RoleAssignment("", "support", "support", "support")]
MEMBERS = {"engineering": ["alice"], "support": ["bob"]}
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("lookup_knowledge", {"query": "Tern T3 reboot Nordhaven E-417 ticket"}),
    ("index_status", {})]


class MemoryStorage(TokenStorage):
    """The host's token and client store, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The provider and `docgraph serve` accepting its tokens (audience: the MCP URL)."""
    root = tmp_path_factory.mktemp("oauth-flow")
    graph = build_corpus(open_isolated_graph(root / "index.db"), root)
    tokens = BearerTokens(graph.token_store)
    static = {user: tokens.add(user) for user in ("alice", "bob")}
    tools = DocgraphTools(Governance(graph, StaticEntitlements(GRANTS, MEMBERS),
                                     CallableRowAuthorizer(row_rights)))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    try:
        with running_provider() as idp:
            resource = ResourceServer(AuthSettings(issuer=idp.issuer), url + "/mcp",
                                      JwksCache(idp.issuer, refetch_s=0))
            with Running(create_app(tools, tokens, resource=resource), port):
                yield {"url": url, "idp": idp, "static": static}
    finally:
        graph.close()


def sign_in_and_call(served: dict[str, Any], user: str
                     ) -> tuple[list[Any], MemoryStorage, list[str]]:
    """The SDK client's whole flow for ``user``: (tool results, the host's stored tokens
    and client, the authorization URLs it was sent to)."""
    idp: OidcProvider = served["idp"]
    storage = MemoryStorage()
    sent: list[str] = []
    back: list[str] = []

    async def redirect(authorization_url: str) -> None:
        sent.append(authorization_url)
        params = {k: v[0] for k, v in parse_qs(urlsplit(authorization_url).query).items()}
        back.append(await anyio.to_thread.run_sync(idp.authorize, user, params))

    async def callback() -> AuthorizationCodeResult:
        query = parse_qs(urlsplit(back[-1]).query)
        return AuthorizationCodeResult(code=query["code"][0], state=query["state"][0],
                                       iss=query.get("iss", [None])[0])

    auth = OAuthClientProvider(
        served["url"] + "/mcp",
        OAuthClientMetadata(redirect_uris=["http://127.0.0.1:9/callback"],
                            client_name="docgraph test host", scope="openid mcp",
                            grant_types=["authorization_code", "refresh_token"],
                            response_types=["code"], token_endpoint_auth_method="none"),
        storage, redirect_handler=redirect, callback_handler=callback)
    results: list[Any] = []

    async def main() -> None:
        with anyio.fail_after(90):
            async with httpx2.AsyncClient(auth=auth) as http, \
                    Client(streamable_http_client(served["url"] + "/mcp",
                                                  http_client=http)) as client:
                for name, args in CALLS:
                    results.append(await client.call_tool(name, args))

    anyio.run(main)
    return results, storage, sent


def test_a_host_signs_each_user_in_through_the_provider_and_sees_their_groups(served):
    for user, namespace, other in (("alice", "engineering", "sup/"),
                                   ("bob", "support", "eng/")):
        results, storage, sent = sign_in_and_call(served, user)
        # the host registered itself and asked for a token bound to this server, with PKCE
        assert storage.client is not None and storage.client.client_id
        (asked,) = sent
        query = parse_qs(urlsplit(asked).query)
        assert query["code_challenge_method"] == ["S256"]
        assert query["resource"] == [served["url"] + "/mcp"]
        assert storage.tokens is not None and storage.tokens.access_token.count(".") == 2
        lookup, status = payload(results[0]), payload(results[1])
        assert {n["namespace"] for n in status["namespaces"]} == {namespace}
        assert lookup["evidence"] and not any(e["document_id"].startswith(other)
                                              for e in lookup["evidence"])
        # the same user through a static token gets the same evidence
        _, by_static = mcp_calls(served["url"], served["static"][user], CALLS[:1])
        assert payload(by_static[0])["evidence"] == lookup["evidence"]


def test_a_token_signed_by_a_key_the_provider_rotated_out_is_refused(served):
    _, storage, _ = sign_in_and_call(served, "alice")
    assert storage.tokens is not None
    before = storage.tokens.access_token

    def status(token: str) -> httpx.Response:
        return httpx.post(served["url"] + "/api/v1/index_status", json={},
                          headers={"Authorization": f"Bearer {token}"}, timeout=30)

    assert status(before).status_code == 200
    served["idp"].rotate_keys()
    # the first token signed with the new key makes the server read the keys again (a key
    # id it does not know)...
    _, fresh, _ = sign_in_and_call(served, "alice")
    assert fresh.tokens is not None and status(fresh.tokens.access_token).status_code == 200
    # ...after which the rotated-out key signs nothing it accepts (unexpired as it is)
    refused = status(before)
    assert refused.status_code == 401
    assert "does not publish" in refused.json()["error"]
    assert 'error="invalid_token"' in refused.headers["www-authenticate"]
