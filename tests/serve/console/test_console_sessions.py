"""Console sessions shared between server processes: two servers (each with its own
:class:`~docgraph.DocGraph`, connections and console) over one database, on the embedded
file and on PostgreSQL. A session begun in one is accepted by the other, survives a restart,
and a logout or a revoked token in one ends it in both. Only the sha256 of a session id is
stored."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from docgraph import DocGraph
from docgraph.governance import Caller
from docgraph.serve.auth import BearerTokens, hash_token
from docgraph.serve.console import Console, ConsoleAuth, SessionStore
from docgraph.serve.http import create_app
from docgraph.store.sessions import StoredSession
from tests.backend_graphs import BACKEND_NAMES
from tests.console_helpers import ConsoleClient
from tests.pg import pgvector_server  # noqa: F401  (fixture of the postgres backend)
from tests.serve.test_http_server import Running
from tests.serve.test_mcp_tools import backend_for, build_corpus, make_tools, open_isolated_graph
from tests.store_backends import Backend


@contextmanager
def server(root: Path, backend: Backend) -> Iterator[dict[str, Any]]:
    """One ``docgraph serve`` process's app, on a DocGraph of its own over ``backend``."""
    graph = open_isolated_graph(root / "index.db", backend.store_settings())
    tokens = BearerTokens(graph.token_store)
    tools = make_tools(graph)
    sessions = SessionStore(graph.console_session_store)
    console = Console(tools, ConsoleAuth(tokens, tools.governance.entitlements, sessions))
    try:
        with Running(create_app(tools, tokens, console=console)) as running:
            yield {"url": running.url, "graph": graph, "tokens": tokens, "sessions": sessions}
    finally:
        graph.close()


