"""Bearer tokens in the index's database, on the embedded store and on PostgreSQL: the token
commands write there, a running server accepts a token added by another process and refuses
a revoked one on its next request, a legacy tokens file is imported once, and ``migrate``
carries the digests along."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from docgraph import DocGraph
from docgraph.config import load_settings
from docgraph.errors import ConfigError
from docgraph.serve.auth import BearerTokens, hash_token
from docgraph.serve.cli import app
from docgraph.serve.http import create_app
from docgraph.serve.setup import open_bearer_tokens
from tests import store_backends
from tests.conftest import REPO
from tests.helpers import CountingEmbedder, write_files
from tests.pg import PostgresServer, pgvector_server  # noqa: F401  (fixture)
from tests.serve.test_http_server import Running
from tests.serve.test_mcp_tools import ENGINEERING, make_tools
from tests.store_backends import Backend

# On the embedded file and on PostgreSQL.
backend = store_backends.product_backend


def write_config(backend: Backend | dict[str, object], tmp_path: Path) -> Path:
    """A settings file for ``backend`` (or a ``[store]`` section) with the hashing embedder
    and a legacy tokens file path inside ``tmp_path``."""
    store = backend if isinstance(backend, dict) else backend.store_settings()
    lines = ["[store]"] + [f'{key} = "{value}"' for key, value in store.items()]
    lines += ["[embed]", 'model = "hashing"',
              "[serve]", f'tokens_file = "{tmp_path / "legacy-tokens.toml"}"']
    config = tmp_path / "docgraph.toml"
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return config


def cli(config: Path, *args: str) -> tuple[int, str, str]:
    """``docgraph --config CONFIG ARGS`` in a separate process: exit code, stdout, stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCGRAPH_")}
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env["COLUMNS"] = "200"
    done = subprocess.run([sys.executable, "-m", "docgraph.serve.cli", "--config", str(config),
                           *args], capture_output=True, text=True, env=env, timeout=120,
                          cwd=config.parent, check=False)
    return done.returncode, done.stdout, done.stderr


def open_graph(config: Path) -> DocGraph:
    return DocGraph(load_settings(config), CountingEmbedder())


def status(url: str, token: str) -> int:
    """The HTTP status of an authenticated JSON-API call."""
    answer = httpx.post(url + "/api/v1/index_status", json={},
                        headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return answer.status_code


def test_tokens_from_the_cli_are_served_and_revoked_across_processes(
        backend: Backend, tmp_path: Path) -> None:
    config = write_config(backend, tmp_path)
    code, out, err = cli(config, "token", "add", "alice", "--role", "support")
    assert code == 0, err
    alice = out.strip()
    assert alice.startswith("dg_") and len(alice) > 40 and "alice" in err

    graph = open_graph(config)
    try:
        graph.index(write_files(tmp_path / "eng", ENGINEERING), namespace="engineering")
        # only the digest is stored, in the index's database
        stored = graph.token_store.entries()
        assert [(e.digest, e.user, e.role) for e in stored] == [
            (hash_token(alice), "alice", "support")]
        with Running(create_app(make_tools(graph), open_bearer_tokens(graph))) as server:
            assert status(server.url, alice) == 200
            assert status(server.url, alice + "x") == 401
            assert status(server.url, "dg_" + "A" * 43) == 401

            # another process adds a token: the running server accepts it at once
            code, out, err = cli(config, "token", "add", "bob")
            assert code == 0, err
            bob = out.strip()
            assert status(server.url, bob) == 200

            # another process lists (ids, never tokens) and revokes alice's token
            code, listed, err = cli(config, "token", "list")
            assert code == 0, err
            assert hash_token(alice)[:12] in listed and "bob" in listed
            assert alice not in listed and bob not in listed and alice not in err
            code, out, err = cli(config, "token", "remove", hash_token(alice)[:10])
            assert code == 0 and "removed 1 token(s)" in out, err
            assert status(server.url, alice) == 401
            assert status(server.url, bob) == 200

            # a second DocGraph on the same database revokes bob's
            with open_graph(config) as other:
                assert BearerTokens(other.token_store).remove(hash_token(bob)[:12]) == 1
            assert status(server.url, bob) == 401
        code, out, err = cli(config, "token", "remove", hash_token(alice)[:10])
        assert code == 1 and "removed 0 token(s)" in out  # already revoked
    finally:
        graph.close()
    if backend.name == "embedded":  # read only once closed: reading an open SQLite file
        # from this process would drop its POSIX locks
        path = Path(str(backend.store_settings()["path"]))
        stored_bytes = b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))
        assert hash_token(bob).encode() in stored_bytes
        assert alice.encode() not in stored_bytes and bob.encode() not in stored_bytes


