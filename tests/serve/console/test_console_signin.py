"""The console's sign-in limit against the faults of issue 34, over real HTTP: a flood of
wrong guesses from many addresses does not lock the admin out; servers on one database
(SQLite file or PostgreSQL) share each address's limit; and ``docgraph serve`` believes
``X-Forwarded-For`` only from the proxies ``[serve] trusted_proxies`` names.

Addresses are real: every 127/8 address is the loopback's on Linux, so a client bound to
``127.0.2.7`` connects from that address (:class:`~tests.console_helpers.ConsoleClient`'s
``local_address``). Each test has a database of its own (the buckets live in it). The
servers use the default limits (10 attempts at once per address,
60 for all failing addresses), as ``docgraph serve`` does."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from docgraph.serve.auth import BearerTokens
from docgraph.serve.console import Console, ConsoleAuth, SessionStore
from docgraph.serve.http import create_app
from tests.backend_graphs import BACKEND_NAMES
from tests.console_helpers import ConsoleClient
from tests.deployment import Deployment, embedded_store
from tests.pg import pgvector_server  # noqa: F401  (fixture of the postgres backend)
from tests.serve.test_http_server import Running
from tests.serve.test_mcp_tools import POLICY_YAML, backend_for, make_tools, open_isolated_graph
from tests.store_backends import Backend


@contextmanager
def server(root: Path, backend: Backend) -> Iterator[dict[str, Any]]:
    """One ``docgraph serve`` process's app with its default sign-in limiter, on a DocGraph
    of its own over ``backend``."""
    graph = open_isolated_graph(root / "index.db", backend.store_settings())
    tokens = BearerTokens(graph.token_store)
    tools = make_tools(graph)
    console = Console(tools, ConsoleAuth(tokens, tools.governance.entitlements,
                                         SessionStore(graph.console_session_store)))
    try:
        with Running(create_app(tools, tokens, console=console)) as running:
            yield {"url": running.url, "graph": graph}
    finally:
        graph.close()


@pytest.fixture(params=BACKEND_NAMES)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A database of this test's own (per backend: the buckets are in it) holding an
    admin's token; no documents are needed."""
    root = tmp_path
    with backend_for(request, root) as backend:
        graph = open_isolated_graph(root / "index.db", backend.store_settings())
        token = BearerTokens(graph.token_store).add("root")
        graph.close()
        yield {"root": root, "backend": backend, "token": token}


@contextmanager
def _client(url: str, address: str) -> Iterator[ConsoleClient]:
    """A browser-like client whose connections come from ``address``."""
    client = ConsoleClient(url, local_address=address)
    try:
        yield client
    finally:
        client.close()


def wrong_guess(url: str, address: str) -> httpx.Response:
    """One flood attempt from ``address``: a bare POST to the sign-in route (no form, no
    cookie: it fails, after the limiter has counted it)."""
    with httpx.Client(base_url=url, timeout=60,
                      transport=httpx.HTTPTransport(local_address=address)) as http:
        return http.post("/console/login", data={"token": "dg_guess"})


def audited_refusals(graph: Any, address: str) -> int:
    return sum(1 for r in graph.audit_store.recent(500)
               if r["operation"] == "console:login" and r["outcome"] == "denied"
               and f"from {address}" in (r["reason"] or ""))


