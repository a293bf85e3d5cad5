"""Real ``docgraph serve`` processes on one PostgreSQL database with different policy files
(issue 34: "policies are per process").

What must hold: the first server publishes its policy; while it runs, a server whose policy
file grants otherwise does not start, and says which grant differs and how to roll the
change out; one whose file says the same in another order and layout starts, and the same
token gets the same rights from both. ``docgraph policy publish`` changes the rights on
every running server without a restart (the rolling change), the server that was refused
then may start, ``docgraph policy show`` prints the published policy, and once every server
has stopped a server with yet another file starts and publishes its policy.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from docgraph import DocGraph
from docgraph.governance import Caller
from docgraph.governance.fleet_policy import FleetPolicyEntitlements, live_servers
from docgraph.serve.auth import BearerTokens
from docgraph.serve.cli import app
from docgraph.serve.setup import build_governance
from tests.deployment import Deployment, free_port, postgres_store
from tests.helpers import write_files
from tests.pg import PostgresServer, pgvector_server  # noqa: F401  (fixture)

pytestmark = pytest.mark.postgres

POLICY = ("assignments:\n"
          "  - {user: alice, role: eng, domain: engineering}\n"
          "  - {user: bob, role: fin, domain: finance}\n")
# The same grants, another order and layout: the same policy.
SAME = ("# reordered\nassignments:\n"
        "- domain: finance\n  role: fin\n  user: bob\n"
        "- {user: alice, domain: engineering, role: eng}\n"
        "- {user: alice, domain: engineering, role: eng}\n")
WIDER = POLICY + "  - {user: alice, role: fin, domain: finance}\n"
QUERY = {"query_text": "Tern T3 firmware budget", "k": 10}


@pytest.fixture
def store(pgvector_server: PostgresServer) -> Iterator[str]:  # noqa: F811
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield postgres_store(pgvector_server.create_database(name))
    pgvector_server.drop_database(name)


@pytest.fixture
def deployments(store: str, tmp_path: Path) -> Iterator[dict[str, Deployment]]:
    """Three servers' settings on one database: each its own folder and policy file."""
    made = {}
    for name, policy in (("first", POLICY), ("wider", WIDER), ("same", SAME)):
        (tmp_path / name).mkdir()
        made[name] = Deployment(tmp_path / name, store, policy,
                                "[refresh]\nin_serve = false\n")
    try:
        yield made
    finally:
        for deployment in made.values():
            deployment.stop()


def cli(deployment: Deployment, *args: str) -> str:
    """Run a quick docgraph command in this process (a process start costs seconds); its
    standard output."""
    result = CliRunner().invoke(app, ["--config", str(deployment.config), *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def refused_start(deployment: Deployment) -> str:
    """Start ``docgraph serve``, which must exit 1 without ever answering; its output."""
    port = free_port()
    process = deployment.start("serve", "--port", str(port))
    deadline = time.monotonic() + 120
    while process.poll() is None:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                pytest.fail("a server whose policy differs from the fleet's started")
        assert time.monotonic() < deadline, "docgraph serve neither started nor exited"
        time.sleep(0.2)
    assert process.returncode == 1
    return deployment.log_of(process)


def namespaces(base: str, token: str) -> set[str]:
    answer = httpx.post(base + "/api/v1/search_documents", json=QUERY, timeout=60,
                        headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    return {hit["namespace"] for hit in answer.json()["results"]}


def test_servers_of_one_database_serve_one_policy(deployments, tmp_path: Path):
    first, wider, same = deployments["first"], deployments["wider"], deployments["same"]
    with DocGraph.open(None, config_file=first.config) as graph:  # in this process: quicker
        graph.index(write_files(tmp_path / "eng", {"fw.md": (
            "# Firmware\n\nThe Tern T3 firmware 2.4.1 fixes E-417.\n")}), namespace="engineering")
        graph.index(write_files(tmp_path / "fin", {"budget.md": (
            "# Budget\n\nThe Tern T3 firmware budget is 90,000 EUR.\n")}), namespace="finance")
        alice = BearerTokens(graph.token_store).add("alice")

    one = first.serve()  # the first server publishes its policy
    assert namespaces(one, alice) == {"engineering"}

    refused = refused_start(wider)
    message = " ".join(refused.split())
    assert "differs from the policy the servers of this index serve" in message
    assert "+ user alice: role fin on domain finance (only in this file)" in message
    assert "docgraph policy publish" in message and "Traceback" not in refused

    two = same.serve()  # the same grants in another layout: it joins
    assert namespaces(two, alice) == namespaces(one, alice) == {"engineering"}

    # The rolling change: published once, applied by every running server, no restart.
    published = cli(wider, "policy", "publish")
    assert "role fin on domain finance (new)" in published
    deadline = time.monotonic() + 15
    while not (namespaces(one, alice) == namespaces(two, alice) == {"engineering", "finance"}):
        assert time.monotonic() < deadline, "the running servers did not apply the policy"
        time.sleep(0.3)
    # the refused server's file is the fleet's policy now: it would start (checked in this
    # process, as `docgraph serve` checks it, without paying for a third server's start)
    with DocGraph.open(None, config_file=wider.config) as graph:
        joined = build_governance(graph, fleet=True)
        assert joined.namespaces(Caller("alice")) == {"engineering", "finance"}
        assert isinstance(joined.entitlements, FleetPolicyEntitlements)
        joined.entitlements.stop()
    shown = yaml.safe_load(cli(first, "policy", "show"))
    assert shown["groups"] == {}
    assert shown["assignments"] == [  # a policy file: sorted, user, role, domain
        {"user": "alice", "role": "eng", "domain": "engineering"},
        {"user": "alice", "role": "fin", "domain": "finance"},
        {"user": "bob", "role": "fin", "domain": "finance"}]
    # a server whose file is behind the published policy says so once (not per request)
    time.sleep(0.1)
    server_log = "\n".join(first.log_of(p) for p, _ in first.processes)
    assert server_log.count("differs from the policy every server of the index serves") == 1

    # Every server stopped (each deletes its row): a server started with another file now
    # publishes that one (the other way to change the policy: stop all, start all).
    for deployment in deployments.values():
        deployment.stop()
    with DocGraph.open(None, config_file=first.config) as graph:
        assert live_servers(graph.ports.policy, time.time()) == {}
        joined = build_governance(graph, fleet=True)
        assert joined.namespaces(Caller("alice")) == {"engineering"}
        assert isinstance(joined.entitlements, FleetPolicyEntitlements)
        joined.entitlements.stop()
