"""`docgraph serve` as an OAuth 2.1 resource server: access tokens of a real authorization
server on loopback (RFC 8414 metadata, a JWKS it rotates, RFC 7662 introspection; see
`oauth_issuer.py`) are checked against its published keys, every refusal the issue lists is
a 401 naming its reason, the Protected Resource Metadata tells a host where to sign in, and
the users the tokens name see exactly their groups' namespaces, through the MCP SDK's client
and `/api/v1`, as the same user does through a static token."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from docgraph import DocGraph
from docgraph.config import AuthSettings
from docgraph.governance import CallableRowAuthorizer, Governance, RoleAssignment
from docgraph.governance.entitlements import StaticEntitlements
from docgraph.serve.auth import STATIC_ISSUER, BearerTokens, hash_token
from docgraph.serve.http import create_app
from docgraph.serve.idp.claims import TokenRefused, groups_from, user_from
from docgraph.serve.idp.discovery import DiscoveryError, JwksCache, metadata_urls
from docgraph.serve.idp.introspection import BURST, PER_SECOND
from docgraph.serve.idp.resource import ResourceServer
from docgraph.serve.tools import DocgraphTools
from tests.deployment import Deployment, embedded_store
from tests.helpers import write_files
from tests.serve.oauth_issuer import TestIssuer, b64
from tests.serve.test_http_server import Running, free_port, mcp_calls
from tests.serve.test_mcp_tools import build_corpus, open_isolated_graph, payload, row_rights

#: Grants by group (the policy also declares bob a member of support-eu, so a static token
#: for bob reaches the same namespaces as bob's access token, whose claim lists the group).
GROUP_GRANTS = [RoleAssignment("", "eng", "engineering", "engineers"),
                RoleAssignment("", "support", "support", "support-eu")]
SCOPE = "docgraph"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The issuer and `docgraph serve` (embedded index, group grants, scope ``docgraph``
    required), each on a loopback port; one static token for bob."""
    root = tmp_path_factory.mktemp("oauth")
    issuer_port, port = free_port(), free_port()
    issuer = TestIssuer(f"http://127.0.0.1:{issuer_port}")
    issuer.add_key("k1")
    issuer.add_key("e1", "EC")
    issuer.add_key("r1")  # rotated out by the rotation test
    issuer.opaque["opaque-carol"] = {
        "active": True, "sub": "carol", "iss": issuer.url, "aud": "",  # audience set below
        "groups": ["support-eu"], "scope": SCOPE, "exp": 4_000_000_000}
    graph = build_corpus(open_isolated_graph(root / "index.db"), root)
    tokens = BearerTokens(graph.token_store)
    static = tokens.add("bob")
    tools = DocgraphTools(Governance(
        graph, StaticEntitlements(GROUP_GRANTS, {"support-eu": ["bob"]}),
        CallableRowAuthorizer(row_rights)))
    url = f"http://127.0.0.1:{port}"
    settings = AuthSettings(issuer=issuer.url, scopes=[SCOPE],
                            introspection_url=issuer.url + "/introspect",
                            introspection_client_id="docgraph",
                            introspection_client_secret="s3cret")
    # refetch_s=0: every unknown kid refetches here; the rate limit has its own test
    resource = ResourceServer(settings, url + "/mcp",
                              JwksCache(issuer.url, cache_s=300, refetch_s=0))
    issuer.opaque["opaque-carol"]["aud"] = resource.audience
    try:
        with Running(issuer.app(), issuer_port), \
                Running(create_app(tools, tokens, resource=resource), port):
            yield {"url": url, "issuer": issuer, "static": static, "graph": graph,
                   "audience": url + "/mcp", "resource": resource}
    finally:
        graph.close()


def mint(served: dict[str, Any], **overrides: Any) -> str:
    """A valid access token for the server (carol, group engineers, scope docgraph)."""
    issuer: TestIssuer = served["issuer"]
    return issuer.mint(served["audience"], **overrides)


