"""Table-derived sources against SQLite and a throwaway PostgreSQL server: column tags,
row documents with origin fields, incremental refresh by content hash, the live entity
vocabulary, hostile identifiers and values, and failures that keep what was indexed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from docgraph.errors import SourceError
from docgraph.model import RowOrigin
from docgraph.store.sql.dialect import run
from tests import backend_graphs, pg

# Every DocGraph test here runs on the embedded file and on PostgreSQL.
make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

postgres_server = pg.postgres_server
postgres_db = pg.postgres_db
postgres_url = pg.postgres_url

PASSWORD = "hunter2-not-stored"


class Db:
    """A test database: its URL and a way to run statements in it."""

    def __init__(self, url: str, default_schema: str) -> None:
        import sqlalchemy as sa

        self.url = url
        self.default_schema = default_schema
        self.engine = sa.create_engine(url, poolclass=sa.pool.NullPool)

    def run(self, *statements: str, **params: Any) -> None:
        import sqlalchemy as sa

        with self.engine.begin() as conn:
            for statement in statements:
                conn.execute(sa.text(statement), params)

    def url_with_password(self) -> str:
        from sqlalchemy.engine import make_url

        url = make_url(self.url)
        if url.get_backend_name() == "sqlite":
            return self.url
        return url.set(password=PASSWORD).render_as_string(hide_password=False)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    if request.param == "sqlite":
        found = Db(f"sqlite:///{tmp_path / 'crm.db'}", "main")
    else:
        found = Db(request.getfixturevalue("postgres_db"), "public")
    found.run(
        "CREATE TABLE tickets (id INTEGER PRIMARY KEY, body TEXT, product TEXT)",
        "CREATE TABLE products (name TEXT)",
        "INSERT INTO products VALUES ('Heron X2'), ('Kestrel K2'), ('Zephyr Nine'), (NULL)",
        "INSERT INTO tickets VALUES "
        "(1, 'The Heron X2 scanner drops frames after the 4.2 update.', 'Heron X2'),"
        "(2, 'Customer asks for a refund of the Kestrel K2 picker.', 'Kestrel K2'),"
        "(3, NULL, NULL),"
        "(4, 'Invoice 77 was paid twice; please reverse one payment.', NULL)",
    )
    yield found
    found.engine.dispose()


def _docs(graph: Any, namespace: str) -> dict[str, Any]:
    return {d.doc_id: d for s in graph.store.list_sources() if s.namespace == namespace
            for d in graph.store.documents_for_source(s).values()}


def _origin(graph: Any, doc_id: str) -> RowOrigin | None:
    gate = graph.store.gates_for([doc_id]).get(doc_id)
    return None if gate is None else gate.origin


def _stored_anywhere(graph: Any, secret: str) -> bool:
    """Whether ``secret`` is anywhere in the index: in the bytes of the SQLite file and its
    WAL, or in any row of any table of the PostgreSQL database."""
    if graph.backend == "embedded":
        store = Path(graph.settings.store.path)
        files = [p for p in store.parent.iterdir() if p.name.startswith(store.name)]
        assert len(files) >= 2  # the catalog and its WAL
        return any(secret.encode() in p.read_bytes() for p in files)
    db = graph.store.connection()
    tables = [r[0] for r in db.execute(
        "SELECT quote_ident(table_schema) || '.' || quote_ident(table_name)"
        " FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
        " AND table_schema NOT IN ('pg_catalog', 'information_schema')")]
    assert len(tables) > 10  # the whole product's tables
    return any(db.execute(f"SELECT 1 FROM {table} t WHERE strpos(t::text, %s) > 0 LIMIT 1",
                          (secret,)).fetchone() for table in tables)


def test_tagged_columns_become_row_documents_and_live_vocabulary(db, make_graph, embedder):
    graph = make_graph()
    registry = graph.sources
    registry.add_sql_source("crm", db.url_with_password())
    tag = registry.set_tag("crm", "tickets", "body", "natural_language", domain="support")
    assert (tag.schema, tag.table, tag.column, tag.pk_column) == (
        db.default_schema, "tickets", "body", "id")
    registry.set_tag("crm", "products", "name", "entity:product")
    schema = db.default_schema

    result = graph.refresher.run_once()
    (build,) = result.builds
    assert build.outcome == "ok", [p for p in build.phases if p.outcome != "ok"]
    docs = _docs(graph, "support")
    assert set(docs) == {f"{schema}.tickets.body/1", f"{schema}.tickets.body/2",
                         f"{schema}.tickets.body/4"}  # row 3 is NULL: no document
    assert all(d.path == d.doc_id for d in docs.values())
    assert _origin(graph, f"{schema}.tickets.body/2") == RowOrigin(
        "crm", schema, "tickets", "id", "2")
    hit = graph.search("refund picker", namespaces={"support"}, k=1)[0]
    assert hit.doc_id == f"{schema}.tickets.body/2"
    assert hit.origin == RowOrigin("crm", schema, "tickets", "id", "2")

    # The entity vocabulary was fed live: the products are typed entities ...
    found = {e.name: e.type for e in graph.entities({"support"}, limit=100)}
    assert found.get("Heron X2") == "product" and found.get("Kestrel K2") == "product"
    # ... and terms never mentioned in the namespace are not stored anywhere.
    stored = [name for (name,) in run(graph.store, "SELECT name FROM entities")]
    assert "Heron X2" in stored and not any("Zephyr" in name for name in stored)
    # No password reached the catalog.
    assert _stored_anywhere(graph, "Heron X2 scanner")  # the probe finds what is stored
    assert not _stored_anywhere(graph, PASSWORD)
    assert PASSWORD not in registry.sql_source("crm").url

    # Unchanged rerun: nothing embedded.
    before = embedder.embedded
    (report,) = graph.refresher.run_once().reports
    assert report.unchanged == 3 and not (report.added or report.updated or report.removed)
    assert embedder.embedded == before

    # Edit one row, delete one, add one, blank one: only the changed text is embedded.
    db.run("UPDATE tickets SET body = :b WHERE id = 1", b="The Heron X2 scanner is fixed.")
    db.run("DELETE FROM tickets WHERE id = 2")
    db.run("INSERT INTO tickets VALUES (5, 'Zephyr Nine units ship in March.', NULL)")
    db.run("UPDATE tickets SET body = '   ' WHERE id = 4")
    before = embedder.embedded
    (report,) = graph.refresher.run_once().reports
    assert report.updated == [f"{schema}.tickets.body/1"]
    assert report.added == [f"{schema}.tickets.body/5"]
    assert sorted(report.removed) == [f"{schema}.tickets.body/2", f"{schema}.tickets.body/4"]
    assert report.chunks_embedded == 2
    assert embedder.embedded - before == 2 + sum(g.reports_embedded
                                                 for g in graph.last_graph_reports)
    assert set(_docs(graph, "support")) == {f"{schema}.tickets.body/1",
                                            f"{schema}.tickets.body/5"}
    # Zephyr Nine is now mentioned, so it became a product entity of the namespace.
    found = {e.name: e.type for e in graph.entities({"support"}, limit=100)}
    assert found.get("Zephyr Nine") == "product"

    # A vocabulary change alone re-links entities without re-embedding any row.
    db.run("INSERT INTO products VALUES ('March')")
    before = embedder.embedded
    result = graph.refresher.run_once()
    assert result.reports[0].chunks_embedded == 0
    assert {e.name: e.type for e in graph.entities({"support"}, limit=100)}.get("March") \
        == "product"

    # Removing the tag removes its documents.
    assert registry.remove_tag("crm", "tickets", "body", "natural_language") == 2
    assert _docs(graph, "support") == {}


def test_hostile_identifiers_and_values_are_quoted_and_bound(db, make_graph):
    db.run('CREATE TABLE "odd ""name""" (k TEXT PRIMARY KEY, "the text" TEXT)')
    db.run('INSERT INTO "odd ""name""" VALUES (:k, :t)',
           k="x'); DROP TABLE tickets; --", t="Robert'); DROP TABLE tickets; -- was here")
    db.run('INSERT INTO "odd ""name""" VALUES (\'plain\', \'A plain row.\')')
    graph = make_graph()
    graph.sources.add_sql_source("crm", db.url)
    tag = graph.sources.set_tag("crm", 'odd "name"', "the text", "natural_language",
                                domain="d")
    assert tag.pk_column == "k"
    assert graph.refresher.run_once().ok
    doc_ids = set(_docs(graph, "d"))
    assert f'{db.default_schema}.odd "name".the text/x\'); DROP TABLE tickets; --' in doc_ids
    db.run("SELECT count(*) FROM tickets")  # still there
    with graph.sources.reader("crm") as reader:
        ref = reader.resolve(None, 'odd "name"', "the text")
        rows = reader.fetch_rows(ref, ["x'); DROP TABLE tickets; --", "' OR '1'='1"])
    assert list(rows) == ["x'); DROP TABLE tickets; --"]
    assert rows["x'); DROP TABLE tickets; --"].text.startswith("Robert")