def test_a_flood_from_many_addresses_does_not_lock_the_admin_out(database):
    with server(database["root"], database["backend"]) as running, ExitStack() as stack:
        url, token = running["url"], database["token"]
        regular = stack.enter_context(_client(url, "127.0.1.2"))
        assert regular.follow(regular.login(token)).status_code == 200  # before the flood
        flood = [f"127.0.2.{n}" for n in range(1, 41)]
        statuses: list[int] = []
        for _ in range(9):  # rounds until the shared bucket is drained (9: within a burst)
            statuses += [wrong_guess(url, address).status_code for address in flood]
            if 429 in statuses:
                break
        assert 429 in statuses, "the flood did not even drain the shared bucket"
        assert set(statuses) <= {403, 429}
        # An address the flood never used: its first sign-in is not held back.
        fresh = stack.enter_context(_client(url, "127.0.1.1"))
        signed_in = fresh.login(token)
        assert signed_in.status_code == 303, signed_in.text[:300]
        # The admin's usual address, after a typo: it signed in today, so it still gets in.
        assert regular.login("dg_typo").status_code == 401
        assert regular.follow(regular.login(token)).status_code == 200
        # The flood's addresses are still held back (more of it drains what refilled since),
        # and told why.
        held = [r for r in (wrong_guess(url, address) for address in flood) if r.status_code == 429]
        assert held and "from many addresses" in held[0].text


def test_servers_on_one_database_share_each_address_limit(database):
    with server(database["root"], database["backend"]) as a, \
            server(database["root"], database["backend"]) as b, \
            _client(a["url"], "127.0.3.1") as at_a, _client(b["url"], "127.0.3.1") as at_b:
        for _ in range(5):  # 10 in all: the burst of one address
            assert at_a.login("dg_wrong").status_code == 401
            assert at_b.login("dg_wrong").status_code == 401
        for client in (at_a, at_b):
            limited = client.login(database["token"])
            assert limited.status_code == 429, limited.text[:300]
            assert "from your address (127.0.3.1)" in limited.text
        assert audited_refusals(a["graph"], "127.0.3.1") == 1  # one run, in the whole fleet
        with _client(b["url"], "127.0.3.2") as elsewhere:  # another address is not held
            assert elsewhere.login(database["token"]).status_code == 303


def forwarded_attempt(client: ConsoleClient, token: str, forwarded_for: str) -> httpx.Response:
    """A sign-in through a proxy on loopback that says the client is ``forwarded_for``."""
    client.get("/console/login")
    return client.post("/console/login", {"token": token},
                       headers={"X-Forwarded-For": forwarded_for})


@contextmanager
def deployed(root: Path, serve_settings: str = "") -> Iterator[tuple[str, str]]:
    """A real ``docgraph serve`` process on a new embedded index, with ``serve_settings``
    added to its ``[serve]`` section; yields its URL and an admin's token."""
    made = Deployment(root, embedded_store(root / "index.db"), POLICY_YAML, serve_settings)
    try:
        token = made.run("token", "add", "root").strip()
        yield made.serve(), token
    finally:
        made.stop()


def test_without_trusted_proxies_a_forwarded_address_is_not_believed(tmp_path: Path):
    with deployed(tmp_path) as (url, token), _client(url, "127.0.0.1") as client:
        for n in range(10):  # a local process naming another client each time
            assert forwarded_attempt(client, "dg_wrong", f"198.51.100.{n}").status_code == 401
        limited = forwarded_attempt(client, token, "198.51.100.99")
        assert limited.status_code == 429, limited.text[:300]
        assert "from your address (127.0.0.1)" in limited.text


def test_a_trusted_proxy_names_the_client(tmp_path: Path):
    with deployed(tmp_path, 'trusted_proxies = ["127.0.0.1"]\n') as (url, token), \
            _client(url, "127.0.0.1") as client:
        for _ in range(10):
            assert forwarded_attempt(client, "dg_wrong", "1.2.3.4").status_code == 401
        limited = forwarded_attempt(client, token, "1.2.3.4")
        assert limited.status_code == 429 and "(1.2.3.4)" in limited.text
        # Prepending an address does not help: the nearest untrusted one is the client.
        chained = forwarded_attempt(client, token, "203.0.113.5, 1.2.3.4")
        assert chained.status_code == 429 and "(1.2.3.4)" in chained.text
        # Another client behind the same proxy is not held back.
        assert forwarded_attempt(client, token, "5.6.7.8").status_code == 303
