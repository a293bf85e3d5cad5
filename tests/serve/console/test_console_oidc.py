"""The console signs people in through the organisation's identity provider: the real test
provider (``tests/idp``, node-oidc-provider) and the real ``docgraph serve`` app under
uvicorn. alice (group ``docgraph-admins`` = ``[auth] admin_group``) lands on the console;
bob (group ``support``) gets a 403 page and no session; a forged or replayed ``state``, an
id_token with another ``nonce`` and a code issued to another client are refused. The
flows are driven with httpx against the provider's login form, and once each in headless
Chromium (skipped without it).

The console runs on ``localhost`` and the provider on ``127.0.0.1``: two sites, so the
browser treats the provider's redirect back as cross-site, as it would in production.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import pytest

from docgraph.config import AuthSettings
from docgraph.governance import (
    CallableRowAuthorizer,
    Governance,
    RoleAssignment,
    StaticEntitlements,
)
from docgraph.serve.auth import BearerTokens
from docgraph.serve.console import Console, ConsoleAuth, SessionStore
from docgraph.serve.console.ratelimit import SignInLimiter
from docgraph.serve.console.sessions import SESSION_COOKIE, IdpAdmins, idp_admins
from docgraph.serve.http import create_app
from docgraph.serve.idp.console_signin import OidcConsoleClient, SignInRefused
from docgraph.serve.tools import DocgraphTools
from tests.console_helpers import ConsoleClient
from tests.idp.provider import ADMIN_GROUP, Client, OidcProvider, running_provider
from tests.serve.test_http_server import Running, free_port
from tests.serve.test_mcp_tools import ASSIGNMENTS, build_corpus, open_isolated_graph, row_rights

CONSOLE_ID = "docgraph-console"
OTHER_ID = "another-app"
PENDING = "docgraph_console_oidc"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The provider (console client and another client pre-registered) and the console
    configured through ``[auth]`` to sign in with it; the policy grants the admin group the
    admin role on every domain."""
    root = tmp_path_factory.mktemp("console-oidc")
    port = free_port()
    callbacks = [f"http://{host}:{port}/console/oidc/callback"
                 for host in ("localhost", "127.0.0.1")]
    clients = [Client(CONSOLE_ID, "console-secret", callbacks),
               Client(OTHER_ID, "other-secret", callbacks)]
    with running_provider(clients) as idp:
        graph = build_corpus(open_isolated_graph(root / "index.db"), root)
        graph.settings.auth = AuthSettings(issuer=idp.issuer, console_client_id=CONSOLE_ID,
                                           console_client_secret="console-secret",
                                           admin_group=ADMIN_GROUP)
        tokens = BearerTokens(graph.token_store)
        tools = DocgraphTools(Governance(graph, StaticEntitlements(
            [*ASSIGNMENTS, RoleAssignment("", "admin", "*", ADMIN_GROUP)]),
            CallableRowAuthorizer(row_rights)))
        auth = ConsoleAuth(tokens, tools.governance.entitlements,
                           SessionStore(graph.console_session_store),
                           idp=idp_admins(graph.settings.auth))
        # many sign-ins from one address: the limit is raised (it is tested elsewhere)
        console = Console(tools, auth, SignInLimiter(
            graph.signin_limit_store, client_burst=10_000, client_per_minute=1_000_000,
            failing_burst=10_000, failing_per_minute=1_000_000))
        try:
            with Running(create_app(tools, tokens, console=console), port=port) as running:
                yield {"url": running.url, "idp": idp, "graph": graph, "auth": auth,
                       "browser_url": f"http://localhost:{port}"}
        finally:
            graph.close()


@pytest.fixture
def client(served: dict[str, Any]) -> Iterator[ConsoleClient]:
    browser = ConsoleClient(served["url"])
    yield browser
    browser.close()


def _begin(client: ConsoleClient) -> dict[str, str]:
    """Start a sign-in: the authorization request's parameters the console sends."""
    started = client.get("/console/oidc/start")
    assert started.status_code == 303, started.text[:300]
    assert PENDING in client.http.cookies
    return {k: v[0] for k, v in parse_qs(urlsplit(started.headers["location"]).query).items()}


def _back(client: ConsoleClient, url: str) -> httpx.Response:
    """The browser following the provider's redirect back to the console."""
    parts = urlsplit(url)
    return client.get(f"{parts.path}?{parts.query}")


def _audit(served: dict[str, Any]) -> list[dict[str, Any]]:
    """The console's sign-in records, newest first."""
    return [r for r in served["graph"].audit_store.recent(200)
            if r["operation"] == "console:login"]