def test_tag_validation(db, make_graph):
    db.run("CREATE TABLE pairs (a INTEGER, b INTEGER, note TEXT, PRIMARY KEY (a, b))")
    graph = make_graph()
    registry = graph.sources
    with pytest.raises(SourceError, match="no SQL source named 'crm'"):
        registry.set_tag("crm", "tickets", "body", "natural_language", domain="d")
    registry.add_sql_source("crm", db.url)
    with pytest.raises(SourceError, match="unknown column tag"):
        registry.set_tag("crm", "tickets", "body", "summary", domain="d")
    with pytest.raises(SourceError, match="needs a domain"):
        registry.set_tag("crm", "tickets", "body", "natural_language")
    with pytest.raises(SourceError, match="no column 'bodyy'"):
        registry.set_tag("crm", "tickets", "bodyy", "natural_language", domain="d")
    with pytest.raises(SourceError, match="no table 'ticket'"):
        registry.set_tag("crm", "ticket", "body", "natural_language", domain="d")
    with pytest.raises(SourceError, match="single-column primary key"):
        registry.set_tag("crm", "pairs", "note", "natural_language", domain="d")
    registry.set_tag("crm", "pairs", "note", "entity:note")  # entity columns need no key
    # Case-insensitive lookup resolves to the database's spelling.
    assert registry.set_tag("crm", "TICKETS", "Body", "natural_language", domain="d").table \
        == "tickets"
    # One folder-like name per namespace: another source may not produce the same doc ids.
    registry.add_sql_source("crm2", db.url)
    with pytest.raises(SourceError, match="would collide"):
        registry.set_tag("crm2", "tickets", "body", "natural_language", domain="d")
    assert {s.kind for s in registry.list()} == {"relational", "table"}
    assert all(s.read_only for s in registry.list() if s.kind == "table")


