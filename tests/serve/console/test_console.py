"""The web console over HTTP (no browser): sign-in, sessions, CSRF, Host/Origin, and each
page's reads and writes, on the embedded file and on PostgreSQL."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from docgraph.governance import Caller, RoleAssignment, StaticEntitlements
from docgraph.serve.console import SessionStore, is_console_admin
from docgraph.serve.console.ratelimit import SignInLimiter
from docgraph.serve.console.views import lane_share_chart, provenance_shares
from tests.backend_graphs import BACKEND_NAMES
from tests.console_helpers import ConsoleClient, served_console, tagged_database
from tests.deployment import Deployment, embedded_store
from tests.pg import pgvector_server  # noqa: F401  (fixture of the postgres backend)
from tests.serve.test_mcp_tools import POLICY_YAML, backend_for


@pytest.fixture(scope="module", params=BACKEND_NAMES)
def served(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("console")
    with backend_for(request, root) as backend, served_console(root, backend) as running:
        yield running


@pytest.fixture
def client(served: dict[str, Any]) -> Iterator[ConsoleClient]:
    c = ConsoleClient(served["url"])
    yield c
    c.close()


@pytest.fixture
def admin(served: dict[str, Any], client: ConsoleClient) -> ConsoleClient:
    signed_in = client.login(served["tokens"]["root"])
    assert signed_in.status_code == 303, signed_in.text[:500]
    assert client.follow(signed_in).status_code == 200
    return client


def audit_operations(served: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(r["user_id"], r["operation"], r["outcome"])
            for r in served["graph"].audit_store.recent(200)]


# -- who is an admin ------------------------------------------------------------------------

def test_a_console_admin_holds_the_admin_role_on_every_domain():
    rights = StaticEntitlements([RoleAssignment("root", "admin", "*"),
                                 RoleAssignment("eve", "admin", "support"),
                                 RoleAssignment("alice", "support", "*")])
    assert is_console_admin(Caller("root"), rights)
    assert is_console_admin(Caller("root", "admin"), rights)
    assert not is_console_admin(Caller("root", "support"), rights)  # pinned to another role
    assert not is_console_admin(Caller("eve"), rights)  # admin of one domain only
    assert not is_console_admin(Caller("alice"), rights)
    assert is_console_admin(Caller("alice"), rights, admin_role="support")


def test_sessions_end_when_idle(tmp_path: Path):
    from docgraph.store.sql.sessions import SqlConsoleSessionStore
    from docgraph.store.sqlite import SQLiteCatalog
    from docgraph.store.sqlite.sessions import create_session_table

    catalog = SQLiteCatalog(tmp_path / "index.db")
    try:
        create_session_table(catalog)
        store = SessionStore(SqlConsoleSessionStore(catalog), idle_seconds=0.05)
        session = store.open(Caller("root"), "d" * 64)
        again = store.get(session.id)
        assert again is not None and again.csrf == session.csrf
        assert again.caller == Caller("root")
        time.sleep(0.1)
        assert store.get(session.id) is None
        assert store.store.get(session.digest) is None  # the expired row is gone
    finally:
        catalog.close()


# -- sign-in --------------------------------------------------------------------------------

def test_pages_need_a_session(served, client):
    for path in ("/console/status", "/console/sources", "/console/traces",
                 "/console/playground", "/console"):
        response = client.get(path)
        assert response.status_code == 303
        assert response.headers["location"].endswith(("/console/login", "/console/status"))
    refused = client.post("/console/sources/add", {"urn": "docs", "domain": "x"}, csrf="x")
    assert refused.status_code == 403 and "sign in again" in refused.text


def test_a_wrong_token_and_non_admins_get_no_session(served, client):
    wrong = client.login("dg_not-a-token")
    assert wrong.status_code == 401 and "not a valid token" in wrong.text
    for name in ("alice", "bob", "root_support"):
        refused = client.login(served["tokens"][name])
        assert refused.status_code == 403, name
        assert "is not a console admin" in refused.text
        assert "docgraph_console=" not in refused.headers.get("set-cookie", "")
        assert client.get("/console/status").status_code == 303  # still signed out
    assert ("alice", "console:login", "denied") in audit_operations(served)


def test_sign_in_attempts_are_limited_per_address(served, client):
    console = served["console"]
    default = console.limiter
    console.limiter = SignInLimiter(served["graph"].signin_limit_store, client_burst=3,
                                    client_per_minute=1)
    try:
        for _ in range(3):
            assert client.login("dg_wrong-guess").status_code == 401
        before = audit_operations(served).count(("(anonymous)", "console:login", "denied"))
        for token in ("dg_wrong-guess", served["tokens"]["root"]):  # not even looked at
            limited = client.login(token)
            assert limited.status_code == 429, limited.text[:300]
            assert "too many sign-in attempts from your address" in limited.text
            assert 1 <= int(limited.headers["retry-after"]) <= 60
            assert "docgraph_console=" not in limited.headers.get("set-cookie", "")
        assert client.get("/console/status").status_code == 303  # no session was opened
        after = audit_operations(served).count(("(anonymous)", "console:login", "denied"))
        assert after == before + 1  # one record for the run of refusals, not one each
    finally:
        console.limiter = default


def test_failing_addresses_share_one_more_bucket(served):
    """Each address here is fresh (its own 127/8 source address, on this backend's database):
    its first wrong guess is not limited by the shared bucket, its next ones are."""
    console = served["console"]
    default = console.limiter
    console.limiter = SignInLimiter(served["graph"].signin_limit_store, client_burst=100,
                                    failing_burst=2, failing_per_minute=1)
    guesser = ConsoleClient(served["url"], local_address="127.0.4.1")
    admin = ConsoleClient(served["url"], local_address="127.0.4.2")
    try:
        for _ in range(3):  # not failing yet, then two tokens of the shared bucket
            assert guesser.login("dg_wrong-guess").status_code == 401
        limited = guesser.login(served["tokens"]["root"])
        assert limited.status_code == 429 and "from many addresses" in limited.text
        assert "Retry-After" in limited.headers
        assert admin.follow(admin.login(served["tokens"]["root"])).status_code == 200
    finally:
        console.limiter = default
        guesser.close()
        admin.close()


def test_the_sign_in_buckets_refill_and_keep_addresses_apart(tmp_path: Path):
    from docgraph.store.sql.signin import SqlSignInLimitStore
    from docgraph.store.sqlite import SQLiteCatalog
    from docgraph.store.sqlite.signin import create_signin_table

    catalog = SQLiteCatalog(tmp_path / "index.db")
    create_signin_table(catalog)
    now = [1000.0]
    limiter = SignInLimiter(SqlSignInLimitStore(catalog), client_burst=3, client_per_minute=6,
                            failing_burst=2, failing_per_minute=6, clock=lambda: now[0])
    try:
        for _ in range(3):  # the 2nd and 3rd follow a failure: 2 tokens of the shared bucket
            assert limiter.attempt("a") is None
        refused = limiter.attempt("a")
        assert refused is not None and refused.scope == "client" and refused.first
        assert refused.retry_after == 10  # one attempt per 10 s
        again = limiter.attempt("a")
        assert again is not None and not again.first
        assert limiter.attempt("b") is None  # another address has its own bucket
        now[0] += 10
        assert limiter.attempt("a") is None  # refilled: its own bucket and the shared one
        assert limiter.attempt("c") is None  # c has not failed yet
        failing = limiter.attempt("c")  # now it has, and the shared bucket is empty
        assert failing is not None and failing.scope == "failing" and failing.first
        assert limiter.attempt("d") is None  # d has not failed: not held back
        limiter.succeeded("d")
        assert limiter.attempt("d") is None  # its last attempt signed in
        assert limiter.attempt("d") is None  # it failed since, but d signed in today
        now[0] += 16 * 60  # a failure 16 minutes old is forgotten
        assert limiter.attempt("c") is None
        for host in ("2001:db8::1", "2001:db8::2", "2001:db8::3"):
            assert limiter.attempt(host) is None
        held = limiter.attempt("2001:db8::4")  # one /64: one bucket
        assert held is not None and held.scope == "client"
    finally:
        catalog.close()


def test_the_sign_in_form_needs_its_csrf_token(served, client):
    client.get("/console/login")
    forged = client.post("/console/login", {"token": served["tokens"]["root"]}, csrf="forged")
    assert forged.status_code == 403 and "CSRF" in forged.text
    fresh = ConsoleClient(served["url"])  # no form cookie at all
    try:
        bare = fresh.post("/console/login", {"token": served["tokens"]["root"],
                                             "csrf": "anything"}, csrf="")
        assert bare.status_code == 403
    finally:
        fresh.close()


def test_the_session_cookie_is_httponly_strict_and_secure_behind_tls(served, client):
    signed_in = client.login(served["tokens"]["root"])
    cookie = next(c for c in signed_in.headers.get_list("set-cookie")
                  if c.startswith("docgraph_console=")).lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/console" in cookie
    assert "secure" not in cookie  # plain HTTP on loopback
    behind_tls = ConsoleClient(served["url"])
    try:
        behind_tls.get("/console/login", headers={"X-Forwarded-Proto": "https"})
        # A TLS proxy on loopback (uvicorn trusts its X-Forwarded-Proto): Secure cookies.
        response = behind_tls.http.post(
            "/console/login", data={"token": served["tokens"]["root"],
                                    "csrf": behind_tls.csrf},
            headers={"X-Forwarded-Proto": "https",
                     "Cookie": f"docgraph_console_login={behind_tls.csrf}"})
        cookie = next(c for c in response.headers.get_list("set-cookie")
                      if c.startswith("docgraph_console=")).lower()
        assert "secure" in cookie and "httponly" in cookie
    finally:
        behind_tls.close()


def test_pages_carry_a_strict_content_security_policy(admin):
    page = admin.get("/console/status")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["cache-control"] == "no-store"
    css = admin.get("/console/static/console.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert admin.get("/console/static/..%2fviews.py").status_code == 404
    assert admin.get("/console/static/routes.py").status_code == 404


def test_logout_and_token_revocation_end_the_session(served, admin):
    assert admin.get("/console/status").status_code == 200
    out = admin.post("/console/logout", {})
    assert out.status_code == 303
    assert admin.get("/console/status").status_code == 303
    # A fresh admin token, revoked while its session is open.
    graph = served["graph"]
    from docgraph.serve.auth import BearerTokens, hash_token

    tokens = BearerTokens(graph.token_store)
    token = tokens.add("root")
    again = ConsoleClient(served["url"])
    try:
        assert again.login(token).status_code == 303
        assert again.get("/console/status").status_code == 200
        tokens.remove(hash_token(token)[:12])
        assert again.get("/console/status").status_code == 303
    finally:
        again.close()


def test_an_expired_session_is_refused(served, admin):
    sessions = served["console"].auth.sessions
    admin.get("/console/status")
    idle = sessions.idle_seconds
    sessions.idle_seconds = 0.05
    try:
        time.sleep(0.1)
        expired = admin.post("/console/status/refresh", {})
        assert expired.status_code == 403 and "session has ended" in expired.text
        assert admin.get("/console/status").status_code == 303
    finally:
        sessions.idle_seconds = idle


# -- CSRF and Origin ------------------------------------------------------------------------

def test_a_form_without_or_with_a_forged_csrf_token_is_refused(served, admin):
    before = audit_operations(served)
    missing = admin.post("/console/status/refresh", {}, csrf="")
    assert missing.status_code == 403 and "CSRF" in missing.text
    forged = admin.post("/console/sources/add", {"urn": str(served["root"]), "domain": "x"},
                        csrf="forged-token")
    assert forged.status_code == 403 and "CSRF" in forged.text
    assert audit_operations(served) == before  # nothing happened, nothing was recorded
    assert all(s.namespace != "x" for s in served["graph"].store.list_sources())


def test_foreign_hosts_origins_and_cross_site_forms_are_refused(served, admin):
    admin.get("/console/status")
    foreign_origin = admin.post("/console/status/refresh", {},
                                headers={"Origin": "http://evil.example"})
    assert foreign_origin.status_code == 403  # the server-wide policy, as on /mcp
    assert "Origin 'http://evil.example' is not allowed" in foreign_origin.json()["error"]
    foreign_host = admin.http.get("/console/status", headers={"Host": "evil.example"})
    assert foreign_host.status_code == 421
    cross_site = admin.post("/console/status/refresh", {},
                            headers={"Sec-Fetch-Site": "cross-site"})
    assert cross_site.status_code == 403 and "cross-site" in cross_site.text
    port = served["url"].rsplit(":", 1)[1]
    other_port = admin.post("/console/status/refresh", {},
                            headers={"Origin": f"http://localhost:{int(port) + 1}"})
    assert other_port.status_code == 403  # a loopback page of another port is not ours


# -- pages ----------------------------------------------------------------------------------

def test_status_shows_every_namespace_and_refresh_runs_in_the_background(served, admin):
    page = admin.get("/console/status")
    assert page.status_code == 200
    for text in ("engineering", "support", "Documents", "Communities", "Failed files"):
        assert text in page.text
    started = time.monotonic()
    refreshed = admin.post("/console/status/refresh", {})
    assert refreshed.status_code == 303
    assert time.monotonic() - started < 5  # the request does not wait for the build
    # The server answers while the build runs.
    assert httpx.get(served["url"] + "/healthz", timeout=5).status_code == 200
    assert served["console"].refresh_job.wait(120)
    after = admin.get("/console/status")
    assert "Console refresh" in after.text and "finished" in after.text
    assert "crawl" in after.text and "embed" in after.text  # the phases of the last build
    assert "built-in method" not in after.text
    # A failing source shows its phase outcome and message (the ticket rows have no tag).
    assert "no natural_language tag" in after.text and ">skipped<" in after.text
    assert ("root", "console:refresh", "ok") in audit_operations(served)


def test_status_shows_a_build_in_progress_with_how_far_it_got(served, admin):
    """A long build (a "Refresh now", an `index`) is a running row of the build history
    from its start: the page says so and how far it got, instead of "never built"."""
    from docgraph.lifecycle.history import NAMESPACE_WIDE, PhaseOutcome

    graph = served["graph"]
    history = graph.build_history
    with graph.leadership.elected("a test build"):
        build = history.start("support")
        history.progress(build, "indexing file:///corpus/support: 3 of 10 files, 7 chunks "
                                "written", 3)
        page = admin.get("/console/status")
        build.phases = [PhaseOutcome(NAMESPACE_WIDE, "graph", "ok", "up to date")]
        history.finish(build)
    text = html.unescape(page.text)
    assert "Building now: indexing file:///corpus/support: 3 of 10 files" in text, text
    assert ">running<" in text
    after = html.unescape(admin.get("/console/status").text)
    assert "Building now" not in after


def test_sources_add_shows_the_normalized_urn_then_refuses_duplicates(served, admin, tmp_path):
    folder = tmp_path / "handbook"
    folder.mkdir()
    (folder / "intro.md").write_text("# Handbook\n\nThe Tern T3 handbook.\n")
    entered = f"{tmp_path}/./handbook/"
    admin.get("/console/sources")
    preview = admin.post("/console/sources/preview", {"urn": entered, "domain": "handbook"})
    assert preview.status_code == 200, preview.text[:500]
    urn = f"file://{folder}"
    assert f'id="normalized-urn">{urn}<' in preview.text
    assert "Save this folder" in preview.text
    saved = admin.post("/console/sources/add", {"urn": urn, "domain": "handbook",
                                                "display_name": ""})
    listing = admin.follow(saved)
    assert "Done:" in listing.text and urn in listing.text
    duplicate = admin.post("/console/sources/preview", {"urn": str(folder),
                                                        "domain": "handbook"})
    assert duplicate.status_code == 400
    assert "is already registered in domain &#39;handbook&#39;" in duplicate.text
    unreachable = admin.post("/console/sources/preview",
                             {"urn": str(tmp_path / "absent"), "domain": "handbook"})
    assert unreachable.status_code == 400 and "unreachable" in unreachable.text
    bad = admin.post("/console/sources/preview", {"urn": "gopher://x/y", "domain": "d"})
    assert bad.status_code == 400 and "unsupported folder URN scheme" in bad.text
    renamed = admin.post("/console/sources/update", {
        "urn": urn, "domain": "handbook", "display_name": "staff-handbook",
        "public_url": "https://intranet.example/handbook/"})
    assert "is now shown as &#39;staff-handbook&#39;" in admin.follow(renamed).text
    record = next(s for s in served["graph"].store.list_sources() if s.urn == urn)
    assert record.display_name == "staff-handbook"
    assert record.public_url == "https://intranet.example/handbook/"
    bad_name = admin.post("/console/sources/update", {
        "urn": urn, "domain": "handbook", "display_name": "has space", "public_url": ""})
    assert "not changed" in admin.follow(bad_name).text
    cleared = admin.post("/console/sources/update", {
        "urn": urn, "domain": "handbook", "display_name": "staff-handbook", "public_url": ""})
    assert "without citation links" in admin.follow(cleared).text
    removed = admin.post("/console/sources/remove", {"urn": urn, "domain": "handbook"})
    after = admin.follow(removed)
    assert "removed" in after.text
    assert all(s.urn != urn for s in served["graph"].store.list_sources())
    operations = audit_operations(served)
    assert ("root", "console:add_source", "ok") in operations
    assert ("root", "console:remove_source", "ok") in operations
    assert ("root", "console:update_source", "ok") in operations


def test_a_remote_folder_is_reached_before_it_is_saved(served, admin, tmp_path, monkeypatch):
    from docgraph.sources.credentials import credential_key
    from tests.servers import PASSWORD, USER, FtpServer

    (tmp_path / "docs").mkdir()
    admin.get("/console/sources")
    with FtpServer(tmp_path) as server:
        urn = f"{server.url}/docs"
        key = credential_key(urn)
        monkeypatch.setenv(f"DOCGRAPH_SOURCE_{key}_TIMEOUT", "5")
        refused = admin.post("/console/sources/preview", {"urn": urn, "domain": "ftp"})
        assert refused.status_code == 400 and "unreachable:" in refused.text  # no login
        assert "Save this folder" not in refused.text
        monkeypatch.setenv(f"DOCGRAPH_SOURCE_{key}_USERNAME", USER)
        monkeypatch.setenv(f"DOCGRAPH_SOURCE_{key}_PASSWORD", PASSWORD)
        reached = admin.post("/console/sources/preview",
                             {"urn": f"ftp://someone:pw@127.0.0.1:{server.port}/docs/",
                              "domain": "ftp"})
        assert reached.status_code == 200, reached.text[-1500:]
        assert f'id="normalized-urn">{urn}<' in reached.text  # no credentials, no slash
        assert "reached: the folder answered" in reached.text
        assert "credentials in the URN are not stored" in reached.text
    gone = admin.post("/console/sources/preview", {"urn": urn, "domain": "ftp"})
    assert gone.status_code == 400 and "unreachable:" in gone.text


def test_tags_set_and_remove_on_a_real_table(served, admin):
    graph = served["graph"]
    graph.sources.add_sql_source("desk", tagged_database(served))
    try:
        page = admin.get("/console/tags?source=desk")
        assert page.status_code == 200, page.text[-1000:]
        assert "desk_tickets" in page.text and "(primary key id)" in page.text
        assert '<option value="desk_tickets.body">' in page.text
        nl = admin.post("/console/tags/set", {"source": "desk", "column": "desk_tickets.body",
                                              "kind": "natural_language", "domain": "support",
                                              "entity_type": ""})
        shown = admin.follow(nl).text
        assert "tagged desk:" in shown and "in domain &#39;support&#39;" in shown
        entity = admin.post("/console/tags/set", {
            "source": "desk", "column": "desk_tickets.product", "kind": "entity",
            "domain": "", "entity_type": "product"})
        assert "entity:product" in admin.follow(entity).text
        missing = admin.post("/console/tags/set", {
            "source": "desk", "column": "desk_tickets.nope", "kind": "entity", "domain": "",
            "entity_type": "product"})
        assert "not tagged" in admin.follow(missing).text
        no_domain = admin.post("/console/tags/set", {
            "source": "desk", "column": "desk_tickets.body", "kind": "natural_language",
            "domain": "", "entity_type": ""})
        assert "needs a domain" in admin.follow(no_domain).text
        sources = admin.get("/console/sources").text
        assert "sql://desk/" in sources and "no (read-only)" in sources
        if graph.settings.store.backend == "postgres":  # another schema of the database
            other = admin.get("/console/tags?source=desk&schema=helpdesk")
            assert '<option value="helpdesk" selected>' in other.text
            assert '<option value="calls.note">' in other.text
            tagged = admin.post("/console/tags/set", {
                "source": "desk", "schema": "helpdesk", "column": "calls.note",
                "kind": "entity", "domain": "", "entity_type": "topic"})
            assert tagged.headers["location"].endswith("schema=helpdesk")
            assert "tagged desk:helpdesk.calls.note" in admin.follow(tagged).text
            unknown = admin.get("/console/tags?source=desk&schema=nope")
            assert "Cannot read:" in unknown.text and "schema" in unknown.text
            graph.sources.remove_tag("desk", "calls", "note", "entity:topic",
                                     schema="helpdesk")
        tag = next(t for t in graph.sources.tags() if t.tag == "natural_language")
        removed = admin.post("/console/tags/remove", {
            "source": "desk", "schema": tag.schema, "table": tag.table, "column": tag.column,
            "tag": tag.tag, "domain": tag.domain})
        assert "removed natural_language" in admin.follow(removed).text
        assert [t.tag for t in graph.sources.tags()] == ["entity:product"]
        assert "sql://desk/" not in admin.get("/console/sources").text
        operations = audit_operations(served)
        assert ("root", "console:set_tag", "ok") in operations
        assert ("root", "console:set_tag", "error") in operations
        assert ("root", "console:remove_tag", "ok") in operations
    finally:
        graph.sources.remove_sql_source("desk")
    unreadable = admin.get("/console/tags?source=desk")
    assert "no SQL source named" in unreadable.text


def test_settings_change_the_refresh_interval_and_refuse_invalid_values(served, admin):
    import os

    graph = served["graph"]
    before = graph.settings.refresh.interval_seconds
    store_url = graph.settings.store.url
    page = admin.get("/console/settings")
    assert page.status_code == 200 and 'name="refresh.interval_seconds"' in page.text
    if graph.settings.store.backend == "postgres":
        assert 'name="store.url"' in page.text and "readonly" in page.text
    else:  # a PostgreSQL setting is not shown beside an embedded store
        assert 'name="store.url"' not in page.text and 'name="store.path"' in page.text
    fields = {key: html.unescape(value) for key, value in
              re.findall(r'name="([a-z_]+\.[a-z_]+)" value="([^"]*)"', page.text)}
    try:
        changed = admin.post("/console/settings", {**fields, "refresh.interval_seconds": "600",
                                                   "store.url": "postgresql://x:y@evil/db"})
        shown = admin.follow(changed).text
        assert "changed refresh.interval_seconds = 600.0" in shown, shown[-2000:]
        assert graph.settings.refresh.interval_seconds == 600
        assert graph.settings.store.url == store_url  # read-only here: never changed
        written = Path(os.environ["DOCGRAPH_CONFIG"]).read_text()
        assert "interval_seconds = 600" in written and "evil" not in written
        bad = admin.post("/console/settings", {**fields, "refresh.interval_seconds": "-5"})
        assert "nothing changed" in admin.follow(bad).text
        assert graph.settings.refresh.interval_seconds == 600
        operations = audit_operations(served)
        assert ("root", "console:settings", "ok") in operations
        assert ("root", "console:settings", "error") in operations
    finally:
        graph.settings.refresh.interval_seconds = before


def test_settings_set_and_clear_the_chat_model(served, admin, monkeypatch):
    import os
    import tomllib

    from docgraph.llm import OpenAIChatModel

    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-shown-42")
    graph = served["graph"]
    config = Path(os.environ["DOCGRAPH_CONFIG"])
    page = admin.get("/console/settings")
    assert 'id="chat-form"' in page.text and "No chat model" in page.text
    assert 'name="llm.' not in page.text  # not in the generic form
    try:
        for base_url, model, problem in (
                ("http://127.0.0.1:9/v1", "", "give both the endpoint and the model name"),
                ("ftp://127.0.0.1/v1", "local-7b", "expected an http:// or https:// URL"),
                ("http://me:pw@127.0.0.1:9/v1", "local-7b", "must not carry credentials")):
            refused = admin.post("/console/settings/chat", {"chat_base_url": base_url,
                                                            "chat_model": model})
            shown = html.unescape(admin.follow(refused).text)
            assert "chat model not changed" in shown and problem in shown, shown[-1500:]
            assert graph.chat_model is None and graph.settings.llm.model is None
        saved = admin.post("/console/settings/chat", {
            "chat_base_url": "http://127.0.0.1:9/v1", "chat_model": "local-7b",
            "llm.api_key_env": "PGPASSWORD", "action": "save"})  # a forged extra field
        shown = html.unescape(admin.follow(saved).text)
        assert "set chat model 'local-7b' at http://127.0.0.1:9/v1" in shown, shown[-1500:]
        assert 'value="local-7b"' in shown and "OPENAI_API_KEY" in shown
        assert '<span id="chat-key">set</span>' in shown
        assert "sk-never-shown-42" not in shown
        model = graph.chat_model
        assert isinstance(model, OpenAIChatModel)
        assert (model.base_url, model.name) == ("http://127.0.0.1:9/v1", "local-7b")
        assert graph.settings.llm.api_key_env == "OPENAI_API_KEY"  # never set from here
        text = config.read_text()
        assert tomllib.loads(text)["llm"] == {"base_url": "http://127.0.0.1:9/v1",
                                              "model": "local-7b"}
        assert "sk-never-shown-42" not in text and "PGPASSWORD" not in text
        cleared = admin.post("/console/settings/chat", {"chat_base_url": "http://127.0.0.1:9/v1",
                                                        "chat_model": "local-7b",
                                                        "action": "clear"})
        shown = html.unescape(admin.follow(cleared).text)
        assert "set no chat model" in shown and "No chat model" in shown
        assert graph.chat_model is None
        assert tomllib.loads(config.read_text()).get("llm", {}) == {}
        operations = audit_operations(served)
        assert ("root", "console:chat_model", "ok") in operations
        assert ("root", "console:chat_model", "error") in operations
    finally:
        graph.admin.update({"llm.base_url": None, "llm.model": None}, is_admin=True)


def test_changing_the_embedding_model_warns_then_reindexes_in_the_background(tmp_path):
    """On its own served index (the model change re-embeds everything), embedded."""

    class Embedded:  # the [store] settings of an embedded index: the defaults
        def store_settings(self) -> dict[str, Any]:
            return {}

    with served_console(tmp_path, Embedded()) as running:
        graph = running["graph"]
        client = ConsoleClient(running["url"])
        try:
            client.follow(client.login(running["tokens"]["root"]))
            client.get("/console/settings")
            unknown = client.post("/console/settings/model", {"model": "no-such-model"})
            assert unknown.status_code == 400 and "unknown embed.model" in unknown.text
            same = client.post("/console/settings/model",
                               {"model": graph.settings.embed.model})
            assert "already uses" in same.text
            chunks = sum(ns.chunks for ns in graph.store.stats())
            folders = {ns.namespace: ns.chunks for ns in graph.store.stats()}
            preview = client.post("/console/settings/model", {"model": "hashing"})
            assert preview.status_code == 200
            assert f"all {chunks} chunks" in preview.text and 'id="model-go"' in preview.text
            unconfirmed = client.post("/console/settings/model/confirm", {"model": "hashing"})
            assert "needs its confirmation" in client.follow(unconfirmed).text
            assert graph.settings.embed.model != "hashing"
            started = time.monotonic()
            confirmed = client.post("/console/settings/model/confirm",
                                    {"model": "hashing", "confirm": "yes"})
            assert time.monotonic() - started < 5  # the re-index runs in the background
            assert "re-indexing with" in client.follow(confirmed).text
            assert running["console"].model_change.wait(120)
            page = client.get("/console/settings").text
            assert "now embedded with &#39;hashing&#39;" in page, page[-3000:]
            assert graph.settings.embed.model == "hashing"
            # Every folder is re-embedded (the untagged ticket rows have no source to come
            # back from: they are gone, as after any full re-index).
            after = {ns.namespace: ns.chunks for ns in graph.store.stats()}
            assert after["engineering"] == folders["engineering"] > 0
            assert ("root", "console:embedding_model", "ok") in [
                (r["user_id"], r["operation"], r["outcome"])
                for r in graph.audit_store.recent(50)]
        finally:
            client.close()


def test_sql_sources_are_added_and_listed_without_passwords(served, admin):
    admin.get("/console/sources")
    added = admin.post("/console/sources/add-sql",
                       {"name": "crm_console", "url": "postgresql://app:hunter2@db.example/crm"})
    shown = admin.follow(added).text
    assert "added SQL source" in shown and "DOCGRAPH_SOURCE_CRM_CONSOLE_PASSWORD" in shown
    bad = admin.post("/console/sources/add-sql", {"name": "1 bad", "url": "sqlite://"})
    assert "not added" in admin.follow(bad).text
    try:
        page = admin.get("/console/sources")
        assert "crm_console" in page.text and "db.example" in page.text
        assert "hunter2" not in page.text
        assert "DOCGRAPH_SOURCE_CRM_CONSOLE_" in page.text
        assert all("hunter2" not in str(r) for r in served["graph"].audit_store.recent(50))
        removed = admin.post("/console/sources/remove-sql", {"name": "crm_console"})
        assert "removed SQL source" in admin.follow(removed).text
    finally:
        if any(s.name == "crm_console" for s in served["graph"].sources.sql_sources()):
            served["graph"].sources.remove_sql_source("crm_console")
    assert ("root", "console:add_sql_source", "ok") in audit_operations(served)
    assert ("root", "console:remove_sql_source", "ok") in audit_operations(served)


def test_the_playground_runs_as_the_chosen_caller(served, admin):
    admin.get("/console/playground")
    as_alice = admin.post("/console/playground", {
        "tool": "lookup_knowledge", "user": "alice", "role": "", "query": "Tern T3 E-417",
        "k": "10", "mode": "vector_first"})
    assert as_alice.status_code == 200, as_alice.text[:800]
    assert 'id="namespaces">engineering, support<' in as_alice.text
    assert "Quality score" in as_alice.text and "Relevance level" in as_alice.text
    as_bob = admin.post("/console/playground", {
        "tool": "search_documents", "user": "bob", "role": "support",
        "query": "Tern T3 E-417", "k": "10", "mode": "vector_first"})
    assert 'id="namespaces">support<' in as_bob.text
    assert 'class="ns">engineering<' not in as_bob.text
    topics = admin.post("/console/playground", {
        "tool": "explore_topics", "user": "bob", "role": "", "query": "", "k": "3",
        "mode": "vector_first"})
    assert topics.status_code == 200 and "community report(s)" in topics.text
    assert 'id="namespaces">support<' in topics.text
    assert 'class="ns">engineering<' not in topics.text
    nobody = admin.post("/console/playground", {
        "tool": "lookup_knowledge", "user": "mallory", "role": "", "query": "E-417",
        "k": "10", "mode": "vector_first"})
    assert "access denied" in nobody.text
    operations = audit_operations(served)
    assert ("bob", "retrieve:vector_first", "ok") in operations
    assert ("root", "console:playground", "ok") in operations
    assert ("mallory", "lookup_knowledge", "denied") in operations


def test_traces_list_requests_and_open_a_trace(served, admin):
    admin.get("/console/playground")
    ran = admin.post("/console/playground", {
        "tool": "search_documents", "user": "alice", "role": "",
        "query": "Nordhaven Logistics E-417", "k": "5", "mode": "vector_first"})
    assert "Open the trace of this search" in ran.text
    page = admin.get("/console/traces")
    assert page.status_code == 200 and "retrieve:vector_first" in page.text
    trace_id = served["graph"].traces.recent(1)[0]["id"]
    assert f"/console/traces/{trace_id}" in page.text
    trace = admin.get(f"/console/traces/{trace_id}")
    assert trace.status_code == 200
    for text in ("Candidates per lane", "Timings", "Query entities", "Provenance", "seed"):
        assert text in trace.text
    assert admin.get("/console/traces/nope").status_code == 404
    assert 'id="lane-chart"' in page.text and 'id="lane-shares"' in page.text


def test_the_lane_share_chart_stacks_each_trace_to_its_full_height():
    chart = lane_share_chart([
        {"id": "b", "final_provenance": {"1": "seed", "2": "entity_adjacent"}},
        {"id": "empty", "final_provenance": {}},
        {"id": "a", "final_provenance": {"1": "seed", "2": "seed", "3": "weird_lane"}},
    ])
    assert chart is not None
    assert [b["id"] for b in chart["bars"]] == ["a", "b"]  # oldest left, empty left out
    assert [item["lane"] for item in chart["legend"]] == ["seed", "entity_adjacent",
                                                          "weird_lane"]
    for bar in chart["bars"]:
        assert abs(sum(s["height"] for s in bar["segments"]) - chart["height"]) < 0.5
        assert bar["segments"][0]["lane"] == "seed"  # stacked in lane order from the bottom
    assert lane_share_chart([{"id": "x", "final_provenance": {}}]) is None


def test_the_graph_page_finds_entities_neighbours_and_community_reports(served, admin):
    page = admin.get("/console/graph?q=Tern")
    assert page.status_code == 200 and 'id="entities"' in page.text
    assert "Tern T3" in page.text
    neighbours = admin.get("/console/graph?q=Tern&entity=Tern%20T3")
    assert 'id="neighbors"' in neighbours.text and "Weight (NPMI)" in neighbours.text
    listed = re.findall(r'href="/console/graph/communities/(\d+)"', neighbours.text)
    assert listed, "the corpus has communities"
    community = admin.get(f"/console/graph/communities/{listed[0]}")
    assert community.status_code == 200 and 'id="members"' in community.text
    assert 'id="report"' in community.text
    assert admin.get("/console/graph/communities/999999").status_code == 404
    assert admin.get("/console/graph/communities/x").status_code == 404


def test_page_views_write_no_audit_records_but_changes_do(served, admin):
    """Rendering pages (the admin's governed reads behind Status and Graph among them)
    adds no audit row, so agents' requests are not buried; a change still adds one."""
    store = served["graph"].audit_store
    graph = admin.get("/console/graph?q=Tern&entity=Tern%20T3")
    listed = re.findall(r'href="/console/graph/communities/(\d+)"', graph.text)
    assert listed
    before = store.recent(500)
    for path in ("/console/status", "/console/sources", "/console/graph",
                 "/console/graph?q=Tern", "/console/graph?q=Tern&entity=Tern%20T3",
                 f"/console/graph/communities/{listed[0]}", "/console/tags",
                 "/console/settings", "/console/traces", "/console/playground"):
        page = admin.get(path)
        assert page.status_code == 200, (path, page.text[:300])
    assert store.recent(500) == before
    done = admin.post("/console/settings/chat", {"chat_base_url": "", "chat_model": "",
                                                 "action": "clear"})
    assert done.status_code == 303
    assert admin.post("/console/status/refresh", {}).status_code == 303
    assert served["console"].refresh_job.wait(120)
    added = store.recent(500)[:len(store.recent(500)) - len(before)]
    assert [(r["user_id"], r["operation"]) for r in added] == [("root", "console:refresh")]


def test_provenance_shares_add_up():
    shares = provenance_shares({"a": "seed", "b": "seed", "c": "entity_adjacent"})
    assert shares == [{"lane": "seed", "count": 2, "percent": 66.7},
                      {"lane": "entity_adjacent", "count": 1, "percent": 33.3}]
    assert provenance_shares({}) == []


# -- the real command -----------------------------------------------------------------------

def test_docgraph_serve_serves_the_console_and_refreshes_from_it(tmp_path):
    """``docgraph serve`` as a process (settings file, policy, tokens from the CLI): a
    non-admin is refused, an admin adds a folder and "refresh now" wakes the server's own
    refresh loop, which indexes it."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "tern.md").write_text("# Tern T3\n\nFirmware 5.3.1 fixes error E-417.\n")
    made = Deployment(tmp_path, embedded_store(tmp_path / "index.db"), POLICY_YAML,
                      "[refresh]\ninterval_seconds = 3600\n")
    try:
        root_token = made.run("token", "add", "root").strip()
        alice_token = made.run("token", "add", "alice").strip()
        url = made.serve()
        client = ConsoleClient(url)
        assert client.login(alice_token).status_code == 403
        assert client.follow(client.login(root_token)).status_code == 200
        client.get("/console/sources")
        preview = client.post("/console/sources/preview", {"urn": str(docs), "domain": "demo"})
        assert f'id="normalized-urn">file://{docs}<' in preview.text
        added = client.post("/console/sources/add", {"urn": f"file://{docs}",
                                                     "domain": "demo", "display_name": ""})
        assert "Done:" in client.follow(added).text
        refreshed = client.follow(client.post("/console/status/refresh", {}))
        assert "the refresh loop of this server starts a round now" in refreshed.text
        deadline = time.monotonic() + 120
        while True:
            status = httpx.get(url + "/api/v1/index_status", timeout=30,
                               headers={"Authorization": f"Bearer {root_token}"}).json()
            demo = [n for n in status["namespaces"] if n["namespace"] == "demo"]
            if demo and demo[0]["documents"] == 1:
                break
            assert time.monotonic() < deadline, status
            time.sleep(0.5)
        client.close()
    finally:
        made.stop()
