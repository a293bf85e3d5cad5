"""A served index with its web console, and an HTTP client that signs in to it like a browser.

The corpus is the two-namespace one of :mod:`tests.serve.test_mcp_tools` (engineering, support,
and support ticket rows), served by the real ASGI app of ``docgraph serve``
(:func:`docgraph.serve.http.create_app`) under uvicorn on a free loopback port. Tokens:
``root`` (role admin on ``*``: a console admin), ``alice`` and ``bob`` (not admins), and
``root_support`` (root's token pinned to a role root does not hold: not an admin either).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from docgraph import DocGraph
from docgraph.serve.auth import BearerTokens
from docgraph.serve.console import Console, ConsoleAuth, SessionStore
from docgraph.serve.console.ratelimit import SignInLimiter
from docgraph.serve.http import create_app
from tests.serve.test_http_server import Running
from tests.serve.test_mcp_tools import build_corpus, make_tools, open_isolated_graph
from tests.store_backends import Backend

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@contextmanager
def served_console(root: Path, backend: Backend) -> Iterator[dict[str, Any]]:
    """The corpus indexed on ``backend`` and served with the console; yields ``url``,
    ``tokens`` (by name), ``graph`` and ``console``."""
    graph: DocGraph = build_corpus(
        open_isolated_graph(root / "index.db", backend.store_settings()), root)
    tokens = BearerTokens(graph.token_store)
    issued = {"root": tokens.add("root"), "alice": tokens.add("alice"),
              "bob": tokens.add("bob", "support"), "root_support": tokens.add("root", "support")}
    tools = make_tools(graph)
    # Every test signs in afresh from one address: far more often than a person would, so
    # the sign-in limit is raised here, and refills at once after a test that set a tight
    # one (the buckets are rows in the database, kept across limiters).
    console = Console(tools, ConsoleAuth(tokens, tools.governance.entitlements,
                                         SessionStore(graph.console_session_store)),
                      SignInLimiter(graph.signin_limit_store, client_burst=10_000,
                                    client_per_minute=1_000_000, failing_burst=10_000,
                                    failing_per_minute=1_000_000))
    try:
        with Running(create_app(tools, tokens, console=console)) as running:
            yield {"url": running.url, "tokens": issued, "graph": graph, "console": console,
                   "root": root}
    finally:
        graph.close()


class ConsoleClient:
    """An HTTP client with a cookie jar, as a browser on a console page would be."""

    def __init__(self, url: str, local_address: str | None = None) -> None:
        """A client of the server at ``url``; with ``local_address`` (e.g. ``127.0.0.9``: any
        127/8 address is the loopback's on Linux) its connections come from that address,
        as another machine's would."""
        self.url = url
        transport = httpx.HTTPTransport(local_address=local_address) if local_address else None
        self.http = httpx.Client(base_url=url, timeout=60, follow_redirects=False,
                                 transport=transport)
        self.csrf = ""

    def close(self) -> None:
        self.http.close()

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        """GET a console path, remembering the page's CSRF token."""
        response = self.http.get(path, **kwargs)
        found = CSRF.search(response.text)
        if found:
            self.csrf = found.group(1)
        return response

    def post(self, path: str, data: dict[str, str], *, csrf: str | None = None,
             headers: dict[str, str] | None = None) -> httpx.Response:
        """POST a form with the last page's CSRF token (or ``csrf``; '' sends none)."""
        token = self.csrf if csrf is None else csrf
        form = dict(data, csrf=token) if token else dict(data)
        response = self.http.post(path, data=form, headers=headers or {})
        found = CSRF.search(response.text)
        if found:
            self.csrf = found.group(1)
        return response

    def login(self, token: str) -> httpx.Response:
        """Sign in with a bearer token (the sign-in form, then its POST)."""
        self.get("/console/login")
        return self.post("/console/login", {"token": token})

    def follow(self, response: httpx.Response) -> httpx.Response:
        """GET the page a redirect points at."""
        assert response.status_code == 303, (response.status_code, response.text[:300])
        return self.get(response.headers["location"])


def tagged_database(served: dict[str, Any]) -> str:
    """A SQL source database with a ``desk_tickets`` table: the PostgreSQL database of the
    store on that backend (a real PostgreSQL table), else a SQLite file."""
    import sqlalchemy as sa

    graph = served["graph"]
    url = graph.settings.store.url if graph.settings.store.backend == "postgres" \
        else f"sqlite:///{served['root'] / 'desk.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE IF EXISTS desk_tickets"))
        conn.execute(sa.text("CREATE TABLE desk_tickets (id integer PRIMARY KEY, "
                             "body text, product text)"))
        conn.execute(sa.text("INSERT INTO desk_tickets VALUES (1, 'The Tern T3 stopped "
                             "with E-417.', 'Tern T3')"))
        if graph.settings.store.backend == "postgres":  # a second schema to pick
            conn.execute(sa.text("CREATE SCHEMA IF NOT EXISTS helpdesk"))
            conn.execute(sa.text("DROP TABLE IF EXISTS helpdesk.calls"))
            conn.execute(sa.text("CREATE TABLE helpdesk.calls (id integer PRIMARY KEY, "
                                 "note text)"))
    engine.dispose()
    return str(url)