def test_the_sign_in_page_offers_the_provider(client: ConsoleClient,
                                              served: dict[str, Any]) -> None:
    page = client.get("/console/login")
    assert f"Sign in with {served['idp'].issuer}" in page.text
    assert 'name="token"' in page.text  # token sign-in stays for local use


def test_serve_offers_the_provider_when_auth_configures_it(served: dict[str, Any]) -> None:
    """``create_app``'s own console (what ``docgraph serve`` runs) reads ``[auth]``."""
    graph = served["graph"]
    tools = DocgraphTools(Governance(graph, StaticEntitlements(ASSIGNMENTS),
                                     CallableRowAuthorizer(row_rights)))
    with Running(create_app(tools, BearerTokens(graph.token_store))) as running:
        login = httpx.get(running.url + "/console/login")
        started = httpx.get(running.url + "/console/oidc/start")
    assert f"Sign in with {served['idp'].issuer}" in login.text
    assert started.status_code == 303
    assert started.headers["location"].startswith(served["idp"].issuer + "/auth?")


def test_an_admin_signs_in_through_the_provider(client: ConsoleClient,
                                                served: dict[str, Any]) -> None:
    idp: OidcProvider = served["idp"]
    params = _begin(client)
    assert params["code_challenge_method"] == "S256" and params["client_id"] == CONSOLE_ID
    back = _back(client, idp.authorize("alice", params))
    assert back.status_code == 200, back.text[:500]
    assert 'http-equiv="refresh"' in back.text and "/console/status" in back.text
    assert PENDING not in client.http.cookies  # spent
    status = client.get("/console/status")
    assert status.status_code == 200
    assert "Signed in as <strong>alice</strong>" in status.text
    assert "engineering" in status.text and "support" in status.text  # the group's grant
    record = _audit(served)[0]
    assert (record["user_id"], record["outcome"]) == ("alice", "ok")
    assert idp.issuer in record["reason"]


def test_a_user_outside_the_admin_group_gets_nothing(client: ConsoleClient,
                                                     served: dict[str, Any]) -> None:
    back = _back(client, served["idp"].authorize("bob", _begin(client)))
    assert back.status_code == 403
    assert "bob is not a console admin" in back.text and ADMIN_GROUP in back.text
    assert SESSION_COOKIE not in client.http.cookies
    assert client.get("/console/status").status_code == 303  # to the sign-in page
    record = _audit(served)[0]
    assert (record["user_id"], record["outcome"]) == ("bob", "denied")


def test_a_forged_state_is_refused(client: ConsoleClient, served: dict[str, Any]) -> None:
    params = _begin(client)
    back = _back(client, served["idp"].authorize("alice", dict(params, state="forged")))
    assert back.status_code == 403 and "state" in back.text
    assert SESSION_COOKIE not in client.http.cookies


def test_a_replayed_answer_is_refused(client: ConsoleClient, served: dict[str, Any]) -> None:
    params = _begin(client)
    pending = client.http.cookies[PENDING]
    answer = served["idp"].authorize("alice", params)
    assert _back(client, answer).status_code == 200
    # the same answer again (a reload, a replay): its sign-in was spent with the cookie
    replayed = _back(client, answer)
    assert replayed.status_code == 400 and "already used" in replayed.text
    # even with the pending cookie kept by whoever replays it: the code is spent
    client.http.cookies.set(PENDING, pending, domain="127.0.0.1", path="/console/oidc")
    again = _back(client, answer)
    assert again.status_code == 403 and "refused the code" in again.text
    assert f"{SESSION_COOKIE}=" not in again.headers.get("set-cookie", "")


def test_an_id_token_for_another_nonce_is_refused(client: ConsoleClient,
                                                  served: dict[str, Any]) -> None:
    params = _begin(client)
    back = _back(client, served["idp"].authorize("alice", dict(params, nonce="another")))
    assert back.status_code == 403 and "nonce" in back.text
    assert SESSION_COOKIE not in client.http.cookies


def test_a_code_issued_to_another_client_is_refused(client: ConsoleClient,
                                                    served: dict[str, Any]) -> None:
    params = _begin(client)
    back = _back(client, served["idp"].authorize("alice", dict(params, client_id=OTHER_ID)))
    assert back.status_code == 403 and "refused the code" in back.text
    assert SESSION_COOKIE not in client.http.cookies


def test_an_id_token_issued_to_another_client_is_refused(served: dict[str, Any]) -> None:
    idp: OidcProvider = served["idp"]
    other = idp.tokens(idp.clients[OTHER_ID], "alice")["id_token"]
    client = OidcConsoleClient(served["graph"].settings.auth)
    with pytest.raises(SignInRefused, match=r"(?i)audience"):
        anyio.run(client.verify_id_token, other, "any nonce")


