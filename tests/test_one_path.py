"""One governed path: the same question from the same caller gets the same evidence through
the MCP tools, the JSON-ready tool layer, the CLI and the Python API; the CLI is a caller."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import docgraph
from docgraph.app import DocGraph
from docgraph.errors import InvalidQuery
from docgraph.serve.cli import app
from docgraph.serve.setup import build_tools, local_governance
from tests import store_backends
from tests.helpers import write_files
from tests.pg import pgvector_server  # noqa: F401  (fixture used by the postgres backend)
from tests.store_backends import Backend

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "corpus"
QUESTION = "What caused the Rotterdam outage?"


# On the embedded file and on PostgreSQL.
backend = store_backends.product_backend


def _store_section(backend: Backend) -> str:
    """The ``[store]`` section of a docgraph.toml that opens ``backend``'s index."""
    lines = [f'{key} = "{value.as_posix() if isinstance(value, Path) else value}"'
             for key, value in backend.store_settings().items()]
    return "[store]\n" + "\n".join(lines) + "\n"


@pytest.fixture
def deployment(tmp_path, monkeypatch, backend):
    """An index of the sample corpus in two namespaces, a policy that grants alice one."""
    monkeypatch.setenv("DOCGRAPH_EMBED__MODEL", "hashing")
    policy = tmp_path / "policy.yaml"
    policy.write_text("assignments:\n  - {user: alice, role: ops, domain: ops}\n")
    config = tmp_path / "docgraph.toml"
    config.write_text(_store_section(backend)
                      + f'[governance]\npolicy_file = "{policy.as_posix()}"\n')
    with DocGraph.open(config_file=config) as dg:
        dg.index(SAMPLE, namespace="ops")
        dg.index(write_files(tmp_path / "hr", {"pay.md": "# Pay\n\nThe Rotterdam outage "
                                               "bonus is secret hr material.\n"}),
                 namespace="hr")
    return config


def _cli(config: Path, *args: str) -> tuple[int, str]:
    done = CliRunner().invoke(app, ["--config", str(config), *args])
    return done.exit_code, done.stdout if done.exit_code == 0 else repr(done.exception)


def test_the_same_question_gets_the_same_evidence_everywhere(deployment):
    code, out = _cli(deployment, "--user", "alice", "lookup", QUESTION)
    assert code == 0, out
    from_cli = json.loads(out)
    with DocGraph.open(config_file=deployment) as dg:
        from_tool = build_tools(dg).call("lookup_knowledge", docgraph.Caller("alice"),
                                         {"query": QUESTION})
        governance, caller = docgraph.governed(dg, user="alice")
        from_python = governance.lookup(caller, QUESTION).to_dict()
    keys = [e["document_id"] for e in from_tool["evidence"]]
    assert keys, "the sample corpus answers this question"
    assert [e["document_id"] for e in from_cli["evidence"]] == keys
    assert [e["document_id"] for e in from_python["evidence"]] == keys
    assert from_cli["relevance_level"] == from_tool["relevance_level"]
    # (the hr folder as a path segment: "hr" alone is inside "email-thread.txt" of ops)
    assert all("/hr/" not in k and "pay.md" not in k for k in keys)

    code, out = _cli(deployment, "--user", "alice", "search", QUESTION, "--mode",
                     "vector_first", "-k", "5", "--json")
    assert code == 0, out
    with DocGraph.open(config_file=deployment) as dg:
        served = build_tools(dg).call("search_documents", docgraph.Caller("alice"),
                                      {"query_text": QUESTION, "k": 5})
    assert [h["chunk_id"] for h in json.loads(out)] == \
        [h["chunk_id"] for h in served["results"]]


def test_the_cli_is_a_caller_and_is_denied_without_one(deployment):
    code, out = _cli(deployment, "lookup", QUESTION)
    assert code != 0 and "need a caller" in out
    code, out = _cli(deployment, "--user", "mallory", "search", QUESTION)
    assert code != 0 and isinstance(out, str) and "AccessDenied" in out
    code, out = _cli(deployment, "--user", "alice", "search", "Rotterdam outage bonus",
                     "--json", "-k", "10")
    assert code == 0 and "secret hr material" not in out  # hr is not alice's
    code, out = _cli(deployment, "--user", "alice", "search", "bonus", "--namespace", "hr")
    assert code != 0  # --namespace can only narrow what alice holds


def test_without_governance_the_owner_reads_through_the_same_path(tmp_path, monkeypatch,
                                                                 backend):
    monkeypatch.setenv("DOCGRAPH_EMBED__MODEL", "hashing")
    with DocGraph.open(tmp_path / "own.db", store=backend.store_settings()) as dg:
        dg.index(SAMPLE, namespace="ops")
        governance, caller = docgraph.governed(dg)
        assert caller.user_id == "owner"
        hits = governance.search(caller, QUESTION, k=3, mode="hybrid")
        engine = dg.search(QUESTION, namespaces={"ops"}, k=6, mode="hybrid")  # over-fetch
        assert [h.chunk_id for h in hits] == [h.chunk_id for h in engine[:3]]
        assert governance.audit.recent(1)[0]["user_id"] == "owner"
        narrowed, _ = local_governance(dg, only={"ops"})
        assert narrowed.search(caller, QUESTION, k=3)
        with pytest.raises(InvalidQuery, match="no namespace 'nowhere'"):
            local_governance(dg, only={"ops", "nowhere"})  # a typo is named, not silent


def test_a_caller_reads_only_its_own_stored_traces(deployment):
    code, _ = _cli(deployment, "--user", "alice", "search", QUESTION, "--mode", "graph_first")
    assert code == 0
    code, out = _cli(deployment, "--user", "alice", "trace", "last")
    assert code == 0 and json.loads(out)["user_id"] == "alice" and QUESTION not in out
    code, _ = _cli(deployment, "--user", "bob", "trace", "last")
    assert code != 0
