"""The PostgreSQL change feed an external chunk index (Milvus) follows.

Chunk row ids come from a sequence that concurrent writers draw from out of commit order; a
follower that took "row ids above the last one seen" would skip a chunk committed late for
good. These tests commit chunks out of id order on a real server and check that a follower
still ends with exactly the catalog's chunks.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from docgraph.model import ChunkDraft, SourceRecord
from docgraph.store.base import DocumentWrite
from docgraph.store.feed import FeedBatch
from tests.pg import PostgresServer, pgvector_server  # noqa: F401

pytest.importorskip("psycopg")
from docgraph.store.postgres import PostgresCatalog
from docgraph.store.postgres.feed import PostgresChangeFeed

DIM = 4


@pytest.fixture
def catalog(pgvector_server: PostgresServer) -> Iterator[PostgresCatalog]:  # noqa: F811
    name = f"t_{uuid.uuid4().hex[:12]}"
    url = pgvector_server.create_database(name)
    made = PostgresCatalog(url)
    made.set_embedding_model("m", DIM)
    try:
        yield made
    finally:
        made.close()
        pgvector_server.drop_database(name)


class Follower:
    """A stand-in external index: the chunk ids and texts the feed delivered."""

    def __init__(self, feed: PostgresChangeFeed) -> None:
        self.feed = feed
        self.rows: dict[int, str] = {}

    def apply(self, batch: FeedBatch) -> None:
        for row in batch.rows:
            assert row.vector.shape == (DIM,)
            self.rows[row.rowid] = row.text
        for rowid in batch.deleted:
            self.rows.pop(rowid, None)

    def sync(self, limit: int = 2) -> None:
        while self.feed.apply_next(limit, self.apply):
            pass


def _write(catalog: PostgresCatalog, source: SourceRecord, path: str, texts: list[str]) -> None:
    vectors = np.eye(DIM, dtype=np.float32)[[i % DIM for i in range(len(texts))]]
    catalog.write_document(DocumentWrite(
        source=source, path=path, doc_id=f"{source.urn}/{path}", title=path,
        content_hash=str(hash(tuple(texts))), change_token="t", media_type="text/plain",
        chunks=[ChunkDraft(i, t, (), 1, None, None, None) for i, t in enumerate(texts)],
        breadcrumbs=[""] * len(texts), embedded_texts=texts, vectors=vectors))


def _catalog_rows(catalog: PostgresCatalog) -> dict[int, str]:
    return {int(i): str(t) for i, t in catalog.connection().execute(
        "SELECT id, text FROM chunks").fetchall()}


def test_follower_reaches_the_catalog_through_scan_then_log(catalog: PostgresCatalog) -> None:
    source = catalog.add_source("file:///corpus", "ns")
    for d in range(3):
        _write(catalog, source, f"d{d}.txt", [f"doc {d} part {i}" for i in range(3)])
    feed = PostgresChangeFeed(catalog, "test", DIM)
    assert feed.cursor() is None
    feed.reset("g1")
    follower = Follower(feed)
    follower.sync()  # the scan phase, two chunks per batch
    assert follower.rows == _catalog_rows(catalog)
    before = feed.marks()
    _write(catalog, source, "d1.txt", ["doc 1 rewritten"])  # replace: deletes + inserts
    _write(catalog, source, "d3.txt", ["doc 3"])
    assert feed.marks() != before
    follower.sync()
    assert follower.rows == _catalog_rows(catalog)
    assert "doc 1 rewritten" in follower.rows.values()
    assert feed.live_chunks() == len(follower.rows)
    cursor = feed.cursor()
    assert cursor is not None and cursor.generation == "g1"
    # Applied log entries are pruned: the log does not grow with the corpus.
    assert catalog.connection().execute("SELECT count(*) FROM chunk_feed").fetchone()[0] == 0


def test_no_log_is_kept_while_nothing_follows(catalog: PostgresCatalog) -> None:
    source = catalog.add_source("file:///corpus", "ns")
    _write(catalog, source, "a.txt", ["alpha", "beta"])
    assert catalog.connection().execute("SELECT count(*) FROM chunk_feed").fetchone()[0] == 0


def test_a_chunk_committed_after_a_higher_id_is_not_skipped(catalog: PostgresCatalog) -> None:
    source = catalog.add_source("file:///corpus", "ns")
    _write(catalog, source, "seed.txt", ["seed"])
    feed = PostgresChangeFeed(catalog, "test", DIM)
    feed.reset("g1")
    follower = Follower(feed)
    follower.sync()
    doc_id = int(catalog.connection().execute("SELECT id FROM documents").fetchone()[0])
    insert = ("INSERT INTO chunks (document_id, namespace_id, chunk_index, kind, text,"
              " breadcrumb, section_path, token_count, embed_hash, embedding)"
              " SELECT %s, namespace_id, %s, 'text', %s, '', '[]', 1, 'h', '[1,0,0,0]'"
              " FROM documents WHERE id = %s")
    import psycopg

    first = psycopg.connect(catalog.url, autocommit=False)
    second = psycopg.connect(catalog.url, autocommit=False)
    second_inserted = threading.Event()
    may_commit = threading.Event()
    errors: list[BaseException] = []

    def late_writer() -> None:
        try:
            # Draws its id while the first writer is mid-way, then waits for its lock.
            second.execute(insert, (doc_id, 11, "late", doc_id))
            second_inserted.set()
            assert may_commit.wait(30)
            second.commit()
        except BaseException as exc:  # reported below
            errors.append(exc)
            second_inserted.set()

    try:
        first.execute(insert, (doc_id, 10, "early a", doc_id))
        thread = threading.Thread(target=late_writer)
        thread.start()
        # The late writer's row id is drawn before it blocks on the writers' lock.
        deadline = 100
        while deadline and not catalog.connection().execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted)").fetchone()[0]:
            threading.Event().wait(0.1)
            deadline -= 1
        first.execute(insert, (doc_id, 12, "early b", doc_id))
        first.commit()
        assert second_inserted.wait(30)
        follower.sync()  # sees both early rows (ids around the late one's)
        ids = {text: rowid for rowid, text in follower.rows.items()}
        assert "late" not in ids and {"early a", "early b"} <= set(ids)
        may_commit.set()
        thread.join(30)
        assert not errors
        late_id = int(catalog.connection().execute(
            "SELECT id FROM chunks WHERE text = 'late'").fetchone()[0])
        assert ids["early a"] < late_id < ids["early b"]  # really out of commit order
        follower.sync()
        assert follower.rows == _catalog_rows(catalog)
    finally:
        may_commit.set()
        first.close()
        second.close()
