"""``/readyz`` on the embedded store: readiness for a load balancer, beside ``/healthz``.

Ready (200) when the store and the refresh leader can be read; a row database that is down
is named and leaves the server degraded, still 200; no token or allowed Host is needed
(probes address the server by names of their own); a load balancer probing many times a
second costs one check a second. The PostgreSQL outage itself (503 naming the store) is in
``test_store_outage_pg.py``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from docgraph import DocGraph
from docgraph.governance import Governance, SqlRowAuthorizer, StaticEntitlements
from docgraph.serve.auth import BearerTokens
from docgraph.serve.http import create_app, openapi_document
from docgraph.serve.outage import StoreOutage
from docgraph.serve.readiness import Readiness
from docgraph.serve.tools import DocgraphTools
from tests.serve.test_http_server import Running
from tests.serve.test_mcp_tools import ASSIGNMENTS, make_tools, open_isolated_graph


@pytest.fixture
def graph(tmp_path: Path) -> Iterator[DocGraph]:
    opened = open_isolated_graph(tmp_path / "index.db")
    try:
        yield opened
    finally:
        opened.close()


def closed_port() -> int:
    """A loopback port nothing listens on (connections to it are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_readyz_on_the_embedded_store_is_ready_without_token_or_known_host(graph: DocGraph):
    with Running(create_app(make_tools(graph), BearerTokens(graph.token_store))) as running:
        for headers in ({}, {"Host": "lb.internal"}, {"Authorization": "Bearer not-a-token"}):
            answer = httpx.get(running.url + "/readyz", headers=headers, timeout=30)
            assert answer.status_code == 200, (headers, answer.text)
            body = answer.json()
            assert body["status"] == "ready" and body["failing"] == []
            assert body["components"]["store"] == {"status": "ok"}
            assert body["components"]["leader"]["status"] == "ok"
            assert body["components"]["leader"]["leader"] in ("none", "this process")
            assert body["components"]["row_databases"]["status"] == "none configured"
        # a probe that sends a token gets liveness without a token check
        assert httpx.get(running.url + "/healthz", timeout=30,
                         headers={"Authorization": "Bearer not-a-token"}).status_code == 200


def test_a_row_database_that_is_down_is_named_and_leaves_the_server_ready(graph: DocGraph,
                                                                         tmp_path: Path):
    rows = {"crm": f"sqlite:///{tmp_path / 'crm.db'}",
            "billing": f"postgresql+psycopg://docgraph@127.0.0.1:{closed_port()}/billing"}
    tools = DocgraphTools(Governance(graph, StaticEntitlements(ASSIGNMENTS),
                                     SqlRowAuthorizer(rows, identity="none")))
    with Running(create_app(tools, BearerTokens(graph.token_store))) as running:
        answer = httpx.get(running.url + "/readyz", timeout=30)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["status"] == "degraded"
    assert body["failing"] == ["row_databases.billing"]
    assert body["components"]["row_databases"] == {
        "status": "degraded", "databases": {"billing": "unavailable", "crm": "ok"}}
    assert "127.0.0.1" not in answer.text  # states only, no addresses


def test_probes_many_times_a_second_cost_one_check(graph: DocGraph):
    reads: list[int] = []

    def probe() -> int:
        reads.append(1)
        return graph.token_store.version()

    readiness = Readiness(store_probe=probe, leadership=graph.leadership,
                          outage=StoreOutage(), ttl_s=60.0)

    async def hammer() -> None:
        async with anyio.create_task_group() as group:
            for _ in range(50):
                group.start_soon(readiness.report)

    anyio.run(hammer)
    assert len(reads) == 1


def test_the_openapi_document_lists_readyz_and_the_503():
    document = openapi_document()
    readyz = document["paths"]["/readyz"]["get"]
    assert readyz["security"] == [] and set(readyz["responses"]) == {"200", "503"}
    search = document["paths"]["/api/v1/search_documents"]["post"]
    assert "503" in search["responses"]
