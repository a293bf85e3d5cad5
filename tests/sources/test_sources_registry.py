"""The source registry (folders in domains, credentials never stored), credential lookup,
change tokens per scheme and the crawler's fetch circuit breaker."""

from __future__ import annotations

import datetime as dt
import logging
import time
from pathlib import Path

import pytest

from docgraph.errors import ConfigError, SourceError
from docgraph.sources.changes import RACY_WINDOW_SECONDS, change_token
from docgraph.sources.credentials import Credentials, credential_key
from docgraph.sources.folder import MAX_CONSECUTIVE_FETCH_FAILURES, FolderCrawler
from docgraph.sources.registry import strip_sql_credentials
from docgraph.sources.urn import normalize_urn
from tests import backend_graphs
from tests.helpers import write_files

# Every DocGraph test here runs on the embedded file and on PostgreSQL.
make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

# -- folders ---------------------------------------------------------------------------


def test_every_spelling_registers_one_folder_and_one_urn_may_serve_several_domains(
        tmp_path, make_graph, monkeypatch):
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    graph = make_graph()
    registry = graph.sources
    spellings = ["docs", "./docs/", f"{tmp_path}/docs/sub/..", f"file://{tmp_path}/docs//"]
    records = {registry.add_folder(s, "hr").id for s in spellings}
    assert len(records) == 1
    assert [s.urn for s in registry.folders()] == [normalize_urn(tmp_path / "docs")]
    # UNIQUE (urn, domain): the same folder in a second domain is a second source.
    registry.add_folder("docs", "legal")
    assert sorted((s.urn, s.namespace) for s in registry.folders()) == [
        (normalize_urn(tmp_path / "docs"), "hr"), (normalize_urn(tmp_path / "docs"), "legal")]
    kinds = {(s.kind, s.type, s.domain, s.read_only) for s in registry.list()}
    assert kinds == {("documents", "file", "hr", False), ("documents", "file", "legal", False)}
    with pytest.raises(SourceError, match="domain"):
        registry.add_folder("docs", " ")
    # Table-derived sources are views of the tag registry, never registered as folders.
    with pytest.raises(SourceError, match="unsupported folder URN scheme 'sql'"):
        registry.add_folder("sql://crm/public.tickets.body", "hr")
    with pytest.raises(SourceError, match="unsupported folder URN scheme 'sql'"):
        graph.remove_folder("sql://crm/public.tickets.body", "hr")


def test_a_path_change_is_a_removal_plus_a_new_registration(tmp_path, make_graph):
    old = write_files(tmp_path / "old", {"a.md": "# A\n\nalpha text\n"})
    new = write_files(tmp_path / "new", {"a.md": "# A\n\nalpha text\n"})
    graph = make_graph()
    graph.index(old, "hr")
    assert graph.sources.remove_folder(f"{old}/", "hr") == 1
    with pytest.raises(SourceError, match="no folder"):
        graph.sources.remove_folder(old, "hr")
    graph.index(new, "hr")
    (hit,) = graph.search("alpha", namespaces={"hr"}, k=1)
    assert hit.doc_id == normalize_urn(new) + "/a.md"


def test_credentials_in_a_urn_are_dropped_with_a_warning(make_graph, caplog):
    graph = make_graph()
    with caplog.at_level(logging.WARNING):
        record = graph.sources.add_folder("SFTP://svc:pa55word@Files.Example.COM:22/a/./b/", "x")
    assert record.urn == "sftp://files.example.com/a/b"
    assert "DOCGRAPH_SOURCE_SFTP_FILES_EXAMPLE_COM_" in caplog.text
    assert "pa55word" not in caplog.text
    store = Path(graph.settings.store.path)
    assert all(b"pa55word" not in p.read_bytes() for p in store.parent.iterdir()
               if p.name.startswith(store.name))
    (info,) = graph.sources.list()
    assert info.credential_env == "DOCGRAPH_SOURCE_SFTP_FILES_EXAMPLE_COM_"


def test_sql_urls_lose_their_password_and_secret_options(tmp_path):
    stored, stripped = strip_sql_credentials(
        "postgresql+psycopg://svc:pw@db.example.com:5433/crm?sslmode=require&sslpassword=x")
    assert stripped
    assert stored == "postgresql+psycopg://svc@db.example.com:5433/crm?sslmode=require"
    stored, stripped = strip_sql_credentials("sqlite:///relative/crm.db")
    assert not stripped and stored.startswith("sqlite:////")
    with pytest.raises(SourceError, match="not a SQLAlchemy URL"):
        strip_sql_credentials("::nonsense")


# -- credentials -----------------------------------------------------------------------


def test_credential_key_names_scheme_host_and_explicit_port():
    assert credential_key("sftp://files.example.com:2222/x") == "SFTP_FILES_EXAMPLE_COM_2222"
    assert credential_key("sftp://files.example.com/x") == "SFTP_FILES_EXAMPLE_COM"
    assert credential_key("s3://my-bucket/prefix") == "S3_MY_BUCKET"


