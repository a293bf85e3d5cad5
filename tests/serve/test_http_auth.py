"""Bearer tokens (hashed at rest, constant-time checks), the token commands, and the
configuration the servers are built from."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from docgraph import DocGraph
from docgraph.config import GovernanceSettings, ServeSettings, load_settings
from docgraph.errors import ConfigError
from docgraph.governance import Caller, PolicyFileEntitlements
from docgraph.serve.auth import (
    BearerTokens,
    StoreTokenVerifier,
    caller_from_access_token,
    entry_caller,
    hash_token,
    parse_tokens_file,
)
from docgraph.serve.cli import app
from docgraph.serve.setup import build_entitlements, stdio_caller
from tests import store_backends
from tests.helpers import CountingEmbedder
from tests.pg import pgvector_server  # noqa: F401  (fixture of the postgres backend)
from tests.serve.test_mcp_tools import POLICY_YAML
from tests.store_backends import Backend

# On the embedded file and on PostgreSQL.
backend = store_backends.product_backend


def store_env(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point ``load_settings`` (and so the CLI) at ``backend`` through DOCGRAPH_STORE__*."""
    for key, value in backend.store_settings().items():
        monkeypatch.setenv(f"DOCGRAPH_STORE__{key.upper()}", str(value))


@pytest.fixture
def tokens(backend: Backend) -> Iterator[BearerTokens]:
    """The bearer tokens of an index on the test's backend."""
    graph = DocGraph(load_settings(store=backend.store_settings()), CountingEmbedder())
    try:
        yield BearerTokens(graph.token_store)
    finally:
        graph.close()


def test_tokens_are_stored_as_sha256_only(tokens: BearerTokens):
    token = tokens.add("alice", "support")
    stored = tokens.store.entries()
    assert [(e.digest, e.user, e.role) for e in stored] == [
        (hashlib.sha256(token.encode()).hexdigest(), "alice", "support")]
    entry = tokens.verify(token)
    assert entry is not None and entry_caller(entry) == Caller("alice", "support")
    assert tokens.verify(token + "x") is None and tokens.verify("") is None
    assert tokens.verify("x" * 10_000) is None


def test_the_cache_follows_other_instances_and_revocation(tokens: BearerTokens,
                                                         backend: Backend):
    assert tokens.entries() == () and tokens.verify("anything") is None
    first = tokens.add("alice")
    with DocGraph(load_settings(store=backend.store_settings()),
                  CountingEmbedder()) as other:  # another process adds a token
        second = BearerTokens(other.token_store).add("bob")
    assert tokens.verify(second) is not None and tokens.verify(first) is not None
    removed = tokens.remove(hash_token(first)[:12])
    assert removed == 1 and tokens.verify(first) is None and tokens.verify(second) is not None
    with pytest.raises(ConfigError, match="8 hex digits"):
        tokens.remove("ab")


def test_yaml_token_files_are_read(tmp_path: Path):
    path = tmp_path / "tokens.yaml"
    path.write_text(f"tokens:\n  {hash_token('s3cret')}: {{user: carol, role: eng}}\n")
    [entry] = parse_tokens_file(path)
    assert (entry.digest, entry.user, entry.role) == (hash_token("s3cret"), "carol", "eng")


@pytest.mark.parametrize("content", [
    '[tokens.abc]\nuser = "x"\n',                       # not a digest
    f'[tokens.{"0" * 64}]\nrole = "x"\n',                 # no user
    "tokens = 3\n",
    "[tokens\n",                                         # not TOML
])
def test_broken_token_files_are_config_errors(tokens: BearerTokens, tmp_path: Path,
                                              content: str):
    path = tmp_path / "tokens.toml"
    path.write_text(content)
    with pytest.raises(ConfigError, match="tokens file"):
        tokens.import_file(path)
    assert tokens.entries() == ()


def test_the_sdk_verifier_maps_a_token_to_its_caller(tokens: BearerTokens):
    token = tokens.add("bob", "support")
    verifier = StoreTokenVerifier(tokens)
    access = anyio.run(verifier.verify_token, token)
    assert access is not None and caller_from_access_token(access) == Caller("bob", "support")
    assert token not in access.model_dump_json()  # the raw token is not carried along
    assert anyio.run(verifier.verify_token, "nope") is None


def test_token_commands_print_the_token_once_and_store_its_hash(backend: Backend,
                                                                tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store_env(backend, monkeypatch)
    runner = CliRunner()
    added = runner.invoke(app, ["token", "add", "alice", "--role", "support"])
    assert added.exit_code == 0, added.output
    token = added.stdout.strip().splitlines()[0]
    assert token.startswith("dg_") and len(token) > 40
    listed = runner.invoke(app, ["token", "list"])
    assert "alice" in listed.stdout and token not in listed.stdout
    assert hash_token(token)[:12] in listed.stdout
    removed = runner.invoke(app, ["token", "remove", hash_token(token)[:10]])
    assert removed.exit_code == 0
    with DocGraph(load_settings(), CountingEmbedder()) as graph:
        assert graph.token_store.entries() == []
        assert [e.user for e in graph.token_store.entries(include_revoked=True)] == ["alice"]


def test_serve_refuses_to_start_without_tokens(backend: Backend, tmp_path: Path,
                                               monkeypatch):
    monkeypatch.setenv("DOCGRAPH_SERVE__TOKENS_FILE", str(tmp_path / "none.toml"))
    store_env(backend, monkeypatch)
    monkeypatch.setenv("DOCGRAPH_EMBED__MODEL", "hashing")
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 1 and "token add" in result.output


def test_settings_sections_and_defaults(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("DOCGRAPH_SERVE__PORT", "9999")
    monkeypatch.setenv("DOCGRAPH_GOVERNANCE__POLICY_FILE", str(tmp_path / "p.yaml"))
    settings = load_settings()
    assert settings.serve.host == "127.0.0.1" and settings.serve.port == 9999
    assert settings.governance.policy_file == tmp_path / "p.yaml"


def test_entitlements_come_from_the_governance_section(tmp_path: Path):
    with pytest.raises(ConfigError, match="policy_file"):
        build_entitlements(GovernanceSettings())
    policy = tmp_path / "policy.yaml"
    with pytest.raises(ConfigError, match="policy file"):
        build_entitlements(GovernanceSettings(policy_file=policy))
    policy.write_text(POLICY_YAML)
    found = build_entitlements(GovernanceSettings(policy_file=policy))
    assert isinstance(found, PolicyFileEntitlements)
    assert {a.domain for a in found.assignments_for("alice")} == {"engineering", "support"}
    with pytest.raises(ConfigError, match="not both"):
        build_entitlements(GovernanceSettings(policy_file=policy, sql_url="sqlite://"))


def test_the_stdio_caller_comes_from_configuration():
    assert stdio_caller(ServeSettings(stdio_user="alice", stdio_role="eng")) == \
        Caller("alice", "eng")
    assert stdio_caller(ServeSettings(stdio_user="alice"), "bob") == Caller("bob")
    with pytest.raises(ConfigError, match="stdio_user"):
        stdio_caller(ServeSettings())
