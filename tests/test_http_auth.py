"""Bearer tokens (hashed at rest, constant-time checks), the token commands, and the
configuration the servers are built from."""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from docgraph.config import GovernanceSettings, ServeSettings, load_settings
from docgraph.errors import ConfigError
from docgraph.governance import Caller, PolicyFileEntitlements
from docgraph.serve.auth import (
    StoreTokenVerifier,
    TokenStore,
    caller_from_access_token,
    hash_token,
)
from docgraph.serve.cli import app
from docgraph.serve.setup import build_entitlements, stdio_caller
from tests.test_mcp_tools import POLICY_YAML


def test_tokens_are_stored_as_sha256_only(tmp_path: Path):
    store = TokenStore(tmp_path / "tokens.toml")
    token = store.add("alice", "support")
    text = store.path.read_text()
    assert token not in text and hashlib.sha256(token.encode()).hexdigest() in text
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    entry = store.verify(token)
    assert entry is not None and entry.caller() == Caller("alice", "support")
    assert store.verify(token + "x") is None and store.verify("") is None
    assert store.verify("x" * 10_000) is None


def test_the_store_follows_file_changes_and_revocation(tmp_path: Path):
    store = TokenStore(tmp_path / "tokens.toml")
    assert store.entries() == [] and store.verify("anything") is None
    first = store.add("alice")
    second = TokenStore(store.path).add("bob")  # another process adds a token
    assert store.verify(second) is not None and store.verify(first) is not None
    removed = store.remove(hash_token(first)[:12])
    assert removed == 1 and store.verify(first) is None and store.verify(second) is not None
    with pytest.raises(ConfigError, match="8 hex digits"):
        store.remove("ab")


def test_yaml_token_files_are_read(tmp_path: Path):
    path = tmp_path / "tokens.yaml"
    path.write_text(f"tokens:\n  {hash_token('s3cret')}: {{user: carol, role: eng}}\n")
    entry = TokenStore(path).verify("s3cret")
    assert entry is not None and (entry.user, entry.role) == ("carol", "eng")


@pytest.mark.parametrize("content", [
    '[tokens.abc]\nuser = "x"\n',                       # not a digest
    f'[tokens.{"0" * 64}]\nrole = "x"\n',                 # no user
    "tokens = 3\n",
])
def test_broken_token_files_are_config_errors(tmp_path: Path, content: str):
    path = tmp_path / "tokens.toml"
    path.write_text(content)
    with pytest.raises(ConfigError, match="tokens file"):
        TokenStore(path).verify("anything")


def test_the_sdk_verifier_maps_a_token_to_its_caller(tmp_path: Path):
    store = TokenStore(tmp_path / "tokens.toml")
    token = store.add("bob", "support")
    verifier = StoreTokenVerifier(store)
    access = anyio.run(verifier.verify_token, token)
    assert access is not None and caller_from_access_token(access) == Caller("bob", "support")
    assert token not in access.model_dump_json()  # the raw token is not carried along
    assert anyio.run(verifier.verify_token, "nope") is None


def test_token_commands_print_the_token_once_and_store_its_hash(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DOCGRAPH_SERVE__TOKENS_FILE", str(tmp_path / "t.toml"))
    runner = CliRunner()
    added = runner.invoke(app, ["token", "add", "alice", "--role", "support"])
    assert added.exit_code == 0, added.output
    token = added.stdout.strip().splitlines()[0]
    assert token.startswith("dg_") and len(token) > 40
    assert token not in (tmp_path / "t.toml").read_text()
    listed = runner.invoke(app, ["token", "list"])
    assert "alice" in listed.stdout and token not in listed.stdout
    removed = runner.invoke(app, ["token", "remove", hash_token(token)[:10]])
    assert removed.exit_code == 0 and TokenStore(tmp_path / "t.toml").entries() == []


def test_serve_refuses_to_start_without_tokens(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("DOCGRAPH_SERVE__TOKENS_FILE", str(tmp_path / "none.toml"))
    monkeypatch.setenv("DOCGRAPH_STORE__PATH", str(tmp_path / "index.db"))
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