def test_unreachable_database_is_an_error_and_keeps_rows(db, make_graph, monkeypatch):
    graph = make_graph()
    graph.sources.add_sql_source("crm", db.url)
    graph.sources.set_tag("crm", "tickets", "body", "natural_language", domain="support")
    graph.sources.set_tag("crm", "products", "name", "entity:product")
    assert graph.refresher.run_once().ok
    kept = set(_docs(graph, "support"))
    entities_before = {e.name for e in graph.entities({"support"}, limit=100)}

    if db.url.startswith("sqlite"):
        broken = "sqlite:////nonexistent-dir/crm.db"
    else:
        import socket

        with socket.socket() as sock:  # a loopback port nobody listens on
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        broken = f"postgresql+psycopg://postgres@127.0.0.1:{port}/nothing"
    monkeypatch.setenv("DOCGRAPH_SOURCE_CRM_URL", broken)
    result = graph.refresher.run_once()
    (build,) = result.builds
    assert build.outcome == "error"
    errors = {(p.phase, p.outcome) for p in build.phases if p.outcome in ("error", "skipped")}
    assert ("crawl", "error") in errors and ("entities", "error") in errors
    crawl = next(p for p in build.phases if p.phase == "crawl" and p.outcome == "error")
    assert "crm" in crawl.message
    # Nothing was deleted and the graph was kept (the vocabulary query also failed, but the
    # terms of its last good query in this process were reused).
    assert set(_docs(graph, "support")) == kept
    assert {e.name for e in graph.entities({"support"}, limit=100)} == entities_before
    assert graph.search("refund picker", namespaces={"support"}, k=1)[0].doc_id.endswith("/2")


def test_sql_credentials_come_from_the_environment(postgres_url, make_graph, monkeypatch):
    from sqlalchemy.engine import make_url

    graph = make_graph()
    graph.sources.add_sql_source("crm", postgres_url)
    monkeypatch.setenv("DOCGRAPH_SOURCE_CRM_PASSWORD", PASSWORD)
    url = make_url(graph.sources.sql_urls()["crm"])
    assert url.password == PASSWORD and url.port == make_url(postgres_url).port
    with graph.sources.reader("crm") as reader:  # trust auth: the password is ignored
        assert reader.dialect == "postgresql"
        with reader.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT current_database()").scalar() == "docgraph"
