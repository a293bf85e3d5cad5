"""Two real ``docgraph serve`` processes on one PostgreSQL database, with bearer tokens from
that database, serving eight MCP clients (the SDK's streamable-HTTP client) while a third
process re-indexes a changed file.

What must hold: no call fails, every answer comes only from the caller's namespaces, the
write of the indexing process is visible to both servers on their next query, both servers
answer the same query identically afterwards, and a token added by another process while
they run is accepted by both (and refused by both once another process revoked it).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from docgraph.serve.auth import hash_token
from tests.deployment import Deployment, postgres_store
from tests.helpers import write_files
from tests.pg import PostgresServer, pgvector_server  # noqa: F401  (fixture)
from tests.serve.test_mcp_tools import ENGINEERING, SUPPORT

HR = {"salaries.md": "# Salaries\n\nConfidential: the Tern T3 firmware team bonus pool after "
                     "E-417 is 90,000 EUR. Nordhaven Logistics never sees this.\n"}
POLICY = ("assignments:\n"
          "  - {user: alice, role: eng, domain: engineering}\n"
          "  - {user: alice, role: support, domain: support}\n"
          "  - {user: bob, role: support, domain: support}\n")
ALLOWED = {"alice": {"engineering", "support"}, "bob": {"support"}}
QUERIES = ["Which firmware fixes E-417 on the Tern T3?", "Nordhaven Logistics P1 response",
           "reboot the Tern T3", "Roost gateway TLS certificate"]
NEW_FACT = "E-500: Zephyrine coolant leak on the Heron H7; replace the Zephyrine pump."
CLIENTS = 8


@pytest.fixture
def deployment(pgvector_server: PostgresServer,  # noqa: F811
               tmp_path: Path) -> Iterator[Deployment]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    url = pgvector_server.create_database(name)
    # The servers only serve here: the writer is a concurrent `docgraph index`, which would
    # be refused while one of them led the refresh (tests/serve/test_serve_refresh.py covers that).
    made = Deployment(tmp_path, postgres_store(url), POLICY, "[refresh]\nin_serve = false\n")
    try:
        yield made
    finally:
        made.stop()
        pgvector_server.drop_database(name)


FOLDERS = {"engineering": "eng", "support": "sup", "hr": "hr"}


def namespaces_in(value: Any) -> set[str]:
    """Every namespace an answer draws from: ``namespace`` fields, and the folder (one per
    namespace) of every ``document``/``document_id``."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "namespace" and isinstance(item, str):
                found.add(item)
            elif key in ("document", "document_id") and isinstance(item, str):
                # agent-visible ids start with the folder's display name; stored ids hold it
                found |= {ns for ns, folder in FOLDERS.items()
                          if item.startswith(f"{folder}/") or f"/{folder}/" in item}
            else:
                found |= namespaces_in(item)
    elif isinstance(value, list):
        for item in value:
            found |= namespaces_in(item)
    return found


