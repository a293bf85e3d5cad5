"""The test OpenID Connect provider does what the identity tests rely on: a dynamically
registered public client gets, for alice, an id_token and a JWT access token bound to the
resource asked for, both carrying her groups and signed with a key of the JWKS; PKCE is
required; a key rotation takes the old key out of the JWKS; nothing is left running."""

from __future__ import annotations

import jwt

from tests.idp import provider
from tests.idp.provider import USERS, OidcProvider, running_provider

RESOURCE = "http://127.0.0.1:8765/mcp"
idp = provider.oidc_provider  # the module's provider, under a short name


def _verify(idp: OidcProvider, token: str, audience: str) -> dict[str, object]:
    keys = jwt.PyJWKSet.from_dict(idp.jwks())
    kid = jwt.get_unverified_header(token)["kid"]
    key = next(k for k in keys.keys if k.key_id == kid)
    claims: dict[str, object] = jwt.decode(token, key.key, algorithms=["RS256"],
                                           audience=audience, issuer=idp.issuer)
    return claims


def test_tokens_carry_groups_and_the_resource_as_audience(idp: OidcProvider) -> None:
    client = idp.register(["http://127.0.0.1:9/callback"])
    tokens = idp.tokens(client, "alice", scope="openid mcp", resource=RESOURCE)
    access = _verify(idp, tokens["access_token"], RESOURCE)
    assert access["aud"] == RESOURCE and access["sub"] == "alice"
    assert access["groups"] == USERS["alice"]
    identity = _verify(idp, tokens["id_token"], client.client_id)
    assert identity["groups"] == USERS["alice"]


def test_pkce_is_required_of_confidential_clients_too(idp: OidcProvider) -> None:
    client = idp.register(["http://127.0.0.1:9/callback"], public=False)
    assert client.client_secret
    answer = idp.http.get(idp.metadata()["authorization_endpoint"], params={
        "response_type": "code", "client_id": client.client_id, "scope": "openid",
        "redirect_uri": client.redirect_uris[0], "state": "s"})
    assert answer.status_code in (302, 303)
    assert "error=invalid_request" in answer.headers["location"]
    assert "requires+PKCE" in answer.headers["location"]


def test_a_rotation_takes_the_old_key_out(idp: OidcProvider) -> None:
    client = idp.register(["http://127.0.0.1:9/callback"])
    before = idp.tokens(client, "bob", resource=RESOURCE)["access_token"]
    old_kid = jwt.get_unverified_header(before)["kid"]
    new_kid = idp.rotate_keys()
    assert [k["kid"] for k in idp.jwks()["keys"]] == [new_kid] != [old_kid]
    after = idp.tokens(client, "bob", resource=RESOURCE)["access_token"]
    assert jwt.get_unverified_header(after)["kid"] == new_kid
    assert _verify(idp, after, RESOURCE)["groups"] == USERS["bob"]


def test_the_provider_process_ends_with_its_fixture() -> None:
    with running_provider() as provider:
        process = provider.process
    assert process.poll() is not None