def test_a_session_ends_when_the_admin_group_changes(client: ConsoleClient,
                                                     served: dict[str, Any]) -> None:
    assert _back(client, served["idp"].authorize("alice", _begin(client))).status_code == 200
    cookie = client.http.cookies[SESSION_COOKIE]
    auth: ConsoleAuth = served["auth"]
    assert auth.current(cookie) is not None
    moved = ConsoleAuth(auth.tokens, auth.entitlements, auth.sessions,
                        idp=IdpAdmins(served["idp"].issuer, "other-admins"))
    assert moved.current(cookie) is None
    assert auth.current(cookie) is None  # ended for every process


def test_the_pending_cookie_holds_the_pkce_verifier_of_the_challenge_sent(
        client: ConsoleClient) -> None:
    import hashlib

    params = _begin(client)
    pending = json.loads(base64.urlsafe_b64decode(client.http.cookies[PENDING]))
    digest = hashlib.sha256(pending["verifier"].encode()).digest()
    assert base64.urlsafe_b64encode(digest).rstrip(b"=").decode() == params["code_challenge"]
    assert (pending["state"], pending["nonce"]) == (params["state"], params["nonce"])


# -- in a browser ---------------------------------------------------------------------------

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def browser(served: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Any]:
    from tests.serve.console.test_console_browser import CHROMIUM, _browser_missing

    missing = _browser_missing()
    if missing:
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-oidc")), executable_path=CHROMIUM,
            headless=True, args=CHROMIUM_ARGS)
        context.set_default_timeout(30_000)
        try:
            yield context
        finally:
            context.close()


def _browser_sign_in(browser: Any, served: dict[str, Any], user: str,
                     shot: str) -> Any:
    """Open the console, choose the provider, sign in as ``user`` on its form."""
    browser.clear_cookies()
    page = browser.new_page()
    page.goto(served["browser_url"] + "/console/status")
    assert page.url.endswith("/console/login")
    with page.expect_navigation():
        page.click("#idp-sign-in")
    assert page.url.startswith(served["idp"].issuer + "/interaction/")
    page.fill("input[name=login]", user)
    page.fill("input[name=password]", "any password")
    page.click("button[type=submit]")
    page.wait_for_load_state()
    artifacts = os.environ.get("DOCGRAPH_TEST_ARTIFACTS")
    if artifacts:
        Path(artifacts, "console").mkdir(parents=True, exist_ok=True)
    return page, (Path(artifacts, "console", shot) if artifacts else None)


def test_an_admin_lands_on_the_console_in_a_browser(browser: Any,
                                                    served: dict[str, Any]) -> None:
    page, shot = _browser_sign_in(browser, served, "alice", "oidc_admin.png")
    page.wait_for_url(served["browser_url"] + "/console/status")
    assert "Signed in as alice" in page.inner_text("header")
    if shot:
        page.screenshot(path=str(shot), full_page=True)
    page.close()


def test_a_non_admin_gets_nothing_in_a_browser(browser: Any, served: dict[str, Any]) -> None:
    page, shot = _browser_sign_in(browser, served, "bob", "oidc_non_admin.png")
    page.wait_for_url(f"{served['browser_url']}/console/oidc/callback*")
    assert "bob is not a console admin" in page.inner_text("main")
    if shot:
        page.screenshot(path=str(shot), full_page=True)
    assert not [c for c in browser.cookies() if c["name"] == SESSION_COOKIE]
    page.goto(served["browser_url"] + "/console/status")
    assert page.url.endswith("/console/login")
    page.close()


def test_a_planted_pending_cookie_cannot_send_the_admin_off_site(
        client: ConsoleClient, served: dict[str, Any]) -> None:
    """The pending cookie comes back from the browser: someone able to plant cookies for the
    console's host could put any target in it, so the callback checks it again."""
    idp: OidcProvider = served["idp"]
    params = _begin(client)
    pending = json.loads(base64.urlsafe_b64decode(client.http.cookies[PENDING]))
    pending["next"] = "https://evil.example/phish"
    client.http.cookies.set(PENDING, base64.urlsafe_b64encode(
        json.dumps(pending).encode()).decode(), domain="127.0.0.1", path="/console/oidc")
    back = _back(client, idp.authorize("alice", params))
    assert back.status_code == 200, back.text[:500]
    assert "evil.example" not in back.text and "/console/status" in back.text