def texts_in(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


async def call(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One tool call; a tool error fails the test with its message."""
    result = await client.call_tool(name, arguments)
    assert not result.is_error, (name, arguments, result.content[0].text[:500])
    data: dict[str, Any] = json.loads(result.content[0].text)
    return data


def arguments(tool: str, query: str) -> dict[str, Any]:
    """The arguments of ``tool`` for one query."""
    return {"query_text": query, "k": 10} if tool == "search_documents" else {"query": query}


def hits(answer: dict[str, Any]) -> list[Any]:
    """The ranked items of a search_documents or lookup_knowledge answer."""
    found: list[Any] = answer.get("results", answer.get("evidence", []))
    return found


class Load:
    """What the concurrent clients saw."""

    def __init__(self) -> None:
        self.calls = 0
        self.errors: list[str] = []
        self.leaks: list[tuple[str, set[str]]] = []
        self.writer_done = False


async def client_loop(url: str, user: str, token: str, tools: tuple[str, ...], load: Load,
                      rounds_after: int) -> None:
    """One MCP session: search and look up until the writer finished, then a few rounds
    more; every answer is checked against the user's namespaces."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http, \
            Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
        after = 0
        turn = 0
        while after < rounds_after:
            if load.writer_done:
                after += 1
            query = QUERIES[turn % len(QUERIES)]
            turn += 1
            for name in tools:
                try:
                    answer = await call(client, name, arguments(name, query))
                except Exception as exc:  # counted, reported below
                    load.errors.append(f"{user}@{url} {name}: {type(exc).__name__}: {exc}")
                    continue
                load.calls += 1
                outside = namespaces_in(answer) - ALLOWED[user]
                if outside or "Confidential" in texts_in(answer):
                    load.leaks.append((user, outside))


async def one_session(url: str, token: str, calls: list[tuple[str, dict[str, Any]]]
                      ) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http, \
            Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
        return [await call(client, name, arguments) for name, arguments in calls]


def run_scenario(deployment: Deployment, tools: tuple[str, ...]) -> None:
    """The whole scenario with the clients calling ``tools`` (the first one also probes the
    token added late and the write)."""
    probe = tools[0]
    root = deployment.root
    eng = write_files(root / "eng", ENGINEERING)
    deployment.run("index", str(eng), "--namespace", "engineering")
    deployment.run("index", str(write_files(root / "sup", SUPPORT)), "--namespace", "support")
    deployment.run("index", str(write_files(root / "hr", HR)), "--namespace", "hr")
    tokens = {user: deployment.run("token", "add", user).strip() for user in ALLOWED}
    servers = [deployment.serve(), deployment.serve()]

    # a token added by another process while both run is accepted by both
    late = deployment.run("token", "add", "bob").strip()
    for url in servers:
        [answer] = anyio.run(one_session, url, late,
                             [(probe, arguments(probe, "How do I reboot a Tern T3?"))])
        assert hits(answer) and namespaces_in(answer) == {"support"}

    # a wrong token is refused by both; the late token, revoked by another process, too
    deployment.run("token", "remove", hash_token(late)[:12])
    for url in servers:
        for token in (late, tokens["alice"] + "x"):
            answer = httpx.post(url + "/api/v1/index_status", json={}, timeout=60,
                                headers={"Authorization": f"Bearer {token}"})
            assert answer.status_code == 401

    [before] = anyio.run(one_session, servers[0], tokens["alice"],
                         [(probe, arguments(probe, "Zephyrine coolant pump"))])
    assert "Zephyrine" not in texts_in(hits(before))

    load = Load()

    async def writer() -> None:
        (eng / "errors.md").write_text(ENGINEERING["errors.md"] + "\n" + NEW_FACT + "\n",
                                       encoding="utf-8")
        process = deployment.start("index", str(eng), "--namespace", "engineering")
        while process.poll() is None:
            await anyio.sleep(0.1)
        assert process.returncode == 0, deployment.processes[-1][1].read_text()[-3000:]
        load.writer_done = True

    async def main() -> None:
        with anyio.fail_after(600):
            async with anyio.create_task_group() as group:
                for i in range(CLIENTS):
                    user = "alice" if i % 2 == 0 else "bob"
                    group.start_soon(client_loop, servers[(i // 2) % 2], user, tokens[user],
                                     tools, load, 2)
                group.start_soon(writer)

    anyio.run(main)
    assert load.errors == [] and load.leaks == []
    assert load.calls >= CLIENTS * 2 * len(tools)

    # the write of the indexing process is visible to both servers, and they agree
    calls = [(tool, arguments(tool, query)) for tool in tools
             for query in ("Zephyrine coolant pump on the Heron H7", QUERIES[0], QUERIES[1])]
    answers = [anyio.run(one_session, url, tokens["alice"], calls) for url in servers]
    for answer in answers:
        assert "Zephyrine" in texts_in(hits(answer[0])[0])
        assert namespaces_in(answer) <= ALLOWED["alice"]
    assert answers[0] == answers[1]
    # bob still sees only support, on both servers, after the write
    for url in servers:
        [answer] = anyio.run(one_session, url, tokens["bob"],
                             [(probe, arguments(probe, "Zephyrine coolant pump"))])
        assert namespaces_in(answer) <= {"support"} and "Zephyrine" not in texts_in(hits(answer))


def test_two_servers_on_one_database_serve_searches_during_a_reindex(
        deployment: Deployment) -> None:
    run_scenario(deployment, ("search_documents", "lookup_knowledge"))