def api(served: dict[str, Any], token: str | None, name: str = "index_status",
        body: dict[str, Any] | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(f"{served['url']}/api/v1/{name}", json=body or {}, headers=headers,
                      timeout=60)


def namespaces(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {n["namespace"] for n in response.json()["namespaces"]}


def metadata_url(served: dict[str, Any]) -> str:
    return served["url"] + "/.well-known/oauth-protected-resource/mcp"


# -- discovery: metadata and the 401 challenge ------------------------------------------------

def test_protected_resource_metadata_is_served_at_both_well_known_paths(served):
    expected = {"resource": served["audience"],
                "authorization_servers": [served["issuer"].url],
                "scopes_supported": [SCOPE], "bearer_methods_supported": ["header"],
                "resource_name": "docgraph"}
    for path in ("/.well-known/oauth-protected-resource/mcp",
                 "/.well-known/oauth-protected-resource"):
        response = httpx.get(served["url"] + path, timeout=30)
        assert response.status_code == 200 and response.json() == expected, path


def test_a_request_without_a_token_is_told_where_the_metadata_is(served):
    challenge = f'Bearer resource_metadata="{metadata_url(served)}"'
    mcp = httpx.post(served["url"] + "/mcp", json={}, timeout=30,
                     headers={"Accept": "application/json, text/event-stream"})
    api_v1 = api(served, None)
    for response in (mcp, api_v1):
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == challenge


def test_a_token_without_the_required_scope_gets_403_insufficient_scope(served):
    token = mint(served, scope="openid profile")
    expected = (f'Bearer error="insufficient_scope", scope="{SCOPE}", '
                f'error_description="the token lacks the scope {SCOPE}", '
                f'resource_metadata="{metadata_url(served)}"')
    for response in (api(served, token),
                     httpx.post(served["url"] + "/mcp", json={}, timeout=30,
                                headers={"Authorization": f"Bearer {token}"})):
        assert response.status_code == 403
        assert response.headers["www-authenticate"] == expected


# -- refusals ----------------------------------------------------------------------------------

def _tampered(token: str) -> str:
    """``token`` with its payload's groups changed and the signature kept."""
    header, body, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["groups"] = ["engineers", "support-eu"]
    return ".".join((header, b64(json.dumps(claims).encode()), signature))


REFUSALS: dict[str, tuple[Any, str]] = {
    "expired": (lambda s: mint(s, exp=1_000_000_000, iat=999_999_000, nbf=None),
                "the token has expired (exp)"),
    "not yet valid": (lambda s: mint(s, nbf=4_000_000_000),
                      "the token is not valid yet (nbf/iat)"),
    "wrong issuer": (lambda s: mint(s, iss="http://127.0.0.1:1/other"),
                     "the token was issued by another issuer (iss)"),
    "wrong audience": (lambda s: mint(s, aud="https://other.example/mcp"),
                       "the token was issued for another resource (aud)"),
    "alg none": (lambda s: TestIssuer.forge({"alg": "none", "kid": "k1"},
                                            s["issuer"].claims(s["audience"]), None),
                 "alg 'none' is not accepted (auth.algorithms: RS256, ES256)"),
    "HS256 with the public key": (
        lambda s: TestIssuer.forge({"alg": "HS256", "kid": "k1", "typ": "JWT"},
                                   s["issuer"].claims(s["audience"]),
                                   s["issuer"].public_pem("k1")),
        "alg 'HS256' is not accepted (auth.algorithms: RS256, ES256)"),
    "unknown kid": (lambda s: mint(s, kid="unpublished"),
                    "the token is signed with a key the issuer does not publish "
                    "(kid 'unpublished')"),
    "tampered payload": (lambda s: _tampered(mint(s)),
                         "the token's signature does not verify"),
    "missing groups claim": (lambda s: mint(s, groups=None),
                             "the token has no 'groups' claim (auth.groups_claim): configure "
                             "the identity provider to include the groups, or name the claim "
                             "that holds them"),
    "unknown opaque token": (lambda s: "opaque-nobody", "the token is not active "
                                                        "(introspection)"),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_each_bad_token_is_refused_with_its_reason(served, case):
    if case == "unknown kid":
        served["issuer"].add_key("unpublished", publish=False)
    make, reason = REFUSALS[case]
    response = api(served, make(served))
    assert response.status_code == 401, response.text
    assert response.json() == {"error": reason}
    assert response.headers["www-authenticate"] == (
        f'Bearer error="invalid_token", error_description="{reason}", '
        f'resource_metadata="{metadata_url(served)}"')


def test_the_same_tokens_pass_when_valid(served):
    """The refusals above are refusals of one defect each: the unaltered tokens pass."""
    assert namespaces(api(served, mint(served))) == {"engineering"}
    assert namespaces(api(served, mint(served, kid="e1"))) == {"engineering"}  # ES256
    assert namespaces(api(served, "opaque-carol")) == {"support"}  # introspected


def test_a_rotated_out_key_is_refused_after_the_rotation(served):
    issuer: TestIssuer = served["issuer"]
    before = mint(served, kid="r1")
    assert api(served, before).status_code == 200
    reads = issuer.jwks_reads
    issuer.add_key("r2", publish=False)
    issuer.published = [k for k in issuer.published if k != "r1"] + ["r2"]
    # the first token of the new key makes the server read the keys again, once
    assert namespaces(api(served, mint(served, kid="r2"))) == {"engineering"}
    assert issuer.jwks_reads == reads + 1
    refused = api(served, before)
    assert refused.status_code == 401
    assert refused.json() == {"error": "the token is signed with a key the issuer does not "
                                       "publish (kid 'r1')"}


def test_an_unknown_kid_refetches_the_keys_at_most_once_per_interval(served):
    issuer: TestIssuer = served["issuer"]
    cache = JwksCache(issuer.url, cache_s=300, refetch_s=60)

    async def main() -> list[bool]:
        found = [await cache.key("k1") is not None]
        for _ in range(5):
            found.append(await cache.key("made-up") is not None)
        return found

    reads = issuer.jwks_reads
    assert anyio.run(main) == [True] + [False] * 5
    assert issuer.jwks_reads == reads + 1 and cache.fetches == 1  # made-up kids: no refetch


def test_an_unreachable_issuer_is_asked_again_only_after_the_interval():
    cache = JwksCache(f"http://127.0.0.1:{free_port()}", cache_s=300, refetch_s=60)

    async def main() -> None:
        with pytest.raises(DiscoveryError, match="no metadata for issuer"):
            await cache.key("k1")
        assert await cache.key("k1") is None  # no second attempt within refetch_s

    anyio.run(main)
    assert cache.fetches == 1


# -- callers: users and groups from the claims --------------------------------------------

LOOKUP = ("lookup_knowledge", {"query": "Tern T3 reboot Nordhaven E-417 ticket"})


def test_the_mcp_client_with_an_access_token_sees_its_groups_namespaces(served):
    calls = [LOOKUP, ("index_status", {})]
    bob_jwt = mint(served, sub="bob", groups=["support-eu"])
    _, by_jwt = mcp_calls(served["url"], bob_jwt, calls)
    _, by_static = mcp_calls(served["url"], served["static"], calls)
    jwt_lookup, static_lookup = payload(by_jwt[0]), payload(by_static[0])
    assert jwt_lookup["evidence"] and jwt_lookup["evidence"] == static_lookup["evidence"]
    assert not any(e["document_id"].startswith("eng/") for e in jwt_lookup["evidence"])
    assert {n["namespace"] for n in payload(by_jwt[1])["namespaces"]} == {"support"}
    _, carol = mcp_calls(served["url"], mint(served), calls)
    carol_lookup = payload(carol[0])
    assert carol_lookup["evidence"] and all(
        e["document_id"].startswith("eng/") for e in carol_lookup["evidence"])
    assert {n["namespace"] for n in payload(carol[1])["namespaces"]} == {"engineering"}


def test_the_json_api_gives_each_user_their_groups_namespaces(served):
    assert namespaces(api(served, served["static"])) == {"support"}
    assert namespaces(api(served, mint(served, sub="bob", groups=["support-eu"]))) \
        == {"support"}
    assert namespaces(api(served, mint(served, groups=["engineers", "support-eu"]))) \
        == {"engineering", "support"}
    denied = api(served, mint(served, sub="dave", groups=[]))
    assert denied.status_code == 403 and "dave" in denied.json()["error"]


def test_audit_rows_and_traces_record_the_tokens_issuer_and_subject(served):
    graph = served["graph"]
    token = mint(served, sub="00u-carol", preferred_username="carol")
    assert api(served, token, *LOOKUP).status_code == 200
    record = graph.audit_store.recent(1)[0]
    assert (record["user_id"], record["issuer"], record["subject"]) == (
        "00u-carol", served["issuer"].url, "00u-carol")
    trace = graph.traces.get("last")
    assert trace is not None and (trace["issuer"], trace["subject"]) == (
        served["issuer"].url, "00u-carol")
    assert api(served, served["static"]).status_code == 200
    record = graph.audit_store.recent(1)[0]
    assert (record["user_id"], record["issuer"], record["subject"]) == (
        "bob", STATIC_ISSUER, "token:" + hash_token(served["static"])[:12])


# -- pieces ----------------------------------------------------------------------------------

def test_groups_come_from_a_dotted_claim_path_and_a_missing_claim_is_named():
    claims = {"realm_access": {"roles": ["support-eu", "offline_access"]},
              "https://example.com/groups": ["a"]}
    assert groups_from(claims, "realm_access.roles") == {"support-eu", "offline_access"}
    assert groups_from(claims, "https://example.com/groups") == {"a"}
    with pytest.raises(TokenRefused, match="'roles'"):
        groups_from(claims, "roles")


def test_metadata_is_looked_up_as_rfc_8414_then_openid_connect_name_it():
    assert metadata_urls("https://login.example/realms/acme") == [
        "https://login.example/.well-known/oauth-authorization-server/realms/acme",
        "https://login.example/realms/acme/.well-known/openid-configuration",
        "https://login.example/.well-known/openid-configuration/realms/acme"]


def test_symmetric_and_none_algorithms_cannot_be_configured():
    for algorithms in (["HS256"], ["none"], []):
        with pytest.raises(ValueError, match="only asymmetric"):
            AuthSettings(issuer="https://idp.example", algorithms=algorithms)


def test_serve_starts_with_an_issuer_and_no_static_token(served, tmp_path: Path):
    """`docgraph serve` as a process: with auth.issuer and no static token it starts, its
    metadata names the issuer, and an access token for its own /mcp reads what the YAML
    policy grants the token's group."""
    issuer: TestIssuer = served["issuer"]
    deployment = Deployment(
        tmp_path, embedded_store(tmp_path / "index.db"),
        "assignments:\n  - {group: engineers, role: eng, domain: ops}\n",
        f'[auth]\nissuer = "{issuer.url}"\n[refresh]\nin_serve = false\n')
    with DocGraph.open(config_file=deployment.config) as graph:
        graph.index(write_files(tmp_path / "ops", {"a.md": "# A\n\nE-417 runbook.\n"}), "ops")
    try:
        _, url = deployment.serve_process()
        prm = httpx.get(url + "/.well-known/oauth-protected-resource/mcp", timeout=10).json()
        assert prm["authorization_servers"] == [issuer.url] and prm["resource"] == url + "/mcp"
        token = issuer.mint(url + "/mcp")
        assert namespaces(httpx.post(url + "/api/v1/index_status", json={}, timeout=30,
                                     headers={"Authorization": f"Bearer {token}"})) == {"ops"}
    finally:
        deployment.stop()


# -- what a token may not stand for ---------------------------------------------------------

def test_made_up_opaque_tokens_cost_the_provider_one_question_each_at_most(served):
    """Anyone can send opaque tokens: each answer is kept, and new questions are limited, so
    a flood of made-up tokens does not become a flood at the identity provider."""
    issuer: TestIssuer = served["issuer"]
    before = issuer.introspections
    assert api(served, "made-up-1").status_code == 401
    assert api(served, "made-up-1").status_code == 401  # the refusal is kept
    assert namespaces(api(served, "opaque-carol")) == {"support"}
    assert namespaces(api(served, "opaque-carol")) == {"support"}  # the answer is kept
    assert issuer.introspections - before <= 2
    answers: list[httpx.Response] = []

    async def flood() -> None:  # 80 made-up tokens at once
        async with httpx.AsyncClient(timeout=60) as client, anyio.create_task_group() as tg:
            async def one(i: int) -> None:
                answers.append(await client.post(
                    f"{served['url']}/api/v1/index_status", json={},
                    headers={"Authorization": f"Bearer flood-{i}"}))
            for i in range(80):
                tg.start_soon(one, i)

    asked = issuer.introspections
    started = time.monotonic()
    anyio.run(flood)
    elapsed = time.monotonic() - started
    assert len(answers) == 80 and all(a.status_code == 401 for a in answers)
    # the burst, then the refill rate: never one question per request
    assert issuer.introspections - asked <= BURST + PER_SECOND * elapsed + 1
    assert any("too many unknown tokens" in a.json()["error"] for a in answers)


def test_a_refresh_token_or_an_id_token_is_not_an_access_token(served):
    issuer: TestIssuer = served["issuer"]
    issuer.opaque["opaque-refresh"] = {**issuer.opaque["opaque-carol"],
                                       "token_type": "refresh_token"}
    refused = api(served, "opaque-refresh")
    assert refused.status_code == 401
    assert refused.json()["error"] == "a 'refresh_token' is not an access token (introspection)"
    id_token = api(served, mint(served, nonce="n-0S6_WzA2Mj"))
    assert id_token.status_code == 401
    assert "id_token is not an access token" in id_token.json()["error"]


def test_an_unverified_email_address_names_nobody():
    claims = {"sub": "u1", "email": "ceo@corp.example", "groups": []}
    with pytest.raises(TokenRefused, match="not verified"):
        user_from({**claims, "email_verified": False}, "email")
    with pytest.raises(TokenRefused, match="not verified"):
        user_from(claims, "email")
    assert user_from({**claims, "email_verified": True}, "email") == "ceo@corp.example"


def test_the_console_asks_an_unreadable_provider_again_only_after_a_pause():
    """Anyone can open the console's sign-in start: while the provider's metadata cannot be
    read, it is asked once per pause, not once per visit."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from docgraph.serve.idp.console_signin import OidcConsoleClient, SignInRefused

    asked: list[str] = []

    async def down(request: Any) -> JSONResponse:
        asked.append(request.url.path)
        return JSONResponse({"error": "down"}, status_code=503)

    port = free_port()
    with Running(Starlette(routes=[Route("/{rest:path}", down)]), port):
        console = OidcConsoleClient(AuthSettings(
            issuer=f"http://127.0.0.1:{port}", console_client_id="console",
            admin_group="admins"))

        async def visits() -> None:
            for _ in range(5):
                with pytest.raises(SignInRefused, match="no metadata for issuer"):
                    await console.metadata()

        anyio.run(visits)
    assert len(asked) == len(metadata_urls(f"http://127.0.0.1:{port}"))  # one round only