def test_storage_options_come_from_the_secrets_file_and_the_environment(tmp_path):
    secrets = tmp_path / "secrets.toml"
    secrets.write_text(
        '[folders."sftp://files.example.com"]\nusername = "file-user"\npassword = "from-file"\n'
        '[folders."sftp://files.example.com/reports"]\npassword = "reports-file"\n'
        '[folders."s3://bkt"]\nkey = "AK"\nsecret = "SK"\n'
        '[sql.crm]\npassword = "sql-file"\n',
        encoding="utf-8",
    )
    env = {
        "DOCGRAPH_SOURCE_SFTP_FILES_EXAMPLE_COM_LOOK_FOR_KEYS": "false",
        "DOCGRAPH_SOURCE_SFTP_FILES_EXAMPLE_COM_TIMEOUT": "7.5",
        "DOCGRAPH_SOURCE_S3_BKT_ENDPOINT_URL": "http://127.0.0.1:9",
        "DOCGRAPH_SOURCE_S3_BKT_REGION": "eu-west-1",
        "DOCGRAPH_SOURCE_S3_BKT_OPTIONS": '{"anon": false}',
        "DOCGRAPH_SOURCE_CRM_USERNAME": "env-user",
    }
    creds = Credentials(secrets, environ=env, timeout_s=11)
    sftp = creds.storage_options("sftp://files.example.com/reports/q1")
    assert sftp["username"] == "file-user"
    assert sftp["password"] == "reports-file"  # the longest matching prefix wins
    assert sftp["look_for_keys"] is False and sftp["timeout"] == 7.5
    assert sftp["banner_timeout"] == 11
    other = creds.storage_options("sftp://files.example.com/other")
    assert other["password"] == "from-file"
    s3 = creds.storage_options("s3://bkt/docs")
    assert (s3["key"], s3["secret"], s3["endpoint_url"]) == ("AK", "SK", "http://127.0.0.1:9")
    assert s3["client_kwargs"] == {"region_name": "eu-west-1"} and s3["anon"] is False
    assert s3["config_kwargs"]["connect_timeout"] == 11
    assert creds.storage_options("ftp://elsewhere/x") == {"timeout": 11}
    assert creds.sql_url("crm", "postgresql+psycopg://db/crm") == \
        "postgresql+psycopg://env-user:sql-file@db/crm"
    with pytest.raises(ConfigError, match="true or false"):
        Credentials(environ={"DOCGRAPH_SOURCE_S3_BKT_ANON": "maybe"}).storage_options(
            "s3://bkt/x")
    with pytest.raises(ConfigError, match="not found"):
        Credentials(tmp_path / "missing.toml").storage_options("s3://bkt/x")


# -- change tokens -----------------------------------------------------------------------


def test_change_tokens_per_scheme():
    now = time.time()
    etag = change_token({"ETag": '"abc"', "size": 3, "LastModified": now}, "s3", now)
    assert etag.encode() == "etag:abc:3" and etag.trusted
    old = dt.datetime.fromtimestamp(now - 3600, tz=dt.UTC)
    settled = change_token({"mtime": old, "size": 5}, "sftp", now)
    assert settled.trusted and settled == change_token({"mtime": old, "size": 5}, "sftp", now)
    # A whole-second timestamp inside the racy window is never trusted, and never repeats.
    fresh = dt.datetime.fromtimestamp(now - RACY_WINDOW_SECONDS / 2, tz=dt.UTC)
    first = change_token({"mtime": fresh, "size": 5}, "sftp", now)
    assert not first.trusted
    assert first.encode() != change_token({"mtime": fresh, "size": 5}, "sftp", now).encode()
    # FTP MLSD facts are parsed as UTC.
    stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime(now - 3600))
    assert change_token({"modify": stamp, "size": 1}, "ftp", now).trusted
    assert not change_token({"modify": time.strftime("%Y%m%d%H%M%S", time.gmtime(now)),
                             "size": 1}, "ftp", now).trusted
    # Local files have fine timestamps: trusted as they are.
    assert change_token({"mtime": now, "size": 1}, "file", now).trusted
    # Size alone cannot see a same-size edit: the body is always read.
    assert not change_token({"size": 10}, "hdfs", now).trusted


def test_the_crawler_stops_fetching_from_a_server_that_stopped_answering(tmp_path):
    folder = write_files(tmp_path / "docs", {f"{i}.md": f"# {i}\n\ntext {i}\n" for i in range(6)})
    crawler = FolderCrawler(normalize_urn(folder), ["*.md"])
    entries = list(crawler.list_files())
    calls = []

    class Broken:  # never patch crawler.fs itself: fsspec shares filesystem instances
        def cat_file(self, path: str) -> bytes:
            calls.append(path)
            raise ConnectionResetError("peer reset")

    crawler.fs = Broken()
    messages = []
    for entry in entries:
        with pytest.raises(SourceError) as info:
            crawler.read(entry)
        messages.append(str(info.value))
    assert len(calls) == MAX_CONSECUTIVE_FETCH_FAILURES
    assert "ConnectionResetError: peer reset" in messages[0]
    assert "not tried, the server stopped answering" in messages[-1]
    assert crawler.bodies_fetched == MAX_CONSECUTIVE_FETCH_FAILURES