@pytest.fixture(scope="module", params=BACKEND_NAMES)
def database(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One indexed database (per backend) and an admin token in it."""
    root = tmp_path_factory.mktemp("console-sessions")
    with backend_for(request, root) as backend:
        graph = build_corpus(open_isolated_graph(root / "index.db", backend.store_settings()),
                             root, rows=False)
        token = BearerTokens(graph.token_store).add("root")
        graph.close()
        yield {"root": root, "backend": backend, "token": token}


@pytest.fixture
def two(database: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Two servers over the one database."""
    with server(database["root"], database["backend"]) as a, \
            server(database["root"], database["backend"]) as b:
        yield a, b


def cookie(client: ConsoleClient) -> str:
    value = client.http.cookies.get("docgraph_console", path="/console")
    assert value
    return str(value)


def moved_to(client: ConsoleClient, url: str) -> ConsoleClient:
    """A client for the server at ``url`` with ``client``'s cookies (a load balancer sending
    the same browser to another process)."""
    other = ConsoleClient(url)
    other.http.cookies = client.http.cookies
    return other


def test_a_session_begun_in_one_server_is_accepted_by_another(database, two):
    a, b = two
    browser = ConsoleClient(a["url"])
    try:
        assert browser.follow(browser.login(database["token"])).status_code == 200
        on_b = moved_to(browser, b["url"])
        page = on_b.get("/console/status")
        assert page.status_code == 200 and "Sign out" in page.text
        # A form of server b's page posts to server a: the CSRF token is the session's.
        browser.csrf = on_b.csrf
        removed = browser.post("/console/sources/remove-sql", {"name": "no-such-source"})
        assert removed.status_code == 303
        # The message of a's redirect shows on b's next page, once.
        shown = on_b.get("/console/sources")
        assert shown.status_code == 200 and "not removed" in shown.text
        assert "not removed" not in browser.get("/console/sources").text
        on_b.close()
    finally:
        browser.close()


def test_a_logout_in_one_server_is_a_logout_in_every_one(database, two):
    a, b = two
    browser = ConsoleClient(a["url"])
    try:
        browser.follow(browser.login(database["token"]))
        on_b = moved_to(browser, b["url"])
        assert on_b.get("/console/status").status_code == 200
        browser.get("/console/status")
        out = ConsoleClient(b["url"])  # signs out on b with the same cookie
        out.http.cookies.set("docgraph_console", cookie(browser), path="/console")
        out.get("/console/status")
        assert out.post("/console/logout", {}).status_code == 303
        out.close()
        assert browser.get("/console/status").status_code == 303  # refused on a as well
        on_b.close()
    finally:
        browser.close()


def test_a_token_revoked_through_one_server_ends_its_sessions_in_every_one(database, two):
    a, b = two
    token = a["tokens"].add("root")
    browser = ConsoleClient(a["url"])
    try:
        browser.follow(browser.login(token))
        on_b = moved_to(browser, b["url"])
        assert on_b.get("/console/status").status_code == 200
        b["tokens"].remove(hash_token(token)[:12])
        assert browser.get("/console/status").status_code == 303
        on_b.close()
    finally:
        browser.close()


def test_a_session_survives_a_server_restart(database):
    with server(database["root"], database["backend"]) as first:
        browser = ConsoleClient(first["url"])
        browser.follow(browser.login(database["token"]))
        jar = browser.http.cookies
        browser.close()
    with server(database["root"], database["backend"]) as restarted:
        again = ConsoleClient(restarted["url"])
        again.http.cookies = jar
        try:
            assert again.get("/console/status").status_code == 200
        finally:
            again.close()


def test_only_the_digest_of_a_session_id_is_stored(database, two):
    a, _ = two
    browser = ConsoleClient(a["url"])
    try:
        browser.follow(browser.login(database["token"]))
        session_id = cookie(browser)
        store = a["graph"].console_session_store
        digest = hashlib.sha256(session_id.encode()).hexdigest()
        row = store.get(digest)
        assert row is not None and row.user == "root"
        assert store.get(session_id) is None
        catalog = a["graph"].ports.catalog
        dump = [" ".join(map(str, r)) for r in catalog.connection().execute(
            "SELECT digest, user_id, token_digest, csrf FROM console_sessions").fetchall()]
        assert dump and not any(session_id in line for line in dump)
    finally:
        browser.close()


def test_expired_sessions_are_refused_on_read_and_purged_at_sign_in(database, two):
    a, b = two
    store = a["graph"].console_session_store
    now = time.time()
    stale = {"idle": ("1" * 64, now - 10_000, now - 3 * 3600),  # idle for hours
             "old": ("2" * 64, now - 60, now - 9 * 3600)}  # active, but begun 9 h ago
    for digest, last_seen, created in stale.values():
        store.add(StoredSession(digest, "root", None, "f" * 64, "x", created, last_seen))
    browser = ConsoleClient(b["url"])
    try:
        browser.follow(browser.login(database["token"]))  # purges
        assert all(store.get(d) is None for d, _, _ in stale.values())
        # Absolute expiry judged on read, however recent the last use.
        sessions = SessionStore(store, max_seconds=0.2)
        opened = sessions.open(Caller("root"), "f" * 64)
        assert sessions.get(opened.id) is not None
        time.sleep(0.3)
        assert sessions.get(opened.id) is None and store.get(opened.digest) is None
    finally:
        browser.close()


def test_a_chat_model_set_in_one_server_applies_in_the_other(database, two):
    a, b = two
    browser = ConsoleClient(a["url"])
    try:
        browser.follow(browser.login(database["token"]))
        browser.get("/console/settings")
        saved = browser.post("/console/settings/chat", {"chat_base_url": "http://127.0.0.1:9/v1",
                                                        "chat_model": "shared-7b"})
        assert saved.status_code == 303
        deadline = time.monotonic() + 10
        while b["graph"].chat_model is None and time.monotonic() < deadline:
            time.sleep(0.2)  # the other process re-reads shared settings every 2 s
        model = b["graph"].chat_model
        assert model is not None and getattr(model, "name", None) == "shared-7b"
    finally:
        browser.close()
        a["graph"].admin.update({"llm.base_url": None, "llm.model": None}, is_admin=True)
        deadline = time.monotonic() + 10
        while b["graph"].chat_model is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert b["graph"].chat_model is None


def test_migrate_leaves_console_sessions_behind(pgvector_server, tmp_path):  # noqa: F811
    """``docgraph migrate`` does not copy sessions (sign in again after the move), and an
    embedded index holding some still migrates."""
    import uuid

    from typer.testing import CliRunner

    from docgraph.config import load_settings
    from docgraph.serve.cli import app
    from tests.helpers import CountingEmbedder, write_files
    from tests.serve.test_mcp_tools import ENGINEERING
    from tests.serve.test_tokens import open_graph, write_config

    config = write_config({"path": tmp_path / "index.db"}, tmp_path)
    with open_graph(config) as graph:
        graph.index(write_files(tmp_path / "eng", ENGINEERING), namespace="engineering")
        session = SessionStore(graph.console_session_store).open(Caller("root"), "e" * 64)
        assert graph.console_session_store.get(session.digest) is not None
    name = f"t_{uuid.uuid4().hex[:12]}"
    url = pgvector_server.create_database(name)
    try:
        result = CliRunner().invoke(app, ["--config", str(config), "migrate", "--to", url])
        assert result.exit_code == 0, result.output
        with DocGraph(load_settings(store={"backend": "postgres", "url": url}),
                      CountingEmbedder()) as moved:
            assert moved.store.stats()  # the documents came along
            assert moved.console_session_store.get(session.digest) is None
    finally:
        pgvector_server.drop_database(name)