def test_the_change_counter_moves_only_on_changes_by_any_instance(
        backend: Backend, tmp_path: Path) -> None:
    config = write_config(backend, tmp_path)
    with open_graph(config) as first, open_graph(config) as second:
        a, b = BearerTokens(first.token_store), BearerTokens(second.token_store)
        start = first.token_store.version()
        assert a.entries() == () and first.token_store.version() == start
        token = b.add("carol")
        moved = first.token_store.version()
        assert moved != start and a.verify(token) is not None
        assert b.remove("0123456789ab") == 0 and first.token_store.version() == moved
        with pytest.raises(ConfigError, match="8 hex digits"):
            a.remove("abc")
        with pytest.raises(ConfigError, match="8 hex digits"):
            a.remove("zzzzzzzzzz")  # not hex: never a pattern
        with pytest.raises(ConfigError, match="user"):
            a.add("  ")
        with pytest.raises(ConfigError, match="control characters"):
            a.add("eve\nrole = admin")
        assert a.remove(hash_token(token)[:8]) == 1
        assert first.token_store.version() != moved and b.verify(token) is None
        # revoked tokens stay stored (so they cannot come back), but are not live
        assert [e.user for e in first.token_store.entries(include_revoked=True)] == ["carol"]
        assert first.token_store.entries() == []


def test_a_legacy_tokens_file_is_imported_once_and_never_written(
        backend: Backend, tmp_path: Path) -> None:
    config = write_config(backend, tmp_path)
    legacy = tmp_path / "legacy-tokens.toml"
    legacy.write_text(f'[tokens.{hash_token("old-secret")}]\nuser = "carol"\nrole = "eng"\n'
                      f'[tokens.{hash_token("other-secret")}]\nuser = "dave"\n')
    before = legacy.read_bytes()
    runner = CliRunner()
    listed = runner.invoke(app, ["--config", str(config), "token", "list"])
    assert listed.exit_code == 0, listed.output
    assert "imported 2 token(s)" in listed.stderr
    assert str(legacy) in listed.stderr.replace("\n", "")
    assert "carol" in listed.stdout and "dave" in listed.stdout
    listed = runner.invoke(app, ["--config", str(config), "token", "list"])
    assert listed.exit_code == 0 and "imported" not in listed.stderr  # no second import
    assert listed.stdout.count("carol") == 1
    removed = runner.invoke(app, ["--config", str(config), "token", "remove",
                                  hash_token("old-secret")[:12]])
    assert removed.exit_code == 0 and "removed 1 token(s)" in removed.stdout
    with open_graph(config) as graph:
        tokens = open_bearer_tokens(graph)  # the file still lists carol: she stays revoked
        assert tokens.verify("old-secret") is None
        entry = tokens.verify("other-secret")
        assert entry is not None and (entry.user, entry.role) == ("dave", None)
    assert legacy.read_bytes() == before


def test_a_broken_legacy_file_is_an_error_naming_it(tmp_path: Path) -> None:
    config = write_config({"path": tmp_path / "index.db"}, tmp_path)
    (tmp_path / "legacy-tokens.toml").write_text('[tokens.abc]\nuser = "x"\n')
    result = CliRunner().invoke(app, ["--config", str(config), "token", "list"])
    assert isinstance(result.exception, ConfigError)
    assert "legacy-tokens.toml" in str(result.exception)


def test_migrate_copies_the_token_digests(pgvector_server: PostgresServer,  # noqa: F811
                                         tmp_path: Path) -> None:
    config = write_config({"path": tmp_path / "index.db"}, tmp_path)
    with open_graph(config) as graph:
        graph.index(write_files(tmp_path / "eng", ENGINEERING), namespace="engineering")
        tokens = BearerTokens(graph.token_store)
        kept, revoked = tokens.add("alice"), tokens.add("bob")
        tokens.remove(hash_token(revoked)[:12])
    name = f"t_{uuid.uuid4().hex[:12]}"
    url = pgvector_server.create_database(name)
    try:
        result = CliRunner().invoke(app, ["--config", str(config), "migrate", "--to", url])
        assert result.exit_code == 0, result.output
        assert "2 bearer token digest(s)" in " ".join(result.output.split())
        with DocGraph(load_settings(store={"backend": "postgres", "url": url}),
                      CountingEmbedder()) as moved:
            served = BearerTokens(moved.token_store)
            assert served.verify(kept) is not None and served.verify(revoked) is None
            # the revoked digest came along, so it cannot be added (imported) back
            gone = [e for e in moved.token_store.entries(include_revoked=True)
                    if e.revoked_at is not None]
            assert [e.digest for e in gone] == [hash_token(revoked)]
            assert not moved.token_store.add(gone[0])
    finally:
        pgvector_server.drop_database(name)
